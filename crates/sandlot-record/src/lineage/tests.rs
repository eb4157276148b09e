//! Lineage's logic on recorded runs (a real store in a temporary directory): the parent chain
//! (forks, snapshots, other tenants, cycles, its depth bound), which policy decided an
//! execution, stable run ids, and the OpenLineage events of a run.

use super::*;
use crate::fixtures::{artifact, execution, input, sandbox, store, T0};
use sandlot_store::{DecisionRecord, FindingRecord, SnapshotRecord, Store};
use sandlot_types::{EndState, Snapshot};

fn insert(store: &Store, sb: &Sandbox) {
    store.insert_sandbox(sb).unwrap();
}

fn fork(id: &str, tenant: &str, of: &str) -> Sandbox {
    let mut sb = sandbox(id, tenant, SandboxState::Running);
    sb.forked_from = Some(of.to_owned());
    sb
}

fn snapshot(store: &Store, id: &str, of: &str, tenant: &str) {
    store
        .insert_snapshot(&SnapshotRecord {
            snapshot: Snapshot {
                id: id.to_owned(),
                name: None,
                sandbox_id: of.to_owned(),
                template: "default".to_owned(),
                template_version: format!("v-{of}"),
                created_at: "2026-01-01T00:30:00.000000Z".to_owned(),
                state_bytes: 10,
                workspace: true,
                variables: 1,
                not_captured: Vec::new(),
                version: 1,
                tenant: tenant.to_owned(),
            },
            state_sha256: "0".repeat(64),
            contexts: Vec::new(),
        })
        .unwrap();
}

fn decision(id: &str, gate: &str, sandbox: &str, at: &str, version: &str) -> DecisionRecord {
    DecisionRecord {
        id: id.to_owned(),
        at: at.to_owned(),
        gate: gate.to_owned(),
        key_id: None,
        tenant: Some("acme".to_owned()),
        resource: format!("Sandbox::{sandbox:?}"),
        allowed: true,
        policies: vec!["p0".to_owned()],
        reason: String::new(),
        version: version.to_owned(),
        latency_us: 1.0,
        detail: None,
    }
}

#[test]
fn a_sandbox_made_from_nothing_has_no_parents() {
    let (_d, store) = store();
    let sb = sandbox("sb_a", "acme", SandboxState::Running);
    insert(&store, &sb);
    assert!(parents(&store, &sb).is_empty());
}

#[test]
fn forks_are_followed_nearest_first() {
    let (_d, store) = store();
    let mut a = sandbox("sb_a", "acme", SandboxState::Deleted);
    a.ended_reason = Some("deleted".into());
    insert(&store, &a);
    insert(&store, &fork("sb_b", "acme", "sb_a"));
    let c = fork("sb_c", "acme", "sb_b");
    insert(&store, &c);
    assert_eq!(
        parents(&store, &c),
        vec![
            json!({"relation": "forked_from", "sandbox_id": "sb_b", "template": "default",
                   "template_version": "v-sb_b", "state": "running"}),
            json!({"relation": "forked_from", "sandbox_id": "sb_a", "template": "default",
                   "template_version": "v-sb_a", "state": "deleted"}),
        ]
    );
}

#[test]
fn a_snapshot_leads_to_the_sandbox_it_was_taken_of() {
    let (_d, store) = store();
    insert(&store, &sandbox("sb_a", "acme", SandboxState::Running));
    snapshot(&store, "snap_1", "sb_a", "acme");
    let mut b = sandbox("sb_b", "acme", SandboxState::Running);
    b.from_snapshot = Some("snap_1".into());
    insert(&store, &b);
    assert_eq!(
        parents(&store, &b),
        vec![json!({"relation": "from_snapshot", "snapshot_id": "snap_1",
                    "sandbox_id": "sb_a", "snapshot_created_at": "2026-01-01T00:30:00.000000Z",
                    "template": "default", "template_version": "v-sb_a",
                    "state": "running"})]
    );
}

