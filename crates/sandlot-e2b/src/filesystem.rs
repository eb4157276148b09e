//! envd's `filesystem.Filesystem` service over the sandbox's workspace: `Stat`, `MakeDir`,
//! `Move`, `ListDir` (with depth), `Remove`, and directory watches (`WatchDir`, and the
//! polling `CreateWatcher`/`GetWatcherEvents`/`RemoveWatcher`; see `watch`), through the
//! runtime's file operations (every lookup beneath the workspace's fd, no symlink followed,
//! nothing outside reachable).
//!
//! E2B's paths: the user's home, `/home/user`, is the workspace; a relative path is relative
//! to it (as envd resolves them); `/workspace/...` is accepted too. Any other absolute path is
//! refused with `invalid_argument`: the server only reaches the workspace. Entries come back
//! with `/home/user/...` paths. The mapping is `files::workspace_path` (one for `/files` and
//! these calls).
//!
//! Entries carry what envd's do: type, size, mode and its `rwx` string, owner and group
//! (`user`: the sandbox has one user), modification time, the file's metadata (its
//! `user.e2b.*` extended attributes, however they were set) and, for a symlink, its target
//! (as an E2B path when it is in the workspace) with the target's type, as envd reports it.
//! Removing what does not exist succeeds, as envd's `Remove` does.
//!
//! Policy: `Stat`, `ListDir` and the watches pass the `read_file` gate on their path,
//! `MakeDir`, `Remove` and both paths of `Move` the `write_file` gate (0 bytes: they write no
//! content); see `gates`.

use crate::connect::{self, Call, Code, RpcError};
use crate::files::{e2b_path, workspace_path, HOME};
use crate::gates::Gate;
use crate::Ctx;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use sandlot_runtime::e2b::EntryExtra;
use sandlot_types::FileEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub(crate) mod watch;

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/filesystem.Filesystem/Stat", post(stat))
        .route("/filesystem.Filesystem/MakeDir", post(make_dir))
        .route("/filesystem.Filesystem/Move", post(move_entry))
        .route("/filesystem.Filesystem/ListDir", post(list_dir))
        .route("/filesystem.Filesystem/Remove", post(remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch::watch_dir))
        .route(
            "/filesystem.Filesystem/CreateWatcher",
            post(watch::create_watcher),
        )
        .route(
            "/filesystem.Filesystem/GetWatcherEvents",
            post(watch::get_watcher_events),
        )
        .route(
            "/filesystem.Filesystem/RemoveWatcher",
            post(watch::remove_watcher),
        )
}

/// The directory a command starts in, inside the sandbox: E2B's home (the workspace, mounted
/// at `/home/user` too, so `pwd` says what E2B's does) for the default and relative paths;
/// other absolute paths as given (the command runs confined to the sandbox, so it may use any
/// directory the sandbox sees).
pub(crate) fn command_dir(cwd: Option<&str>) -> String {
    let cwd = cwd.unwrap_or("").trim();
    match workspace_path(cwd) {
        Ok(rel) if rel.is_empty() => HOME.to_owned(),
        Ok(rel) => format!("{HOME}/{rel}"),
        Err(_) => cwd.to_owned(),
    }
}

fn mapped(p: &str) -> Result<String, RpcError> {
    workspace_path(p).map_err(|f| RpcError::invalid(f.message))
}

// ---- messages ----

#[derive(Debug, Deserialize)]
struct PathRequest {
    #[serde(default)]
    path: String,
}

#[derive(Debug, Deserialize)]
struct ListDirRequest {
    #[serde(default)]
    path: String,
    #[serde(default)]
    depth: u32,
}

#[derive(Debug, Deserialize)]
struct MoveRequest {
    #[serde(default)]
    source: String,
    #[serde(default)]
    destination: String,
}

/// `filesystem.EntryInfo` in proto3 JSON (int64 as a string, the enum by name, the timestamp
/// in RFC 3339).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EntryInfo {
    name: String,
    r#type: &'static str,
    path: String,
    size: String,
    mode: u32,
    permissions: String,
    owner: &'static str,
    group: &'static str,
    modified_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    symlink_target: Option<String>,
    metadata: BTreeMap<String, String>,
    is_symlink: bool,
}

#[derive(Debug, Serialize)]
struct EntryResponse {
    entry: EntryInfo,
}

