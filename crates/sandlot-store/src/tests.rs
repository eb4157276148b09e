use std::collections::BTreeMap;
use std::sync::Arc;

use sandlot_types::{Context, EffectiveLimits, IdleAction, Language, OutputEvent, Snapshot};

use super::schema::MIGRATIONS;
use super::*;

fn sandbox(id: &str, created_at: &str, state: SandboxState) -> Sandbox {
    Sandbox {
        id: id.to_owned(),
        template: "default".to_owned(),
        template_version: "sha256:abc".to_owned(),
        state,
        env: BTreeMap::from([("A".to_owned(), "1".to_owned())]),
        metadata: BTreeMap::from([("owner".to_owned(), "test".to_owned())]),
        limits: EffectiveLimits {
            memory_mb: 512,
            cpu_millis: 1000,
            pids: 64,
            disk_mb: 256,
        },
        idle_timeout: 600,
        max_lifetime: 3600,
        created_at: created_at.to_owned(),
        last_active_at: created_at.to_owned(),
        expires_at: "2030-01-01T00:00:00.000Z".to_owned(),
        ended_reason: match state {
            SandboxState::Running => None,
            _ => Some("ended".to_owned()),
        },
        restart_count: 0,
        last_restart: None,
        on_idle: IdleAction::Delete,
        forked_from: None,
        from_snapshot: None,
        paused_at: None,
        last_restore: None,
        volumes: Vec::new(),
        ports: Vec::new(),
        all_ports: false,
        tenant: "acme".to_owned(),
        tier: "trusted".to_owned(),
        network: vec!["pkgs.test".to_owned()],
        secrets: vec!["token".to_owned()],
        contained: None,
        mounts: Vec::new(),
        port_token: None,
    }
}

fn execution(id: &str, sandbox_id: &str, started_at: &str) -> ExecutionRecord {
    ExecutionRecord {
        id: id.to_owned(),
        sandbox_id: sandbox_id.to_owned(),
        code: "print(1)".to_owned(),
        language: Language::Python,
        started_at: started_at.to_owned(),
        result: None,
    }
}

fn result_for(rec: &ExecutionRecord) -> ExecutionResult {
    ExecutionResult {
        output_held: None,
        id: rec.id.clone(),
        sandbox_id: rec.sandbox_id.clone(),
        language: rec.language,
        end_state: EndState::Error,
        stdout: "1\n".to_owned(),
        stderr: "warn\n".to_owned(),
        result: Some(BTreeMap::from([(
            "text/plain".to_owned(),
            serde_json::json!("42"),
        )])),
        error: Some(ExecError {
            name: "ValueError".to_owned(),
            value: "bad".to_owned(),
            traceback: vec!["line 1".to_owned(), "line 2".to_owned()],
        }),
        exit_code: Some(3),
        outputs: vec![
            OutputEvent::Stdout {
                text: "1\n".to_owned(),
            },
            OutputEvent::Stderr {
                text: "warn\n".to_owned(),
            },
            OutputEvent::DisplayData {
                data: BTreeMap::from([
                    ("image/png".to_owned(), serde_json::json!("iVBORw0KGgo=")),
                    (
                        "application/json".to_owned(),
                        serde_json::json!({"a": [1, 2.5, null]}),
                    ),
                ]),
                metadata: serde_json::json!({"width": 640}),
            },
            OutputEvent::Result {
                data: BTreeMap::from([("text/plain".to_owned(), serde_json::json!("42"))]),
                metadata: serde_json::Value::Null,
            },
            OutputEvent::Error(ExecError {
                name: "ValueError".to_owned(),
                value: "bad".to_owned(),
                traceback: vec!["line 1".to_owned(), "line 2".to_owned()],
            }),
        ],
        stdout_truncation: Truncation {
            kept_bytes: 2,
            dropped_bytes: 0,
        },
        stderr_truncation: Truncation {
            kept_bytes: 5,
            dropped_bytes: 17,
        },
        started_at: rec.started_at.clone(),
        duration_ms: 12.5,
        cpu_time_ms: 3.25,
        peak_memory_bytes: 123_456_789,
        sandbox_alive: true,
        artifacts: Vec::new(),
        context: None,
        restarted: None,
        background_bytes: 0,
        rolled_back: false,
        rollback: None,
    }
}

#[test]
fn store_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Store>();
    assert_send_sync::<StoreError>();
}

#[test]
fn enum_columns_match_the_wire_names() {
    let json = |v: serde_json::Value| v.as_str().unwrap().to_owned();
    for s in [
        SandboxState::Running,
        SandboxState::Stopped,
        SandboxState::Failed,
        SandboxState::Deleted,
        SandboxState::Expired,
        SandboxState::Lost,
        SandboxState::Paused,
    ] {
        assert_eq!(state_str(s), json(serde_json::to_value(s).unwrap()));
    }
    for l in [Language::Python, Language::Bash] {
        assert_eq!(l.as_str(), json(serde_json::to_value(l).unwrap()));
    }
    for e in [
        EndState::Ok,
        EndState::Error,
        EndState::Timeout,
        EndState::Interrupted,
        EndState::Oom,
        EndState::Killed,
    ] {
        assert_eq!(end_state_str(e), json(serde_json::to_value(e).unwrap()));
    }
}

