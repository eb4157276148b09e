//! Who owns what and every decision about it: tenants, API keys (their sha256, never the key),
//! template owners, policy decisions, egress attempts and guardrail findings.
//!
//! Decisions, egress events and findings arrive on hot paths (every execution, every proxied
//! request), so they are written in batches: [`Store::insert_decisions`] and friends take a
//! slice and write it in one transaction.

use crate::{Store, StoreError};
use rusqlite::{params, OptionalExtension, Row};
use sandlot_types::{ApiKeyInfo, Role, Tenant, TenantQuotas};

/// An API key as stored: what is listed, plus the sha256 of the key to check against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub info: ApiKeyInfo,
    pub sha256: String,
}

/// One policy decision.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRecord {
    pub id: String,
    pub at: String,
    pub gate: String,
    pub key_id: Option<String>,
    pub tenant: Option<String>,
    /// `Sandbox::"sb_..."`, `Template::"default"`, `Domain::"example.com"`.
    pub resource: String,
    pub allowed: bool,
    /// The ids of the policies that decided.
    pub policies: Vec<String>,
    pub reason: String,
    /// The policy set's version.
    pub version: String,
    pub latency_us: f64,
    /// What else the gate recorded (the context, the chosen tier), as JSON.
    pub detail: Option<serde_json::Value>,
}

/// What [`Store::list_decisions_filtered`] narrows by (None: any).
#[derive(Debug, Clone, Copy, Default)]
pub struct DecisionFilter<'a> {
    pub tenant: Option<&'a str>,
    pub gate: Option<&'a str>,
    pub allowed: Option<bool>,
    pub policy: Option<&'a str>,
    pub limit: usize,
}

/// One egress attempt through the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressRecord {
    pub sandbox_id: String,
    pub at: String,
    pub host: String,
    pub port: u16,
    pub ip: Option<String>,
    pub method: String,
    pub allowed: bool,
    pub reason: String,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub decision_id: Option<String>,
}

/// One guardrail finding: the rule and the sha256 of what matched, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingRecord {
    pub sandbox_id: String,
    pub execution_id: Option<String>,
    pub at: String,
    pub rule: String,
    /// `secret` or `canary`.
    pub kind: String,
    /// `stdout`, `stderr`, `result`, `file`, `egress`.
    pub stream: String,
    pub sha256: String,
    /// `pass`, `redact`, `withhold`, `contain`.
    pub outcome: String,
    pub decision_id: Option<String>,
}

fn govern<T>(op: &'static str, r: rusqlite::Result<T>) -> Result<T, StoreError> {
    r.map_err(|source| StoreError::Govern { op, source })
}

fn tenant_from_row(row: &Row<'_>) -> rusqlite::Result<Tenant> {
    let quotas: String = row.get(2)?;
    Ok(Tenant {
        name: row.get(0)?,
        plan: row.get(1)?,
        quotas: serde_json::from_str::<TenantQuotas>(&quotas).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, Box::new(e))
        })?,
        created_at: row.get(3)?,
    })
}

fn key_from_row(row: &Row<'_>) -> rusqlite::Result<KeyRecord> {
    let role: String = row.get(4)?;
    Ok(KeyRecord {
        info: ApiKeyInfo {
            id: row.get(0)?,
            prefix: row.get(1)?,
            tenant: row.get(3)?,
            role: if role == "admin" {
                Role::Admin
            } else {
                Role::Member
            },
            name: row.get(5)?,
            created_at: row.get(6)?,
            revoked_at: row.get(7)?,
        },
        sha256: row.get(2)?,
    })
}

const KEY_COLUMNS: &str = "id, prefix, sha256, tenant, role, name, created_at, revoked_at";

/// The columns [`decision_from_row`] reads, in its order.
pub(crate) const DECISION_COLUMNS: &str = "id, at, gate, key_id, tenant, resource, allowed, \
     policies, reason, version, latency_us, detail";

/// A row of [`DECISION_COLUMNS`].
pub(crate) fn decision_from_row(r: &Row<'_>) -> rusqlite::Result<DecisionRecord> {
    let policies: String = r.get(7)?;
    let detail: Option<String> = r.get(11)?;
    Ok(DecisionRecord {
        id: r.get(0)?,
        at: r.get(1)?,
        gate: r.get(2)?,
        key_id: r.get(3)?,
        tenant: r.get(4)?,
        resource: r.get(5)?,
        allowed: r.get(6)?,
        policies: serde_json::from_str(&policies).unwrap_or_default(),
        reason: r.get(8)?,
        version: r.get(9)?,
        latency_us: r.get(10)?,
        detail: detail.and_then(|d| serde_json::from_str(&d).ok()),
    })
}

