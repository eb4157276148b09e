//! The seam between the HTTP layer and the runtime. The router is generic over [`Backend`] so
//! its own tests can drive every route, error path and stream with a scripted backend instead
//! of real sandboxes; [`sandlot_runtime::Runtime`] is the only implementation outside tests.

use sandlot_runtime::{ByteStream, Runtime};
use sandlot_types::{
    ApiError, Context, CreateSandbox, ExecuteRequest, ExecutionRecord, ExecutionResult, FileEntry,
    OutputEvent, Sandbox, Template, TemplateSpec,
};
use std::future::Future;
use tokio::sync::mpsc;

/// The runtime operations the API serves, with the signatures of [`Runtime`]'s methods.
pub(crate) trait Backend: Clone + Send + Sync + 'static {
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
    /// An artifact's size, MIME type and content, by its SHA-256.
    fn open_artifact(
        &self,
        sha256: &str,
    ) -> impl Future<Output = Result<(u64, String, tokio::fs::File), ApiError>> + Send;
    /// Registers a template and starts building it; returns at once (status `building`).
    fn create_template(
        &self,
        spec: TemplateSpec,
    ) -> impl Future<Output = Result<Template, ApiError>> + Send;
    fn list_templates(&self) -> impl Future<Output = Vec<Template>> + Send;
    fn get_template(&self, name: &str) -> impl Future<Output = Result<Template, ApiError>> + Send;
    fn create_context(&self, id: &str) -> impl Future<Output = Result<Context, ApiError>> + Send;
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
}

impl Backend for Runtime {
    fn create_sandbox(
        &self,
        req: CreateSandbox,
    ) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::create_sandbox(self, req)
    }

    fn list_sandboxes(
        &self,
        include_ended: bool,
    ) -> impl Future<Output = Result<Vec<Sandbox>, ApiError>> + Send {
        Runtime::list_sandboxes(self, include_ended)
    }

    fn get_sandbox(&self, id: &str) -> impl Future<Output = Result<Sandbox, ApiError>> + Send {
        Runtime::get_sandbox(self, id)
    }

    fn delete_sandbox(&self, id: &str) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_sandbox(self, id)
    }

    fn execute(
        &self,
        id: &str,
        req: ExecuteRequest,
        events: Option<mpsc::UnboundedSender<OutputEvent>>,
    ) -> impl Future<Output = Result<ExecutionResult, ApiError>> + Send {
        Runtime::execute(self, id, req, events)
    }

    fn interrupt(&self, id: &str) -> impl Future<Output = Result<bool, ApiError>> + Send {
        Runtime::interrupt(self, id)
    }

    fn list_executions(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<ExecutionRecord>, ApiError>> + Send {
        Runtime::list_executions(self, id)
    }

    fn write_file(
        &self,
        id: &str,
        path: &str,
        body: ByteStream,
    ) -> impl Future<Output = Result<FileEntry, ApiError>> + Send {
        Runtime::write_file(self, id, path, body)
    }

    fn read_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<(u64, tokio::fs::File), ApiError>> + Send {
        Runtime::read_file(self, id, path)
    }

    fn list_files(
        &self,
        id: &str,
        path: &str,
        recursive: bool,
    ) -> impl Future<Output = Result<Vec<FileEntry>, ApiError>> + Send {
        Runtime::list_files(self, id, path, recursive)
    }

    fn delete_file(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_file(self, id, path)
    }

    fn open_artifact(
        &self,
        sha256: &str,
    ) -> impl Future<Output = Result<(u64, String, tokio::fs::File), ApiError>> + Send {
        Runtime::open_artifact(self, sha256)
    }

    fn create_template(
        &self,
        spec: TemplateSpec,
    ) -> impl Future<Output = Result<Template, ApiError>> + Send {
        Runtime::create_template(self, spec)
    }

    fn list_templates(&self) -> impl Future<Output = Vec<Template>> + Send {
        Runtime::list_templates(self)
    }

    fn get_template(&self, name: &str) -> impl Future<Output = Result<Template, ApiError>> + Send {
        Runtime::get_template(self, name)
    }

    fn create_context(&self, id: &str) -> impl Future<Output = Result<Context, ApiError>> + Send {
        Runtime::create_context(self, id)
    }

    fn list_contexts(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Vec<Context>, ApiError>> + Send {
        Runtime::list_contexts(self, id)
    }

    fn restart_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> impl Future<Output = Result<Context, ApiError>> + Send {
        Runtime::restart_context(self, id, ctx)
    }

    fn delete_context(
        &self,
        id: &str,
        ctx: &str,
    ) -> impl Future<Output = Result<(), ApiError>> + Send {
        Runtime::delete_context(self, id, ctx)
    }
}