/// A trusted sandbox's host paths share the `volumes` column with its volumes (an object
/// when it has any, the plain list otherwise): both read back, through insert and update.
#[test]
fn host_mounts_roundtrip_beside_volumes() {
    let store = Store::open_in_memory().unwrap();
    let mut sb = sandbox("sb-m", "2025-01-01T00:00:00.000Z", SandboxState::Running);
    sb.volumes = vec![sandlot_types::VolumeMount {
        name: "data".into(),
        path: "data".into(),
        read_only: true,
    }];
    sb.mounts = vec![sandlot_types::HostMount {
        host: "/srv/data".into(),
        path: "/mnt/data".into(),
    }];
    store.insert_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-m").unwrap(), Some(sb.clone()));
    sb.mounts.push(sandlot_types::HostMount {
        host: "/etc/hosts".into(),
        path: "/mnt/hosts".into(),
    });
    store.update_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-m").unwrap(), Some(sb.clone()));
    sb.mounts.clear();
    store.update_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-m").unwrap(), Some(sb));
}

#[test]
fn sandbox_roundtrip_and_update() {
    let store = Store::open_in_memory().unwrap();
    let mut sb = sandbox("sb-1", "2025-01-01T00:00:00.000Z", SandboxState::Running);
    sb.idle_timeout = i64::MAX as u64;
    store.insert_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-1").unwrap(), Some(sb.clone()));

    sb.state = SandboxState::Deleted;
    sb.ended_reason = Some("deleted by request".to_owned());
    sb.last_active_at = "2025-01-01T00:05:00.000Z".to_owned();
    sb.metadata.insert("k".to_owned(), "v".to_owned());
    sb.env.clear();
    sb.limits.memory_mb = 1024;
    store.update_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-1").unwrap(), Some(sb.clone()));

    // Ended reason back to none is also a full-row update.
    sb.ended_reason = None;
    store.update_sandbox(&sb).unwrap();
    assert_eq!(
        store.get_sandbox("sb-1").unwrap().unwrap().ended_reason,
        None
    );
}

#[test]
fn paused_forked_sandbox_roundtrip() {
    let store = Store::open_in_memory().unwrap();
    let mut sb = sandbox("sb-2", "2025-01-01T00:00:00.000Z", SandboxState::Running);
    sb.on_idle = IdleAction::Pause;
    sb.forked_from = Some("sb-1".to_owned());
    sb.volumes = vec![sandlot_types::VolumeMount {
        name: "data".to_owned(),
        path: "data".to_owned(),
        read_only: true,
    }];
    sb.from_snapshot = Some("snap_1".to_owned());
    store.insert_sandbox(&sb).unwrap();
    store.set_host_uid("sb-2", Some(4242)).unwrap();
    assert_eq!(store.get_sandbox("sb-2").unwrap(), Some(sb.clone()));
    sb.state = SandboxState::Paused;
    sb.paused_at = Some("2025-01-01T00:01:00.000Z".to_owned());
    sb.last_restore = Some(sandlot_types::LastRestore {
        at: "2025-01-01T00:00:01.000Z".to_owned(),
        source: "fork".to_owned(),
        variables: 3,
        not_restored: vec![sandlot_types::NotCaptured {
            name: "f".to_owned(),
            context: "default".to_owned(),
            reason: "open file".to_owned(),
        }],
    });
    store.update_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-2").unwrap(), Some(sb.clone()));
    let paused = store.sandboxes_in(&[SandboxState::Paused]).unwrap();
    assert_eq!(paused, vec![(sb, Some(4242))]);
}

#[test]
fn snapshot_roundtrip_list_and_delete() {
    let store = Store::open_in_memory().unwrap();
    let rec = |id: &str, at: &str| SnapshotRecord {
        snapshot: Snapshot {
            id: id.to_owned(),
            name: Some("before training".to_owned()),
            sandbox_id: "sb-1".to_owned(),
            template: "default".to_owned(),
            template_version: "sha256:abc".to_owned(),
            created_at: at.to_owned(),
            state_bytes: 1234,
            workspace: true,
            variables: 7,
            not_captured: vec![sandlot_types::NotCaptured {
                name: "sock".to_owned(),
                context: "default".to_owned(),
                reason: "cannot pickle socket".to_owned(),
            }],
            version: 1,
            tenant: "acme".to_owned(),
        },
        state_sha256: "ab".repeat(32),
        contexts: vec![Context {
            id: "default".to_owned(),
            created_at: at.to_owned(),
            cwd: None,
        }],
    };
    let (a, b) = (
        rec("snap_b", "2025-01-02T00:00:00.000Z"),
        rec("snap_a", "2025-01-01T00:00:00.000Z"),
    );
    store.insert_snapshot(&a).unwrap();
    store.insert_snapshot(&b).unwrap();
    assert!(store
        .insert_snapshot(&a)
        .unwrap_err()
        .is_constraint_violation());
    assert_eq!(store.get_snapshot("snap_b").unwrap(), Some(a.clone()));
    assert_eq!(store.list_snapshots().unwrap(), vec![b.clone(), a.clone()]);
    assert!(store.delete_snapshot("snap_b").unwrap());
    assert!(!store.delete_snapshot("snap_b").unwrap());
    assert_eq!(store.get_snapshot("snap_b").unwrap(), None);
}