impl Store {
    /// Records a tenant, or replaces its plan and quotas when it exists.
    pub fn upsert_tenant(&self, t: &Tenant) -> Result<(), StoreError> {
        let quotas = serde_json::to_string(&t.quotas).expect("quotas serialize");
        govern(
            "record a tenant",
            self.conn().execute(
                "INSERT INTO tenants (name, plan, quotas, created_at) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (name) DO UPDATE SET plan = excluded.plan, quotas = excluded.quotas",
                params![t.name, t.plan, quotas, t.created_at],
            ),
        )
        .map(|_| ())
    }

    /// Every tenant, by name.
    pub fn list_tenants(&self) -> Result<Vec<Tenant>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<Tenant>> {
            let mut stmt =
                conn.prepare("SELECT name, plan, quotas, created_at FROM tenants ORDER BY name")?;
            let rows = stmt.query_map([], tenant_from_row)?;
            rows.collect()
        };
        govern("list tenants", run())
    }

    /// Records a new key. Fails (a constraint violation) if its id or prefix is taken.
    pub fn insert_key(&self, k: &KeyRecord) -> Result<(), StoreError> {
        govern(
            "record an API key",
            self.conn().execute(
                &format!(
                    "INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ),
                params![
                    k.info.id,
                    k.info.prefix,
                    k.sha256,
                    k.info.tenant,
                    k.info.role.as_str(),
                    k.info.name,
                    k.info.created_at,
                    k.info.revoked_at
                ],
            ),
        )
        .map(|_| ())
    }

    /// Every key, oldest first.
    pub fn list_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<KeyRecord>> {
            let mut stmt = conn.prepare(&format!(
                "SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, rowid"
            ))?;
            let rows = stmt.query_map([], key_from_row)?;
            rows.collect()
        };
        govern("list API keys", run())
    }

    /// Marks a key revoked at `at`; the key as it is now, if it exists.
    pub fn revoke_key(&self, id: &str, at: &str) -> Result<Option<KeyRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<KeyRecord>> {
            conn.execute(
                "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, at],
            )?;
            conn.query_row(
                &format!("SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?1"),
                [id],
                key_from_row,
            )
            .optional()
        };
        govern("revoke an API key", run())
    }

    /// Records that `tenant` has a template `name` (names are per tenant: another tenant's
    /// template of the same name is another row). Idempotent.
    pub fn record_template(&self, tenant: &str, name: &str) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<usize> {
            conn.execute(
                "INSERT OR IGNORE INTO template_owners (tenant, name, flat) VALUES (?1, ?2, 0)",
                params![tenant, name],
            )
        };
        govern("record a template", run().map(|_| ()))
    }

    /// Forgets `tenant`'s template `name`.
    pub fn forget_template(&self, tenant: &str, name: &str) -> Result<(), StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<usize> {
            conn.execute(
                "DELETE FROM template_owners WHERE tenant = ?1 AND name = ?2",
                params![tenant, name],
            )
        };
        govern("forget a template", run().map(|_| ()))
    }

    /// The tenant whose spec is the flat `templates/<name>.json` written before names were per
    /// tenant, when that was not the tenant `default` (whose such specs have no row, or a row
    /// of its own).
    pub fn flat_template_owner(&self, name: &str) -> Result<Option<String>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Option<String>> {
            conn.query_row(
                "SELECT tenant FROM template_owners WHERE name = ?1 AND flat = 1",
                [name],
                |r| r.get(0),
            )
            .optional()
        };
        govern("look up a template's owner", run())
    }

    /// The epoch of sandbox `id`'s port capability URLs: 0 until they are first rotated.
    pub fn port_epoch(&self, id: &str) -> Result<u64, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<u64> {
            let epoch: Option<i64> = conn
                .query_row(
                    "SELECT epoch FROM port_epochs WHERE sandbox_id = ?1",
                    [id],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(epoch.unwrap_or(0).max(0) as u64)
        };
        govern("look up a sandbox's port epoch", run())
    }

    /// Moves sandbox `id`'s port capability URLs to the next epoch (every URL made before
    /// stops working); returns the new epoch.
    pub fn rotate_port_epoch(&self, id: &str, at: &str) -> Result<u64, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<u64> {
            conn.query_row(
                "INSERT INTO port_epochs (sandbox_id, epoch, rotated_at) VALUES (?1, 1, ?2) \
                 ON CONFLICT (sandbox_id) DO UPDATE SET epoch = epoch + 1, rotated_at = ?2 \
                 RETURNING epoch",
                params![id, at],
                |r| r.get::<_, i64>(0),
            )
            .map(|e| e.max(0) as u64)
        };
        govern("rotate a sandbox's port URLs", run())
    }

    /// Records that `tenant`'s executions produced these artifacts.
    pub fn add_artifact_owners(&self, tenant: &str, shas: &[String]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut run = || -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT OR IGNORE INTO artifact_owners (sha256, tenant) VALUES (?1, ?2)",
                )?;
                for sha in shas {
                    stmt.execute(params![sha, tenant])?;
                }
            }
            tx.commit()
        };
        govern("record artifact owners", run())
    }

    /// Whether `tenant`'s executions produced artifact `sha256`.
    pub fn artifact_owned(&self, sha256: &str, tenant: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<bool> {
            let mut stmt = conn.prepare_cached(
                "SELECT 1 FROM artifact_owners WHERE sha256 = ?1 AND tenant = ?2",
            )?;
            stmt.exists(params![sha256, tenant])
        };
        govern("look up an artifact's owners", run())
    }

    /// Records policy decisions, in one transaction.
    pub fn insert_decisions(&self, batch: &[DecisionRecord]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut run = || -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT OR IGNORE INTO decisions (id, at, gate, key_id, tenant, resource, \
                     allowed, policies, reason, version, latency_us, detail) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                )?;
                for d in batch {
                    stmt.execute(params![
                        d.id,
                        d.at,
                        d.gate,
                        d.key_id,
                        d.tenant,
                        d.resource,
                        d.allowed,
                        serde_json::to_string(&d.policies).expect("strings serialize"),
                        d.reason,
                        d.version,
                        d.latency_us,
                        d.detail.as_ref().map(|v| v.to_string()),
                    ])?;
                }
            }
            tx.commit()
        };
        govern("record policy decisions", run())
    }

    /// Decisions, newest first, at most `limit`, optionally of one tenant or one gate.
    pub fn list_decisions(
        &self,
        tenant: Option<&str>,
        gate: Option<&str>,
        limit: usize,
    ) -> Result<Vec<DecisionRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<DecisionRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions \
                     WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR gate = ?2) \
                     ORDER BY at DESC, rowid DESC LIMIT ?3"
            ))?;
            let rows = stmt.query_map(params![tenant, gate, limit as i64], decision_from_row)?;
            rows.collect()
        };
        govern("list policy decisions", run())
    }

    /// Decisions, newest first, at most `filter.limit`, narrowed by every filter given: the
    /// tenant, the gate, the outcome (`allowed`), and a policy id among the deciding ones.
    pub fn list_decisions_filtered(
        &self,
        filter: &DecisionFilter<'_>,
    ) -> Result<Vec<DecisionRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<DecisionRecord>> {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {DECISION_COLUMNS} FROM decisions \
                     WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR gate = ?2) \
                     AND (?3 IS NULL OR allowed = ?3) \
                     AND (?4 IS NULL OR EXISTS \
                          (SELECT 1 FROM json_each(decisions.policies) WHERE value = ?4)) \
                     ORDER BY at DESC, rowid DESC LIMIT ?5"
            ))?;
            let rows = stmt.query_map(
                params![
                    filter.tenant,
                    filter.gate,
                    filter.allowed,
                    filter.policy,
                    filter.limit as i64
                ],
                decision_from_row,
            )?;
            rows.collect()
        };
        govern("list policy decisions", run())
    }

    /// Records egress attempts, in one transaction.
    pub fn insert_egress(&self, batch: &[EgressRecord]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut run = || -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO egress_events (sandbox_id, at, host, port, ip, method, allowed, \
                     reason, bytes_up, bytes_down, decision_id) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
                )?;
                for e in batch {
                    stmt.execute(params![
                        e.sandbox_id,
                        e.at,
                        e.host,
                        e.port,
                        e.ip,
                        e.method,
                        e.allowed,
                        e.reason,
                        e.bytes_up,
                        e.bytes_down,
                        e.decision_id
                    ])?;
                }
            }
            tx.commit()
        };
        govern("record egress attempts", run())
    }

    /// A sandbox's egress attempts, oldest first (the last `limit`).
    pub fn list_egress(
        &self,
        sandbox_id: &str,
        limit: usize,
    ) -> Result<Vec<EgressRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<EgressRecord>> {
            let mut stmt = conn.prepare_cached(
                "SELECT sandbox_id, at, host, port, ip, method, allowed, reason, bytes_up, \
                 bytes_down, decision_id FROM (SELECT *, id AS n FROM egress_events \
                 WHERE sandbox_id = ?1 ORDER BY id DESC LIMIT ?2) ORDER BY n",
            )?;
            let rows = stmt.query_map(params![sandbox_id, limit as i64], |r| {
                Ok(EgressRecord {
                    sandbox_id: r.get(0)?,
                    at: r.get(1)?,
                    host: r.get(2)?,
                    port: r.get(3)?,
                    ip: r.get(4)?,
                    method: r.get(5)?,
                    allowed: r.get(6)?,
                    reason: r.get(7)?,
                    bytes_up: r.get(8)?,
                    bytes_down: r.get(9)?,
                    decision_id: r.get(10)?,
                })
            })?;
            rows.collect()
        };
        govern("list egress attempts", run())
    }

    /// Records guardrail findings, in one transaction.
    pub fn insert_findings(&self, batch: &[FindingRecord]) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let mut run = || -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO findings (sandbox_id, execution_id, at, rule, kind, stream, \
                     sha256, outcome, decision_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )?;
                for f in batch {
                    stmt.execute(params![
                        f.sandbox_id,
                        f.execution_id,
                        f.at,
                        f.rule,
                        f.kind,
                        f.stream,
                        f.sha256,
                        f.outcome,
                        f.decision_id
                    ])?;
                }
            }
            tx.commit()
        };
        govern("record guardrail findings", run())
    }

    /// A sandbox's guardrail findings, oldest first.
    pub fn list_findings(&self, sandbox_id: &str) -> Result<Vec<FindingRecord>, StoreError> {
        let conn = self.conn();
        let run = || -> rusqlite::Result<Vec<FindingRecord>> {
            let mut stmt = conn.prepare_cached(
                "SELECT sandbox_id, execution_id, at, rule, kind, stream, sha256, outcome, \
                 decision_id FROM findings WHERE sandbox_id = ?1 ORDER BY id LIMIT 10000",
            )?;
            let rows = stmt.query_map([sandbox_id], |r| {
                Ok(FindingRecord {
                    sandbox_id: r.get(0)?,
                    execution_id: r.get(1)?,
                    at: r.get(2)?,
                    rule: r.get(3)?,
                    kind: r.get(4)?,
                    stream: r.get(5)?,
                    sha256: r.get(6)?,
                    outcome: r.get(7)?,
                    decision_id: r.get(8)?,
                })
            })?;
            rows.collect()
        };
        govern("list guardrail findings", run())
    }
}

