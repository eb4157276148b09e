//! The warm pool: each ready template keeps `pool_size` sandboxes booted and warmed ahead of
//! requests. A creation takes one and gives it its limits: memory, CPU and pids rewritten in
//! its cgroup, `disk_mb` as its workspace's new quota (a sandbox with a tmpfs workspace must
//! match in size, as a tmpfs is sized when mounted); a background task boots replacements, one
//! at a time per template. Pooled sandboxes are not in the store until handed out. Killing one
//! (`discard`) is teardown's.

use crate::admission::cgroup_limits;
use crate::sandbox::Live;
use crate::templates::Tmpl;
use crate::util::lock;
use crate::Runtime;
use sandlot_types::EffectiveLimits;
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Runtime {
    /// A booted, idle sandbox of `tmpl` from its pool, with its cgroup and workspace quota set
    /// to `limits`; `None` when the pool is empty (or its tmpfs workspace has another size).
    pub(crate) fn take_pooled(
        &self,
        tmpl: &Arc<Tmpl>,
        limits: EffectiveLimits,
    ) -> Option<Arc<Live>> {
        loop {
            let live = {
                let mut pool = lock(&tmpl.pool);
                match pool.first() {
                    // A tmpfs is sized when mounted: its /tmp and /dev/shm must already be the
                    // sizes these limits give.
                    Some(l)
                        if (l.disk() || l.limits.disk_mb == limits.disk_mb)
                            && crate::spawn::tmp_bytes(l.limits)
                                == crate::spawn::tmp_bytes(limits)
                            && crate::spawn::shm_bytes(l.limits)
                                == crate::spawn::shm_bytes(limits) =>
                    {
                        pool.remove(0)
                    }
                    _ => return None,
                }
            };
            if live.is_dead() || live.init_exited() {
                self.discard(live);
                continue;
            }
            if live.limits != limits && live.cgroup.set_limits(&cgroup_limits(limits)).is_err() {
                self.discard(live);
                continue;
            }
            if live.disk()
                && live.limits.disk_mb != limits.disk_mb
                && self.set_workspace_limit(&live.id, limits.disk_mb).is_err()
            {
                self.discard(live);
                continue;
            }
            return Some(live);
        }
    }

    /// Tops up `tmpl`'s pool in the background, one boot at a time.
    pub(crate) fn refill(&self, tmpl: &Arc<Tmpl>) {
        let want = self.inner.config.pool_size;
        if want == 0 || tmpl.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let rt = self.clone();
        let tmpl = tmpl.clone();
        tokio::spawn(async move {
            let limits = rt
                .resolve_limits(&tmpl.spec.limits)
                .unwrap_or(rt.inner.config.default_limits);
            loop {
                let have = lock(&tmpl.pool).len();
                let current = rt
                    .template(&tmpl.tenant, &tmpl.spec.name)
                    .map(|t| Arc::ptr_eq(&t, &tmpl))
                    .unwrap_or(false);
                if have >= want || !current || rt.inner.registry.is_closing() {
                    break;
                }
                match rt.boot(&tmpl, &tmpl.tenant, limits, &[]).await {
                    Ok(live) => {
                        // Touch the pages a first cell needs now, not on the client's time.
                        let _ = live.send(&serde_json::json!({"type": "warm"})).await;
                        let mut pool = lock(&tmpl.pool);
                        // Replaced while it booted: the retirement drained the pool already
                        // (it marks the template before it drains, under this lock).
                        if tmpl.retired.load(Ordering::SeqCst) {
                            drop(pool);
                            rt.discard(live);
                            break;
                        }
                        pool.push(live);
                    }
                    Err(e) => {
                        tracing::warn!(template = %tmpl.spec.name, error = %e, "could not boot a pooled sandbox");
                        break;
                    }
                }
            }
            tmpl.refilling.store(false, Ordering::SeqCst);
        });
    }

    /// Kills every pooled sandbox of `tmpl`; the handles finish when each is gone.
    pub(crate) fn drain_pool(&self, tmpl: &Tmpl) -> Vec<tokio::task::JoinHandle<()>> {
        let pooled: Vec<Arc<Live>> = std::mem::take(&mut *lock(&tmpl.pool));
        pooled.into_iter().map(|live| self.discard(live)).collect()
    }
}