#[derive(Debug, Serialize)]
struct ListDirResponse {
    entries: Vec<EntryInfo>,
}

#[derive(Debug, Serialize)]
struct Empty {}

/// Go's `FileMode.String()` shape, which envd sends: type letter and `rwx` triplets.
fn permissions(kind: &str, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        "dir" => 'd',
        "symlink" => 'L',
        "other" => '?',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

fn rfc3339(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into())
}

fn type_name(kind: &str) -> &'static str {
    match kind {
        "file" => "FILE_TYPE_FILE",
        "dir" => "FILE_TYPE_DIRECTORY",
        "symlink" => "FILE_TYPE_SYMLINK",
        _ => "FILE_TYPE_UNSPECIFIED",
    }
}

/// An entry as envd shows it. A symlink is shown as envd shows one: its target's type (when
/// the target is in the workspace and exists) and its target's path; one whose target is
/// elsewhere or missing keeps the symlink type.
fn entry_info(e: FileEntry, extra: EntryExtra) -> EntryInfo {
    let path = e2b_path(&e.path);
    let name = if e.path.is_empty() {
        "user".to_owned()
    } else {
        e.name
    };
    let (kind, symlink_target) = match extra.symlink {
        Some(t) => {
            let target = match &t.workspace_path {
                Some(p) => e2b_path(p),
                None => t.raw.clone(),
            };
            (t.kind.unwrap_or(e.kind.clone()), Some(target))
        }
        None => (e.kind.clone(), None),
    };
    EntryInfo {
        name,
        r#type: type_name(&kind),
        path,
        size: e.size.to_string(),
        mode: e.mode,
        permissions: permissions(&e.kind, e.mode),
        owner: "user",
        group: "user",
        modified_time: rfc3339(e.modified),
        symlink_target,
        metadata: extra.metadata,
        // A link shown by its target's type is not marked (the SDKs read `is_symlink` as
        // "the type is symlink"); one whose target is elsewhere or missing is.
        is_symlink: kind == "symlink",
    }
}

/// Entries with their metadata and symlink targets, read in one pass.
pub(crate) async fn entries(
    ctx: &Ctx,
    id: &str,
    list: Vec<FileEntry>,
) -> Result<Vec<EntryInfo>, RpcError> {
    let paths = list.iter().map(|e| e.path.clone()).collect();
    let extras = ctx.rt.entry_extras(id, paths).await?;
    Ok(list
        .into_iter()
        .zip(extras)
        .map(|(e, x)| entry_info(e, x))
        .collect())
}

/// One entry with its metadata and symlink target.
pub(crate) async fn entry(ctx: &Ctx, id: &str, e: FileEntry) -> Result<EntryInfo, RpcError> {
    Ok(entries(ctx, id, vec![e])
        .await?
        .pop()
        .expect("one entry in, one out"))
}

// ---- handlers ----

async fn stat(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |ctx, call: Call, req: PathRequest| async move {
        let p = mapped(&req.path)?;
        Gate::open(&ctx, &call.headers, &call.sandbox)
            .await?
            .read(&p)?;
        let e = ctx.rt.stat_path(&call.sandbox, &p).await?;
        Ok(EntryResponse {
            entry: entry(&ctx, &call.sandbox, e).await?,
        })
    })
    .await
}

async fn make_dir(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |ctx, call: Call, req: PathRequest| async move {
        let p = mapped(&req.path)?;
        Gate::open(&ctx, &call.headers, &call.sandbox)
            .await?
            .write(&p, 0)?;
        if !ctx.rt.make_dir(&call.sandbox, &p).await? {
            return Err(RpcError::new(
                Code::AlreadyExists,
                format!("directory {} already exists", e2b_path(&p)),
            ));
        }
        let e = ctx.rt.stat_path(&call.sandbox, &p).await?;
        Ok(EntryResponse {
            entry: entry(&ctx, &call.sandbox, e).await?,
        })
    })
    .await
}

async fn move_entry(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |ctx, call: Call, req: MoveRequest| async move {
        let (from, to) = (mapped(&req.source)?, mapped(&req.destination)?);
        // A move removes one name and writes another: both are writes.
        let gate = Gate::open(&ctx, &call.headers, &call.sandbox).await?;
        gate.write(&from, 0)?;
        gate.write(&to, 0)?;
        let e = ctx.rt.move_path(&call.sandbox, &from, &to).await?;
        Ok(EntryResponse {
            entry: entry(&ctx, &call.sandbox, e).await?,
        })
    })
    .await
}

