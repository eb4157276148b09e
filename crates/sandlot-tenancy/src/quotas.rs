//! Admission of sandbox creations against a tenant's quotas.
//!
//! Usage is never counted up and down by hand: what a tenant holds is read from the runtime's
//! live set each time (`Runtime::tenant_usage`), plus the reservations of creations admitted
//! but not finished yet. A delete, a crash or a server restart therefore cannot leak quota.
//! A reservation is released when its [`Admission`] is dropped (after the creation returned, so
//! the sandbox, if any, is in the live set by then).
//!
//! Over quota, a creation waits in its tenant's line: a fair (FIFO) async mutex, so requests
//! are admitted in arrival order; the head re-checks when a reservation is released and every
//! 50 ms (sandboxes also end by themselves: expiry, deletion through another interface). The
//! line is bounded ([`MAX_WAITING`]) and so is the wait (the tenant's `wait_seconds`, default
//! 10 s); past either the creation fails with which quota was full and when to retry.

use crate::error::QuotaError;
use crate::shares::{Claim, Share, Shares, Slot};
use sandlot_types::{Tenant, TenantQuotas};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Most creations waiting in one tenant's line.
pub const MAX_WAITING: usize = 256;
const DEFAULT_WAIT: Duration = Duration::from_secs(10);
const RECHECK: Duration = Duration::from_millis(50);

/// What a creation asks for, or what a tenant holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Want {
    pub sandboxes: u64,
    pub cpu_millis: u64,
    pub memory_mb: u64,
}

impl std::ops::Add for Want {
    type Output = Want;
    fn add(self, o: Want) -> Want {
        Want {
            sandboxes: self.sandboxes + o.sandboxes,
            cpu_millis: self.cpu_millis + o.cpu_millis,
            memory_mb: self.memory_mb + o.memory_mb,
        }
    }
}

/// Every tenant's line.
#[derive(Default, Clone)]
pub struct Quotas {
    lanes: Arc<Mutex<HashMap<String, Arc<Lane>>>>,
    /// The fair shares' lines and open streams (`shares.rs`).
    shares: Shares,
}

#[derive(Default)]
struct Lane {
    /// Held by the creation at the head of the line while it waits for room.
    line: tokio::sync::Mutex<()>,
    /// Admitted creations that have not finished.
    pending: Mutex<Want>,
    waiting: AtomicUsize,
    released: Notify,
    bucket: Mutex<Option<Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// A creation admitted: its reservation lasts until this is dropped.
pub struct Admission {
    lane: Option<Arc<Lane>>,
    want: Want,
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(lane) = &self.lane {
            let mut p = lane.pending.lock().unwrap_or_else(PoisonError::into_inner);
            p.sandboxes -= self.want.sandboxes;
            p.cpu_millis -= self.want.cpu_millis;
            p.memory_mb -= self.want.memory_mb;
            drop(p);
            lane.released.notify_waiters();
        }
    }
}

impl Admission {
    /// Wakes the tenant's line now (a sandbox was deleted).
    pub fn nudge(quotas: &Quotas, tenant: &str) {
        if let Some(lane) = quotas.lock().get(tenant) {
            lane.released.notify_waiters();
        }
    }
}

impl Quotas {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Lane>>> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Admits a creation of `want` for `tenant`, waiting in line while its quotas are full.
    /// `usage` reads what the tenant's sandboxes hold now.
    pub async fn admit(
        &self,
        tenant: &Tenant,
        want: Want,
        usage: impl Fn() -> Want,
    ) -> Result<Admission, QuotaError> {
        let q = &tenant.quotas;
        if is_unlimited(q) {
            return Ok(Admission { lane: None, want });
        }
        if let Some(err) = too_large(tenant, want) {
            return Err(err);
        }
        let lane = self.lock().entry(tenant.name.clone()).or_default().clone();
        let wait = q
            .wait_seconds
            .map(Duration::from_secs_f64)
            .unwrap_or(DEFAULT_WAIT);
        let deadline = Instant::now() + wait;
        if lane.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING {
            lane.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(QuotaError::Exceeded {
                tenant: tenant.name.clone(),
                quota: "queue",
                detail: format!("{MAX_WAITING} creations are already waiting"),
                retry_after_secs: 1,
            });
        }
        let result = self
            .wait_for_room(&lane, tenant, want, usage, deadline)
            .await;
        lane.waiting.fetch_sub(1, Ordering::SeqCst);
        result
    }

