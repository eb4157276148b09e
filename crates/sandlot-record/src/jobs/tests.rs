//! The jobs' logic that needs no running sandbox: submission checks, queue bounds and their
//! `Retry-After`, listing pages, the job as stored and shown, and the job table's lifecycle and
//! restart recovery as `Jobs` drives it (a real store in a temporary directory).

use super::routes::{
    check_submission, job_record, list_limit, next_after, queue_full, view, ListQuery,
};
use super::*;
use sandlot_types::{Principal, Role};

fn caller(tenant: &str) -> Caller {
    Caller(Principal {
        key_id: format!("key_{tenant}"),
        key_prefix: "sl_abcd".to_owned(),
        tenant: tenant.to_owned(),
        role: Role::Member,
        plan: "free".to_owned(),
    })
}

fn submission(v: Value) -> SubmitJob {
    serde_json::from_value(v).expect("a valid submission")
}

fn limits(concurrency: usize, per_sandbox: usize, per_tenant: usize, global: usize) -> Limits {
    Limits {
        concurrency,
        per_sandbox,
        per_tenant,
        global,
    }
}

fn request(code: &str) -> ExecuteRequest {
    ExecuteRequest {
        code: code.to_owned(),
        language: Language::Python,
        timeout: Some(5.0),
        stream: false,
        context: None,
        on_failure: Default::default(),
    }
}

/// A store in a temporary directory (kept alive with it), as `sandlot serve` opens one.
fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("sandlot.db")).unwrap();
    (dir, store)
}

fn submit(store: &Store, id: &str, sandbox: &str, tenant: &str, idempotent: bool) -> i64 {
    let job = job_record(
        id,
        sandbox,
        &caller(tenant),
        &request("print(1)"),
        json!({"label": id}),
        idempotent,
        "2026-01-01T00:00:00.000000Z",
    );
    store.insert_job(&job).unwrap()
}