#[test]
fn volume_roundtrip_and_duplicate_names() {
    let store = Store::open_in_memory().unwrap();
    let v = VolumeRecord {
        name: "data".to_owned(),
        size_mb: 64,
        created_at: "2025-01-01T00:00:00.000Z".to_owned(),
        host_uid: 4243,
        tenant: "acme".to_owned(),
        workspace: "vol-x".to_owned(),
    };
    store.insert_volume(&v).unwrap();
    assert!(store
        .insert_volume(&v)
        .unwrap_err()
        .is_constraint_violation());
    // Names are per tenant: another tenant's `data` is another volume.
    let w = VolumeRecord {
        tenant: "beta".to_owned(),
        workspace: "vol-y".to_owned(),
        host_uid: 4244,
        ..v.clone()
    };
    store.insert_volume(&w).unwrap();
    assert_eq!(store.list_volumes().unwrap(), vec![v.clone(), w.clone()]);
    assert_eq!(store.get_volume("acme", "data").unwrap(), Some(v));
    assert_eq!(store.get_volume("beta", "data").unwrap(), Some(w));
    assert_eq!(store.get_volume("gamma", "data").unwrap(), None);
    assert_eq!(store.get_volume("acme", "other").unwrap(), None);
    assert!(store.delete_volume("acme", "data").unwrap());
    assert!(!store.delete_volume("acme", "data").unwrap());
    assert!(store.delete_volume("beta", "data").unwrap());
    assert!(store.list_volumes().unwrap().is_empty());
}

#[test]
fn duplicate_and_unknown_ids() {
    let store = Store::open_in_memory().unwrap();
    let sb = sandbox("sb-1", "2025-01-01T00:00:00Z", SandboxState::Running);
    store.insert_sandbox(&sb).unwrap();
    let err = store.insert_sandbox(&sb).unwrap_err();
    assert!(matches!(err, StoreError::InsertSandbox { .. }), "{err:?}");
    assert!(err.is_constraint_violation());

    let ghost = sandbox("ghost", "2025-01-01T00:00:00Z", SandboxState::Running);
    let err = store.update_sandbox(&ghost).unwrap_err();
    assert!(
        matches!(err, StoreError::SandboxNotFound { ref id } if id == "ghost"),
        "{err:?}"
    );

    // An execution needs a recorded sandbox (foreign key).
    let err = store
        .insert_execution(&execution("ex-1", "ghost", "2025-01-01T00:00:01Z"))
        .unwrap_err();
    assert!(matches!(err, StoreError::InsertExecution { .. }), "{err:?}");
    assert!(err.is_constraint_violation());

    let rec = execution("ex-1", "sb-1", "2025-01-01T00:00:01Z");
    store.insert_execution(&rec).unwrap();
    let err = store.insert_execution(&rec).unwrap_err();
    assert!(err.is_constraint_violation(), "{err:?}");

    let err = store
        .finish_execution("ex-404", &result_for(&rec))
        .unwrap_err();
    assert!(
        matches!(err, StoreError::ExecutionNotFound { ref id } if id == "ex-404"),
        "{err:?}"
    );
}

#[test]
fn get_unknown_returns_none() {
    let store = Store::open_in_memory().unwrap();
    assert_eq!(store.get_sandbox("nope").unwrap(), None);
    assert_eq!(store.get_execution("nope").unwrap(), None);
    assert!(store.list_executions("nope").unwrap().is_empty());
    assert!(store.list_sandboxes(true).unwrap().is_empty());
}

#[test]
fn execution_roundtrip() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_sandbox(&sandbox(
            "sb-1",
            "2025-01-01T00:00:00Z",
            SandboxState::Running,
        ))
        .unwrap();
    let mut rec = execution("ex-1", "sb-1", "2025-01-01T00:00:01.000Z");
    rec.language = Language::Bash;
    rec.code = "echo hi; exit 3".to_owned();
    store.insert_execution(&rec).unwrap();
    assert_eq!(store.get_execution("ex-1").unwrap(), Some(rec.clone()));

    let result = result_for(&rec);
    store.finish_execution("ex-1", &result).unwrap();
    rec.result = Some(result.clone());
    assert_eq!(store.get_execution("ex-1").unwrap(), Some(rec.clone()));
    assert_eq!(store.list_executions("sb-1").unwrap(), vec![rec.clone()]);

    // Finishing again replaces the result.
    let mut second = result.clone();
    second.end_state = EndState::Ok;
    second.error = None;
    second.result = None;
    second.exit_code = None;
    second.outputs.clear();
    store.finish_execution("ex-1", &second).unwrap();
    assert_eq!(
        store.get_execution("ex-1").unwrap().unwrap().result,
        Some(second)
    );

    // The queryable columns follow the result.
    let conn = store.conn();
    let (end_state, duration, cpu, peak): (String, f64, f64, i64) = conn
        .query_row(
            "SELECT end_state, duration_ms, cpu_time_ms, peak_memory_bytes FROM executions \
             WHERE id = 'ex-1'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .unwrap();
    assert_eq!(
        (end_state.as_str(), duration, cpu, peak),
        ("ok", 12.5, 3.25, 123_456_789)
    );
}

