//! Tests that need the machine to themselves, in a binary where every suite shares the process
//! and `--test-threads 2` runs tests of different files side by side.
//!
//! [`serial`] is for a test whose assertions depend on load (a deadline for a fixed amount of
//! work, a measurement): it waits until no other test has a server running, and while it holds
//! the guard no other test starts one. Every [`TestServer`](super::TestServer) holds a
//! [`Share`] from its start to its drop, which is how a running server is seen. Servers the
//! serial test starts itself, from its own thread, are let through.
//!
//! A thread that already has a server running is never held back (a test that starts a second
//! server while a serial test waits for the first one to go would wait for itself); a thread
//! without one waits while a serial test is waiting, so the serial test is not starved by the
//! next test's server starting the moment the previous one stopped.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

#[derive(Default)]
struct State {
    /// Running servers per thread that started them.
    servers: HashMap<ThreadId, usize>,
    /// The thread of the serial test holding the machine.
    holder: Option<ThreadId>,
    /// Serial tests waiting for the machine.
    waiting: usize,
}

impl State {
    fn running(&self) -> usize {
        self.servers.values().sum()
    }
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static CHANGED: Condvar = Condvar::new();

fn lock() -> MutexGuard<'static, Option<State>> {
    // A test that panicked while holding the lock left the counts consistent (every change is
    // one statement), so a poisoned lock is still good.
    STATE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn with_state<T>(
    mut guard: MutexGuard<'static, Option<State>>,
    mut ready: impl FnMut(&State) -> bool,
    then: impl FnOnce(&mut State) -> T,
) -> T {
    loop {
        let state = guard.get_or_insert_with(State::default);
        if ready(state) {
            let out = then(state);
            CHANGED.notify_all();
            return out;
        }
        guard = CHANGED
            .wait(guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}

/// The machine for this test alone until the guard drops (see the module doc). Start the
/// test's servers after this, from the test's own thread.
#[must_use = "the machine is this test's only while the guard lives"]
pub fn serial() -> Serial {
    let me = std::thread::current().id();
    let mut guard = lock();
    guard.get_or_insert_with(State::default).waiting += 1;
    with_state(
        guard,
        |s| s.holder.is_none() && s.running() == 0,
        |s| {
            s.waiting -= 1;
            s.holder = Some(me);
        },
    );
    Serial(())
}

/// See [`serial`].
pub struct Serial(());

impl Drop for Serial {
    fn drop(&mut self) {
        with_state(lock(), |_| true, |s| s.holder = None);
    }
}

/// A running server's share of the machine (see the module doc).
pub struct Share {
    thread: ThreadId,
}

impl Share {
    /// Waits until this thread may start a server.
    pub fn take() -> Share {
        let me = std::thread::current().id();
        with_state(
            lock(),
            |s| {
                s.servers.get(&me).is_some_and(|n| *n > 0)
                    || s.holder == Some(me)
                    || (s.holder.is_none() && s.waiting == 0)
            },
            |s| *s.servers.entry(me).or_default() += 1,
        );
        Share { thread: me }
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let thread = self.thread;
        with_state(
            lock(),
            |_| true,
            |s| {
                if let Some(n) = s.servers.get_mut(&thread) {
                    *n -= 1;
                    if *n == 0 {
                        s.servers.remove(&thread);
                    }
                }
            },
        );
    }
}
