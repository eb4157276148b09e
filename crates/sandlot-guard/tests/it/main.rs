//! The integration tests of sandlot-guard, one test binary: each file here is a module (a
//! test's path is `it::<file>::<test>`). One suite: `cargo test -p sandlot-guard --test it -- <file>::`.

mod common;

mod canary;
mod false_positives;
mod hostile;
mod rules;
mod stream;
mod throughput;