async fn list_dir(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(
        ctx,
        req,
        |ctx, call: Call, req: ListDirRequest| async move {
            let p = mapped(&req.path)?;
            let depth = req.depth.max(1) as usize;
            Gate::open(&ctx, &call.headers, &call.sandbox)
                .await?
                .read(&p)?;
            let dir = ctx.rt.stat_path(&call.sandbox, &p).await?;
            if dir.kind != "dir" {
                return Err(RpcError::invalid(format!(
                    "{} is not a directory",
                    e2b_path(&p)
                )));
            }
            let base = dir.path.split('/').filter(|c| !c.is_empty()).count();
            let listed = ctx.rt.list_files(&call.sandbox, &p, depth > 1).await?;
            let listed = listed
                .into_iter()
                .filter(|e| e.path.split('/').filter(|c| !c.is_empty()).count() - base <= depth)
                .collect();
            Ok(ListDirResponse {
                entries: entries(&ctx, &call.sandbox, listed).await?,
            })
        },
    )
    .await
}

async fn remove(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unary(ctx, req, |ctx, call: Call, req: PathRequest| async move {
        let p = mapped(&req.path)?;
        Gate::open(&ctx, &call.headers, &call.sandbox)
            .await?
            .write(&p, 0)?;
        match ctx.rt.delete_file(&call.sandbox, &p).await {
            // envd's Remove of what is not there succeeds (the SDKs' `remove` does not raise).
            Err(sandlot_runtime::RuntimeError::File(sandlot_runtime::FileError::NotFound(_))) => {}
            r => r?,
        }
        Ok(Empty {})
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_dirs() {
        assert_eq!(command_dir(None), "/home/user");
        assert_eq!(command_dir(Some("/home/user/x")), "/home/user/x");
        assert_eq!(command_dir(Some("sub")), "/home/user/sub");
        assert_eq!(command_dir(Some("/tmp")), "/tmp");
    }

    #[test]
    fn entries_look_like_envd_s() {
        let mut extra = EntryExtra::default();
        extra.metadata.insert("k".into(), "v".into());
        let e = entry_info(
            FileEntry {
                path: "d/f.txt".into(),
                name: "f.txt".into(),
                kind: "file".into(),
                size: 5,
                modified: 0,
                mode: 0o644,
            },
            extra,
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "FILE_TYPE_FILE");
        assert_eq!(v["path"], "/home/user/d/f.txt");
        assert_eq!(v["size"], "5");
        assert_eq!(v["permissions"], "-rw-r--r--");
        assert_eq!(v["modifiedTime"], "1970-01-01T00:00:00Z");
        assert_eq!(v["isSymlink"], false);
        assert_eq!(v["metadata"]["k"], "v");
        assert!(v.get("symlinkTarget").is_none());
        assert_eq!(permissions("dir", 0o755), "drwxr-xr-x");
    }

    #[test]
    fn symlinks_show_their_target() {
        let link = FileEntry {
            path: "d/l".into(),
            name: "l".into(),
            kind: "symlink".into(),
            size: 5,
            modified: 0,
            mode: 0o777,
        };
        let inside = EntryExtra {
            metadata: Default::default(),
            symlink: Some(sandlot_runtime::e2b::SymlinkTarget {
                workspace_path: Some("d/t.txt".into()),
                raw: "t.txt".into(),
                kind: Some("file".into()),
            }),
        };
        let v = serde_json::to_value(entry_info(link.clone(), inside)).unwrap();
        assert_eq!(v["type"], "FILE_TYPE_FILE");
        assert_eq!(v["isSymlink"], false);
        assert_eq!(v["symlinkTarget"], "/home/user/d/t.txt");
        let outside = EntryExtra {
            metadata: Default::default(),
            symlink: Some(sandlot_runtime::e2b::SymlinkTarget {
                workspace_path: None,
                raw: "/etc/passwd".into(),
                kind: None,
            }),
        };
        let v = serde_json::to_value(entry_info(link, outside)).unwrap();
        assert_eq!(v["type"], "FILE_TYPE_SYMLINK");
        assert_eq!(v["isSymlink"], true);
        assert_eq!(v["symlinkTarget"], "/etc/passwd");
    }
}