#[test]
fn execution_inserted_with_a_result() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_sandbox(&sandbox(
            "sb-1",
            "2025-01-01T00:00:00Z",
            SandboxState::Running,
        ))
        .unwrap();
    let mut rec = execution("ex-1", "sb-1", "2025-01-01T00:00:01Z");
    rec.result = Some(result_for(&rec));
    store.insert_execution(&rec).unwrap();
    assert_eq!(store.get_execution("ex-1").unwrap(), Some(rec));
}

#[test]
fn non_finite_times_are_stored_as_zero() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_sandbox(&sandbox(
            "sb-1",
            "2025-01-01T00:00:00Z",
            SandboxState::Running,
        ))
        .unwrap();
    let rec = execution("ex-1", "sb-1", "2025-01-01T00:00:01Z");
    store.insert_execution(&rec).unwrap();
    let mut result = result_for(&rec);
    result.duration_ms = f64::NAN;
    result.cpu_time_ms = f64::INFINITY;
    store.finish_execution("ex-1", &result).unwrap();
    let got = store
        .get_execution("ex-1")
        .unwrap()
        .unwrap()
        .result
        .unwrap();
    assert_eq!((got.duration_ms, got.cpu_time_ms), (0.0, 0.0));
}

#[test]
fn list_filters_and_ordering() {
    let store = Store::open_in_memory().unwrap();
    // Inserted out of time order; two share a created_at (insertion order breaks the tie).
    let rows = [
        ("c", "2025-01-03T00:00:00.000Z", SandboxState::Running),
        ("a", "2025-01-01T00:00:00.000Z", SandboxState::Deleted),
        ("d", "2025-01-04T00:00:00.000Z", SandboxState::Lost),
        ("b", "2025-01-02T00:00:00.000Z", SandboxState::Running),
        ("e", "2025-01-05T00:00:00.000Z", SandboxState::Expired),
        ("b2", "2025-01-02T00:00:00.000Z", SandboxState::Running),
    ];
    for (id, at, state) in rows {
        store.insert_sandbox(&sandbox(id, at, state)).unwrap();
    }
    let ids = |v: Vec<Sandbox>| v.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(store.list_sandboxes(false).unwrap()), ["b", "b2", "c"]);
    assert_eq!(
        ids(store.list_sandboxes(true).unwrap()),
        ["a", "b", "b2", "c", "d", "e"]
    );

    // A sandbox that ends drops out of the running list.
    let mut c = store.get_sandbox("c").unwrap().unwrap();
    c.state = SandboxState::Expired;
    store.update_sandbox(&c).unwrap();
    assert_eq!(ids(store.list_sandboxes(false).unwrap()), ["b", "b2"]);

    // Executions: in start order, only those of the sandbox asked for.
    let execs = [
        ("x3", "b", "2025-01-02T00:00:03.000Z"),
        ("x1", "b", "2025-01-02T00:00:01.000Z"),
        ("y1", "b2", "2025-01-02T00:00:02.000Z"),
        ("x2", "b", "2025-01-02T00:00:02.000Z"),
        ("x2b", "b", "2025-01-02T00:00:02.000Z"),
    ];
    for (id, sb, at) in execs {
        store.insert_execution(&execution(id, sb, at)).unwrap();
    }
    let ids = |v: Vec<ExecutionRecord>| v.into_iter().map(|e| e.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_executions("b").unwrap()),
        ["x1", "x2", "x2b", "x3"]
    );
    assert_eq!(ids(store.list_executions("b2").unwrap()), ["y1"]);
    assert!(store.list_executions("a").unwrap().is_empty());
}

