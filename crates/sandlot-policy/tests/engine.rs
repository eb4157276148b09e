//! The engine against real policy files: shipped defaults, the example policies, refused sets
//! (parse, validation, ids), evaluation errors, replace and reload, concurrency, and timing.

use sandlot_policy::{
    testing, Decision, Finding, Gate, GateRequest, Outcome, OutputGate, PolicyEngine, PolicyError,
    PolicyPrincipal, Query, SandboxRef, SandboxRequest, DEFAULT_POLICIES, POLICIES_FILE,
    SCHEMA_FILE,
};
use std::fs;
use std::time::Instant;

const CODE_SIZE_CAP: &str = include_str!("../../../examples/policies/code-size-cap.cedar");
const FREE_NO_NETWORK: &str = include_str!("../../../examples/policies/free-plan-no-network.cedar");
const TRUSTED_ACME: &str = include_str!("../../../examples/policies/trusted-tier-acme.cedar");
const EGRESS_ONE: &str = include_str!("../../../examples/policies/egress-one-domain.cedar");

fn principal(tenant: &str, plan: &str) -> PolicyPrincipal {
    PolicyPrincipal {
        key_id: format!("key-{tenant}"),
        key_prefix: "abcd2345".into(),
        tenant: tenant.into(),
        role: "member".into(),
        plan: plan.into(),
    }
}

fn sandbox(tenant: &str) -> SandboxRef {
    SandboxRef {
        id: "sb-1".into(),
        tenant: tenant.into(),
        template: "python".into(),
        tier: "isolated".into(),
    }
}

fn execute(p: &PolicyPrincipal, code_bytes: u64) -> Query {
    Query::new(
        p.clone(),
        GateRequest::Execute {
            sandbox: sandbox(&p.tenant),
            code_bytes,
            language: "python".into(),
            code: String::new(),
        },
    )
}

fn create(p: &PolicyPrincipal, network: bool) -> Query {
    Query::new(
        p.clone(),
        GateRequest::CreateSandbox {
            template: "python".into(),
            request: SandboxRequest {
                memory_mb: 512,
                cpu_millis: 1000,
                pids: 256,
                disk_mb: 2048,
                network,
                allow: if network {
                    vec!["pkgs.test".into()]
                } else {
                    vec![]
                },
                tier: "isolated".into(),
                ports: 0,
            },
        },
    )
}

fn tier(p: &PolicyPrincipal, name: &str) -> Query {
    Query::new(
        p.clone(),
        GateRequest::SelectTier {
            tier: name.into(),
            request: SandboxRequest {
                tier: name.into(),
                ..Default::default()
            },
        },
    )
}

fn egress(p: &PolicyPrincipal, host: &str) -> Query {
    Query::new(
        p.clone(),
        GateRequest::Egress {
            host: host.into(),
            port: 443,
            ip: String::new(),
            method: "CONNECT".into(),
        },
    )
}

fn finding(kind: &str) -> Finding {
    Finding {
        rule: "aws-access-key-id".into(),
        kind: kind.into(),
        stream: "stdout".into(),
    }
}

#[track_caller]
fn allowed(d: &Decision, ids: &[&str]) {
    assert!(d.allowed, "expected allow: {d:?}");
    assert_eq!(d.policies, ids, "{d:?}");
    assert!(d.errors.is_empty(), "{d:?}");
}

#[track_caller]
fn denied(d: &Decision, ids: &[&str]) {
    assert!(!d.allowed, "expected deny: {d:?}");
    assert_eq!(d.policies, ids, "{d:?}");
}

#[test]
fn open_writes_the_shipped_files_and_reopens_the_same_set() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("policies");
    let engine = PolicyEngine::open(&pdir).unwrap();
    assert!(pdir.join(POLICIES_FILE).is_file());
    assert!(pdir.join(SCHEMA_FILE).is_file());
    let info = engine.info();
    let ids: Vec<&str> = info.policies.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "allow-all-gates",
            "templates-without-packages",
            "templates-with-packages-operator",
            "isolated-tier",
            "trusted-tier-local",
            "contain-canary",
            "redact-secrets"
        ]
    );
    assert_eq!(info.version.len(), 16);
    assert!(info.version.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(info.policies[0]
        .text
        .starts_with("@id(\"allow-all-gates\")"));
    assert_eq!(info.policies[0].effect, "permit");
    assert_eq!(
        info.policies[5].reason.as_deref(),
        Some("the sandbox's canary credential appeared in its output: contained")
    );
    assert!(info.schema.contains("namespace Sandlot"));
    assert_eq!(engine.text(), DEFAULT_POLICIES);
    let again = PolicyEngine::open(&pdir).unwrap();
    assert_eq!(again.version(), info.version);
}