/// A write-behind journal for decisions, egress attempts and findings: they arrive on hot
/// paths (every execution, every proxied request), so callers only queue them and one thread
/// writes them in batches (one transaction per batch, at most every 50 ms). Records queued
/// when the process dies unflushed are lost at most 50 ms' worth; [`Journal::flush`] waits
/// for everything queued so far (tests and readers call it before reading).
#[derive(Clone)]
pub struct Journal {
    tx: std::sync::mpsc::Sender<Entry>,
}

enum Entry {
    Decision(DecisionRecord),
    Egress(EgressRecord),
    Finding(FindingRecord),
    Flush(std::sync::mpsc::Sender<()>),
}

impl Journal {
    /// Starts the writer thread for `store`.
    pub fn start(store: std::sync::Arc<Store>) -> Journal {
        let (tx, rx) = std::sync::mpsc::channel::<Entry>();
        std::thread::Builder::new()
            .name("sandlot-journal".into())
            .spawn(move || write_loop(&store, &rx))
            .expect("spawn the journal thread");
        Journal { tx }
    }

    pub fn decision(&self, d: DecisionRecord) {
        let _ = self.tx.send(Entry::Decision(d));
    }

    pub fn egress(&self, e: EgressRecord) {
        let _ = self.tx.send(Entry::Egress(e));
    }

