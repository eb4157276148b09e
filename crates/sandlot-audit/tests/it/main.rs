//! The integration tests of sandlot-audit, one test binary: each file here is a module (a
//! test's path is `it::<file>::<test>`). One suite: `cargo test -p sandlot-audit --test it -- <file>::`.

mod log;
mod segments;