#[test]
fn shipped_defaults_decide_every_gate() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let free = principal("t1", "free");
    let local = principal("default", "local");
    allowed(&engine.decide(&execute(&free, 5)), &["allow-all-gates"]);
    allowed(&engine.decide(&create(&free, true)), &["allow-all-gates"]);
    allowed(
        &engine.decide(&egress(&free, "anything.test")),
        &["allow-all-gates"],
    );
    for q in testing::sample_queries() {
        let d = engine.decide(&q);
        assert_eq!(d.gate, q.gate());
        match q.gate() {
            Gate::OutputWithhold => denied(&d, &[]),
            // The samples' finding is a secret: redact yes, contain no.
            Gate::OutputContain => denied(&d, &[]),
            Gate::OutputRedact => allowed(&d, &["redact-secrets"]),
            Gate::SelectTier => allowed(&d, &["isolated-tier"]),
            // The sample is the operator's, with packages.
            Gate::BuildTemplate => allowed(&d, &["templates-with-packages-operator"]),
            // Host paths are granted by the operator's own permit only.
            Gate::MountHostPath => denied(&d, &[]),
            _ => allowed(&d, &["allow-all-gates"]),
        }
    }
    // Templates: a template of imports and setup for every key; packages for the operator only.
    let build = |p: &PolicyPrincipal, packages| {
        Query::new(
            p.clone(),
            GateRequest::BuildTemplate {
                template: "t".into(),
                packages,
            },
        )
    };
    allowed(
        &engine.decide(&build(&free, 0)),
        &["templates-without-packages"],
    );
    let d = engine.decide(&build(&free, 1));
    denied(&d, &[]);
    assert_eq!(d.reason, "no policy permits build_template");
    let mut tenant_admin = principal("t1", "free");
    tenant_admin.role = "admin".into();
    denied(&engine.decide(&build(&tenant_admin, 3)), &[]);
    let mut operator = principal("default", "local");
    operator.role = "admin".into();
    allowed(
        &engine.decide(&build(&operator, 3)),
        &["templates-with-packages-operator"],
    );
    // Tiers: isolated for everyone, trusted for the local plan only.
    allowed(&engine.decide(&tier(&free, "isolated")), &["isolated-tier"]);
    let d = engine.decide(&tier(&free, "trusted"));
    denied(&d, &[]);
    assert_eq!(d.reason, "no policy permits select_tier");
    allowed(
        &engine.decide(&tier(&local, "trusted")),
        &["trusted-tier-local"],
    );
    denied(&engine.decide(&tier(&local, "gpu")), &[]);
    // Outputs.
    let sb = sandbox("t1");
    let (o, d) = engine.output_outcome(&free, &sb, &finding("canary"));
    assert_eq!(o, Outcome::Contain);
    allowed(&d, &["contain-canary"]);
    assert_eq!(d.gate, Gate::OutputContain);
    let (o, d) = engine.output_outcome(&free, &sb, &finding("secret"));
    assert_eq!(o, Outcome::Redact);
    allowed(&d, &["redact-secrets"]);
    assert_eq!(d.reason, "secrets are redacted from output");
    let (o, d) = engine.output_outcome(&free, &sb, &finding("other"));
    assert_eq!(o, Outcome::Pass);
    assert!(!d.allowed && d.errors.is_empty());
}

#[test]
fn example_code_size_cap() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let p = principal("t1", "free");
    allowed(&engine.decide(&execute(&p, 20_000)), &["allow-all-gates"]);
    let info = engine.replace(CODE_SIZE_CAP).unwrap();
    assert!(info
        .policies
        .iter()
        .any(|e| e.id == "code-size-cap" && e.effect == "forbid"));
    allowed(&engine.decide(&execute(&p, 10_000)), &["allow-all-gates"]);
    let d = engine.decide(&execute(&p, 10_001));
    denied(&d, &["code-size-cap"]);
    assert_eq!(d.reason, "code larger than 10000 bytes is not executed");
    assert_eq!(d.version, info.version);
    // Other gates are untouched.
    allowed(&engine.decide(&create(&p, true)), &["allow-all-gates"]);
}

#[test]
fn example_free_plan_has_no_network() {
    let engine = PolicyEngine::from_text(FREE_NO_NETWORK).unwrap();
    let free = principal("t1", "free");
    let pro = principal("t2", "pro");
    let d = engine.decide(&create(&free, true));
    denied(&d, &["free-plan-no-network"]);
    assert!(
        d.reason.starts_with("the free plan has no network"),
        "{d:?}"
    );
    allowed(&engine.decide(&create(&free, false)), &["allow-all-gates"]);
    allowed(&engine.decide(&create(&pro, true)), &["allow-all-gates"]);
    allowed(&engine.decide(&execute(&free, 1)), &["allow-all-gates"]);
}

#[test]
fn example_trusted_tier_only_for_acme() {
    let engine = PolicyEngine::from_text(TRUSTED_ACME).unwrap();
    let acme = principal("acme", "pro");
    let other = principal("globex", "pro");
    let local = principal("default", "local");
    allowed(&engine.decide(&tier(&acme, "trusted")), &["any-tier"]);
    let d = engine.decide(&tier(&other, "trusted"));
    denied(&d, &["trusted-tier-acme-only"]);
    assert_eq!(d.reason, "the trusted tier is for tenant acme only");
    denied(
        &engine.decide(&tier(&local, "trusted")),
        &["trusted-tier-acme-only"],
    );
    allowed(&engine.decide(&tier(&other, "isolated")), &["any-tier"]);
}

#[test]
fn example_egress_to_one_domain() {
    let engine = PolicyEngine::from_text(EGRESS_ONE).unwrap();
    let p = principal("t1", "free");
    allowed(
        &engine.decide(&egress(&p, "pkgs.test")),
        &["allow-all-gates"],
    );
    // Host names are compared lowercased.
    allowed(
        &engine.decide(&egress(&p, "PKGS.test")),
        &["allow-all-gates"],
    );
    for host in [
        "evil.test",
        "pkgs.test.evil.test",
        "sub.pkgs.test",
        "10.0.0.1",
    ] {
        let d = engine.decide(&egress(&p, host));
        denied(&d, &["egress-pkgs-only"]);
        assert_eq!(d.reason, "egress is allowed to pkgs.test only");
    }
}

