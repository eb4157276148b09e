//! The server's side of a zygote's unshare filter: the one power a zygote has that a sandbox
//! does not, kept in the server's hands.
//!
//! A zygote runs tenant code (the template's imports and setup) and its seccomp filters refuse
//! it nothing a sandbox is refused but this: its forked children (P0, see
//! `sandlot_jail::child`) must make their sandbox's namespaces. Every `unshare(2)` under the
//! zygote's filters is handed to this supervisor (a seccomp user notification), which lets a
//! call through only when
//!
//! - the caller is the child the zygote just reported forking for a spawn the server asked for
//!   ([`UnshareGuard::expect`]), and
//! - its flags are exactly the next call of the containment sequence
//!   ([`sandlot_jail::child::SANDBOX_NAMESPACES`], then
//!   [`sandlot_jail::child::CGROUP_NAMESPACE`]), each once.
//!
//! Everything else (the template's setup, a daemon it left behind, a child that already made its
//! namespaces) gets `EPERM`. `unshare` takes only an integer, so letting the call continue in
//! the kernel after the check reads nothing the caller could change in between (the race that
//! makes `SECCOMP_USER_NOTIF_FLAG_CONTINUE` unsafe for pointer arguments does not apply).
//! Sandboxes' own filters refuse `unshare` with an errno, which outranks a notification, so
//! sandboxes never reach this supervisor.

use crate::util::lock;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a notification from an unknown pid waits for the zygote's `spawned` answer (the
/// child may reach `unshare` before the server has read that answer), while a spawn is
/// outstanding.
const EXPECT_WAIT: Duration = Duration::from_secs(5);

/// How long an expected child may take to make both calls.
const EXPECT_TTL: Duration = Duration::from_secs(60);

/// The calls one expected child may still make, in order.
struct Expected {
    next: Vec<u64>,
    since: Instant,
}

/// One zygote's supervisor state, shared by the zygote's handle and the supervising thread.
#[derive(Default)]
pub struct UnshareGuard {
    expected: Mutex<HashMap<i32, Expected>>,
    arrived: Condvar,
    /// Spawns asked of the zygote and not answered yet.
    outstanding: AtomicUsize,
    stop: AtomicBool,
    /// Calls refused, for logs and tests.
    refused: AtomicUsize,
}

impl UnshareGuard {
    /// A spawn is being asked of the zygote: a notification from a pid not known yet may be its
    /// child's, so wait for the answer before refusing it.
    pub fn spawn_started(&self) {
        self.outstanding.fetch_add(1, Ordering::SeqCst);
    }

    /// The zygote answered (or failed to answer) a spawn.
    pub fn spawn_ended(&self) {
        self.outstanding.fetch_sub(1, Ordering::SeqCst);
        self.arrived.notify_all();
    }

    /// The zygote says it forked `pid` for a spawn the server asked for.
    pub fn expect(&self, pid: i32) {
        let next = vec![
            sandlot_jail::child::SANDBOX_NAMESPACES.bits() as u64,
            sandlot_jail::child::CGROUP_NAMESPACE.bits() as u64,
        ];
        let mut map = lock(&self.expected);
        map.retain(|_, e| e.since.elapsed() < EXPECT_TTL);
        map.insert(
            pid,
            Expected {
                next,
                since: Instant::now(),
            },
        );
        drop(map);
        self.arrived.notify_all();
    }