    async fn wait_for_room(
        &self,
        lane: &Arc<Lane>,
        tenant: &Tenant,
        want: Want,
        usage: impl Fn() -> Want,
        deadline: Instant,
    ) -> Result<Admission, QuotaError> {
        let q = &tenant.quotas;
        let mut blocked = ("queue", String::new(), 1u64);
        let head = tokio::time::timeout_at(deadline.into(), lane.line.lock()).await;
        let Ok(_head) = head else {
            // Never reached the head of the line: report the quota that is full now (the
            // line itself when none is).
            let held = usage() + *lane.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(why) = over(q, held, want) {
                blocked = why;
            }
            return Err(exceeded(tenant, blocked));
        };
        loop {
            // Register for a wake-up before checking, so a release between the check and the
            // wait is not missed.
            let released = lane.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let mut pending = lane.pending.lock().unwrap_or_else(PoisonError::into_inner);
                let held = usage() + *pending;
                match over(q, held, want) {
                    Some(why) => blocked = why,
                    None => match take_token(lane, q) {
                        Err(retry) => {
                            blocked = (
                                "creates_per_second",
                                format!("{} per second", q.creates_per_second.unwrap_or(0.0)),
                                retry.as_secs().max(1),
                            )
                        }
                        Ok(()) => {
                            *pending = *pending + want;
                            return Ok(Admission {
                                lane: Some(lane.clone()),
                                want,
                            });
                        }
                    },
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(exceeded(tenant, blocked));
            }
            let nap = RECHECK.min(deadline - now);
            let _ = tokio::time::timeout(nap, released).await;
        }
    }
}

impl Quotas {
    /// Takes `tenant`'s line for `share` (creations of it wait for one another, never for
    /// other tenants), then checks what `held` counts now against the cap (`shares.rs`).
    pub async fn claim(
        &self,
        tenant: &Tenant,
        share: Share,
        held: impl FnOnce() -> u64,
    ) -> Result<Claim, QuotaError> {
        self.shares.claim(tenant, share, held).await
    }

    /// Takes `tenant`'s line for `share` without checking (the caller counts, perhaps
    /// asynchronously, and checks with [`crate::check_share`] while it holds the claim).
    pub async fn line(&self, tenant: &str, share: Share) -> Claim {
        self.shares.line(tenant, share).await
    }

    /// A slot for one more open stream of `share` (`EventStreams`, `McpSessions`), or why not.
    pub fn open(&self, tenant: &Tenant, share: Share) -> Result<Slot, QuotaError> {
        self.shares.open(tenant, share)
    }
}

fn is_unlimited(q: &TenantQuotas) -> bool {
    q.max_sandboxes.is_none()
        && q.max_cpu_millis.is_none()
        && q.max_memory_mb.is_none()
        && q.creates_per_second.is_none()
}

/// The first quota `held + want` would pass: its name, a description, a retry hint.
fn over(q: &TenantQuotas, held: Want, want: Want) -> Option<(&'static str, String, u64)> {
    let total = held + want;
    let checks = [
        (
            "max_sandboxes",
            q.max_sandboxes,
            held.sandboxes,
            total.sandboxes,
            "",
        ),
        (
            "max_cpu_millis",
            q.max_cpu_millis,
            held.cpu_millis,
            total.cpu_millis,
            " millicores",
        ),
        (
            "max_memory_mb",
            q.max_memory_mb,
            held.memory_mb,
            total.memory_mb,
            " MiB",
        ),
    ];
    for (name, limit, now, after, unit) in checks {
        if let Some(limit) = limit {
            if after > limit {
                return Some((
                    name,
                    format!(
                        "{now}{unit} held of {limit}{unit}, {} more asked",
                        after - now
                    ),
                    1,
                ));
            }
        }
    }
    None
}

fn too_large(tenant: &Tenant, want: Want) -> Option<QuotaError> {
    over(&tenant.quotas, Want::default(), want).map(|(quota, detail, _)| QuotaError::TooLarge {
        tenant: tenant.name.clone(),
        quota,
        detail,
    })
}