fn state_of(store: &Store, id: &str) -> String {
    store.get_job(id).unwrap().unwrap()["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_submission_needs_only_the_code() {
    let s = submission(json!({"code": "1 + 1"}));
    assert_eq!(s.code, "1 + 1");
    assert_eq!(s.language, Language::Python);
    assert_eq!(s.timeout, None);
    assert_eq!(s.context, None);
    assert!(!s.idempotent);
    assert_eq!(s.metadata, None);
    let s = submission(json!({"code": "ls", "language": "bash", "idempotent": true,
                              "metadata": {"run": 7}}));
    assert_eq!(s.language, Language::Bash);
    assert!(s.idempotent);
    assert_eq!(s.metadata.unwrap()["run"], json!(7));
}

#[test]
fn submissions_within_bounds_pass() {
    let s = submission(json!({"code": "x" , "timeout": 30.0}));
    assert!(check_submission(&s, &json!({}), 1, 30.0).is_ok());
    let s = submission(json!({"code": "x"}));
    assert!(check_submission(&s, &json!({}), 1, 30.0).is_ok());
}

#[test]
fn code_past_the_limit_is_too_large() {
    let s = submission(json!({"code": "12345"}));
    let e = check_submission(&s, &json!({}), 4, 30.0).unwrap_err().0;
    assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    assert_eq!(
        e.message,
        "the code is 5 bytes; this server accepts at most 4 bytes"
    );
}

#[test]
fn timeouts_must_be_positive_finite_and_at_most_the_server_s() {
    for bad in [0.0, -1.0, 30.5, f64::INFINITY, f64::NAN] {
        let mut s = submission(json!({"code": "x"}));
        s.timeout = Some(bad);
        let e = check_submission(&s, &json!({}), 100, 30.0).unwrap_err().0;
        assert_eq!(e.code, ErrorCode::InvalidArgument, "timeout {bad}");
        assert_eq!(
            e.message,
            "timeout must be a number of seconds above 0 and at most 30"
        );
    }
    let mut s = submission(json!({"code": "x"}));
    s.timeout = Some(30.0);
    assert!(check_submission(&s, &json!({}), 100, 30.0).is_ok());
}

#[test]
fn metadata_is_bounded_as_json() {
    let s = submission(json!({"code": "x"}));
    // `{"m":"…"}` is 8 bytes around the string.
    let fits = json!({"m": "a".repeat(MAX_METADATA_BYTES - 8)});
    assert_eq!(fits.to_string().len(), MAX_METADATA_BYTES);
    assert!(check_submission(&s, &fits, 100, 30.0).is_ok());
    let over = json!({"m": "a".repeat(MAX_METADATA_BYTES - 7)});
    let e = check_submission(&s, &over, 100, 30.0).unwrap_err().0;
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(e.message, "metadata is larger than 16384 bytes as JSON");
}

#[test]
fn queues_with_room_accept() {
    assert_eq!(queue_full(&limits(4, 10, 20, 100), 9, 19, 99), None);
    assert_eq!(queue_full(&limits(4, 10, 20, 100), 0, 0, 0), None);
}

#[test]
fn the_first_full_bound_is_named_with_a_retry() {
    let l = limits(4, 10, 20, 100);
    assert_eq!(
        queue_full(&l, 10, 20, 100).as_deref(),
        Some("10 jobs already wait on this sandbox; retry in 2 s")
    );
    assert_eq!(
        queue_full(&l, 3, 20, 100).as_deref(),
        Some("20 jobs already wait on this tenant's sandboxes; retry in 5 s")
    );
    assert_eq!(
        queue_full(&l, 3, 5, 100).as_deref(),
        Some("100 jobs already wait on this server; retry in 25 s")
    );
}

#[test]
fn retry_after_is_between_one_second_and_a_minute() {
    // Fewer waiting than permits: at least a second.
    assert_eq!(
        queue_full(&limits(8, 1, 10, 10), 1, 0, 0).as_deref(),
        Some("1 jobs already wait on this sandbox; retry in 1 s")
    );
    // A long queue: at most a minute.
    assert_eq!(
        queue_full(&limits(1, 1000, 10_000, 10_000), 1000, 0, 0).as_deref(),
        Some("1000 jobs already wait on this sandbox; retry in 60 s")
    );
    // No permits at all divides by one, not by zero.
    assert_eq!(
        queue_full(&limits(0, 5, 10, 10), 5, 0, 0).as_deref(),
        Some("5 jobs already wait on this sandbox; retry in 5 s")
    );
}

fn query(v: Value) -> ListQuery {
    serde_json::from_value(v).unwrap()
}

#[test]
fn list_pages_are_100_by_default_and_clamped() {
    assert_eq!(list_limit(&query(json!({}))).unwrap(), 100);
    assert_eq!(list_limit(&query(json!({"limit": 0}))).unwrap(), 1);
    assert_eq!(list_limit(&query(json!({"limit": 5000}))).unwrap(), 1000);
    assert_eq!(list_limit(&query(json!({"limit": 7}))).unwrap(), 7);
    for st in state::ALL {
        assert_eq!(list_limit(&query(json!({"state": st}))).unwrap(), 100);
    }
}

#[test]
fn an_unknown_state_is_refused_with_the_known_ones() {
    let e = list_limit(&query(json!({"state": "done"}))).unwrap_err().0;
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert_eq!(
        e.message,
        "state must be one of queued, running, succeeded, failed, cancelled, lost, held"
    );
}

#[test]
fn a_held_job_s_reason_names_its_review_and_only_a_review() {
    use super::review_of_reason;
    assert_eq!(
        review_of_reason("held for review rev_abc123: bash needs a person"),
        Some("rev_abc123")
    );
    assert_eq!(
        review_of_reason("held for review rev_abc123"),
        Some("rev_abc123")
    );
    for bad in [
        "",
        "the server stopped while it ran",
        "held for review nope: x",
        "held for review rev_: x",
        "held for review rev_a/../b: x",
        "Held for review rev_abc: x",
    ] {
        assert_eq!(review_of_reason(bad), None, "{bad:?}");
    }
}

#[test]
fn the_next_page_starts_after_a_full_page_s_last_position() {
    let page = vec![json!({"position": 3}), json!({"position": 9})];
    assert_eq!(next_after(&page, 2), Some(9));
    assert_eq!(next_after(&page, 3), None);
    assert_eq!(next_after(&[], 0), None);
}

#[test]
fn a_job_is_stored_queued_and_shown_without_its_tenant() {
    let (_dir, store) = store();
    let mut req = request("print(2)");
    req.context = Some("ctx_1".to_owned());
    let job = job_record(
        "job_a",
        "sb_1",
        &caller("acme"),
        &req,
        json!({"k": "v"}),
        true,
        "2026-01-01T00:00:00.000000Z",
    );
    assert_eq!(store.insert_job(&job).unwrap(), 1);
    let stored = store.get_job("job_a").unwrap().unwrap();
    assert_eq!(stored["tenant"], "acme");
    let shown = view(stored);
    assert_eq!(
        shown,
        json!({
            "id": "job_a",
            "sandbox_id": "sb_1",
            "key_id": "key_acme",
            "state": "queued",
            "request": {"code": "print(2)", "language": "python", "timeout": 5.0,
                        "stream": false, "context": "ctx_1"},
            "metadata": {"k": "v"},
            "idempotent": true,
            "submitted_at": "2026-01-01T00:00:00.000000Z",
            "started_at": null,
            "ended_at": null,
            "execution_id": null,
            "result": null,
            "reason": null,
            "attempt": 1,
            "position": 1,
        })
    );
    // What recovery reads back is the request that was submitted.
    let back: ExecuteRequest = serde_json::from_value(shown["request"].clone()).unwrap();
    assert_eq!(back, req);
}

#[test]
fn positions_follow_submission_order_across_sandboxes() {
    let (_dir, store) = store();
    assert_eq!(submit(&store, "job_1", "sb_a", "acme", false), 1);
    assert_eq!(submit(&store, "job_2", "sb_b", "acme", false), 2);
    assert_eq!(submit(&store, "job_3", "sb_a", "acme", false), 3);
    let open: Vec<_> = store
        .open_jobs()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(open, ["job_1", "job_2", "job_3"]);
    let on_a: Vec<_> = store
        .list_jobs("sb_a", None, 0, 100)
        .unwrap()
        .iter()
        .map(|j| j["position"].as_i64().unwrap())
        .collect();
    assert_eq!(on_a, [1, 3]);
}

#[test]
fn a_job_starts_once_and_ends_once() {
    let (_dir, store) = store();
    submit(&store, "job_1", "sb_a", "acme", false);
    assert!(store.start_job("job_1", "t1").unwrap());
    // A second worker (or a cancelled job) does not start it again.
    assert!(!store.start_job("job_1", "t2").unwrap());
    let result = json!({"end_state": "ok"});
    assert!(store
        .end_job(
            "job_1",
            state::SUCCEEDED,
            "t3",
            Some("ex_1"),
            Some(&result),
            None
        )
        .unwrap());
    // An end is recorded once: a late cancel does not overwrite it.
    assert!(!store
        .end_job("job_1", state::CANCELLED, "t4", None, None, Some("late"))
        .unwrap());
    let j = store.get_job("job_1").unwrap().unwrap();
    assert_eq!(j["state"], "succeeded");
    assert_eq!(j["started_at"], "t1");
    assert_eq!(j["ended_at"], "t3");
    assert_eq!(j["execution_id"], "ex_1");
    assert_eq!(j["result"], result);
    assert_eq!(j["reason"], Value::Null);
}

#[test]
fn a_queued_job_cancelled_before_its_turn_never_starts() {
    let (_dir, store) = store();
    submit(&store, "job_1", "sb_a", "acme", false);
    assert!(store
        .end_job(
            "job_1",
            state::CANCELLED,
            "t1",
            None,
            None,
            Some("cancelled by key sl_abcd before it ran")
        )
        .unwrap());
    assert!(!store.start_job("job_1", "t2").unwrap());
    assert_eq!(state_of(&store, "job_1"), "cancelled");
    assert!(store.open_jobs().unwrap().is_empty());
}

#[test]
fn recovery_loses_running_jobs_and_requeues_idempotent_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sandlot.db");
    {
        let store = Store::open(&path).unwrap();
        submit(&store, "job_plain", "sb_a", "acme", false);
        submit(&store, "job_again", "sb_a", "acme", true);
        submit(&store, "job_waiting", "sb_b", "acme", false);
        submit(&store, "job_done", "sb_b", "acme", false);
        assert!(store.start_job("job_plain", "t1").unwrap());
        assert!(store.start_job("job_again", "t1").unwrap());
        assert!(store.start_job("job_done", "t1").unwrap());
        store
            .end_job("job_done", state::FAILED, "t2", None, None, Some("boom"))
            .unwrap();
        // The server stops here; the next one opens the same file.
    }
    let store = Store::open(&path).unwrap();
    let (lost, requeued) = store.recover_jobs(STOPPED_REASON, "t9", None).unwrap();
    assert_eq!((lost, requeued), (1, 1));
    let plain = store.get_job("job_plain").unwrap().unwrap();
    assert_eq!(plain["state"], "lost");
    assert_eq!(plain["reason"], "the server stopped while it ran");
    assert_eq!(plain["ended_at"], "t9");
    let again = store.get_job("job_again").unwrap().unwrap();
    assert_eq!(again["state"], "queued");
    assert_eq!(again["attempt"], 2);
    assert_eq!(again["started_at"], Value::Null);
    assert_eq!(
        again["reason"],
        "the server stopped while it ran; queued again (idempotent)"
    );
    assert_eq!(state_of(&store, "job_waiting"), "queued");
    assert_eq!(state_of(&store, "job_done"), "failed");
    // What `Jobs::start` queues again, in submission order.
    let open: Vec<_> = store
        .open_jobs()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(open, ["job_again", "job_waiting"]);
    // Recovery twice changes nothing more.
    assert_eq!(
        store.recover_jobs(STOPPED_REASON, "t10", None).unwrap(),
        (0, 0)
    );
}

