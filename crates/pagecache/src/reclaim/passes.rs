//! The flusher's pass handshake: how a writer throttled at the dirty limit
//! waits for the flusher's next pass without missing one, and how kicks
//! wake the flusher (`flusher.rs` runs the passes).
//!
//! ```text
//!  throttled writer (`Passes::throttle`)    flusher thread
//!  T1. seen = passes (lock)                 F1. idle: busy = false; wait until
//!  T2. kick: kicked = true, busy = true,        kicked or stop (lock); then
//!      wake the flusher (lock)                  kicked = false
//!  T3. lock; while over the limit:          F2. a pass (write-back, no lock)
//!      passes != seen -> seen = passes;     F3. passes += 1, progress = wrote
//!        no progress: go on (T5)                anything (lock); wake every
//!        busy clear (flusher idle):             waiter
//!        kick again (T2), look again        F4. more to do: F2; else F1
//!      wait for a wake-up (F3, or write-    (reclaim and `dirtied` kick too:
//!      back taking pages), at most 10 ms     T2's kick alone)
//!  T4. the bound (2 s) passed: go on
//!  T5. leave
//! ```
//!
//! Ordering. T1 comes before T2, and both read or write under the lock
//! that F1 and F3 take. Every pass that ends after T1 (its F3 after T1 in
//! the lock's order) moves `passes` away from `seen`, so T3 sees it. After
//! T2, the flusher either is idle at F1 (it takes T2's kick, runs a pass
//! and reaches F3: after T1) or is in a pass (its F3 is after T1; F4 then
//! takes the kick at F1 before going idle), so a pass ends after T1 unless
//! the cache stops. T3 leaves on a pass with no progress (the disk fails,
//! the hook defers everything), and kicks again on a pass with progress
//! that left the flusher idle (busy is cleared only at F1, under the lock).
//! Taken the other way round (T2, then T1), a pass that T2's kick, or a
//! kick of reclaim's before it, started can end between the two: `seen`
//! already counts it, the flusher, with nothing left to do, is idle and
//! kicked by nobody, and the writer waits out the bound (the model check
//! found writers waiting 1.9-2 s at a time, tens per 2,000 operations,
//! with a hook that deferred most pages).
//!
//! Loom: `tests/loom.rs` drives a `Passes` with a writer, a second kicker
//! (reclaim) and a flusher loop of F1-F3 that never makes progress; loom's
//! timed waits never time out, so a missed pass is a deadlock it reports.

use crate::sync::unmodelled::{AtomicBool, Ordering};
use crate::sync::{Condvar, LockClass, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a throttled writer waits between looks at the dirty count: a
/// wake-up that write-back sends as it takes pages may come late.
const LOOK_EVERY: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct State {
    /// Work asked for since the thread last looked.
    kicked: bool,
    /// The cache is going away.
    stop: bool,
    /// Passes finished (throttled writers wait for this to move).
    passes: u64,
    /// Whether the last pass wrote any page.
    progress: bool,
    /// The flusher thread, once started.
    thread: Option<JoinHandle<()>>,
    /// Throttled futures ([`Passes::poll_throttle`]): woken with the
    /// threads waiting on `pass_done`.
    wakers: Vec<std::task::Waker>,
}

/// The handshake between the flusher thread, those who kick it and the
/// writers it throttles (see the module docs).
#[derive(Debug)]
pub struct Passes {
    state: Mutex<State>,
    /// Wakes the flusher (F1).
    work: Condvar,
    /// Wakes throttled writers (F3; write-back taking pages).
    pass_done: Condvar,
    /// (A) kicked (or woken for timed work) and not yet idle again:
    /// `Inner::dirtied` kicks only when clear. Written under `state`'s lock; read there by T3, and without
    /// it as a hint.
    busy: AtomicBool,
}

impl Default for Passes {
    fn default() -> Self {
        Self::new()
    }
}

/// Why [`Passes::throttle`] let its writer go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Throttled {
    /// The dirty count is back under the limit.
    Under,
    /// A pass ended with no page written: waiting longer would not help.
    NoProgress,
    /// The cache is stopping.
    Stopped,
    /// The bound passed.
    Bound,
}

