//! E2B's room: what the runtime does only for E2B's envd and process protocol
//! (`sandlot-e2b`), kept apart from the concerns every interface shares. They stay in the
//! runtime, not in `sandlot-e2b`, because each reaches into its private state: a sandbox's
//! entry and live processes, pidfds, the workspace's fd-relative file rules.
//!
//! - `proctail`: E2B commands' pipes: FIFOs in the sandbox's `/tmp` made and opened by the
//!   host, epoll reads, the host-side kill of a command's process group through pidfds
//! - `fsops`: stat, mkdir and move in the workspace with the rules of `files.rs` (E2B's
//!   filesystem service)
//!   and E2B's file metadata (`user.e2b.*` xattrs) and symlink targets
//! - `watch`: directory watches (inotify on the workspace) for E2B's `watch_dir`
//! - `lifetime`: moving a live sandbox's expiry (`set_timeout`, E2B's control plane)

mod fsops;
mod lifetime;
pub mod proctail;
pub mod watch;

pub(crate) use fsops::set_xattr;
pub use fsops::{EntryExtra, SymlinkTarget, METADATA_XATTR_PREFIX};
