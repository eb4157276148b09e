//! envd's `filesystem.Filesystem` service over the sandbox's workspace: `Stat`, `MakeDir`,
//! `Move`, `ListDir` (with depth) and `Remove`, through the runtime's file operations (every
//! lookup beneath the workspace's fd, no symlink followed, nothing outside reachable).
//!
//! E2B's paths: the user's home, `/home/user`, is the workspace; a relative path is relative
//! to it (as envd resolves them); `/workspace/...` is accepted too. Any other absolute path is
//! refused with `invalid_argument`: the server only reaches the workspace. Entries come back
//! with `/home/user/...` paths. The mapping is `files::workspace_path` (one for `/files` and
//! these calls).
//!
//! Policy: `Stat` and `ListDir` pass the `read_file` gate on their path, `MakeDir`, `Remove`
//! and both paths of `Move` the `write_file` gate (0 bytes: they write no content); see
//! `gates`.
//!
//! Not served: `WatchDir` and the polling watchers (`CreateWatcher`, `GetWatcherEvents`,
//! `RemoveWatcher`) answer `unimplemented` — the runtime has no change notifications to
//! relay, and polling stat snapshots would be a weaker promise than the SDK's watch makes.

use crate::connect::{self, Call, Code, RpcError};
use crate::files::{e2b_path, workspace_path, HOME};
use crate::gates::Gate;
use crate::Ctx;
use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use sandlot_types::FileEntry;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub(crate) fn routes() -> Router<Ctx> {
    Router::new()
        .route("/filesystem.Filesystem/Stat", post(stat))
        .route("/filesystem.Filesystem/MakeDir", post(make_dir))
        .route("/filesystem.Filesystem/Move", post(move_entry))
        .route("/filesystem.Filesystem/ListDir", post(list_dir))
        .route("/filesystem.Filesystem/Remove", post(remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch_dir))
        .route("/filesystem.Filesystem/CreateWatcher", post(watcher))
        .route("/filesystem.Filesystem/GetWatcherEvents", post(watcher))
        .route("/filesystem.Filesystem/RemoveWatcher", post(watcher))
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
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EntryInfo {
    name: String,
    r#type: &'static str,
    path: String,
    size: String,
    mode: u32,
    permissions: String,
    owner: &'static str,
    group: &'static str,
    modified_time: String,
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

fn entry_info(e: FileEntry) -> EntryInfo {
    let path = e2b_path(&e.path);
    let name = if e.path.is_empty() {
        "user".to_owned()
    } else {
        e.name
    };
    EntryInfo {
        name,
        r#type: match e.kind.as_str() {
            "file" => "FILE_TYPE_FILE",
            "dir" => "FILE_TYPE_DIRECTORY",
            "symlink" => "FILE_TYPE_SYMLINK",
            _ => "FILE_TYPE_UNSPECIFIED",
        },
        path,
        size: e.size.to_string(),
        mode: e.mode,
        permissions: permissions(&e.kind, e.mode),
        owner: "user",
        group: "user",
        modified_time: rfc3339(e.modified),
        metadata: BTreeMap::new(),
        is_symlink: e.kind == "symlink",
    }
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
            entry: entry_info(e),
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
            entry: entry_info(e),
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
            entry: entry_info(e),
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
            let entries = ctx.rt.list_files(&call.sandbox, &p, depth > 1).await?;
            let entries = entries
                .into_iter()
                .filter(|e| e.path.split('/').filter(|c| !c.is_empty()).count() - base <= depth)
                .map(entry_info)
                .collect();
            Ok(ListDirResponse { entries })
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
        ctx.rt.delete_file(&call.sandbox, &p).await?;
        Ok(Empty {})
    })
    .await
}

const NO_WATCH: &str = "watching directories is not supported by sandlot (no change notifications from the sandbox); list the directory again instead";

async fn watch_dir(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unimplemented_stream(ctx, req, NO_WATCH).await
}

async fn watcher(State(ctx): State<Ctx>, req: Request) -> Response {
    connect::unimplemented_unary(ctx, req, NO_WATCH).await
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
        let e = entry_info(FileEntry {
            path: "d/f.txt".into(),
            name: "f.txt".into(),
            kind: "file".into(),
            size: 5,
            modified: 0,
            mode: 0o644,
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "FILE_TYPE_FILE");
        assert_eq!(v["path"], "/home/user/d/f.txt");
        assert_eq!(v["size"], "5");
        assert_eq!(v["permissions"], "-rw-r--r--");
        assert_eq!(v["modifiedTime"], "1970-01-01T00:00:00Z");
        assert_eq!(v["isSymlink"], false);
        assert_eq!(permissions("dir", 0o755), "drwxr-xr-x");
    }
}
