//! The MCP tools' declarations: argument structs whose JSON Schema is the tool's input
//! schema, and the list `tools/list` gives.

use rmcp::model::{Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Largest file `read_file` returns (as text, an image, or base64).
pub const READ_LIMIT: u64 = 4 << 20;

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct RunPythonArgs {
    /// Python code to run
    pub code: String,
    /// Run in this sandbox (from create_sandbox or list_sandboxes) instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Seconds before the execution is interrupted (default 60, at most 3600)
    #[serde(default)]
    pub timeout: Option<f64>,
    /// `rollback`: if the code fails (raises, times out, runs out of memory), the sandbox's variables and workspace files go back to what they were before it; `keep` (default): its effects stay
    #[serde(default)]
    pub on_failure: OnFailureArg,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct RunBashArgs {
    /// Bash script to run
    pub code: String,
    /// Run in this sandbox (from create_sandbox or list_sandboxes) instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Seconds before the script is interrupted (default 60, at most 3600)
    #[serde(default)]
    pub timeout: Option<f64>,
    /// `rollback`: if the script fails (exits non-zero, times out), the sandbox's variables and workspace files go back to what they were before it; `keep` (default): its effects stay
    #[serde(default)]
    pub on_failure: OnFailureArg,
}

/// What a failing execution leaves behind (`sandlot_types::OnFailure`, with a schema).
#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub enum OnFailureArg {
    /// The sandbox keeps what the code did
    #[default]
    Keep,
    /// The sandbox's variables and files go back to what they were before the code
    Rollback,
}

impl From<OnFailureArg> for sandlot_types::OnFailure {
    fn from(a: OnFailureArg) -> Self {
        match a {
            OnFailureArg::Keep => sandlot_types::OnFailure::Keep,
            OnFailureArg::Rollback => sandlot_types::OnFailure::Rollback,
        }
    }
}

#[derive(Debug, Default, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// `content` is the file's text (UTF-8)
    #[default]
    Text,
    /// `content` is the file's bytes, base64-encoded
    Base64,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    /// Path under the workspace: `data/x.csv` or `/workspace/data/x.csv`; parent directories are created
    pub path: String,
    /// The file's content
    pub content: String,
    /// How `content` is encoded: `text` (default) or `base64`
    #[serde(default)]
    pub encoding: Encoding,
    /// Use this sandbox instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// Path under the workspace: `data/x.csv` or `/workspace/data/x.csv`
    pub path: String,
    /// Use this sandbox instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// Directory under the workspace (default: the workspace itself)
    #[serde(default)]
    pub path: String,
    /// List subdirectories' contents too
    #[serde(default)]
    pub recursive: bool,
    /// Use this sandbox instead of this session's own
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxArgs {
    /// Template to start from (default: `default`)
    #[serde(default)]
    pub template: Option<String>,
    /// Start from this snapshot (from snapshot_sandbox): its files and variables
    #[serde(default)]
    pub from_snapshot: Option<String>,
    /// Environment variables for code in the sandbox
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds without use after which the server deletes the sandbox
    #[serde(default)]
    pub idle_timeout: Option<u64>,
    /// Isolation tier: `isolated` (default) or `trusted` (more reach; only where the server's
    /// policy allows it)
    #[serde(default)]
    pub tier: Option<String>,
    /// Read-only host paths to mount (trusted tier only; each granted by the operator's
    /// policy): `[{"host": "/srv/data", "path": "/mnt/data"}]`
    #[serde(default)]
    pub mounts: Vec<MountArg>,
}

/// A read-only host path mounted into a trusted-tier sandbox.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct MountArg {
    /// The host directory or file (absolute, no symlinks)
    pub host: String,
    /// Where it appears: a path under /mnt
    pub path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct SandboxArgs {
    /// The sandbox (default: this session's own)
    #[serde(default)]
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct ForkArgs {
    /// The sandbox to fork (default: this session's own)
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// How many copies (1 to 100; default 1)
    #[serde(default)]
    pub count: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct SnapshotArgs {
    /// The sandbox (default: this session's own)
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// A name for the snapshot
    #[serde(default)]
    pub name: Option<String>,
}

fn tool<T: JsonSchema + 'static>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(
        name,
        description,
        rmcp::handler::server::tool::schema_for_type::<T>(),
    )
}

fn read_only(t: Tool) -> Tool {
    t.with_annotations(ToolAnnotations::new().read_only(true))
}

/// Every tool, in the order `tools/list` gives them.
pub fn declarations() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        vec![
            tool::<RunPythonArgs>(
                "run_python",
                "Run Python code in a persistent, sandboxed IPython session. Variables, imports \
                 and files persist between calls. The working directory is /workspace. numpy, \
                 pandas and matplotlib are installed; there is no internet access. Returns \
                 stdout, stderr, the value of the last expression, displayed values, matplotlib \
                 figures (as images) and, on failure, the error with its traceback. Runs in this \
                 session's own sandbox (created on first use, deleted when the session ends) \
                 unless sandbox_id names another.",
            ),
            tool::<RunBashArgs>(
                "run_bash",
                "Run a Bash script in a persistent, sandboxed shell session (the working \
                 directory and exported variables persist between calls; files are shared with \
                 the Python session, under /workspace). There is no internet access. Returns \
                 stdout, stderr and the exit status.",
            ),
            tool::<WriteFileArgs>(
                "write_file",
                "Write a file in the sandbox's workspace (/workspace), creating parent \
                 directories and replacing an existing file.",
            ),
            read_only(tool::<ReadFileArgs>(
                "read_file",
                "Read a file of the sandbox's workspace (at most 4 MiB): text as text, PNG/JPEG/\
                 GIF/WebP images as images, other bytes as base64.",
            )),
            read_only(tool::<ListFilesArgs>(
                "list_files",
                "List a directory of the sandbox's workspace: path, kind (file, dir, symlink) \
                 and size of each entry.",
            )),
            tool::<CreateSandboxArgs>(
                "create_sandbox",
                "Create a new sandbox and return its id. Pass the id as sandbox_id to the other \
                 tools to use it (also from other sessions or clients); it is not deleted when \
                 this session ends, only by delete_sandbox or its idle timeout.",
            ),
            read_only(tool::<NoArgs>(
                "list_sandboxes",
                "List the server's sandboxes that have not ended: id, state, template, \
                 creation and last use, and which one is this session's own.",
            )),
            tool::<SandboxArgs>(
                "delete_sandbox",
                "Delete a sandbox and its files (default: this session's own, which is created \
                 afresh on next use).",
            ),
            tool::<ForkArgs>(
                "fork_sandbox",
                "Copy a running sandbox, its variables and files, into new sandboxes; returns \
                 their ids (use them as sandbox_id to try alternatives side by side).",
            ),
            tool::<SandboxArgs>(
                "pause_sandbox",
                "Pause a sandbox: its variables and files are saved to disk and it holds no \
                 memory; the next call to it (or resume_sandbox) brings it back.",
            ),
            tool::<SandboxArgs>(
                "resume_sandbox",
                "Resume a paused sandbox with its variables and files.",
            ),
            tool::<SnapshotArgs>(
                "snapshot_sandbox",
                "Save a sandbox's variables and files as a snapshot; create_sandbox with \
                 from_snapshot starts new sandboxes from it.",
            ),
        ]
    })
}

/// The declaration of the tool `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    declarations().iter().find(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::JsonObject;
    use serde_json::json;

    #[test]
    fn every_tool_has_an_object_schema() {
        let names: Vec<&str> = declarations().iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "run_python",
                "run_bash",
                "write_file",
                "read_file",
                "list_files",
                "create_sandbox",
                "list_sandboxes",
                "delete_sandbox",
                "fork_sandbox",
                "pause_sandbox",
                "resume_sandbox",
                "snapshot_sandbox"
            ]
        );
        for t in declarations() {
            let schema: &JsonObject = &t.input_schema;
            assert_eq!(schema.get("type"), Some(&json!("object")), "{}", t.name);
        }
        let run = &find("run_python").unwrap().input_schema;
        assert_eq!(run["required"], json!(["code"]));
        assert_eq!(run["additionalProperties"], json!(false));
    }
}