#[test]
fn mark_running_lost_semantics() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_sandbox(&sandbox(
            "late",
            "2025-01-02T00:00:00.000Z",
            SandboxState::Running,
        ))
        .unwrap();
    store
        .insert_sandbox(&sandbox(
            "early",
            "2025-01-01T00:00:00.000Z",
            SandboxState::Running,
        ))
        .unwrap();
    let deleted = sandbox("gone", "2025-01-01T12:00:00.000Z", SandboxState::Deleted);
    store.insert_sandbox(&deleted).unwrap();

    // A finished execution, an unfinished one in a running sandbox, and an unfinished one in a
    // sandbox that had already ended.
    let done = execution("done", "early", "2025-01-03T00:00:00.000Z");
    store.insert_execution(&done).unwrap();
    let done_result = result_for(&done);
    store.finish_execution("done", &done_result).unwrap();
    let mut cut = execution("cut", "early", "2025-01-03T00:00:01.500Z");
    cut.language = Language::Bash;
    store.insert_execution(&cut).unwrap();
    store
        .insert_execution(&execution("orphan", "gone", "2025-01-03T00:00:09.000Z"))
        .unwrap();

    let marked = store
        .mark_running_lost("server restarted", "2025-01-03T00:00:04.000Z")
        .unwrap();
    assert_eq!(marked, ["early", "late"]);

    for id in ["early", "late"] {
        let sb = store.get_sandbox(id).unwrap().unwrap();
        assert_eq!(sb.state, SandboxState::Lost);
        assert_eq!(sb.ended_reason.as_deref(), Some("server restarted"));
    }
    assert_eq!(store.get_sandbox("gone").unwrap(), Some(deleted));
    assert!(store.list_sandboxes(false).unwrap().is_empty());

    // The finished execution is untouched.
    assert_eq!(
        store.get_execution("done").unwrap().unwrap().result,
        Some(done_result)
    );

    let cut_rec = store.get_execution("cut").unwrap().unwrap();
    assert_eq!(cut_rec.code, cut.code);
    let r = cut_rec.result.expect("cut execution gets a result");
    let error = ExecError {
        name: "ServerRestart".to_owned(),
        value: "server restarted".to_owned(),
        traceback: vec![],
    };
    assert_eq!(r.id, "cut");
    assert_eq!(r.sandbox_id, "early");
    assert_eq!(r.language, Language::Bash);
    assert_eq!(r.end_state, EndState::Killed);
    assert!(!r.sandbox_alive);
    assert_eq!(r.error.as_ref(), Some(&error));
    assert_eq!(r.outputs, vec![OutputEvent::Error(error)]);
    assert_eq!(r.started_at, "2025-01-03T00:00:01.500Z");
    assert!((r.duration_ms - 2500.0).abs() < 1e-6, "{}", r.duration_ms);
    assert_eq!((r.stdout.as_str(), r.stderr.as_str()), ("", ""));
    assert_eq!(r.exit_code, None);

    // Every execution without a result, whatever its sandbox's state; a start after "now"
    // (clock skew) gives duration 0, not a negative one.
    let orphan = store
        .get_execution("orphan")
        .unwrap()
        .unwrap()
        .result
        .unwrap();
    assert_eq!(orphan.end_state, EndState::Killed);
    assert_eq!(orphan.duration_ms, 0.0);

    // Nothing left to mark.
    assert!(store
        .mark_running_lost("again", "2025-01-04T00:00:00Z")
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .get_sandbox("early")
            .unwrap()
            .unwrap()
            .ended_reason
            .as_deref(),
        Some("server restarted")
    );
}

#[test]
fn mark_running_lost_with_unparsable_now() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_sandbox(&sandbox(
            "sb",
            "2025-01-01T00:00:00Z",
            SandboxState::Running,
        ))
        .unwrap();
    store
        .insert_execution(&execution("ex", "sb", "2025-01-01T00:00:01Z"))
        .unwrap();
    assert_eq!(
        store.mark_running_lost("restart", "not a time").unwrap(),
        ["sb"]
    );
    let r = store.get_execution("ex").unwrap().unwrap().result.unwrap();
    assert_eq!((r.end_state, r.duration_ms), (EndState::Killed, 0.0));
}

#[test]
fn reopening_a_file_keeps_data_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandlot.db");
    let sb = sandbox("sb-1", "2025-01-01T00:00:00.000Z", SandboxState::Running);
    let ended = sandbox("sb-0", "2024-12-31T00:00:00.000Z", SandboxState::Expired);
    let done = execution("ex-1", "sb-1", "2025-01-01T00:00:01.000Z");
    let done_result = result_for(&done);
    {
        let store = Store::open(&path).unwrap();
        store.insert_sandbox(&sb).unwrap();
        store.insert_sandbox(&ended).unwrap();
        store.insert_execution(&done).unwrap();
        store.finish_execution("ex-1", &done_result).unwrap();
        store
            .insert_execution(&execution("ex-2", "sb-1", "2025-01-01T00:00:02.000Z"))
            .unwrap();
        // The server "crashes" here: the store is dropped with a sandbox running and an
        // execution in flight.
    }
    assert!(path.exists());

    let store = Store::open(&path).unwrap();
    assert_eq!(store.get_sandbox("sb-1").unwrap(), Some(sb));
    assert_eq!(store.list_sandboxes(true).unwrap().len(), 2);
    assert_eq!(store.list_executions("sb-1").unwrap().len(), 2);
    assert_eq!(
        store
            .mark_running_lost("server restart", "2025-01-01T00:01:00Z")
            .unwrap(),
        ["sb-1"]
    );
    drop(store);

    // And the recovery itself persists.
    let store = Store::open(&path).unwrap();
    assert_eq!(
        store.get_sandbox("sb-1").unwrap().unwrap().state,
        SandboxState::Lost
    );
    assert_eq!(store.get_sandbox("sb-0").unwrap(), Some(ended));
    let execs = store.list_executions("sb-1").unwrap();
    assert_eq!(execs[0].result.as_ref(), Some(&done_result));
    assert_eq!(
        execs[1].result.as_ref().unwrap().end_state,
        EndState::Killed
    );

    let conn = store.conn();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fk, 1);
}

