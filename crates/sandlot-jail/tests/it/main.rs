//! The real tests of the jail's layers, one test binary: each file here is a module (a test's
//! path is `it::<file>::<test>`). They share one process: children are forked from it, so
//! whatever a child needs is initialised in the parent before the fork (see `common`), never
//! in the child, whichever file's test another thread is running at that moment. One suite:
//! `cargo test -p sandlot-jail --test it -- <file>::`.

mod common;

mod layers_caps;
mod layers_init;
mod layers_landlock;
mod layers_mounts;
mod layers_net;
mod layers_rlimits;
mod layers_rootfs;
mod layers_seccomp;