#[test]
fn an_invalid_set_is_refused_with_the_parser_message_and_the_old_set_stays() {
    let dir = tempfile::tempdir().unwrap();
    let engine = PolicyEngine::open(dir.path()).unwrap();
    let before = engine.info();
    let bad = format!("{DEFAULT_POLICIES}\n@id(\"broken\")\npermit (principal, action, resource) when {{ context.code_bytes > }};\n");
    let err = engine.replace(&bad).unwrap_err();
    assert!(matches!(err, PolicyError::Parse(_)), "{err:?}");
    assert_eq!(err.code(), "invalid_policy");
    let msg = err.to_string();
    let line = DEFAULT_POLICIES.lines().count() + 3;
    assert!(msg.contains("unexpected token"), "{msg}");
    assert!(msg.contains(&format!("(line {line}, column ")), "{msg}");
    assert!(msg.starts_with("the policies do not parse:"), "{msg}");
    assert_eq!(engine.info(), before);
    assert_eq!(
        fs::read_to_string(dir.path().join(POLICIES_FILE)).unwrap(),
        DEFAULT_POLICIES
    );
    allowed(
        &engine.decide(&execute(&principal("t", "free"), 1)),
        &["allow-all-gates"],
    );
}

#[test]
fn an_unknown_attribute_fails_strict_validation() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let before = engine.version();
    let bad = format!(
        "{DEFAULT_POLICIES}\n@id(\"typo\")\nforbid (principal, action == Sandlot::Action::\"execute\", resource)\nwhen {{ context.code_size > 10 }};\n"
    );
    let err = engine.replace(&bad).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PolicyError::Validation(_)), "{err:?}");
    assert!(msg.contains("typo"), "{msg}");
    assert!(msg.contains("code_size"), "{msg}");
    assert_eq!(engine.version(), before);

    // An attribute on the wrong entity type, and an action that does not exist.
    for bad in [
        "@id(\"a\") permit (principal, action == Sandlot::Action::\"execute\", resource) when { resource.name == \"x\" };",
        "@id(\"b\") permit (principal, action == Sandlot::Action::\"delete_everything\", resource);",
        "@id(\"c\") permit (principal, action == Sandlot::Action::\"execute\", resource) when { context.code_bytes == \"big\" };",
    ] {
        let err = engine.replace(bad).unwrap_err();
        assert!(matches!(err, PolicyError::Validation(_)), "{bad}: {err:?}");
    }
}

#[test]
fn policy_ids_are_required_unique_and_well_formed() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let missing =
        "@id(\"a\") permit (principal, action, resource);\n\npermit (principal, action, resource);";
    let msg = engine.replace(missing).unwrap_err().to_string();
    assert!(msg.contains("policy #2 (line 3) has no @id"), "{msg}");

    let dup = "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);";
    let err = engine.replace(dup).unwrap_err();
    assert!(matches!(err, PolicyError::Id(_)));
    assert!(err.to_string().contains("repeats @id(\"a\")"), "{err}");

    for bad in ["Allow", "", "has space", "-x", &"x".repeat(65)] {
        let text = format!("@id({bad:?}) permit (principal, action, resource);");
        let err = engine.replace(&text).unwrap_err();
        assert!(matches!(err, PolicyError::Id(_)), "{bad:?}: {err:?}");
        assert!(err.to_string().contains("an id is 1 to 64"), "{err}");
    }
    assert_eq!(engine.text(), DEFAULT_POLICIES);
}

#[test]
fn templates_and_oversized_sets_are_refused() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let err = engine
        .replace("@id(\"t\") permit (principal == ?principal, action, resource);")
        .unwrap_err();
    assert!(matches!(err, PolicyError::Unsupported(_)), "{err:?}");
    let huge = format!("// {}\n", "x".repeat(2 << 20));
    let err = engine.replace(&huge).unwrap_err();
    assert!(matches!(err, PolicyError::TooLarge { .. }), "{err:?}");
    // An empty set is valid: it denies everything (the default deny).
    engine.replace("").unwrap();
    let d = engine.decide(&execute(&principal("t", "free"), 1));
    denied(&d, &[]);
    assert_eq!(d.reason, "no policy permits execute");
}