#[test]
fn newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandlot.db");
    drop(Store::open(&path).unwrap());
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let err = Store::open(&path).unwrap_err();
    assert!(
        matches!(err, StoreError::UnsupportedSchema { found, supported }
            if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION),
        "{err:?}"
    );
}

#[test]
fn open_in_a_missing_directory_fails() {
    let dir = tempfile::tempdir().unwrap();
    let err = Store::open(&dir.path().join("no/such/dir/sandlot.db")).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
}

#[test]
fn nul_bytes_and_unicode_roundtrip() {
    let store = Store::open_in_memory().unwrap();
    let weird = "a\0b 🦀 é 日本語 \u{10FFFF} '); DROP TABLE sandboxes; --\0";
    let mut sb = sandbox(weird, "2025-01-01T00:00:00Z", SandboxState::Running);
    sb.env.insert("K\0".to_owned(), weird.to_owned());
    sb.metadata.insert("🦀".to_owned(), weird.to_owned());
    store.insert_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox(weird).unwrap(), Some(sb));

    let mut rec = execution("ex\0🦀", weird, "2025-01-01T00:00:01Z");
    rec.code = format!("print('{weird}')\n\0\0# 🎉👩‍👩‍👧‍👦");
    store.insert_execution(&rec).unwrap();
    assert_eq!(store.get_execution(&rec.id).unwrap(), Some(rec.clone()));

    let mut result = result_for(&rec);
    result.stdout = weird.to_owned();
    result.outputs = vec![OutputEvent::Stdout {
        text: weird.to_owned(),
    }];
    store.finish_execution(&rec.id, &result).unwrap();
    rec.result = Some(result);
    assert_eq!(store.list_executions(weird).unwrap(), vec![rec]);
    // The tables are still there.
    assert_eq!(store.list_sandboxes(true).unwrap().len(), 1);
}

#[test]
fn large_result_roundtrip() {
    let store = Store::open_in_memory().unwrap();
    store
        .insert_sandbox(&sandbox(
            "sb",
            "2025-01-01T00:00:00Z",
            SandboxState::Running,
        ))
        .unwrap();
    let rec = execution("ex", "sb", "2025-01-01T00:00:01Z");
    store.insert_execution(&rec).unwrap();
    let mut result = result_for(&rec);
    result.stdout = "x".repeat(4 << 20);
    result.outputs = (0..1000)
        .map(|i| OutputEvent::Stdout {
            text: format!("{i}: {}\n", "y".repeat(1000)),
        })
        .collect();
    store.finish_execution("ex", &result).unwrap();
    assert_eq!(
        store.get_execution("ex").unwrap().unwrap().result,
        Some(result)
    );
}

#[test]
fn concurrent_use_from_threads() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 25;
    let store = Arc::new(Store::open_in_memory().unwrap());
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                let sb_id = format!("sb-{t}");
                store
                    .insert_sandbox(&sandbox(
                        &sb_id,
                        &format!("2025-01-01T00:00:{t:02}.000Z"),
                        SandboxState::Running,
                    ))
                    .unwrap();
                for i in 0..PER_THREAD {
                    let rec = execution(
                        &format!("ex-{t}-{i}"),
                        &sb_id,
                        &format!("2025-01-01T00:01:{i:02}.000Z"),
                    );
                    store.insert_execution(&rec).unwrap();
                    store.finish_execution(&rec.id, &result_for(&rec)).unwrap();
                    assert!(store
                        .get_execution(&rec.id)
                        .unwrap()
                        .unwrap()
                        .result
                        .is_some());
                    store.list_sandboxes(false).unwrap();
                }
                let mut sb = store.get_sandbox(&sb_id).unwrap().unwrap();
                sb.last_active_at = "2025-01-01T00:02:00.000Z".to_owned();
                store.update_sandbox(&sb).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let all = store.list_sandboxes(true).unwrap();
    assert_eq!(all.len(), THREADS);
    for (t, sb) in all.iter().enumerate() {
        assert_eq!(sb.id, format!("sb-{t}"));
        assert_eq!(sb.last_active_at, "2025-01-01T00:02:00.000Z");
        let execs = store.list_executions(&sb.id).unwrap();
        let ids: Vec<_> = execs.iter().map(|e| e.id.clone()).collect();
        let expected: Vec<_> = (0..PER_THREAD).map(|i| format!("ex-{t}-{i}")).collect();
        assert_eq!(ids, expected);
    }
}