fn exceeded(tenant: &Tenant, (quota, detail, retry): (&'static str, String, u64)) -> QuotaError {
    QuotaError::Exceeded {
        tenant: tenant.name.clone(),
        quota,
        detail: if detail.is_empty() {
            "others were ahead in line for the whole wait".into()
        } else {
            detail
        },
        retry_after_secs: retry,
    }
}

/// Takes a creation token (burst of one second's worth), or says how long until one is due.
fn take_token(lane: &Lane, q: &TenantQuotas) -> Result<(), Duration> {
    let Some(rate) = q.creates_per_second else {
        return Ok(());
    };
    let burst = rate.max(1.0);
    let mut b = lane.bucket.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    let bucket = b.get_or_insert(Bucket {
        tokens: burst,
        at: now,
    });
    bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(burst);
    bucket.at = now;
    if bucket.tokens >= 1.0 {
        bucket.tokens -= 1.0;
        Ok(())
    } else {
        Err(Duration::from_secs_f64((1.0 - bucket.tokens) / rate))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shares::check;
    use std::sync::atomic::AtomicU64;

    fn tenant(q: TenantQuotas) -> Tenant {
        Tenant {
            name: "t".into(),
            plan: "free".into(),
            quotas: q,
            created_at: String::new(),
        }
    }

    const ONE: Want = Want {
        sandboxes: 1,
        cpu_millis: 1000,
        memory_mb: 512,
    };

    #[tokio::test]
    async fn admits_in_order_up_to_the_quota_and_times_out_the_rest() {
        let t = tenant(TenantQuotas {
            max_sandboxes: Some(3),
            wait_seconds: Some(0.3),
            ..Default::default()
        });
        let q = Quotas::default();
        let live = Arc::new(AtomicU64::new(0));
        let mut held = Vec::new();
        for _ in 0..3 {
            let l = live.clone();
            let a = q
                .admit(&t, ONE, move || Want {
                    sandboxes: l.load(Ordering::SeqCst),
                    ..Default::default()
                })
                .await
                .unwrap();
            // The creation finished: the sandbox is live, the reservation goes.
            live.fetch_add(1, Ordering::SeqCst);
            drop(a);
            held.push(());
        }
        let l = live.clone();
        let err = q
            .admit(&t, ONE, move || Want {
                sandboxes: l.load(Ordering::SeqCst),
                ..Default::default()
            })
            .await
            .err()
            .unwrap();
        assert!(
            matches!(
                err,
                QuotaError::Exceeded {
                    quota: "max_sandboxes",
                    ..
                }
            ),
            "{err}"
        );
        // A delete makes room for the next one in line.
        let l = live.clone();
        let q2 = q.clone();
        let t2 = t.clone();
        let waiter = tokio::spawn(async move {
            q2.admit(&t2, ONE, move || Want {
                sandboxes: l.load(Ordering::SeqCst),
                ..Default::default()
            })
            .await
            .map(|_| ())
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        live.fetch_sub(1, Ordering::SeqCst);
        waiter.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn too_large_fails_at_once_and_rate_limits_apply() {
        let t = tenant(TenantQuotas {
            max_memory_mb: Some(256),
            ..Default::default()
        });
        let err = Quotas::default()
            .admit(&t, ONE, Want::default)
            .await
            .err()
            .unwrap();
        assert!(matches!(
            err,
            QuotaError::TooLarge {
                quota: "max_memory_mb",
                ..
            }
        ));
        let t = tenant(TenantQuotas {
            creates_per_second: Some(2.0),
            wait_seconds: Some(0.0),
            ..Default::default()
        });
        let q = Quotas::default();
        q.admit(&t, ONE, Want::default).await.unwrap();
        q.admit(&t, ONE, Want::default).await.unwrap();
        let err = q.admit(&t, ONE, Want::default).await.err().unwrap();
        assert!(
            matches!(
                err,
                QuotaError::Exceeded {
                    quota: "creates_per_second",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn pending_reservations_count_until_dropped() {
        let t = tenant(TenantQuotas {
            max_sandboxes: Some(1),
            wait_seconds: Some(0.1),
            ..Default::default()
        });
        let q = Quotas::default();
        let a = q.admit(&t, ONE, Want::default).await.unwrap();
        assert!(q.admit(&t, ONE, Want::default).await.is_err());
        drop(a);
        q.admit(&t, ONE, Want::default).await.unwrap();
    }

    // The fair shares, through the handle the server holds (`shares.rs`).
    #[tokio::test]
    async fn claims_are_one_at_a_time_and_capped() {
        let t = tenant(TenantQuotas {
            max_volumes: Some(2),
            ..Default::default()
        });
        let q = Quotas::default();
        let c = q.claim(&t, Share::Volumes, || 1).await.unwrap();
        // The same tenant and share waits for the first claim; another share does not.
        let other = q.claim(&t, Share::Snapshots, || 0).await.unwrap();
        drop(other);
        let q2 = q.clone();
        let t2 = t.clone();
        let second = tokio::spawn(async move { q2.claim(&t2, Share::Volumes, || 2).await });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!second.is_finished());
        drop(c);
        let err = second.await.unwrap().err().unwrap();
        assert_eq!(
            err.to_string(),
            "the max_volumes quota of tenant t is full: it holds 2 of 2"
        );
        // Unset: the default.
        let t = tenant(TenantQuotas::default());
        assert!(check(&t, Share::Templates, 31).is_ok());
        assert!(check(&t, Share::Templates, 32).is_err());
    }

    #[test]
    fn slots_count_open_streams() {
        let t = tenant(TenantQuotas {
            max_event_streams: Some(1),
            ..Default::default()
        });
        let q = Quotas::default();
        let a = q.open(&t, Share::EventStreams).unwrap();
        assert!(q.open(&t, Share::EventStreams).is_err());
        let _m = q.open(&t, Share::McpSessions).unwrap();
        drop(a);
        let _b = q.open(&t, Share::EventStreams).unwrap();
    }
}
