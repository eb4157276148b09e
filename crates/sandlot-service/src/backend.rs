//! The one seam between the service and the runtime: what [`crate::Service`] asks of it. The
//! service (and so every adapter) is generic over [`Backend`] so an adapter's own tests can
//! drive every route, error path and stream with a scripted backend instead of real sandboxes;
//! [`sandlot_runtime::Runtime`] is the only implementation outside tests.

use crate::error::api_error;
use futures::FutureExt;
use sandlot_runtime::archive::ArchiveSummary;
use sandlot_runtime::{ByteStream, Runtime, RuntimeError};
use sandlot_types::{
    ApiError, BackgroundOutput, Context, CreateSandbox, CreateSnapshot, CreateVolume,
    ExecuteRequest, ExecutionRecord, ExecutionResult, FileEntry, ForkRequest, ForkResult,
    OutputEvent, Sandbox, Snapshot, Template, TemplateSpec, Volume,
};
use std::future::Future;
use tokio::sync::mpsc;

/// The runtime operations the service serves, with the signatures of [`Runtime`]'s methods except
/// that failures arrive as [`ApiError`]s: the runtime's errors are mapped to their stable codes
/// on the way in (`crate::error::code_of`), so a scripted backend can fail with any code.
pub trait Backend: crate::admission::Lookups {
    fn create_sandbox(
        &self,
        req: CreateSandbox,
    ) -> impl Future<Output = Result<Sandbox, ApiError>> + Send;
    fn list_sandboxes(
        &self,
        include_ended: bool,
    ) -> impl Future<Output = Result<Vec<Sandbox>, ApiError>> + Send;
    fn get_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send;
    fn delete_sandbox(&self, id: &str) -> impl Future<Output = Result<(), ApiError>> + Send;
    fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> impl Future<Output = Result<ExecutionResult, ApiError>> + Send;
    fn interrupt(&self, id: &str) -> impl Future<Output = Result<bool, ApiError>> + Send;
    /// Output produced while no execution ran; `clear` empties the buffer.
    fn background_output(
        &self,
        id: &str,
        clear: bool,
    ) -> impl Future<Output = Result<BackgroundOutput, ApiError>> + Send;
    fn list_executions(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<ExecutionRecord>, ApiError>> + Send;
    fn write_file(
        &self,
        id: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<FileEntry, ApiError>> + Send;
    fn read_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<(u64, tokio::fs::File), ApiError>> + Send;
    fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<Vec<FileEntry>, ApiError>> + Send;
    fn delete_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
    /// Forks a sandbox into `req.count` children.
    fn fork_sandbox(
        &self,
        id: &str,
        req: ForkRequest,
    ) -> impl Future<Output = Result<ForkResult, ApiError>> + Send {
        let _ = (id, req);
        async { Err(not_served()) }
    }
    fn pause_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        let _ = id;
        async { Err(not_served()) }
    }
    fn resume_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        let _ = id;
        async { Err(not_served()) }
    }
    fn create_snapshot(
        &self,
        id: &str,
        req: CreateSnapshot,
    ) -> impl Future<Output = Result<Snapshot, ApiError>> + Send {
        let _ = (id, req);
        async { Err(not_served()) }
    }
    fn list_snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, ApiError>> + Send {
        async { Err(not_served()) }
    }
    /// A snapshot; with `verify`, after checking its saved state on the host.
    fn get_snapshot(
        &self,
        id: &str,
        verify: bool,
    ) -> impl Future<Output = Result<Snapshot, ApiError>> + Send {
        let _ = (id, verify);
        async { Err(not_served()) }
    }
    fn delete_snapshot(&self, id: &str) -> impl Future<Output = Result<(), ApiError>> + Send {
        let _ = id;
        async { Err(not_served()) }
    }
    /// Which variables and workspace entries differ between two sandboxes of one family.
    fn diff_sandboxes(
        &self,
        a: &str,
        b: &str,
    ) -> impl Future<Output = Result<sandlot_types::SandboxDiff, ApiError>> + Send {
        let _ = (a, b);
        async { Err(not_served()) }
    }
    fn create_volume(
        &self,
        req: CreateVolume,
    ) -> impl Future<Output = Result<Volume, ApiError>> + Send {
        let _ = req;
        async { Err(not_served()) }
    }
    fn list_volumes(&self) -> impl Future<Output = Result<Vec<Volume>, ApiError>> + Send {
        async { Err(not_served()) }
    }
    /// `tenant`'s volume `name` (names are per tenant).
    fn get_volume(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<Volume, ApiError>> + Send {
        let _ = (tenant, name);
        async { Err(not_served()) }
    }
    fn delete_volume(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        let _ = (tenant, name);
        async { Err(not_served()) }
    }
    fn write_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<FileEntry, ApiError>> + Send {
        let _ = (tenant, name, path, body);
        async { Err(not_served()) }
    }
    fn read_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
    ) -> impl Future<Output = Result<(u64, tokio::fs::File), ApiError>> + Send {
        let _ = (tenant, name, path);
        async { Err(not_served()) }
    }
    fn list_volume_files(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<Vec<FileEntry>, ApiError>> + Send {
        let _ = (tenant, name, path, recursive);
        async { Err(not_served()) }
    }
    fn delete_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        let _ = (tenant, name, path);
        async { Err(not_served()) }
    }
    /// Extracts a tar (or gzip tar) body into a directory of the workspace.
    fn extract_archive(
        &self,
        id: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<ArchiveSummary, ApiError>> + Send {
        let _ = (id, path, body);
        async { Err(not_served()) }
    }
    /// A tar (gzip-compressed if asked) of a directory of the workspace, as a byte stream.
    fn archive_dir(
        &self,
        id: &str,
        path: &str,
        gzip: bool,
    ) -> impl Future<Output = Result<ByteStream, ApiError>> + Send {
        let _ = (id, path, gzip);
        async { Err(not_served()) }
    }
    /// An artifact's size, MIME type and content, by its SHA-256.
    fn open_artifact(
        &self,
        sha256: &str,
    ) -> impl Future<Output = Result<(u64, String, tokio::fs::File), ApiError>> + Send;
    /// Registers `tenant`'s template and starts building it; returns at once (status
    /// `building`).
    fn create_template(
        &self,
        tenant: &str,
        spec: TemplateSpec,
    ) -> impl Future<Output = Result<Template, ApiError>> + Send;
    /// Every tenant's templates.
    fn list_templates(&self) -> impl Future<Output = Vec<Template>> + Send;
    /// `tenant`'s template `name`, or the built-in `default`.
    fn get_template(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<Template, ApiError>> + Send;
    /// Deletes `tenant`'s template `name`.
    fn delete_template(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        let _ = (tenant, name);
        async { Err(not_served()) }
    }
    fn create_context(
        &self,
        id: &str,
        cwd: Option<&str>,
    ) -> impl Future<Output = Result<Context, ApiError>> + Send;
    fn list_contexts(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<Context>, ApiError>> + Send;
    fn restart_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> impl Future<Output = Result<Context, ApiError>> + Send;
    fn delete_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send;
    /// The tenant a sandbox (live or ended) belongs to; `None` when there is no such
    /// sandbox. Backends without tenants say `default`.
    fn sandbox_tenant(&self, id: &str) -> Option<String> {
        let _ = id;
        Some(sandlot_types::DEFAULT_TENANT.to_owned())
    }
    /// Sets (`None`: lifts) the kernel's cap on all of `tenant`'s workspace bytes.
    fn set_tenant_disk_cap(&self, tenant: &str, bytes: Option<u64>) -> Result<(), ApiError> {
        let _ = (tenant, bytes);
        Ok(())
    }
    /// `PUT /v1/sandboxes/{id}/network`.
    fn set_network(
        &self,
        id: &str,
        update: sandlot_types::NetworkUpdate,
    ) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        let _ = (id, update);
        async { Err(not_served()) }
    }
    /// Whether bytes that cannot be redacted (an archive) may leave sandbox `id`.
    fn guard_whole(&self, id: &str, bytes: &[u8]) -> impl Future<Output = bool> + Send {
        let _ = (id, bytes);
        async { true }
    }
    /// A file's bytes of `tenant`'s volume as they may be downloaded (`None`: withheld).
    fn guard_volume_file(
        &self,
        tenant: &str,
        volume: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Option<Vec<u8>>> + Send {
        let _ = (tenant, volume);
        async { Some(bytes) }
    }
    /// A file's bytes as they may be downloaded after the guardrails (`None`: withheld).
    fn guard_file(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Option<Vec<u8>>> + Send {
        let _ = (id, path);
        async { Some(bytes) }
    }
}

/// What a backend answers for an operation it does not serve (a scripted test backend).
pub fn not_served() -> ApiError {
    ApiError::new(
        sandlot_types::ErrorCode::Internal,
        "this backend does not serve archives",
    )
}

/// A runtime result with its failure mapped to the API's error.
fn api<T>(r: Result<T, RuntimeError>) -> Result<T, ApiError> {
    r.map_err(api_error)
}

impl Backend for Runtime {
    fn sandbox_tenant(&self, id: &str) -> Option<String> {
        Runtime::sandbox_tenant(self, id)
    }

    fn set_tenant_disk_cap(&self, tenant: &str, bytes: Option<u64>) -> Result<(), ApiError> {
        Runtime::set_tenant_disk_cap(self, tenant, bytes).map_err(api_error)
    }

    fn set_network(
        &self,
        id: &str,
        update: sandlot_types::NetworkUpdate,
    ) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::set_network(self, id, update).map(api)
    }

    fn guard_file(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Option<Vec<u8>>> + Send {
        Runtime::guard_file(self, id, path, bytes)
    }

    fn guard_whole(&self, id: &str, bytes: &[u8]) -> impl Future<Output = bool> + Send {
        Runtime::guard_whole(self, id, bytes)
    }

    fn guard_volume_file(
        &self,
        tenant: &str,
        volume: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Option<Vec<u8>>> + Send {
        let rt = self.clone();
        let (tenant, volume) = (tenant.to_owned(), volume.to_owned());
        async move { rt.guard_volume_file(&volume, &tenant, bytes).await }
    }

    fn create_sandbox(
        &self,
        req: CreateSandbox,
    ) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::create_sandbox(self, req).map(api)
    }

    fn list_sandboxes(
        &self,
        include_ended: bool,
    ) -> impl Future<Output = Result<Vec<Sandbox>, ApiError>> + Send {
        Runtime::list_sandboxes(self, include_ended).map(api)
    }

    fn get_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::get_sandbox(self, id).map(api)
    }

    fn delete_sandbox(&self, id: &str) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_sandbox(self, id).map(api)
    }

    fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> impl Future<Output = Result<ExecutionResult, ApiError>> + Send {
        let req = crate::trusted::apply_policy_rollback(req);
        Runtime::execute(self, id, req, events).map(api)
    }

    fn interrupt(&self, id: &str) -> impl Future<Output = Result<bool, ApiError>> + Send {
        Runtime::interrupt(self, id).map(api)
    }

    fn background_output(
        &self,
        id: &str,
        clear: bool,
    ) -> impl Future<Output = Result<BackgroundOutput, ApiError>> + Send {
        let rt = self.clone();
        let id = id.to_owned();
        async move {
            let mut out = api(Runtime::background_output(&rt, &id, clear))?;
            rt.guard_background(&id, &mut out).await;
            Ok(out)
        }
    }

    fn list_executions(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<ExecutionRecord>, ApiError>> + Send {
        Runtime::list_executions(self, id).map(api)
    }

    fn write_file(
        &self,
        id: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<FileEntry, ApiError>> + Send {
        Runtime::write_file(self, id, path, body).map(api)
    }

    fn read_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<(u64, tokio::fs::File), ApiError>> + Send {
        Runtime::read_file(self, id, path).map(api)
    }

    fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<Vec<FileEntry>, ApiError>> + Send {
        Runtime::list_files(self, id, path, recursive).map(api)
    }

    fn delete_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_file(self, id, path).map(api)
    }

    fn fork_sandbox(
        &self,
        id: &str,
        req: ForkRequest,
    ) -> impl Future<Output = Result<ForkResult, ApiError>> + Send {
        Runtime::fork_sandbox(self, id, req).map(api)
    }
    fn pause_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::pause_sandbox(self, id).map(api)
    }
    fn resume_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::resume_sandbox(self, id).map(api)
    }
    fn create_snapshot(
        &self,
        id: &str,
        req: CreateSnapshot,
    ) -> impl Future<Output = Result<Snapshot, ApiError>> + Send {
        Runtime::create_snapshot(self, id, req).map(api)
    }
    fn list_snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, ApiError>> + Send {
        Runtime::list_snapshots(self).map(api)
    }
    fn get_snapshot(
        &self,
        id: &str,
        verify: bool,
    ) -> impl Future<Output = Result<Snapshot, ApiError>> + Send {
        let (rt, id) = (self.clone(), id.to_string());
        async move {
            if verify {
                api(rt.verify_snapshot(&id).await)
            } else {
                api(rt.get_snapshot(&id).await)
            }
        }
    }
    fn delete_snapshot(&self, id: &str) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_snapshot(self, id).map(api)
    }
    fn diff_sandboxes(
        &self,
        a: &str,
        b: &str,
    ) -> impl Future<Output = Result<sandlot_types::SandboxDiff, ApiError>> + Send {
        Runtime::diff_sandboxes(self, a, b).map(api)
    }
    fn create_volume(
        &self,
        req: CreateVolume,
    ) -> impl Future<Output = Result<Volume, ApiError>> + Send {
        Runtime::create_volume(self, req).map(api)
    }
    fn list_volumes(&self) -> impl Future<Output = Result<Vec<Volume>, ApiError>> + Send {
        Runtime::list_volumes(self).map(api)
    }
    fn get_volume(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<Volume, ApiError>> + Send {
        Runtime::get_volume(self, tenant, name).map(api)
    }
    fn delete_volume(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_volume(self, tenant, name).map(api)
    }
    fn write_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<FileEntry, ApiError>> + Send {
        Runtime::write_volume_file(self, tenant, name, path, body).map(api)
    }
    fn read_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
    ) -> impl Future<Output = Result<(u64, tokio::fs::File), ApiError>> + Send {
        Runtime::read_volume_file(self, tenant, name, path).map(api)
    }
    fn list_volume_files(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<Vec<FileEntry>, ApiError>> + Send {
        Runtime::list_volume_files(self, tenant, name, path, recursive).map(api)
    }
    fn delete_volume_file(
        &self,
        tenant: &str,
        name: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_volume_file(self, tenant, name, path).map(api)
    }
    fn extract_archive(
        &self,
        id: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<ArchiveSummary, ApiError>> + Send {
        Runtime::extract_archive(self, id, path, body).map(api)
    }

    fn archive_dir(
        &self,
        id: &str,
        path: &str,
        gzip: bool,
    ) -> impl Future<Output = Result<ByteStream, ApiError>> + Send {
        Runtime::archive_dir(self, id, path, gzip).map(api)
    }

    fn open_artifact(
        &self,
        sha256: &str,
    ) -> impl Future<Output = Result<(u64, String, tokio::fs::File), ApiError>> + Send {
        Runtime::open_artifact(self, sha256).map(api)
    }

    fn create_template(
        &self,
        tenant: &str,
        spec: TemplateSpec,
    ) -> impl Future<Output = Result<Template, ApiError>> + Send {
        let (rt, tenant) = (self.clone(), tenant.to_owned());
        async move { rt.create_template(&tenant, spec).await.map_err(api_error) }
    }

    fn list_templates(&self) -> impl Future<Output = Vec<Template>> + Send {
        Runtime::list_templates(self)
    }

    fn get_template(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<Template, ApiError>> + Send {
        Runtime::get_template(self, tenant, name).map(api)
    }

    fn delete_template(
        &self,
        tenant: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_template(self, tenant, name).map(api)
    }

    fn create_context(
        &self,
        id: &str,
        cwd: Option<&str>,
    ) -> impl Future<Output = Result<Context, ApiError>> + Send {
        Runtime::create_context(self, id, cwd).map(api)
    }

    fn list_contexts(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<Context>, ApiError>> + Send {
        Runtime::list_contexts(self, id).map(api)
    }

    fn restart_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> impl Future<Output = Result<Context, ApiError>> + Send {
        Runtime::restart_context(self, id, ctx).map(api)
    }

    fn delete_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_context(self, id, ctx).map(api)
    }
}
