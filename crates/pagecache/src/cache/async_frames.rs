//! Protocol 5.9 F1's state: the cache's frame events (fills ending,
//! hand-offs taken, write-backs ending, the flusher's rounds) and the
//! queue of futures that found no frame and wait for one, with what the
//! flusher met meanwhile (its write-back errors, its hooks' deferrals)
//! for them to end their wait as a thread's reclaim would. The steps and
//! the handshake are in `cache/asynch.rs`'s block.

use super::Inner;
use crate::frame::FrameNo;
use crate::sync::waitq::{self, Registration};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::io;
use std::task::Waker;

/// A write-back error as F1 keeps it: kind, errno, message.
type WbError = (io::ErrorKind, Option<i32>, String);

/// F1's state: frame events and the futures waiting for one.
#[derive(Debug, Default)]
pub(crate) struct FrameEvents {
    /// (A) ends of fills and claims of hand-offs so far.
    events: AtomicU64,
    /// (A) a future registered (or is about to) on this queue.
    waiting: AtomicBool,
    /// (A) pins of completed reads not yet taken by their futures: frames
    /// that come back by themselves once those futures run. A hint, as
    /// `Inner::filling`.
    pub(crate) handed: crate::sync::unmodelled::AtomicUsize,
    /// The last write-back error (its kind, errno and message): what a
    /// future waiting for the flusher to clean frames
    /// reports when the flusher's writes fail (a thread's reclaim reports
    /// its own).
    wb_error: crate::sync::unmodelled::Mutex<Option<WbError>>,
    /// (A) write-back errors so far.
    wb_errors: crate::sync::unmodelled::AtomicU64,
    /// (A) pages the flusher's work for reclaim found deferred by their
    /// hooks so far.
    deferred: crate::sync::unmodelled::AtomicU64,
    /// (A) rounds of the flusher's loop so far.
    loops: crate::sync::unmodelled::AtomicU64,
    /// (A) rounds of the flusher's work for reclaim so far.
    rounds: crate::sync::unmodelled::AtomicU64,
}

impl FrameEvents {
    /// A write-back failed with `e`. Context: no sleep but a leaf mutex.
    pub(crate) fn note_wb_error(&self, e: &io::Error) {
        *self.wb_error.lock() = Some((e.kind(), crate::error::os_error(e), e.to_string()));
        // Release: the error is in place for a reader of the count.
        self.wb_errors.fetch_add(1, Ordering::Release);
    }

    /// The flusher ended a round of its loop (kicked, timed or idle): a
    /// future waiting while it was busy looks again. Context: no sleep.
    pub(crate) fn flusher_looked(&self) {
        // Relaxed: compared across polls only; `event` wakes.
        self.loops.fetch_add(1, Ordering::Relaxed);
        self.event();
    }

    pub(crate) fn loops(&self) -> u64 {
        // Relaxed: as above.
        self.loops.load(Ordering::Relaxed)
    }

    /// The flusher ended a round of work for reclaim (F1: a future waiting
    /// for it counts them). Context: no sleep.
    pub(crate) fn round_ended(&self) {
        // Relaxed: a count; `event` that follows orders the wake-up.
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.event();
    }

    /// The flusher's work for reclaim found `n` pages deferred by their
    /// hooks. Context: any.
    pub(crate) fn reclaim_deferred(&self, n: usize) {
        // Relaxed: compared across polls only; `round_ended` wakes.
        self.deferred.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn deferrals(&self) -> u64 {
        // Relaxed: as above.
        self.deferred.load(Ordering::Relaxed)
    }

    pub(crate) fn rounds(&self) -> u64 {
        // Relaxed: compared across polls only.
        self.rounds.load(Ordering::Relaxed)
    }

    /// Write-back errors so far.
    pub(crate) fn wb_errors(&self) -> u64 {
        // Acquire: pairs with `note_wb_error`.
        self.wb_errors.load(Ordering::Acquire)
    }

    /// The last write-back error, rebuilt, under `msg`.
    pub(crate) fn wb_error(&self, msg: String) -> io::Error {
        let base = match self.wb_error.lock().clone() {
            Some((_, Some(errno), m)) => {
                crate::error::context(io::Error::from_raw_os_error(errno), m)
            }
            Some((kind, None, m)) => io::Error::new(kind, m),
            None => io::Error::new(io::ErrorKind::OutOfMemory, "write-back failed"),
        };
        crate::error::context(base, msg)
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    /// Pins of completed reads waiting for their futures (`validate`).
    pub(crate) fn handed(&self) -> usize {
        // Relaxed: a snapshot for tests.
        self.handed.load(Ordering::Relaxed)
    }

    /// The count to hand to [`FrameEvents::wait`] (read before trying).
    pub(crate) fn seen(&self) -> u64 {
        // SeqCst: one side of the handshake with `event`.
        self.events.load(Ordering::SeqCst)
    }

    /// A fill ended or a hand-off was taken: frames may be evictable now.
    /// Context: no sleep (the queue's leaf lock when someone waits).
    pub(crate) fn event(&self) {
        // SeqCst (both): the count, then the flag; a waiter sets the flag,
        // then reads the count (F1's handshake).
        self.events.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) && self.waiting.swap(false, Ordering::SeqCst) {
            waitq::wake_all(self.key());
        }
    }

    /// Registers `waker` until the next event after `seen`; false if one
    /// came already (look again). Context: no sleep.
    pub(crate) fn wait(&self, seen: u64, reg: &mut Registration, waker: &Waker) -> bool {
        // SeqCst: see `event`.
        self.waiting.store(true, Ordering::SeqCst);
        waitq::register(reg, self.key(), waker, || {
            self.events.load(Ordering::SeqCst) == seen
        })
    }
}

impl FrameEvents {
    /// A hand-off's pin was taken by its future. Context: no sleep.
    pub(crate) fn claimed(&self) {
        // Relaxed: a hint (see the field).
        self.handed.fetch_sub(1, Ordering::Relaxed);
        self.event();
    }

    /// A completed read whose future was dropped: its pin (and with
    /// `latch` its latch; the page is up to date) go back, and the frame
    /// may be evicted. Context: no sleep.
    pub(crate) fn give_back(&self, c: &Inner, f: FrameNo, latch: bool) {
        if latch {
            c.desc(f).unlatch_uptodate();
        }
        c.release(f);
        self.claimed();
    }
}