#[test]
fn concurrent_stores_on_one_file() {
    // Two connections (as two processes would have) writing the same WAL database at once.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandlot.db");
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = Store::open(&path).unwrap();
                for i in 0..20 {
                    store
                        .insert_sandbox(&sandbox(
                            &format!("sb-{t}-{i}"),
                            &format!("2025-01-01T00:{t:02}:{i:02}.000Z"),
                            SandboxState::Running,
                        ))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.list_sandboxes(false).unwrap().len(), 80);
}

#[test]
fn restarts_host_uids_and_stopped_sandboxes() {
    let store = Store::open_in_memory().unwrap();
    let mut a = sandbox("sb_a", "2025-01-01T00:00:00.000000Z", SandboxState::Running);
    store.insert_sandbox(&a).unwrap();
    store.set_host_uid("sb_a", Some(0x4000_0001)).unwrap();
    a.restart_count = 2;
    a.last_restart = Some(sandlot_types::LastRestart {
        reason: "oom".into(),
        at: "2025-01-01T00:00:01.000000Z".into(),
    });
    store.update_sandbox(&a).unwrap();
    assert_eq!(store.get_sandbox("sb_a").unwrap().unwrap(), a);
    let b = sandbox("sb_b", "2025-01-01T00:00:02.000000Z", SandboxState::Failed);
    store.insert_sandbox(&b).unwrap();
    store
        .insert_sandbox(&sandbox(
            "sb_c",
            "2025-01-01T00:00:03.000000Z",
            SandboxState::Deleted,
        ))
        .unwrap();
    assert!(matches!(
        store.set_host_uid("sb_x", None),
        Err(StoreError::SandboxNotFound { .. })
    ));

    let marked = store
        .mark_running(
            SandboxState::Stopped,
            "server restarted",
            "2025-01-02T00:00:00Z",
        )
        .unwrap();
    assert_eq!(marked, vec!["sb_a".to_string()]);
    let kept = store
        .sandboxes_in(&[SandboxState::Stopped, SandboxState::Failed])
        .unwrap();
    let ids: Vec<(&str, SandboxState, Option<u32>)> = kept
        .iter()
        .map(|(s, uid)| (s.id.as_str(), s.state, *uid))
        .collect();
    assert_eq!(
        ids,
        vec![
            ("sb_a", SandboxState::Stopped, Some(0x4000_0001)),
            ("sb_b", SandboxState::Failed, None),
        ]
    );
    assert_eq!(kept[0].0.restart_count, 2);
}

#[test]
fn exposed_ports_roundtrip() {
    let store = Store::open_in_memory().unwrap();
    let mut sb = sandbox("sb-p", "2025-01-01T00:00:00.000Z", SandboxState::Running);
    sb.ports = vec![8000, 8501, 65535];
    store.insert_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-p").unwrap(), Some(sb.clone()));
    sb.ports.clear();
    sb.all_ports = true;
    store.update_sandbox(&sb).unwrap();
    assert_eq!(store.get_sandbox("sb-p").unwrap(), Some(sb.clone()));
    store.set_host_uid("sb-p", Some(77)).unwrap();
    let listed = store.sandboxes_in(&[SandboxState::Running]).unwrap();
    assert_eq!(listed, vec![(sb, Some(77))]);
    assert_eq!(
        SANDBOX_COLUMNS.split(',').count(),
        SANDBOX_COLUMN_COUNT,
        "the host uid is read right after the sandbox's columns"
    );
}

