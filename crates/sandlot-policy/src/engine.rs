//! The engine: the policy files in a directory, the set in force (swapped atomically on
//! replace), and decisions.

use crate::decision::{Decision, Outcome};
use crate::error::PolicyError;
use crate::gate::Gate;
use crate::index::GateIndex;
use crate::query::{
    Finding, GateRequest, OutputGate, PolicyPrincipal, Query, SandboxRef, SandboxRequest,
};
use crate::schema::{DEFAULT_POLICIES, PREVIOUS_SCHEMAS, SCHEMA};
use crate::set::{compile, describe_all, Compiled, PolicyInfo};
use arc_swap::ArcSwap;
use cedar_policy::{Authorizer, Decision as CedarDecision, PolicySet, Schema};
use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The policy set file in the policy directory.
pub const POLICIES_FILE: &str = "policies.cedar";
/// The schema file in the policy directory.
pub const SCHEMA_FILE: &str = "schema.cedarschema";

/// Decides every gate. Cheap to clone (one `Arc`), usable from any thread; `decide` never
/// blocks (the set in force is read through an `ArcSwap`), `replace` swaps atomically.
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<Inner>,
}

struct Inner {
    /// None for an engine made from text (tests, benchmarks): replace only swaps.
    dir: Option<PathBuf>,
    schema: Schema,
    schema_text: String,
    current: ArcSwap<Current>,
    /// Serializes replaces so the file on disk and the set in force stay the same set.
    replacing: Mutex<()>,
    authorizer: Authorizer,
}

struct Current {
    text: String,
    compiled: Compiled,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("dir", &self.inner.dir)
            .field("version", &self.version())
            .finish()
    }
}