#[test]
fn a_job_stopped_by_shutdown_is_recovered_alone() {
    let (_dir, store) = store();
    submit(&store, "job_1", "sb_a", "acme", false);
    submit(&store, "job_2", "sb_a", "acme", false);
    store.start_job("job_1", "t1").unwrap();
    store.start_job("job_2", "t1").unwrap();
    assert_eq!(
        store
            .recover_jobs(STOPPED_REASON, "t2", Some("job_1"))
            .unwrap(),
        (1, 0)
    );
    assert_eq!(state_of(&store, "job_1"), "lost");
    assert_eq!(state_of(&store, "job_2"), "running");
}

#[test]
fn listing_filters_by_state_and_pages_by_position() {
    let (_dir, store) = store();
    for i in 1..=5 {
        submit(&store, &format!("job_{i}"), "sb_a", "acme", false);
    }
    submit(&store, "job_other", "sb_b", "acme", false);
    store.start_job("job_2", "t").unwrap();
    store.start_job("job_4", "t").unwrap();
    let ids = |v: Vec<Value>| -> Vec<String> {
        v.iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let running = store
        .list_jobs("sb_a", Some(state::RUNNING), 0, 100)
        .unwrap();
    assert_eq!(ids(running), ["job_2", "job_4"]);
    let limit = list_limit(&query(json!({"limit": 2}))).unwrap();
    let page1 = store.list_jobs("sb_a", None, 0, limit).unwrap();
    let after = next_after(&page1, limit);
    assert_eq!(ids(page1), ["job_1", "job_2"]);
    assert_eq!(after, Some(2));
    let page2 = store
        .list_jobs("sb_a", None, after.unwrap(), limit)
        .unwrap();
    let after = next_after(&page2, limit);
    assert_eq!(ids(page2), ["job_3", "job_4"]);
    let page3 = store
        .list_jobs("sb_a", None, after.unwrap(), limit)
        .unwrap();
    assert_eq!(next_after(&page3, limit), None);
    assert_eq!(ids(page3), ["job_5"]);
}

#[test]
fn end_states_read_as_sentences() {
    assert_eq!(end_state_str(EndState::Ok), "ok");
    assert_eq!(end_state_str(EndState::Error), "with an error");
    assert_eq!(end_state_str(EndState::Timeout), "by its timeout");
    assert_eq!(end_state_str(EndState::Interrupted), "interrupted");
    assert_eq!(end_state_str(EndState::Oom), "out of memory");
    assert_eq!(
        end_state_str(EndState::Killed),
        "killed (the sandbox's processes died)"
    );
}

#[test]
fn ids_and_messages_are_bounded() {
    let id = new_job_id();
    assert!(id.starts_with("job_"), "{id}");
    assert_ne!(id, new_job_id());
    let long = "j".repeat(200);
    let e = job_not_found(&long).0;
    assert_eq!(e.code, ErrorCode::JobNotFound);
    assert_eq!(e.message, format!("no job {}", "j".repeat(64)));
    assert_eq!(
        sandbox_ended_reason("sb_9"),
        "sandbox sb_9 ended (deleted, expired or failed) before the job ran"
    );
    assert_eq!(env_usize("SANDLOT_TEST_JOBS_NEVER_SET_ANYWHERE", 7), 7);
}
