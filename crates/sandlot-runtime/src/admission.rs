//! Admission of a new sandbox, before anything is booted: the template must be ready; the
//! creator's environment variables, metadata, limits and lifetimes are checked against the
//! server's bounds; and creation takes a place in the bounded creation queue, then one of
//! `max_concurrent_creates` slots. Past the server's capacity or the queue's bound creation
//! fails at once with `capacity_exhausted`, and nothing else is affected.

use crate::error::RuntimeError;
use crate::templates::Tmpl;
use crate::util::lock;
use crate::Runtime;
use sandlot_jail::cgroup::CgroupLimits;
use sandlot_types::{CreateSandbox, EffectiveLimits, Limits, TemplateStatus};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What an admitted creation request resolved to.
pub(crate) struct Admitted {
    pub tmpl: Arc<Tmpl>,
    pub limits: EffectiveLimits,
    /// Idle timeout and maximum lifetime, in seconds.
    pub idle: u64,
    pub lifetime: u64,
    /// The named volumes to mount, checked, paths normalized.
    pub volumes: Vec<sandlot_types::VolumeMount>,
    /// The tenant the sandbox will belong to: its template and volumes are this tenant's.
    pub tenant: String,
}

/// A creation's place among those counted against capacity (queued or running); given back
/// when dropped.
pub(crate) struct CreateTicket {
    rt: Runtime,
}

impl Drop for CreateTicket {
    fn drop(&mut self) {
        self.rt
            .inner
            .registry
            .creating
            .fetch_sub(1, Ordering::SeqCst);
    }
}

impl Runtime {
    /// Checks a creation request and resolves what it asks for; nothing is counted yet.
    pub(crate) fn admit(&self, req: &CreateSandbox) -> Result<Admitted, RuntimeError> {
        let name = req.template.clone().unwrap_or_else(|| "default".into());
        let tenant = req
            .tenant
            .clone()
            .unwrap_or_else(|| sandlot_types::DEFAULT_TENANT.to_owned());
        let tmpl = self.template(&tenant, &name)?;
        match tmpl.status() {
            (TemplateStatus::Ready, _) => {}
            (TemplateStatus::Building, _) => return Err(RuntimeError::TemplateBuilding { name }),
            (TemplateStatus::Failed, e) => {
                return Err(RuntimeError::TemplateFailed {
                    name,
                    reason: e.unwrap_or_default(),
                })
            }
        }
        validate_env(&req.env)?;
        validate_metadata(&req.metadata)?;
        // The request's limits over the template's, over the server's defaults.
        let mut wanted = tmpl.spec.limits.clone();
        let r = &req.limits;
        wanted.memory_mb = r.memory_mb.or(wanted.memory_mb);
        wanted.cpu_millis = r.cpu_millis.or(wanted.cpu_millis);
        wanted.pids = r.pids.or(wanted.pids);
        wanted.disk_mb = r.disk_mb.or(wanted.disk_mb);
        let trusted = req.tier.as_deref() == Some(sandlot_types::TRUSTED_TIER);
        let limits = self.resolve_limits_in(&wanted, trusted)?;
        let cfg = &self.inner.config;
        let idle = lifetime("idle_timeout", req.idle_timeout, cfg.default_idle_timeout)?;
        let lifetime = lifetime("max_lifetime", req.max_lifetime, cfg.default_max_lifetime)?;
        let volumes = self.check_volume_mounts(&tenant, &req.volumes)?;
        Ok(Admitted {
            tmpl,
            limits,
            idle,
            lifetime,
            volumes,
            tenant,
        })
    }

    /// Counts a creation against capacity, or refuses it when the server is full or the queue
    /// is at its bound.
    pub(crate) fn enqueue_create(&self) -> Result<CreateTicket, RuntimeError> {
        let inner = &self.inner;
        // Paused sandboxes hold no process and no memory: they do not count. Counting them
        // out walks every entry, so it is done only when the total alone is at the limit.
        let creating = inner.registry.creating.load(Ordering::SeqCst);
        let at_limit = |n: usize| n + creating >= inner.config.max_sandboxes;
        let sandboxes = lock(&inner.registry.sandboxes);
        let full = at_limit(sandboxes.len())
            && at_limit(
                sandboxes
                    .values()
                    .filter(|e| e.state() != sandlot_types::SandboxState::Paused)
                    .count(),
            );
        drop(sandboxes);
        if full {
            return Err(RuntimeError::AtCapacity {
                max: inner.config.max_sandboxes,
            });
        }
        let queued = inner.registry.creating.fetch_add(1, Ordering::SeqCst);
        let ticket = CreateTicket { rt: self.clone() };
        if queued >= inner.config.max_pending_creates {
            return Err(RuntimeError::CreateQueueFull {
                queued,
                limit: inner.config.max_pending_creates,
            });
        }
        Ok(ticket)
    }