    pub fn finding(&self, f: FindingRecord) {
        let _ = self.tx.send(Entry::Finding(f));
    }

    /// Waits (blocking, at most 5 s) until everything queued before this call is written.
    pub fn flush(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        if self.tx.send(Entry::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(std::time::Duration::from_secs(5));
        }
    }
}

fn write_loop(store: &Store, rx: &std::sync::mpsc::Receiver<Entry>) {
    const BATCH: usize = 512;
    let (mut ds, mut es, mut fs, mut waiters) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        let until = std::time::Instant::now() + std::time::Duration::from_millis(50);
        while let Some(entry) = next.take() {
            match entry {
                Entry::Decision(d) => ds.push(d),
                Entry::Egress(e) => es.push(e),
                Entry::Finding(f) => fs.push(f),
                Entry::Flush(w) => {
                    waiters.push(w);
                    break;
                }
            }
            if ds.len() + es.len() + fs.len() >= BATCH {
                break;
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            next = rx.recv_timeout(left).ok();
        }
        let written = [
            (
                "decisions",
                (!ds.is_empty()).then(|| store.insert_decisions(&ds)),
            ),
            (
                "egress attempts",
                (!es.is_empty()).then(|| store.insert_egress(&es)),
            ),
            (
                "findings",
                (!fs.is_empty()).then(|| store.insert_findings(&fs)),
            ),
        ];
        for (what, r) in written {
            let Some(r) = r else { continue };
            if let Err(e) = r {
                tracing::error!(error = %e, "{what} not recorded");
            }
        }
        ds.clear();
        es.clear();
        fs.clear();
        for w in waiters.drain(..) {
            let _ = w.send(());
        }
    }
}