impl Passes {
    /// An idle, never started flusher.
    pub fn new() -> Passes {
        Passes {
            state: Mutex::with_class(State::default(), LockClass::Other),
            work: Condvar::new(),
            pass_done: Condvar::new(),
            busy: AtomicBool::new(false),
        }
    }

    /// Whether the flusher was kicked and has not gone idle since (a hint).
    /// Context: any.
    #[inline]
    pub fn busy(&self) -> bool {
        // Relaxed: a hint (see the field).
        self.busy.load(Ordering::Relaxed)
    }

    /// T2: asks the flusher for a round of passes and wakes it; `start`
    /// starts its thread the first time (returns `None` where it cannot:
    /// the next kick tries again). False if the cache is stopping.
    /// Context: no sleep but this leaf mutex (and `start`).
    pub fn kick(&self, start: impl FnOnce() -> Option<JoinHandle<()>>) -> bool {
        let mut st = self.state.lock();
        if st.stop {
            return false;
        }
        st.kicked = true;
        // Relaxed: under the lock (see the field).
        self.busy.store(true, Ordering::Relaxed);
        if st.thread.is_none() {
            st.thread = start();
        }
        drop(st);
        self.work.notify_one();
        true
    }

    /// F1: the flusher goes idle until kicked; false once the cache stops.
    /// Context: sleeps; the flusher thread only.
    pub fn wait_kick(&self) -> bool {
        self.wait_kick_for(None, || false) == Some(true)
    }

    /// F1 with a bound: the flusher goes idle until kicked (`Some(true)`)
    /// or `timeout` passes (`Some(false)`: its timed work, with `busy` set
    /// again under the lock, as for a kick, so that `busy` covers all the
    /// flusher's work and the next F1 clears it); `None` once the cache
    /// stops. Under loom the bound is
    /// ignored (loom's timed waits never time out).
    ///
    /// `due` is work a kicker may have seen `busy` set for and so not
    /// kicked (`Inner::dirtied` kicks past the hard limit only when `busy`
    /// is clear): checked after `busy` is cleared, with a `SeqCst` fence
    /// between (Dekker's pattern with the kicker's count RMW, fence, and
    /// load of `busy`), it counts as a kick. Context: sleeps; the flusher
    /// thread only.
    pub fn wait_kick_for(&self, timeout: Option<Duration>, due: impl Fn() -> bool) -> Option<bool> {
        #[cfg(not(loom))]
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        #[cfg(loom)]
        let deadline: Option<()> = timeout.map(|_| ());
        let mut st = self.state.lock();
        while !st.kicked && !st.stop {
            // Relaxed: under the lock (see the field).
            self.busy.store(false, Ordering::Relaxed);
            // SeqCst: the kicker that saw `busy` set made `due` true
            // before its own fence (see above).
            crate::sync::fence(crate::sync::Ordering::SeqCst);
            if due() {
                // Relaxed: under the lock (see the field).
                self.busy.store(true, Ordering::Relaxed);
                break;
            }
            match deadline {
                None => st = self.work.wait(st),
                #[cfg(not(loom))]
                Some(d) => {
                    let now = std::time::Instant::now();
                    if now >= d {
                        // Relaxed: under the lock (see the field).
                        self.busy.store(true, Ordering::Relaxed);
                        return Some(false);
                    }
                    st = self.work.wait_for(st, Some(d - now));
                }
                #[cfg(loom)]
                Some(()) => st = self.work.wait(st),
            }
        }
        if st.stop {
            return None;
        }
        st.kicked = false;
        Some(true)
    }

    /// F3: a pass ended, having written pages or not; wakes every
    /// throttled writer. Returns false once the cache stops. Context: no
    /// sleep but this leaf mutex; the flusher thread only.
    pub fn end_pass(&self, progress: bool) -> bool {
        let mut st = self.state.lock();
        st.passes += 1;
        st.progress = progress;
        let stop = st.stop;
        let wakers = std::mem::take(&mut st.wakers);
        drop(st);
        self.pass_done.notify_all();
        wakers.into_iter().for_each(std::task::Waker::wake);
        !stop
    }

