//! The integration tests of sandlot-workspace, one test binary: each file here is a module (a
//! test's path is `it::<file>::<test>`). The fixtures of all files share one process and take
//! turns (`common::Fixture` holds the one `SERIAL` lock). One suite:
//! `cargo test -p sandlot-workspace --test it -- <file>::`.

mod common;

mod btrfs;
mod loop_image;
mod race;