#[test]
fn an_evaluation_error_denies_and_is_recorded() {
    // Validates (types are right) but overflows at run time for any code size.
    let text = format!(
        "{DEFAULT_POLICIES}\n@id(\"overflowing\")\n@reason(\"never\")\npermit (principal, action == Sandlot::Action::\"execute\", resource)\nwhen {{ context.code_bytes + 9223372036854775807 > 0 }};\n"
    );
    let engine = PolicyEngine::from_text(&text).unwrap();
    let d = engine.decide(&execute(&principal("t", "free"), 1));
    // Cedar alone would allow (allow-all-gates permits, the erroring policy is skipped).
    denied(&d, &["overflowing"]);
    assert_eq!(d.errors.len(), 1, "{d:?}");
    assert!(d.errors[0].contains("overflowing"), "{d:?}");
    assert!(d.errors[0].contains("overflow"), "{d:?}");
    assert!(d.reason.starts_with("policy evaluation failed:"), "{d:?}");
    // A resource attribute that names an entity the request does not carry: the sandbox of
    // another tenant (its Tenant entity is unknown) errors instead of matching.
    let text = format!(
        "{DEFAULT_POLICIES}\n@id(\"tenant-plan\")\nforbid (principal, action == Sandlot::Action::\"read_file\", resource)\nwhen {{ resource.tenant.plan == \"blocked\" }};\n"
    );
    engine.replace(&text).unwrap();
    let p = principal("t", "free");
    let read = |tenant: &str| {
        Query::new(
            p.clone(),
            GateRequest::ReadFile {
                sandbox: sandbox(tenant),
                path: "/workspace/x".into(),
            },
        )
    };
    allowed(&engine.decide(&read("t")), &["allow-all-gates"]);
    let d = engine.decide(&read("other"));
    denied(&d, &["tenant-plan"]);
    assert!(d.errors[0].contains("does not exist"), "{d:?}");

    // In an output gate: an error withholds rather than passing or containing.
    let text = format!(
        "{DEFAULT_POLICIES}\n@id(\"bad-contain\")\npermit (principal, action == Sandlot::Action::\"output_contain\", resource)\nwhen {{ context.rule == \"x\" && resource.sandbox.tenant.plan == \"free\" }};\n"
    );
    engine.replace(&text).unwrap();
    let f = Finding {
        rule: "x".into(),
        kind: "secret".into(),
        stream: "stdout".into(),
    };
    let (o, d) = engine.output_outcome(&p, &sandbox("other"), &f);
    assert_eq!(o, Outcome::Withhold, "{d:?}");
    assert_eq!(d.gate, Gate::OutputContain);
    assert_eq!(d.policies, ["bad-contain"]);
    assert!(d.reason.starts_with("output withheld:"), "{d:?}");
}

#[test]
fn replace_persists_and_a_bad_set_on_disk_stops_open() {
    let dir = tempfile::tempdir().unwrap();
    let engine = PolicyEngine::open(dir.path()).unwrap();
    let info = engine.replace(CODE_SIZE_CAP).unwrap();
    assert_eq!(
        fs::read_to_string(dir.path().join(POLICIES_FILE)).unwrap(),
        CODE_SIZE_CAP
    );
    let reopened = PolicyEngine::open(dir.path()).unwrap();
    assert_eq!(reopened.version(), info.version);
    // Nothing else left in the directory (no temporary files).
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [POLICIES_FILE, SCHEMA_FILE]);

    fs::write(
        dir.path().join(POLICIES_FILE),
        "permit (principal, action, resource);",
    )
    .unwrap();
    let err = PolicyEngine::open(dir.path()).unwrap_err();
    assert!(matches!(err, PolicyError::Stored { .. }), "{err:?}");
    assert_eq!(err.code(), "policy_stored");
    let msg = err.to_string();
    assert!(
        msg.contains(POLICIES_FILE) && msg.contains("no @id"),
        "{msg}"
    );
}

#[test]
fn a_schema_that_cannot_hold_the_requests_stops_open() {
    let dir = tempfile::tempdir().unwrap();
    PolicyEngine::open(dir.path()).unwrap();
    let path = dir.path().join(SCHEMA_FILE);
    let schema = fs::read_to_string(&path).unwrap();
    fs::write(&path, schema.replace("code_bytes: Long, ", "")).unwrap();
    let err = PolicyEngine::open(dir.path()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, PolicyError::Schema { .. }), "{err:?}");
    assert!(msg.contains("execute gate"), "{msg}");

    fs::write(&path, "namespace Sandlot { entity Key").unwrap();
    let err = PolicyEngine::open(dir.path()).unwrap_err();
    assert!(matches!(err, PolicyError::Schema { .. }), "{err:?}");

    fs::write(
        &path,
        format!("{}\nnamespace Sandlot {{ action files; }}\n", schema),
    )
    .unwrap();
    assert!(PolicyEngine::open(dir.path()).is_err());
}

#[test]
fn hostile_strings_in_queries_are_plain_data() {
    let engine = PolicyEngine::from_text(EGRESS_ONE).unwrap();
    let mut p = principal("t\"); permit(principal,action,resource);//", "free");
    p.key_id = "k\"\n\0::\"x".into();
    for host in ["pkgs.test\"", "pkgs.test\0", "", "*"] {
        denied(&engine.decide(&egress(&p, host)), &["egress-pkgs-only"]);
    }
    allowed(
        &engine.decide(&egress(&p, "pkgs.test")),
        &["allow-all-gates"],
    );
    let d = engine.decide(&execute(&p, u64::MAX));
    allowed(&d, &["allow-all-gates"]);
}

#[test]
fn decisions_serialize_for_the_record() {
    let engine = PolicyEngine::from_text(CODE_SIZE_CAP).unwrap();
    let d = engine.decide(&execute(&principal("t", "free"), 20_000));
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["gate"], "execute");
    assert_eq!(v["allowed"], false);
    assert_eq!(v["policies"][0], "code-size-cap");
    assert!(v["latency_us"].as_f64().unwrap() > 0.0);
    let back: Decision = serde_json::from_value(v).unwrap();
    assert_eq!(back, d);
    let q = serde_json::to_value(execute(&principal("t", "free"), 1)).unwrap();
    assert_eq!(q["request"]["gate"], "execute");
    assert_eq!(
        serde_json::to_value(OutputGate::Contain).unwrap(),
        "contain"
    );
    assert_eq!(serde_json::to_value(Outcome::Withhold).unwrap(), "withhold");
    for g in Gate::ALL {
        assert_eq!(serde_json::to_value(g).unwrap(), g.as_str());
    }
}