impl PolicyEngine {
    /// Opens the policy directory: writes the shipped schema and default policies where the
    /// files are absent, then loads both, checks the schema declares everything the server
    /// fills in, and validates the policies strictly. An invalid set on disk is an error (the
    /// server must not start with policies it cannot enforce).
    pub fn open(dir: impl AsRef<Path>) -> Result<PolicyEngine, PolicyError> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir).map_err(io("creating", dir))?;
        let schema_path = dir.join(SCHEMA_FILE);
        let policies_path = dir.join(POLICIES_FILE);
        for (path, text) in [(&schema_path, SCHEMA), (&policies_path, DEFAULT_POLICIES)] {
            if !path.exists() {
                write_atomically(path, text)?;
            }
        }
        let mut schema_text =
            fs::read_to_string(&schema_path).map_err(io("reading", &schema_path))?;
        if PREVIOUS_SCHEMAS.contains(&schema_text.as_str()) {
            // A shipped schema never edited: the server's requests have grown since.
            write_atomically(&schema_path, SCHEMA)?;
            schema_text = SCHEMA.to_string();
        }
        let text = fs::read_to_string(&policies_path).map_err(io("reading", &policies_path))?;
        let schema = load_schema(&schema_text, &schema_path)?;
        let compiled = compile(&text, &schema, &schema_text).map_err(|e| match e {
            PolicyError::Io { .. } => e,
            other => PolicyError::Stored {
                path: policies_path.clone(),
                source: Box::new(other),
            },
        })?;
        Ok(Self::build(
            Some(dir.to_path_buf()),
            schema,
            schema_text,
            text,
            compiled,
        ))
    }

    /// An engine over the shipped schema and `policies`, with no files (tests, benchmarks).
    pub fn from_text(policies: &str) -> Result<PolicyEngine, PolicyError> {
        let schema = load_schema(SCHEMA, Path::new(SCHEMA_FILE))?;
        let compiled = compile(policies, &schema, SCHEMA)?;
        Ok(Self::build(
            None,
            schema,
            SCHEMA.to_string(),
            policies.to_string(),
            compiled,
        ))
    }

    fn build(
        dir: Option<PathBuf>,
        schema: Schema,
        schema_text: String,
        text: String,
        compiled: Compiled,
    ) -> PolicyEngine {
        PolicyEngine {
            inner: Arc::new(Inner {
                dir,
                schema,
                schema_text,
                current: ArcSwap::from_pointee(Current { text, compiled }),
                replacing: Mutex::new(()),
                authorizer: Authorizer::new(),
            }),
        }
    }

    /// Validates `policies` strictly, writes it atomically to the policy file, and puts it in
    /// force. A refused set leaves the set in force and the file as they were; decisions in
    /// flight finish on the set they started with.
    pub fn replace(&self, policies: &str) -> Result<PolicyInfo, PolicyError> {
        let compiled = compile(policies, &self.inner.schema, &self.inner.schema_text)?;
        let _guard = self
            .inner
            .replacing
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(dir) = &self.inner.dir {
            write_atomically(&dir.join(POLICIES_FILE), policies)?;
        }
        self.inner.current.store(Arc::new(Current {
            text: policies.to_string(),
            compiled,
        }));
        Ok(self.info())
    }

    /// An engine over this engine's schema and `policies`, validated exactly as
    /// [`PolicyEngine::replace`] validates, with no files and nothing put in force: what a
    /// "what if" against a draft set decides with.
    pub fn draft(&self, policies: &str) -> Result<PolicyEngine, PolicyError> {
        let compiled = compile(policies, &self.inner.schema, &self.inner.schema_text)?;
        Ok(Self::build(
            None,
            self.inner.schema.clone(),
            self.inner.schema_text.clone(),
            policies.to_string(),
            compiled,
        ))
    }

    /// The set in force: version, policies (id, reason, effect, text) and the schema.
    pub fn info(&self) -> PolicyInfo {
        let cur = self.inner.current.load();
        PolicyInfo {
            version: cur.compiled.version.clone(),
            policies: cur.compiled.entries.clone(),
            schema: self.inner.schema_text.clone(),
        }
    }

    /// The set in force as a tenant may see it: the policies that could apply to a key of
    /// `tenant` (with id `key_id`). A policy that names another tenant or another tenant's key
    /// (in its scope or its conditions) is left out, so one tenant does not learn another's
    /// name or how it is governed; the version is the whole set's.
    pub fn info_for(&self, tenant: &str, key_id: &str) -> PolicyInfo {
        let mut info = self.info();
        info.policies
            .retain(|p| crate::set::names_only(&p.text, tenant, key_id));
        info
    }

    /// The policy text in force.
    pub fn text(&self) -> String {
        self.inner.current.load().text.clone()
    }

    /// The version of the set in force.
    pub fn version(&self) -> String {
        self.inner.current.load().compiled.version.clone()
    }

    /// The directory of the policy files (None for an engine made from text).
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// Decides one gate. Never fails: a query Cedar cannot represent or a policy that errors
    /// while evaluating is a deny, with the errors recorded in the decision.
    pub fn decide(&self, query: &Query) -> Decision {
        self.decide_over(query, |gate| gate.candidates(query))
    }

    /// `decide` over every policy of the gate, without the guard index (tests compare the two).
    #[doc(hidden)]
    pub fn decide_unindexed(&self, query: &Query) -> Decision {
        self.decide_over(query, |gate| gate.full())
    }

    fn decide_over(
        &self,
        query: &Query,
        policies: impl FnOnce(&GateIndex) -> Arc<PolicySet>,
    ) -> Decision {
        let start = Instant::now();
        let gate = query.gate();
        let cur = self.inner.current.load();
        let compiled = &cur.compiled;
        let mut d = match query.to_cedar(None) {
            Err(e) => Decision {
                gate,
                allowed: false,
                policies: Vec::new(),
                reason: format!("the {gate} request could not be evaluated: {e}"),
                errors: vec![e],
                version: String::new(),
                latency_us: 0.0,
                review: None,
                on_failure: None,
            },
            Ok((request, entities)) => {
                let set = policies(&compiled.per_gate[gate.index()]);
                let response = self
                    .inner
                    .authorizer
                    .is_authorized(&request, &set, &entities);
                let diag = response.diagnostics();
                let errors: Vec<String> = diag.errors().map(|e| describe_all(e, "")).collect();
                if !errors.is_empty() {
                    // Fail closed: a policy that cannot be evaluated might have been a forbid.
                    let failing: BTreeSet<String> = diag
                        .errors()
                        .map(
                            |cedar_policy::AuthorizationError::PolicyEvaluationError(e)| {
                                e.policy_id().to_string()
                            },
                        )
                        .collect();
                    Decision {
                        gate,
                        allowed: false,
                        policies: failing.into_iter().collect(),
                        reason: format!("policy evaluation failed: {}", errors.join("; ")),
                        errors,
                        version: String::new(),
                        latency_us: 0.0,
                        review: None,
                        on_failure: None,
                    }
                } else {
                    let mut ids: BTreeSet<String> =
                        diag.reason().map(|id| id.to_string()).collect();
                    let mut allowed = response.decision() == CedarDecision::Allow;
                    // An allow through a `@review` permit is a hold: the reviewing permits
                    // decide it (review wins over a plain permit; a forbid already won).
                    let reviewing: BTreeSet<String> = if allowed {
                        ids.iter()
                            .filter(|id| compiled.reviews.contains_key(*id))
                            .cloned()
                            .collect()
                    } else {
                        BTreeSet::new()
                    };
                    let review = (!reviewing.is_empty()).then(|| {
                        reviewing
                            .iter()
                            .filter_map(|id| compiled.reviews.get(id).cloned())
                            .collect::<Vec<_>>()
                            .join("; ")
                    });
                    if review.is_some() {
                        allowed = false;
                        ids = reviewing;
                    }
                    let reason = if let Some(r) = &review {
                        format!("needs review: {r}")
                    } else if ids.is_empty() {
                        format!("no policy permits {gate}")
                    } else {
                        let verb = if allowed { "permitted" } else { "forbidden" };
                        ids.iter()
                            .map(|id| match compiled.reasons.get(id) {
                                Some(r) if !r.is_empty() => r.clone(),
                                _ => format!("{verb} by policy {id}"),
                            })
                            .collect::<Vec<_>>()
                            .join("; ")
                    };
                    // An allow through an `@on_failure("rollback")` permit requires rollback
                    // (any one such permit suffices: the caller cannot opt out).
                    let on_failure = (allowed
                        && ids.iter().any(|id| compiled.rollbacks.contains(id)))
                    .then(|| "rollback".to_owned());
                    Decision {
                        gate,
                        allowed,
                        policies: ids.into_iter().collect(),
                        reason,
                        errors,
                        version: String::new(),
                        latency_us: 0.0,
                        review,
                        on_failure,
                    }
                }
            }
        };
        d.version = compiled.version.clone();
        d.latency_us = start.elapsed().as_secs_f64() * 1e6;
        d
    }

    /// What to do with an output in which the guardrails found `finding`: tries
    /// `output_contain`, `output_withhold`, `output_redact` in that order and the first
    /// permitted wins; none permitted = pass. A check that fails to evaluate (before any was
    /// permitted) withholds the output: fail closed, without killing a sandbox over a broken
    /// policy. The decision returned is the deciding one (the permitted gate, the failing one,
    /// or `output_redact` for a pass) with the latency of all the checks made.
    pub fn output_outcome(
        &self,
        principal: &PolicyPrincipal,
        sandbox: &SandboxRef,
        finding: &Finding,
    ) -> (Outcome, Decision) {
        let mut total_us = 0.0;
        let mut check = |gate: OutputGate| {
            let mut d = self.decide(&Query::new(
                principal.clone(),
                GateRequest::Output {
                    outcome: gate,
                    sandbox: sandbox.clone(),
                    finding: finding.clone(),
                },
            ));
            total_us += d.latency_us;
            d.latency_us = total_us;
            d
        };
        let withheld = |mut d: Decision| {
            d.reason = format!("output withheld: {}", d.reason);
            (Outcome::Withhold, d)
        };
        for (outcome, gate) in [
            (Outcome::Contain, OutputGate::Contain),
            (Outcome::Withhold, OutputGate::Withhold),
        ] {
            let d = check(gate);
            if d.allowed {
                return (outcome, d);
            }
            // An output gate held for review: the output waits, withheld (nothing here can
            // wait for a person while the sandbox streams).
            if !d.errors.is_empty() || d.needs_review() {
                return withheld(d);
            }
        }
        let d = check(OutputGate::Redact);
        if d.allowed {
            (Outcome::Redact, d)
        } else if !d.errors.is_empty() || d.needs_review() {
            withheld(d)
        } else {
            (Outcome::Pass, d)
        }
    }
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> PolicyError + 'a {
    move |source| PolicyError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Parses the schema, and checks it can hold every request the server makes: a sample of each
