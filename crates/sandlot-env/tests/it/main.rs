//! The integration tests of sandlot-env, one test binary: each file here is a module (a test's
//! path is `it::<file>::<test>`). Two of them change what is per process by default (the
//! umask, the current directory): they do it in a thread of their own with its own copy of
//! those ([`common::with_own_fs`]), so the tests beside them never see it. One suite:
//! `cargo test -p sandlot-env --test it -- <file>::`.

mod common;

mod provision;
mod relative;
mod umask;