#[test]
fn replace_is_atomic_under_concurrent_decisions() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let v1 = engine.version();
    let v2 = PolicyEngine::from_text(CODE_SIZE_CAP).unwrap().version();
    let p = principal("t", "free");
    std::thread::scope(|s| {
        for _ in 0..4 {
            let engine = engine.clone();
            let (p, v1, v2) = (p.clone(), v1.clone(), v2.clone());
            s.spawn(move || {
                for _ in 0..500 {
                    let d = engine.decide(&execute(&p, 20_000));
                    // Each decision is wholly one set's: allowed under v1, denied under v2.
                    if d.version == v1 {
                        allowed(&d, &["allow-all-gates"]);
                    } else {
                        assert_eq!(d.version, v2);
                        denied(&d, &["code-size-cap"]);
                    }
                }
            });
        }
        for i in 0..50 {
            engine
                .replace(if i % 2 == 0 {
                    CODE_SIZE_CAP
                } else {
                    DEFAULT_POLICIES
                })
                .unwrap();
        }
    });
}

/// Prints (does not assert) decision latency with 100 policies; the benchmark module of
/// sandlot-bench measures the same in release builds.
#[test]
fn timing_with_100_policies() {
    let engine = PolicyEngine::from_text(&testing::policy_set(100)).unwrap();
    assert_eq!(engine.info().policies.len(), 100);
    let queries = testing::sample_queries();
    for q in &queries {
        let d = engine.decide(q);
        assert!(d.errors.is_empty(), "{d:?}");
    }
    let mut samples = Vec::new();
    let start = Instant::now();
    for i in 0..5000 {
        samples.push(engine.decide(&queries[i % queries.len()]).latency_us);
    }
    samples.sort_by(f64::total_cmp);
    let at =
        |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1];
    println!(
        "100 policies, {} decisions in {:?}: p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs (debug build unless --release)",
        samples.len(),
        start.elapsed(),
        at(0.50),
        at(0.99),
        samples[samples.len() - 1]
    );
}

/// A set whose policies have every kind of guard the index uses (and some it must not use).
const GUARDED: &str = r#"
@id("k1-everything") permit (principal == Sandlot::Key::"key-t1", action, resource);
@id("acme-no-t1") forbid (principal in Sandlot::Tenant::"acme", action == Sandlot::Action::"execute", resource in Sandlot::Tenant::"t1");
@id("key-in-key") permit (principal in Sandlot::Key::"key-acme", action == Sandlot::Action::"execute", resource);
@id("pkgs") permit (principal, action == Sandlot::Action::"egress", resource == Sandlot::Domain::"pkgs.test");
@id("tier") permit (principal, action == Sandlot::Action::"select_tier", resource == Sandlot::Tier::"trusted") when { principal.plan == "local" && principal.role == "member" };
@id("free-net") forbid (principal, action == Sandlot::Action::"create_sandbox", resource) when { context.network == true && principal.plan == "free" };
@id("five") permit (principal, action == Sandlot::Action::"execute", resource) when { 5 == context.code_bytes };
@id("acme-sandboxes") forbid (principal, action in [Sandlot::Action::"read_file", Sandlot::Action::"write_file"], resource) when { resource.tenant == Sandlot::Tenant::"acme" };
@id("t1-overflow") forbid (principal, action == Sandlot::Action::"execute", resource) when { principal.tenant == Sandlot::Tenant::"t1" && context.code_bytes + 9223372036854775807 > 0 };
@id("or-not-guard") permit (principal, action == Sandlot::Action::"build_template", resource) when { resource.name == "python" || principal.plan == "free" };
@id("unless-not-guard") forbid (principal, action == Sandlot::Action::"build_template", resource) unless { context.packages == 2 };
@id("second-when") permit (principal, action == Sandlot::Action::"read_file", resource) when { context.path like "/workspace/*" } when { principal.tenant == Sandlot::Tenant::"t1" };
@id("canary") permit (principal, action == Sandlot::Action::"output_contain", resource) when { context.kind == "canary" && resource.sandbox.tier == "isolated" };
@id("output-scope") permit (principal, action == Sandlot::Action::"output_withhold", resource == Sandlot::Output::"sb-1/stdout/aws");
@id("egress-ip") forbid (principal, action == Sandlot::Action::"egress", resource) when { context.ip == "" && context.method == "GET" };
@id("lower") permit (principal, action == Sandlot::Action::"egress", resource) when { resource.name == "mixed.test" };
"#;