/// gate is built and validated against it, and there are no action groups (the per-gate split
/// relies on that).
fn load_schema(text: &str, path: &Path) -> Result<Schema, PolicyError> {
    let err = |message: String| PolicyError::Schema {
        path: path.to_path_buf(),
        message,
    };
    let (schema, _warnings) =
        Schema::from_cedarschema_str(text).map_err(|e| err(describe_all(&e, text)))?;
    if let Some(group) = schema.action_groups().next() {
        return Err(err(format!(
            "action groups are not supported (found {group}); list the actions instead"
        )));
    }
    for q in sample_queries() {
        q.to_cedar(Some(&schema)).map_err(|e| {
            err(format!(
                "it does not declare what the server sends at the {} gate: {e} \
                 (remove the file to get the shipped schema back)",
                q.gate()
            ))
        })?;
    }
    Ok(schema)
}

/// One query per gate, with every field filled.
pub(crate) fn sample_queries() -> Vec<Query> {
    let principal = PolicyPrincipal {
        key_id: "k1".into(),
        key_prefix: "abcdefgh".into(),
        tenant: "default".into(),
        role: "admin".into(),
        plan: "local".into(),
    };
    let sandbox = SandboxRef {
        id: "sb1".into(),
        tenant: "default".into(),
        template: "python".into(),
        tier: "isolated".into(),
    };
    let request = SandboxRequest {
        memory_mb: 512,
        cpu_millis: 1000,
        pids: 256,
        disk_mb: 2048,
        network: true,
        allow: vec!["pkgs.test".into()],
        tier: "isolated".into(),
        ports: 1,
    };
    let finding = Finding {
        rule: "aws-access-key-id".into(),
        kind: "secret".into(),
        stream: "stdout".into(),
    };
    let requests = vec![
        GateRequest::CreateSandbox {
            template: "python".into(),
            request: request.clone(),
        },
        GateRequest::SelectTier {
            tier: "isolated".into(),
            request,
        },
        GateRequest::Execute {
            sandbox: sandbox.clone(),
            code_bytes: 3,
            language: "python".into(),
            code: "1+1".into(),
        },
        GateRequest::ReadFile {
            sandbox: sandbox.clone(),
            path: "/workspace/a".into(),
        },
        GateRequest::WriteFile {
            sandbox: sandbox.clone(),
            path: "/workspace/a".into(),
            bytes: 1,
        },
        GateRequest::Egress {
            host: "pkgs.test".into(),
            port: 443,
            ip: String::new(),
            method: "CONNECT".into(),
        },
        GateRequest::BuildTemplate {
            template: "python".into(),
            packages: 2,
        },
        GateRequest::Output {
            outcome: OutputGate::Redact,
            sandbox: sandbox.clone(),
            finding: finding.clone(),
        },
        GateRequest::Output {
            outcome: OutputGate::Withhold,
            sandbox: sandbox.clone(),
            finding: finding.clone(),
        },
        GateRequest::Output {
            outcome: OutputGate::Contain,
            sandbox,
            finding,
        },
        GateRequest::MountHostPath {
            host: "/srv/data".into(),
            target: "/mnt/data".into(),
            tier: "trusted".into(),
        },
    ];
    debug_assert_eq!(requests.len(), Gate::ALL.len());
    requests
        .into_iter()
        .map(|r| Query::new(principal.clone(), r))
        .collect()
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Write `text` to `path` so a reader (or a crash) sees the old file or the new one whole:
/// a temporary file in the same directory, fsync, rename over, fsync the directory.
fn write_atomically(path: &Path, text: &str) -> Result<(), PolicyError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("policy");
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp).map_err(io("writing", &tmp))?;
        f.write_all(text.as_bytes()).map_err(io("writing", &tmp))?;
        f.sync_all().map_err(io("syncing", &tmp))?;
        fs::rename(&tmp, path).map_err(io("renaming into", path))?;
        if let Ok(d) = fs::File::open(dir) {
            // Best effort: the rename is durable once the directory is synced.
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
