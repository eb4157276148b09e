//! Write-behind recording of executions: the hot path queues its store writes and goes on;
//! one thread applies them in order. Reads of execution history first wait for the queue to
//! drain, so a client never misses a record it was already answered about.

use sandlot_store::Store;
use sandlot_types::{ExecutionRecord, ExecutionResult};
use std::sync::mpsc;
use std::sync::Arc;

enum Op {
    Start(Box<ExecutionRecord>),
    Finish(String, Box<ExecutionResult>),
    Barrier(tokio::sync::oneshot::Sender<()>),
}

#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Op>,
}

impl Recorder {
    pub fn start(store: Arc<Store>) -> Recorder {
        let (tx, rx) = mpsc::channel::<Op>();
        std::thread::Builder::new()
            .name("sandlot-recorder".into())
            .spawn(move || {
                for op in rx {
                    let res = match op {
                        Op::Start(rec) => store.insert_execution(&rec),
                        Op::Finish(id, result) => store.finish_execution(&id, &result),
                        Op::Barrier(done) => {
                            let _ = done.send(());
                            Ok(())
                        }
                    };
                    if let Err(e) = res {
                        tracing::error!(error = %e, "recording an execution failed");
                    }
                }
            })
            .expect("spawning the recorder thread");
        Recorder { tx }
    }

    pub fn started(&self, rec: ExecutionRecord) {
        let _ = self.tx.send(Op::Start(Box::new(rec)));
    }

    pub fn finished(&self, id: &str, result: &ExecutionResult) {
        let _ = self
            .tx
            .send(Op::Finish(id.to_string(), Box::new(result.clone())));
    }

    /// Waits until every write queued before this call is in the store.
    pub async fn flush(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        if self.tx.send(Op::Barrier(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}
