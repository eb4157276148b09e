//! Changing when a live sandbox expires (E2B's `set_timeout`).

use crate::error::RuntimeError;
use crate::util::{lock, rfc3339, secs_since};
use crate::Runtime;
use sandlot_types::Sandbox;
use std::time::{Duration, Instant};

impl Runtime {
    /// Moves a sandbox's expiry to `d` from now (earlier or later than it was), recorded like
    /// every other change of the sandbox. Its `max_lifetime` becomes the lifetime that expiry
    /// gives it, counted from its creation. A paused sandbox's time paused still does not
    /// count: resuming moves the expiry on by it, as before.
    pub fn set_timeout(&self, id: &str, d: Duration) -> Result<Sandbox, RuntimeError> {
        self.timeout_to(id, d, false)
    }

    /// Like [`Runtime::set_timeout`], but only ever later: a sandbox due to end after `d`
    /// keeps its expiry (E2B's `connect` to a running sandbox never shortens its time).
    pub fn extend_timeout(&self, id: &str, d: Duration) -> Result<Sandbox, RuntimeError> {
        self.timeout_to(id, d, true)
    }

    /// Sets a sandbox's idle timeout to `d` and counts it from now (E2B's `set_timeout` on a
    /// sandbox that pauses on its timeout: it pauses `d` from now, or later if it is used
    /// meanwhile; `0` pauses it at the next housekeeping round). Recorded like every other
    /// change of the sandbox.
    pub fn set_idle_timeout(&self, id: &str, d: Duration) -> Result<Sandbox, RuntimeError> {
        if d > Duration::from_secs(365 * 24 * 3600) {
            return Err(RuntimeError::OverOneYear { field: "timeout" });
        }
        let e = self.entry(id)?;
        if lock(&e.slot).ended {
            return Err(RuntimeError::SandboxGone {
                id: id.to_string(),
                state: "ending",
                reason: "it is being removed".into(),
            });
        }
        self.touch(&e);
        let info = {
            let mut info = lock(&e.info);
            info.idle_timeout = d.as_secs();
            info.clone()
        };
        self.save(&e);
        Ok(info)
    }

    fn timeout_to(&self, id: &str, d: Duration, later_only: bool) -> Result<Sandbox, RuntimeError> {
        // The same bound as a lifetime given at creation.
        if d > Duration::from_secs(365 * 24 * 3600) {
            return Err(RuntimeError::OverOneYear { field: "timeout" });
        }
        let e = self.entry(id)?;
        if lock(&e.slot).ended {
            return Err(RuntimeError::SandboxGone {
                id: id.to_string(),
                state: "ending",
                reason: "it is being removed".into(),
            });
        }
        let info = {
            // info before expires: the order resume takes them in.
            let mut info = lock(&e.info);
            let mut expires = lock(&e.expires);
            if later_only && *expires >= Instant::now() + d {
                return Ok(info.clone());
            }
            *expires = Instant::now() + d;
            drop(expires);
            let at = time::OffsetDateTime::now_utc() + d;
            info.expires_at = rfc3339(at);
            let age = secs_since(&info.created_at);
            info.max_lifetime = (age + d.as_secs_f64()).ceil().max(1.0) as u64;
            info.clone()
        };
        self.save(&e);
        Ok(info)
    }
}