    /// How many calls were refused so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::Relaxed)
    }

    /// Stops the supervising thread once no child it expects is still on its way (checked at
    /// each wake-up, every second): a zygote killed or replaced while children it forked have
    /// not made their namespaces yet must not fail those creations, since a notification
    /// with no supervisor answers `ENOSYS`.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Whether the supervisor may end: stopped, and no expected child within its time.
    fn finished(&self) -> bool {
        if !self.stop.load(Ordering::SeqCst) {
            return false;
        }
        let mut map = lock(&self.expected);
        map.retain(|_, e| e.since.elapsed() < EXPECT_TTL);
        map.is_empty()
    }

    /// Whether `pid` may make an `unshare(flags)` now; consumes the permission.
    fn allow(&self, pid: i32, flags: u64) -> bool {
        let deadline = Instant::now() + EXPECT_WAIT;
        let mut map = lock(&self.expected);
        loop {
            if let Some(e) = map.get_mut(&pid) {
                let ok = e.next.first() == Some(&flags) && e.since.elapsed() < EXPECT_TTL;
                if ok {
                    e.next.remove(0);
                }
                if !ok || e.next.is_empty() {
                    map.remove(&pid);
                }
                return ok;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || self.outstanding.load(Ordering::SeqCst) == 0 {
                return false;
            }
            map = self
                .arrived
                .wait_timeout(map, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// Starts the thread that answers the zygote's unshare notifications on `listener`. It ends when
/// the guard is stopped and no expected child is left, or when no process uses the filter any
/// more.
pub fn supervise(template: &str, listener: OwnedFd, guard: Arc<UnshareGuard>) {
    let template = template.to_string();
    let spawned = std::thread::Builder::new()
        .name(format!("unshare-guard-{template}"))
        .spawn(move || run(&template, &listener, &guard));
    if let Err(e) = spawned {
        // Without the thread every unshare of the zygote's children fails (a notification with
        // no supervisor answers ENOSYS once the listener is closed): creation fails, loudly.
        tracing::error!(error = %e, "cannot start the unshare supervisor");
    }
}

fn run(template: &str, listener: &OwnedFd, guard: &UnshareGuard) {
    let unshare_nr = libc::SYS_unshare as i32;
    while !guard.finished() {
        let mut pfd = libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one pollfd we own, bounded to a second.
        let n = unsafe { libc::poll(&mut pfd, 1, 1000) };
        if n <= 0 {
            continue;
        }
        if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            break; // no process uses the filter any more
        }
        // SAFETY: seccomp_notif is plain old data; the kernel requires it zeroed.
        let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
        // SAFETY: SECCOMP_IOCTL_NOTIF_RECV fills the struct we pass, of the size it expects.
        let r = unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_RECV as _,
                &mut notif,
            )
        };
        if r != 0 {
            continue; // EINTR, or the caller died before we read it (ENOENT)
        }
        let pid = notif.pid as i32;
        let flags = notif.data.args[0];
        let ok = notif.data.nr == unshare_nr && guard.allow(pid, flags);
        if !ok {
            guard.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(template, pid, flags, "refused an unshare under a zygote");
        }
        let mut resp = libc::seccomp_notif_resp {
            id: notif.id,
            val: 0,
            error: if ok { 0 } else { -libc::EPERM },
            flags: if ok {
                libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
            } else {
                0
            },
        };
        // SAFETY: SECCOMP_IOCTL_NOTIF_SEND reads the response we pass; ENOENT (the caller died
        // meanwhile) needs nothing from us.
        unsafe {
            libc::ioctl(
                listener.as_raw_fd(),
                libc::SECCOMP_IOCTL_NOTIF_SEND as _,
                &mut resp,
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: u64 = sandlot_jail::child::SANDBOX_NAMESPACES.bits() as u64;
    const CG: u64 = sandlot_jail::child::CGROUP_NAMESPACE.bits() as u64;

    #[test]
    fn an_expected_child_makes_exactly_the_two_calls_in_order() {
        let g = UnshareGuard::default();
        g.expect(42);
        assert!(!g.allow(42, CG), "out of order");
        // The refusal dropped the expectation: nothing more for that pid.
        assert!(!g.allow(42, NS));
        g.expect(43);
        assert!(g.allow(43, NS));
        assert!(!g.allow(43, NS), "each call once");
        g.expect(44);
        assert!(g.allow(44, NS));
        assert!(g.allow(44, CG));
        assert!(!g.allow(44, CG), "nothing after the sequence");
    }

    #[test]
    fn an_unknown_caller_is_refused_at_once_when_no_spawn_is_under_way() {
        let g = UnshareGuard::default();
        let t = Instant::now();
        assert!(!g.allow(7, NS));
        assert!(t.elapsed() < Duration::from_secs(1));
        // A user namespace alone (what setup code would ask for) is never the sequence.
        g.expect(8);
        assert!(!g.allow(8, libc::CLONE_NEWUSER as u64));
    }

    #[test]
    fn a_child_may_ask_before_the_zygote_has_answered() {
        let g = Arc::new(UnshareGuard::default());
        g.spawn_started();
        let waiter = {
            let g = g.clone();
            std::thread::spawn(move || g.allow(9, NS))
        };
        std::thread::sleep(Duration::from_millis(50));
        g.expect(9);
        g.spawn_ended();
        assert!(waiter.join().unwrap());
    }

    #[test]
    fn a_stopped_guard_still_serves_the_children_on_their_way() {
        let g = UnshareGuard::default();
        g.expect(10);
        g.stop();
        assert!(!g.finished(), "child 10 has not made its namespaces yet");
        assert!(g.allow(10, NS));
        assert!(!g.finished());
        assert!(g.allow(10, CG));
        assert!(g.finished(), "nothing left to serve");
    }
}