/// A database written before ports existed (schema 3) opens with every sandbox exposing none.
#[test]
fn schema_3_sandboxes_expose_no_ports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandlot.db");
    {
        let conn = Connection::open(&path).unwrap();
        for m in &MIGRATIONS[..3] {
            conn.execute_batch(m).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute(
            "INSERT INTO sandboxes (id, template, template_version, state, env, metadata, \
             limits, idle_timeout, max_lifetime, created_at, last_active_at, expires_at) \
             VALUES ('sb-old', 'default', 'v1', 'stopped', '{}', '{}', \
             '{\"memory_mb\":1,\"cpu_millis\":1,\"pids\":1,\"disk_mb\":1}', 60, 60, \
             '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', '2025-01-02T00:00:00.000Z')",
            [],
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let sb = store.get_sandbox("sb-old").unwrap().unwrap();
    assert!(sb.ports.is_empty());
    assert!(!sb.all_ports);
    // Records from before tenants belong to the tenant `default`, isolated, no network.
    assert_eq!(
        (sb.tenant.as_str(), sb.tier.as_str()),
        ("default", "isolated")
    );
    assert!(sb.network.is_empty() && sb.contained.is_none());
    let version: i64 = store
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

/// A data dir of schema 8 (volume and template names one namespace across tenants) opens
/// with its volumes and template owners intact, each keyed by its tenant; then a second
/// tenant may take the same names.
#[test]
fn schema_8_volumes_and_templates_become_per_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandlot.db");
    {
        let conn = Connection::open(&path).unwrap();
        for m in &MIGRATIONS[..8] {
            conn.execute_batch(m).unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        conn.execute_batch(
            "INSERT INTO volumes (name, size_mb, created_at, host_uid, tenant) VALUES \
               ('data', 64, '2025-01-01T00:00:00.000Z', 4243, 'acme'), \
               ('cache', 32, '2025-01-02T00:00:00.000Z', 4244, 'default'); \
             INSERT INTO template_owners (name, tenant) VALUES ('t1', 'acme'), ('t2', 'default');",
        )
        .unwrap();
    }
    let store = Store::open(&path).unwrap();
    let data = store.get_volume("acme", "data").unwrap().unwrap();
    assert_eq!(
        (data.size_mb, data.host_uid, data.workspace.as_str()),
        (64, 4243, "vol_data"),
        "a volume keeps its files where they were"
    );
    let cache = store.get_volume("default", "cache").unwrap().unwrap();
    assert_eq!(cache.workspace, "vol_cache");
    assert_eq!(store.get_volume("default", "data").unwrap(), None);
    assert_eq!(
        store.flat_template_owner("t1").unwrap().as_deref(),
        Some("acme")
    );
    assert_eq!(
        store.flat_template_owner("t2").unwrap().as_deref(),
        Some("default")
    );
    // Another tenant may now have its own `data` and `t1`.
    store
        .insert_volume(&VolumeRecord {
            name: "data".into(),
            size_mb: 8,
            created_at: "2026-01-01T00:00:00.000Z".into(),
            host_uid: 4300,
            tenant: "beta".into(),
            workspace: "vol-abc".into(),
        })
        .unwrap();
    store.record_template("beta", "t1").unwrap();
    assert_eq!(store.list_volumes().unwrap().len(), 3);
    assert_eq!(
        store.flat_template_owner("t1").unwrap().as_deref(),
        Some("acme")
    );
    let version: i64 = store
        .conn()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
}

#[test]
fn tenants_keys_and_records_roundtrip() {
    use sandlot_types::{ApiKeyInfo, Role, Tenant, TenantQuotas};
    let store = Store::open_in_memory().unwrap();
    let t = Tenant {
        name: "acme".into(),
        plan: "team".into(),
        quotas: TenantQuotas {
            max_sandboxes: Some(3),
            ..Default::default()
        },
        created_at: "2026-01-01T00:00:00.000000Z".into(),
    };
    store.upsert_tenant(&t).unwrap();
    let mut t2 = t.clone();
    t2.plan = "free".into();
    store.upsert_tenant(&t2).unwrap();
    assert_eq!(store.list_tenants().unwrap(), vec![t2]);
    let k = crate::KeyRecord {
        info: ApiKeyInfo {
            id: "key_1".into(),
            prefix: "abcdefgh".into(),
            tenant: "acme".into(),
            role: Role::Admin,
            name: None,
            created_at: "2026-01-01T00:00:00.000000Z".into(),
            revoked_at: None,
        },
        sha256: "00".repeat(32),
    };
    store.insert_key(&k).unwrap();
    assert!(store.insert_key(&k).is_err(), "ids and prefixes are unique");
    let revoked = store
        .revoke_key("key_1", "2026-01-02T00:00:00.000000Z")
        .unwrap()
        .unwrap();
    assert!(revoked.info.revoked_at.is_some());
    assert!(store.revoke_key("nope", "x").unwrap().is_none());
    // A key of an unknown tenant is refused by the foreign key.
    let mut orphan = k.clone();
    orphan.info.id = "key_2".into();
    orphan.info.prefix = "zzzzzzzz".into();
    orphan.info.tenant = "ghost".into();
    assert!(store.insert_key(&orphan).is_err());
    // Template names are per tenant; rows made now are not legacy flat specs.
    store.record_template("acme", "t").unwrap();
    store.record_template("other", "t").unwrap();
    store.record_template("acme", "t").unwrap();
    assert_eq!(store.flat_template_owner("t").unwrap(), None);
    store.forget_template("acme", "t").unwrap();
    store.add_artifact_owners("acme", &["ab".into()]).unwrap();
    assert!(store.artifact_owned("ab", "acme").unwrap());
    assert!(!store.artifact_owned("ab", "other").unwrap());
}

#[test]
fn the_journal_writes_in_batches_and_flushes() {
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(Store::open(&dir.path().join("db")).unwrap());
    let j = crate::Journal::start(store.clone());
    for i in 0..1000 {
        j.decision(crate::DecisionRecord {
            id: format!("dec_{i}"),
            at: format!("2026-01-01T00:00:{:02}.{i:06}Z", i / 100),
            gate: "execute".into(),
            key_id: Some("key_1".into()),
            tenant: Some("acme".into()),
            resource: "Sandbox::\"sb\"".into(),
            allowed: i % 2 == 0,
            policies: vec!["allow-all-gates".into()],
            reason: "r".into(),
            version: "v".into(),
            latency_us: 1.0,
            detail: None,
        });
    }
    j.flush();
    let got = store
        .list_decisions(Some("acme"), Some("execute"), 2000)
        .unwrap();
    assert_eq!(got.len(), 1000);
    assert_eq!(got[0].id, "dec_999", "newest first");
}
