//! The layered namespace jail.
pub mod caps;
pub mod landlock;
pub mod seccomp;