    /// Wakes throttled writers to look at the dirty count again (write-back
    /// took pages). Context: no sleep but this leaf mutex.
    pub fn wake_waiters(&self) {
        let mut st = self.state.lock();
        self.pass_done.notify_all();
        let wakers = std::mem::take(&mut st.wakers);
        drop(st);
        wakers.into_iter().for_each(std::task::Waker::wake);
    }

    /// T1-T5: waits while `over()` (the dirty count is past the hard
    /// limit), kicking the flusher with `kick` (T2: [`Passes::kick`] with
    /// its thread's start), until a pass ends with no progress, the cache
    /// stops or `bound` passes. Context: sleeps; the caller may hold pins
    /// and latches of pages (the flusher never waits for them).
    pub fn throttle(&self, over: impl Fn() -> bool, kick: impl Fn(), bound: Duration) -> Throttled {
        #[cfg(not(loom))]
        let deadline = std::time::Instant::now() + bound;
        #[cfg(loom)]
        let _ = bound;
        // T1, then T2 (the module docs say why in this order).
        let mut seen = self.state.lock().passes;
        kick();
        let mut st = self.state.lock();
        loop {
            if st.stop {
                return Throttled::Stopped;
            }
            if !over() {
                return Throttled::Under;
            }
            #[cfg(not(loom))]
            if std::time::Instant::now() >= deadline {
                return Throttled::Bound;
            }
            if st.passes != seen {
                seen = st.passes;
                if !st.progress {
                    return Throttled::NoProgress;
                }
                // Relaxed: under the lock (see the field).
                if !self.busy.load(Ordering::Relaxed) {
                    // Idle with the count still over: another round. `seen`
                    // was read before this kick (T1 before T2).
                    drop(st);
                    kick();
                    st = self.state.lock();
                    continue;
                }
            }
            st = self.pass_done.wait_for(st, Some(LOOK_EVERY));
        }
    }

    /// T1-T5 for a future: the same steps as [`Passes::throttle`], where
    /// T3's wait leaves the waker beside the threads' condition variable
    /// (woken by F3, write-back taking pages and the stop, under the same
    /// lock, so none is missed) and returns `Pending`; `at` holds `seen`
    /// and the bound's deadline between polls (`None` before the first).
    /// A wake-up that comes late is not covered by a timed look here (a
    /// future has no timer): F3 comes at the end of every pass the kick
    /// started. Context: no sleep but this leaf mutex (and `kick`).
    pub fn poll_throttle(
        &self,
        at: &mut Option<(u64, std::time::Instant)>,
        over: impl Fn() -> bool,
        kick: impl Fn(),
        bound: Duration,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Throttled> {
        use std::task::Poll;
        let (mut seen, deadline) = match *at {
            Some(a) => a,
            None => {
                // T1, then T2.
                let seen = self.state.lock().passes;
                kick();
                (seen, std::time::Instant::now() + bound)
            }
        };
        let mut st = self.state.lock();
        loop {
            if st.stop {
                return Poll::Ready(Throttled::Stopped);
            }
            if !over() {
                return Poll::Ready(Throttled::Under);
            }
            if std::time::Instant::now() >= deadline {
                return Poll::Ready(Throttled::Bound);
            }
            if st.passes != seen {
                seen = st.passes;
                if !st.progress {
                    return Poll::Ready(Throttled::NoProgress);
                }
                // Relaxed: under the lock (see the field).
                if !self.busy.load(Ordering::Relaxed) {
                    drop(st);
                    kick();
                    st = self.state.lock();
                    continue;
                }
            }
            if !st.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                st.wakers.push(cx.waker().clone());
            }
            *at = Some((seen, deadline));
            return Poll::Pending;
        }
    }

    /// Stops the flusher (F1 returns false) and wakes everyone; returns
    /// its thread to join. Context: no sleep but this leaf mutex.
    pub fn stop(&self) -> Option<JoinHandle<()>> {
        let (h, wakers) = {
            let mut st = self.state.lock();
            st.stop = true;
            (st.thread.take(), std::mem::take(&mut st.wakers))
        };
        self.work.notify_all();
        self.pass_done.notify_all();
        wakers.into_iter().for_each(std::task::Waker::wake);
        h
    }
}
