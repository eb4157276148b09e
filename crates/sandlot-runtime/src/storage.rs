//! What the runtime keeps on disk and in its record: the store and its write-behind
//! recorder, the artifact store, the sandboxes' workspaces, the data dir, and named volumes'
//! serialization and read-write claims.

use crate::error::RuntimeError;
use crate::util::lock;
use crate::{artifacts, recorder};
use sandlot_store::Store;
use sandlot_workspace::Workspaces;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

pub(crate) struct Storage {
    pub(crate) store: Arc<Store>,
    /// Write-behind recording of executions into `store` (`recorder.rs`).
    pub(crate) recorder: recorder::Recorder,
    /// Files executions created or changed, content-addressed under `<data-dir>/artifacts/`.
    pub(crate) artifacts: Arc<artifacts::Store>,
    /// The sandboxes' workspaces, in `<data-dir>/disk` (`workspace.rs`).
    /// `None` once shutdown has unmounted them.
    workspaces: Mutex<Option<Arc<Workspaces>>>,
    /// The data dir, canonical.
    pub(crate) data_dir: PathBuf,
    /// Volume creations and deletions, one at a time.
    pub(crate) volume_ops: tokio::sync::Mutex<()>,
    /// Which sandbox holds each volume mounted read-write.
    pub(crate) volume_claims: Mutex<HashMap<(String, String), String>>,
}

impl Storage {
    pub(crate) fn new(
        store: Arc<Store>,
        artifacts: Arc<artifacts::Store>,
        workspaces: Workspaces,
        data_dir: PathBuf,
    ) -> Self {
        Self {
            recorder: recorder::Recorder::start(store.clone()),
            store,
            artifacts,
            workspaces: Mutex::new(Some(Arc::new(workspaces))),
            data_dir,
            volume_ops: Default::default(),
            volume_claims: Default::default(),
        }
    }

    /// The workspaces of this data dir, until shutdown unmounts them.
    pub(crate) fn workspaces(&self) -> Result<Arc<Workspaces>, RuntimeError> {
        lock(&self.workspaces)
            .clone()
            .ok_or(RuntimeError::AdmissionClosed)
    }

    /// Takes the workspaces out for unmounting; later calls of [`Storage::workspaces`] fail.
    pub(crate) fn take_workspaces(&self) -> Option<Arc<Workspaces>> {
        lock(&self.workspaces).take()
    }
}