#[test]
fn a_snapshot_no_longer_recorded_ends_the_chain_by_name() {
    let (_d, store) = store();
    let mut b = sandbox("sb_b", "acme", SandboxState::Running);
    b.from_snapshot = Some("snap_gone".into());
    insert(&store, &b);
    assert_eq!(
        parents(&store, &b),
        vec![
            json!({"relation": "from_snapshot", "snapshot_id": "snap_gone",
                    "sandbox_id": null})
        ]
    );
}

#[test]
fn another_tenant_s_snapshot_is_told_as_a_missing_one() {
    let (_d, store) = store();
    insert(&store, &sandbox("sb_a", "other", SandboxState::Running));
    snapshot(&store, "snap_1", "sb_a", "other");
    let mut b = sandbox("sb_b", "acme", SandboxState::Running);
    b.from_snapshot = Some("snap_1".into());
    insert(&store, &b);
    assert_eq!(
        parents(&store, &b),
        vec![json!({"relation": "from_snapshot", "snapshot_id": "snap_1",
                    "sandbox_id": null})]
    );
}

#[test]
fn a_parent_of_another_tenant_or_unrecorded_is_named_without_its_details() {
    let (_d, store) = store();
    insert(
        &store,
        &sandbox("sb_theirs", "other", SandboxState::Running),
    );
    let mine = fork("sb_mine", "acme", "sb_theirs");
    insert(&store, &mine);
    assert_eq!(
        parents(&store, &mine),
        vec![json!({"relation": "forked_from", "sandbox_id": "sb_theirs"})]
    );
    let orphan = fork("sb_orphan", "acme", "sb_never");
    insert(&store, &orphan);
    assert_eq!(
        parents(&store, &orphan),
        vec![json!({"relation": "forked_from", "sandbox_id": "sb_never"})]
    );
}

#[test]
fn a_cycle_is_walked_once() {
    let (_d, store) = store();
    let a = fork("sb_a", "acme", "sb_b");
    insert(&store, &a);
    insert(&store, &fork("sb_b", "acme", "sb_a"));
    let ids: Vec<Value> = parents(&store, &a)
        .into_iter()
        .map(|p| p["sandbox_id"].clone())
        .collect();
    assert_eq!(ids, [json!("sb_b"), json!("sb_a")]);
}

#[test]
fn the_chain_stops_at_its_depth_bound() {
    let (_d, store) = store();
    insert(&store, &sandbox("sb_0", "acme", SandboxState::Running));
    for i in 1..=MAX_PARENTS + 6 {
        insert(
            &store,
            &fork(&format!("sb_{i}"), "acme", &format!("sb_{}", i - 1)),
        );
    }
    let last = store
        .get_sandbox(&format!("sb_{}", MAX_PARENTS + 6))
        .unwrap()
        .unwrap();
    let chain = parents(&store, &last);
    assert_eq!(chain.len(), MAX_PARENTS);
    assert_eq!(chain[0]["sandbox_id"], format!("sb_{}", MAX_PARENTS + 5));
    assert_eq!(chain[MAX_PARENTS - 1]["sandbox_id"], "sb_6");
}

#[test]
fn noted_decisions_take_the_version_of_the_execute_gate() {
    let (_d, store) = store();
    insert(&store, &sandbox("sb_a", "acme", SandboxState::Running));
    store
        .insert_decisions(&[
            decision("dec_net", "egress", "sb_a", T0, "v-net"),
            decision("dec_exec", "execute", "sb_a", T0, "v-exec"),
        ])
        .unwrap();
    let noted = vec!["dec_net".to_owned(), "dec_exec".to_owned()];
    assert_eq!(
        decided(&store, "sb_a", T0, Some("v-after".into()), noted.clone()),
        (Some("v-exec".to_owned()), noted)
    );
    // Without an execute decision among them, the first found decides.
    let only_net = vec!["dec_net".to_owned()];
    assert_eq!(
        decided(&store, "sb_a", T0, None, only_net.clone()),
        (Some("v-net".to_owned()), only_net)
    );
    // Noted ids no longer recorded keep the noted version.
    let gone = vec!["dec_gone".to_owned()];
    assert_eq!(
        decided(&store, "sb_a", T0, Some("v-noted".into()), gone.clone()),
        (Some("v-noted".to_owned()), gone)
    );
}