    /// Limits with the server's defaults filled in, each checked against the server's maximum.
    /// The limits a sandbox asking for `req` gets: the server's defaults filled in, checked
    /// against its maxima.
    pub fn effective_limits(&self, req: &Limits) -> Result<EffectiveLimits, RuntimeError> {
        self.resolve_limits(req)
    }

    /// [`Runtime::effective_limits`] against the `trusted` tier's maxima.
    pub fn effective_limits_trusted(&self, req: &Limits) -> Result<EffectiveLimits, RuntimeError> {
        self.resolve_limits_in(req, true)
    }

    pub(crate) fn resolve_limits(&self, req: &Limits) -> Result<EffectiveLimits, RuntimeError> {
        self.resolve_limits_in(req, false)
    }

    fn resolve_limits_in(
        &self,
        req: &Limits,
        trusted: bool,
    ) -> Result<EffectiveLimits, RuntimeError> {
        let d = self.inner.config.default_limits;
        let m = if trusted {
            self.inner.config.trusted_max_limits
        } else {
            self.inner.config.max_limits
        };
        Ok(EffectiveLimits {
            memory_mb: limit("limits.memory_mb", req.memory_mb, d.memory_mb, m.memory_mb)?,
            cpu_millis: limit(
                "limits.cpu_millis",
                req.cpu_millis,
                d.cpu_millis,
                m.cpu_millis,
            )?,
            pids: limit("limits.pids", req.pids, d.pids, m.pids)?,
            disk_mb: limit("limits.disk_mb", req.disk_mb, d.disk_mb, m.disk_mb)?,
        })
    }
}

fn limit(field: &'static str, v: Option<u64>, def: u64, max: u64) -> Result<u64, RuntimeError> {
    match v {
        None => Ok(def),
        Some(0) => Err(RuntimeError::NotPositive { field }),
        Some(value) if value > max => Err(RuntimeError::AboveMax { field, value, max }),
        Some(v) => Ok(v),
    }
}

/// An idle timeout or maximum lifetime in seconds: positive, at most a year.
fn lifetime(field: &'static str, v: Option<u64>, def: u64) -> Result<u64, RuntimeError> {
    match v {
        None => Ok(def),
        Some(0) => Err(RuntimeError::NotPositive { field }),
        Some(v) if v > 365 * 24 * 3600 => Err(RuntimeError::OverOneYear { field }),
        Some(v) => Ok(v),
    }
}

/// The creator's environment variables: names a shell accepts, values without NUL.
fn validate_env(env: &BTreeMap<String, String>) -> Result<(), RuntimeError> {
    if env.len() > 256 {
        return Err(RuntimeError::TooManyEnvVars);
    }
    for (k, v) in env {
        let ok_key = !k.is_empty()
            && k.len() <= 256
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok_key {
            return Err(RuntimeError::InvalidEnvName { name: k.clone() });
        }
        if v.contains('\0') || v.len() > 32768 {
            return Err(RuntimeError::InvalidEnvValue { name: k.clone() });
        }
    }
    Ok(())
}

fn validate_metadata(m: &BTreeMap<String, String>) -> Result<(), RuntimeError> {
    let size: usize = m.iter().map(|(k, v)| k.len() + v.len()).sum();
    if m.len() > 64 || size > 16384 {
        return Err(RuntimeError::MetadataTooLarge);
    }
    Ok(())
}

/// A sandbox's limits as its cgroup enforces them.
pub(crate) fn cgroup_limits(l: EffectiveLimits) -> CgroupLimits {
    CgroupLimits {
        memory_bytes: l.memory_mb << 20,
        pids: l.pids,
        cpu_millis: l.cpu_millis,
    }
}