fn query_grid() -> Vec<Query> {
    let mut out = Vec::new();
    for tenant in ["t1", "t6", "acme", "default"] {
        for plan in ["free", "local", "plan2", "plan7"] {
            for prefix in ["revoked0", "abcd2345"] {
                let mut p = principal(tenant, plan);
                p.key_prefix = prefix.into();
                for q in testing::sample_queries() {
                    out.push(Query::new(p.clone(), q.request));
                }
                for code in [5, 2_000, 20_000] {
                    out.push(execute(&p, code));
                }
                for net in [false, true] {
                    out.push(create(&p, net));
                }
                for t in ["isolated", "trusted", "tier5", "tier15"] {
                    out.push(tier(&p, t));
                }
                for host in [
                    "pkgs.test",
                    "PKGS.TEST",
                    "blocked3.test",
                    "a.blocked3.test",
                    "Mixed.Test",
                ] {
                    out.push(egress(&p, host));
                    let mut q = egress(&p, host);
                    if let GateRequest::Egress { method, ip, .. } = &mut q.request {
                        *method = "GET".into();
                        *ip = "10.0.0.1".into();
                    }
                    out.push(q);
                }
                for sb_tenant in [tenant, "acme", "t4"] {
                    out.push(Query::new(
                        p.clone(),
                        GateRequest::WriteFile {
                            sandbox: sandbox(sb_tenant),
                            path: "/workspace/f".into(),
                            bytes: 10,
                        },
                    ));
                    out.push(Query::new(
                        p.clone(),
                        GateRequest::ReadFile {
                            sandbox: sandbox(sb_tenant),
                            path: "/etc/passwd".into(),
                        },
                    ));
                }
                for (template, packages) in [("python", 2), ("node", 3)] {
                    out.push(Query::new(
                        p.clone(),
                        GateRequest::BuildTemplate {
                            template: template.into(),
                            packages,
                        },
                    ));
                }
                for outcome in [
                    OutputGate::Redact,
                    OutputGate::Withhold,
                    OutputGate::Contain,
                ] {
                    for (rule, kind) in
                        [("aws", "secret"), ("rule9", "canary"), ("rule19", "secret")]
                    {
                        let mut sb = sandbox(tenant);
                        if rule == "rule19" {
                            sb.tier = "trusted".into();
                        }
                        out.push(Query::new(
                            p.clone(),
                            GateRequest::Output {
                                outcome,
                                sandbox: sb,
                                finding: Finding {
                                    rule: rule.into(),
                                    kind: kind.into(),
                                    stream: "stdout".into(),
                                },
                            },
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The guard index only drops policies that cannot apply: every decision equals the one over
/// the gate's whole set, on every set here and a grid of queries that makes guards true and
/// false (including a policy that errors only when its guard holds).
#[test]
fn the_guard_index_decides_as_the_whole_set_does() {
    let sets = [
        DEFAULT_POLICIES.to_string(),
        CODE_SIZE_CAP.to_string(),
        FREE_NO_NETWORK.to_string(),
        TRUSTED_ACME.to_string(),
        EGRESS_ONE.to_string(),
        testing::policy_set(100),
        testing::policy_set(300),
        GUARDED.to_string(),
    ];
    let grid = query_grid();
    for text in &sets {
        let engine = PolicyEngine::from_text(text).unwrap();
        let mut allows = 0;
        for q in &grid {
            let mut a = engine.decide(q);
            let mut b = engine.decide_unindexed(q);
            a.latency_us = 0.0;
            b.latency_us = 0.0;
            assert_eq!(a, b, "{q:?}");
            allows += usize::from(a.allowed);
        }
        // The grid is not all-allow or all-deny under any set.
        assert!(allows > 0 && allows < grid.len());
    }
    // The guarded set exercises errors behind a guard.
    let engine = PolicyEngine::from_text(GUARDED).unwrap();
    let d = engine.decide(&execute(&principal("t1", "free"), 5));
    denied(&d, &["t1-overflow"]);
    allowed(
        &engine.decide(&execute(&principal("t6", "free"), 5)),
        &["five"],
    );
    allowed(
        &engine.decide(&egress(&principal("t6", "free"), "Mixed.Test")),
        &["lower"],
    );
}

/// Hostile shapes (deep brackets, long operator chains) are refused with a clear message on
/// a thread with a tokio worker's stack, never a stack overflow; moderate ones still work.
#[test]
fn deep_nesting_is_refused_not_a_crash() {
    let engine = PolicyEngine::from_text(DEFAULT_POLICIES).unwrap();
    let try_on_small_stack = |body: String| {
        let text = format!(
            "@id(\"deep\") permit (principal, action == Sandlot::Action::\"execute\", resource) when {{ {body} }};"
        );
        let engine = engine.clone();
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                let r = engine.replace(&text).map(|_| ());
                // Decide on the small stack too (a deep tree may error, never crash).
                let _ = engine.decide(&execute(&principal("t", "free"), 1));
                r
            })
            .unwrap()
            .join()
            .unwrap()
    };
    for depth in [65usize, 5_000, 200_000] {
        for (open, close) in [("(", ")"), ("[", "]"), ("{", "}")] {
            let err = try_on_small_stack(format!(
                "{}1{} == 1",
                open.repeat(depth),
                close.repeat(depth)
            ))
            .unwrap_err();
            assert!(
                err.to_string().contains("brackets nest more than 64 deep"),
                "{err}"
            );
        }
        let err = try_on_small_stack("!".repeat(depth) + "true").unwrap_err();
        assert!(err.is_invalid_input(), "{err:?}");
    }
    let err =
        try_on_small_stack(format!("context.code_bytes{} > 0", " + 1".repeat(3000))).unwrap_err();
    assert!(
        err.to_string().contains("more than 2048 operators"),
        "{err}"
    );
    let err = try_on_small_stack(format!("true{}", " && context.code_bytes > 0".repeat(300)))
        .unwrap_err();
    assert!(err.to_string().contains("nests its expression"), "{err}");
    // Within the bounds: accepted.
    try_on_small_stack(format!("true{}", " && context.code_bytes > 0".repeat(20))).unwrap();
    try_on_small_stack(format!("{}1{} == 1", "(".repeat(30), ")".repeat(30))).unwrap();
    // Operators inside strings and comments do not count.
    let text = format!(
        "// {}\n@id(\"s\") permit (principal, action == Sandlot::Action::\"execute\", resource) when {{ context.language == \"{}\" }};",
        "&&((".repeat(5000),
        "((&&".repeat(5000)
    );
    engine.replace(&text).unwrap();
}

/// A `@review` permit holds the request: not allowed, the reviewing permit named, its text
/// the review's reason; a forbid still wins; review wins over a plain permit that also
/// applies; a request no reviewing permit matches is decided as before.
#[test]
fn review_permits_hold_requests_and_forbids_still_win() {
    let set = format!(
        "{DEFAULT_POLICIES}
@id(\"review-big-code\")
@review(\"large code needs a person's look\")
permit (principal, action == Sandlot::Action::\"execute\", resource)
when {{ context.code_bytes > 100 }};

@id(\"review-new-domain\")
@review(\"egress to a new domain\")
permit (principal, action == Sandlot::Action::\"egress\", resource)
when {{ context.host like \"*.new.test\" }};

@id(\"no-huge-code\")
@reason(\"huge code is refused\")
forbid (principal, action == Sandlot::Action::\"execute\", resource)
when {{ context.code_bytes > 10000 }};

@id(\"review-templates\")
@review(\"\")
permit (principal, action == Sandlot::Action::\"build_template\", resource)
when {{ context.packages > 3 }};
"
    );
    let engine = PolicyEngine::from_text(&set).unwrap();
    let p = principal("acme", "free");

    let small = engine.decide(&execute(&p, 10));
    assert!(small.allowed && small.review.is_none(), "{small:?}");

    // Both the plain allow-all-gates permit and the review permit apply: review wins.
    let big = engine.decide(&execute(&p, 500));
    assert!(!big.allowed, "{big:?}");
    assert!(big.needs_review());
    assert_eq!(
        big.review.as_deref(),
        Some("large code needs a person's look")
    );
    assert_eq!(big.policies, vec!["review-big-code".to_string()]);
    assert!(big.reason.starts_with("needs review: "), "{}", big.reason);

    // A forbid wins over a review permit: a deny, not a hold.
    let huge = engine.decide(&execute(&p, 20000));
    assert!(!huge.allowed && huge.review.is_none(), "{huge:?}");
    assert_eq!(huge.policies, vec!["no-huge-code".to_string()]);

    let held = engine.decide(&egress(&p, "api.new.test"));
    assert_eq!(held.review.as_deref(), Some("egress to a new domain"));
    let known = engine.decide(&egress(&p, "pkgs.test"));
    assert!(known.allowed && known.review.is_none());

    // An empty @review gets a generated reason.
    let build = engine.decide(&Query::new(
        p.clone(),
        GateRequest::BuildTemplate {
            template: "t".into(),
            packages: 5,
        },
    ));
    assert_eq!(
        build.review.as_deref(),
        Some("held for review by policy review-templates")
    );

    // The decision's JSON carries the review only when there is one.
    let json = serde_json::to_value(&big).unwrap();
    assert_eq!(json["review"], "large code needs a person's look");
    let json = serde_json::to_value(&small).unwrap();
    assert!(json.get("review").is_none());
}

/// `@review` on a forbid is refused when the set is loaded (it could never hold anything).
#[test]
fn review_on_a_forbid_is_refused() {
    let set = format!(
        "{DEFAULT_POLICIES}
@id(\"bad\")
@review(\"x\")
forbid (principal, action == Sandlot::Action::\"execute\", resource);
"
    );
    let err = PolicyEngine::from_text(&set).unwrap_err();
    assert!(err.to_string().contains("only a permit"), "{err}");
}

/// An output gate held for review withholds the output (fail closed).
#[test]
fn output_held_for_review_is_withheld() {
    let set = format!(
        "{DEFAULT_POLICIES}
@id(\"review-secret-release\")
@review(\"a secret in output needs a person\")
permit (principal, action == Sandlot::Action::\"output_withhold\", resource)
when {{ context.kind == \"secret\" }};
"
    );
    let engine = PolicyEngine::from_text(&set).unwrap();
    let p = principal("acme", "free");
    let (outcome, d) = engine.output_outcome(
        &p,
        &sandbox("acme"),
        &Finding {
            rule: "aws-access-key-id".into(),
            kind: "secret".into(),
            stream: "stdout".into(),
        },
    );
    assert_eq!(outcome, Outcome::Withhold, "{d:?}");
    assert!(d.needs_review());
}

/// The execute gate sees the code: a pattern in it can be held (or refused).
#[test]
fn code_that_matches_a_pattern_is_held() {
    let set = format!(
        "{DEFAULT_POLICIES}
@id(\"review-rm\")
@review(\"deleting files recursively\")
permit (principal, action == Sandlot::Action::\"execute\", resource)
when {{ context.code like \"*rm -rf*\" }};
"
    );
    let engine = PolicyEngine::from_text(&set).unwrap();
    let p = principal("acme", "free");
    let q = |code: &str| {
        Query::new(
            p.clone(),
            GateRequest::Execute {
                sandbox: sandbox("acme"),
                code_bytes: code.len() as u64,
                language: "bash".into(),
                code: code.into(),
            },
        )
    };
    assert!(engine.decide(&q("ls -la")).allowed);
    let d = engine.decide(&q("cd /workspace && rm -rf cache"));
    assert_eq!(d.review.as_deref(), Some("deleting files recursively"));
}

/// A schema file shipped by an earlier sandlot and never edited is replaced with the current
/// one when the engine opens; an edited one is kept (and refused if it lacks what is sent now).
#[test]
fn a_shipped_schema_never_edited_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("policies");
    fs::create_dir_all(&pdir).unwrap();
    // The schema shipped before `code` was sent: the same without it and its comment.
    // (Nor the host paths, added after `code`.)
    let old = without_host_paths(sandlot_policy::SCHEMA)
        .replace(
            "  // `code` is the code itself (a policy may hold or refuse code that matches a pattern:\n  // `context.code like \"*rm -rf*\"`).\n",
            "",
        )
        .replace(", code: String }", " }");
    assert_ne!(old, sandlot_policy::SCHEMA);
    fs::write(pdir.join(SCHEMA_FILE), &old).unwrap();
    let engine = PolicyEngine::open(&pdir).unwrap();
    assert_eq!(engine.info().schema, sandlot_policy::SCHEMA);
    assert_eq!(
        fs::read_to_string(pdir.join(SCHEMA_FILE)).unwrap(),
        sandlot_policy::SCHEMA
    );
    // An edited old schema is not touched: refused, with the way back named.
    let edited = format!("// mine\n{old}");
    fs::write(pdir.join(SCHEMA_FILE), &edited).unwrap();
    let err = PolicyEngine::open(&pdir).unwrap_err().to_string();
    assert!(err.contains("execute"), "{err}");
    assert_eq!(fs::read_to_string(pdir.join(SCHEMA_FILE)).unwrap(), edited);
}

/// The schema without what the trusted tier's host paths added (issue 23): the one shipped
/// before them.
fn without_host_paths(schema: &str) -> String {
    schema
        .replace(
            "  // A host file or directory (its absolute path) a trusted-tier sandbox asks to mount.\n  entity HostPath = { path: String };\n",
            "",
        )
        .replace(
            "  // A read-only host path mounted at `target` (under /mnt) in a sandbox of tier `tier`; asked\n  // at creation (and again by whoever forks it). The shipped set permits it for no one.\n  action mount_host_path appliesTo {\n    principal: Key, resource: HostPath, context: { target: String, tier: String }\n  };\n",
            "",
        )
}

/// The schema shipped just before host paths is upgraded too.
#[test]
fn the_schema_before_host_paths_is_upgraded() {
    let dir = tempfile::tempdir().unwrap();
    let pdir = dir.path().join("policies");
    fs::create_dir_all(&pdir).unwrap();
    let old = without_host_paths(sandlot_policy::SCHEMA);
    assert_ne!(old, sandlot_policy::SCHEMA);
    fs::write(pdir.join(SCHEMA_FILE), &old).unwrap();
    let engine = PolicyEngine::open(&pdir).unwrap();
    assert_eq!(engine.info().schema, sandlot_policy::SCHEMA);
}

/// `@on_failure("rollback")` on a permit: an allow through it carries the requirement (for the
/// tier the permit names only); a plain allow does not; on a forbid, or with another value,
/// the set is refused.
#[test]
fn on_failure_rollback_permits_require_rollback_for_their_tier() {
    let set = format!(
        "{DEFAULT_POLICIES}
@id(\"trusted-rolls-back\")
@on_failure(\"rollback\")
permit (principal, action == Sandlot::Action::\"execute\", resource)
when {{ resource.tier == \"trusted\" }};
"
    );
    let engine = PolicyEngine::from_text(&set).unwrap();
    let p = principal("acme", "free");
    let plain = engine.decide(&execute(&p, 10));
    assert!(plain.allowed && plain.on_failure.is_none(), "{plain:?}");
    assert!(serde_json::to_value(&plain)
        .unwrap()
        .get("on_failure")
        .is_none());
    let mut sb = sandbox("acme");
    sb.tier = "trusted".into();
    let trusted = engine.decide(&Query::new(
        p.clone(),
        GateRequest::Execute {
            sandbox: sb,
            code_bytes: 10,
            language: "python".into(),
            code: String::new(),
        },
    ));
    assert!(trusted.allowed, "{trusted:?}");
    assert_eq!(trusted.on_failure.as_deref(), Some("rollback"));
    assert!(trusted.policies.contains(&"trusted-rolls-back".to_string()));

    for bad in [
        "@id(\"x\")\n@on_failure(\"rollback\")\nforbid (principal, action == Sandlot::Action::\"execute\", resource);",
        "@id(\"x\")\n@on_failure(\"keep\")\npermit (principal, action == Sandlot::Action::\"execute\", resource);",
    ] {
        let err = PolicyEngine::from_text(&format!("{DEFAULT_POLICIES}\n{bad}\n")).unwrap_err();
        assert!(err.to_string().contains("@on_failure"), "{err}");
    }
}