#[test]
fn without_noted_decisions_the_last_execute_decision_before_it_counts() {
    let (_d, store) = store();
    insert(&store, &sandbox("sb_a", "acme", SandboxState::Running));
    store
        .insert_decisions(&[
            decision(
                "dec_1",
                "execute",
                "sb_a",
                "2026-01-01T00:00:01.000000Z",
                "v1",
            ),
            decision(
                "dec_2",
                "execute",
                "sb_a",
                "2026-01-01T00:00:02.000000Z",
                "v2",
            ),
            decision(
                "dec_3",
                "execute",
                "sb_a",
                "2026-01-01T00:00:09.000000Z",
                "v3",
            ),
            decision(
                "dec_x",
                "execute",
                "sb_x",
                "2026-01-01T00:00:03.000000Z",
                "vx",
            ),
        ])
        .unwrap();
    assert_eq!(
        decided(&store, "sb_a", "2026-01-01T00:00:05.000000Z", None, vec![]),
        (Some("v2".to_owned()), vec!["dec_2".to_owned()])
    );
    // Nothing decided before it: nothing to say.
    assert_eq!(
        decided(&store, "sb_a", T0, Some("v-noted".into()), vec![]),
        (Some("v-noted".to_owned()), vec![])
    );
}

#[test]
fn run_ids_are_stable_name_based_uuids() {
    let a = run_id("sb_a");
    assert_eq!(a, run_id("sb_a"));
    assert_ne!(a, run_id("sb_b"));
    let parts: Vec<&str> = a.split('-').collect();
    assert_eq!(
        parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        [8, 4, 4, 4, 12]
    );
    assert!(a.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
    // Version 5 (name-based), RFC 4122 variant.
    assert!(parts[2].starts_with('5'), "{a}");
    assert!(
        matches!(parts[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'),
        "{a}"
    );
    // The first 16 bytes of SHA-256("sandlot-run:sb_a"), version and variant set.
    let h = sha256_hex(b"sandlot-run:sb_a");
    assert_eq!(&a[0..8], &h[0..8]);
    assert_eq!(&a[9..13], &h[8..12]);
}

#[test]
fn times_are_moved_by_milliseconds_or_left_as_they_are() {
    assert_eq!(
        plus_ms("2026-01-01T00:00:00.000000Z", 1500.0),
        "2026-01-01T00:00:01.5Z"
    );
    assert_eq!(
        plus_ms("2026-01-01T23:59:59Z", 2000.25),
        "2026-01-02T00:00:01.00025Z"
    );
    for odd in [-1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(plus_ms(T0, odd), T0);
    }
    assert_eq!(plus_ms("yesterday", 5.0), "yesterday");
}

#[test]
fn steps_show_hashes_and_which_artifacts_have_content() {
    let sha = "a".repeat(64);
    assert_eq!(
        step_json(&input("data.csv", &sha, 12, T0, true)),
        json!({"kind": "input", "path": "data.csv", "sha256": sha, "size": 12,
               "at": T0, "stored": true})
    );
    let rec = execution(
        "ex_1",
        "sb_a",
        "print(1)",
        T0,
        Some(EndState::Ok),
        vec![
            artifact("out.txt", &sha, 3),
            artifact("big.bin", "", 1 << 30),
        ],
    );
    let step = crate::fixtures::exec_step(rec, Some("v7"));
    assert_eq!(
        step_json(&step),
        json!({
            "kind": "execution", "id": "ex_1", "language": "python", "started_at": T0,
            "end_state": "ok", "duration_ms": 1500.0,
            "code_sha256": sha256_hex(b"print(1)"),
            "template": "default", "template_version": "v1",
            "policy_version": "v7", "decisions": ["dec_v7"],
            "artifacts": [
                {"path": "out.txt", "sha256": sha, "size": 3, "mime_type": "text/plain",
                 "change": "created", "stored": true},
                {"path": "big.bin", "sha256": "", "size": 1u64 << 30,
                 "mime_type": "text/plain", "change": "created", "stored": false},
            ],
        })
    );
}

fn kinds(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["eventType"].as_str().unwrap().to_owned(),
                e["job"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_live_run_is_a_started_parent_with_a_child_run_per_execution() {
    let sb = sandbox("sb_a", "acme", SandboxState::Running);
    let (in_sha, out_sha) = ("1".repeat(64), "2".repeat(64));
    let steps = vec![
        input("in.csv", &in_sha, 5, "2026-01-01T00:00:01.000000Z", true),
        crate::fixtures::exec_step(
            execution(
                "ex_1",
                "sb_a",
                "x",
                "2026-01-01T00:00:02.000000Z",
                Some(EndState::Ok),
                vec![artifact("out.txt", &out_sha, 3), artifact("huge", "", 9)],
            ),
            Some("v1"),
        ),
        crate::fixtures::exec_step(
            execution(
                "ex_2",
                "sb_a",
                "y",
                "2026-01-01T00:00:05.000000Z",
                Some(EndState::Error),
                vec![],
            ),
            None,
        ),
        crate::fixtures::exec_step(
            execution(
                "ex_3",
                "sb_a",
                "z",
                "2026-01-01T00:00:09.000000Z",
                None,
                vec![],
            ),
            None,
        ),
    ];
    let findings = vec![FindingRecord {
        sandbox_id: "sb_a".into(),
        execution_id: Some("ex_2".into()),
        at: T0.into(),
        rule: "aws-key".into(),
        kind: "secret".into(),
        stream: "stdout".into(),
        sha256: "f".repeat(64),
        outcome: "redacted".into(),
        decision_id: None,
    }];
    let events = openlineage_of(&sb, &steps, &[], &findings);
    assert_eq!(
        kinds(&events),
        [
            ("START".to_owned(), "sb_a".to_owned()),
            ("START".to_owned(), "sb_a/ex_1".to_owned()),
            ("COMPLETE".to_owned(), "sb_a/ex_1".to_owned()),
            ("START".to_owned(), "sb_a/ex_2".to_owned()),
            ("FAIL".to_owned(), "sb_a/ex_2".to_owned()),
            ("START".to_owned(), "sb_a/ex_3".to_owned()),
        ]
    );
    for e in &events {
        assert_eq!(e["producer"], producer());
        assert_eq!(e["job"]["namespace"], "sandlot/acme");
        assert_eq!(
            e["schemaURL"],
            format!("{OPENLINEAGE_SCHEMA}#/$defs/RunEvent")
        );
    }
    // The sandbox's run has no parent; each execution's run is its child.
    assert_eq!(events[0]["run"]["runId"], run_id("sb_a"));
    assert!(events[0]["run"]["facets"].get("parent").is_none());
    assert_eq!(events[1]["run"]["runId"], run_id("ex_1"));
    assert_eq!(
        events[1]["run"]["facets"]["parent"]["run"]["runId"],
        run_id("sb_a")
    );
    // Inputs so far come in; outputs with content go out, named by hash.
    let input_names: Vec<&Value> = events[1]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["name"])
        .collect();
    assert_eq!(input_names, [&json!(format!("sha256:{in_sha}"))]);
    assert_eq!(events[1]["outputs"], json!([]));
    assert_eq!(events[2]["eventTime"], "2026-01-01T00:00:03.5Z");
    assert_eq!(
        events[2]["outputs"],
        json!([{
            "namespace": "sandlot/acme",
            "name": format!("sha256:{out_sha}"),
            "facets": {"sandlot_content": {
                "sha256": out_sha, "path": "out.txt", "size": 3, "mime_type": "text/plain",
                "_producer": producer(),
                "_schemaURL": format!("{SANDLOT_FACETS_SCHEMA}#/$defs/SandlotContentDatasetFacet"),
            }},
        }])
    );
    let policy = &events[2]["run"]["facets"]["sandlot_policy"];
    assert_eq!(policy["version"], "v1");
    assert_eq!(policy["decisions"], json!(["dec_v1"]));
    // A failed execution says why, and its findings are its own.
    let fail = &events[4]["run"]["facets"];
    assert_eq!(fail["errorMessage"]["message"], "ValueError: bad");
    assert_eq!(fail["errorMessage"]["stackTrace"], "line 1\nline 2");
    assert_eq!(fail["errorMessage"]["programmingLanguage"], "python");
    assert_eq!(
        fail["sandlot_guardrails"]["findings"],
        json!([{"rule": "aws-key", "kind": "secret", "stream": "stdout",
                "sha256": "f".repeat(64), "outcome": "redacted", "decision_id": null}])
    );
    assert_eq!(
        events[2]["run"]["facets"]["sandlot_guardrails"]["findings"],
        json!([])
    );
}

#[test]
fn an_ended_run_completes_or_fails_with_everything_it_made() {
    let out = "3".repeat(64);
    let steps = vec![crate::fixtures::exec_step(
        execution(
            "ex_1",
            "sb_b",
            "x",
            T0,
            Some(EndState::Ok),
            vec![artifact("o", &out, 1)],
        ),
        None,
    )];
    for (state, end) in [
        (SandboxState::Deleted, Some("COMPLETE")),
        (SandboxState::Expired, Some("COMPLETE")),
        (SandboxState::Failed, Some("FAIL")),
        (SandboxState::Lost, Some("FAIL")),
        (SandboxState::Paused, None),
        (SandboxState::Stopped, None),
    ] {
        let sb = sandbox("sb_b", "acme", state);
        let events = openlineage_of(&sb, &steps, &[], &[]);
        let last = events.last().unwrap();
        match end {
            Some(kind) => {
                assert_eq!(events.len(), 4, "{state:?}");
                assert_eq!(last["eventType"], kind);
                assert_eq!(last["job"]["name"], "sb_b");
                assert_eq!(last["eventTime"], sb.last_active_at);
                assert_eq!(last["outputs"][0]["name"], format!("sha256:{out}"));
            }
            None => {
                assert_eq!(events.len(), 3, "{state:?}");
                assert_eq!(last["job"]["name"], "sb_b/ex_1");
            }
        }
    }
}

#[test]
fn a_fork_s_run_is_a_child_of_its_parent_s() {
    let sb = fork("sb_c", "acme", "sb_b");
    let parents = vec![json!({"relation": "forked_from", "sandbox_id": "sb_b"})];
    let events = openlineage_of(&sb, &[], &parents, &[]);
    assert_eq!(events.len(), 1);
    let facets = &events[0]["run"]["facets"];
    assert_eq!(facets["parent"]["run"]["runId"], run_id("sb_b"));
    assert_eq!(
        facets["parent"]["job"],
        json!({"namespace": "sandlot/acme", "name": "sb_b"})
    );
    assert_eq!(facets["sandlot_sandbox"]["parents"], json!(parents));
    // A parent known only by a missing snapshot has no run to point to.
    let lost = vec![json!({"relation": "from_snapshot", "snapshot_id": "s", "sandbox_id": null})];
    let events = openlineage_of(&sb, &[], &lost, &[]);
    assert!(events[0]["run"]["facets"].get("parent").is_none());
}
