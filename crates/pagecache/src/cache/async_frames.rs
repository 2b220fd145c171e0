//! Protocol 5.9 F1's state: the cache's frame events (fills ending,
//! hand-offs taken, write-backs ending, the flusher's rounds) and the
//! queue of futures that found no frame and wait for one, with what the
//! flusher met meanwhile (its write-back errors, its hooks' deferrals)
//! for them to end their wait as a thread's reclaim would. The steps and
//! the handshake are in `cache/asynch.rs`'s block.

use super::{FileShared, Inner};
use crate::frame::FrameNo;
use crate::stats::Counter;
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

    fn loops(&self) -> u64 {
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

    fn deferrals(&self) -> u64 {
        // Relaxed: as above.
        self.deferred.load(Ordering::Relaxed)
    }

    fn rounds(&self) -> u64 {
        // Relaxed: compared across polls only.
        self.rounds.load(Ordering::Relaxed)
    }

    /// Write-back errors so far.
    fn wb_errors(&self) -> u64 {
        // Acquire: pairs with `note_wb_error`.
        self.wb_errors.load(Ordering::Acquire)
    }

    /// The last write-back error, rebuilt, under `msg`.
    fn wb_error(&self, msg: String) -> io::Error {
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
    fn seen(&self) -> u64 {
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

/// F1: rounds of the flusher's work for reclaim (dirty pages reclaim
/// passed it) writing nothing (every such page deferred by its hook)
/// before a future waiting for a frame gives up as a thread's reclaim does
/// (`OutOfMemory`); the first may have begun before the future's pages
/// were handed over.
const NO_WRITE_ROUNDS: u64 = 2;

/// Counts read before a try for a frame (F1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before {
    /// Frame events (for [`FrameEvents::wait`]).
    pub(crate) seen: u64,
    /// Write-back errors.
    errors: u64,
    /// Hook deferrals of the flusher's work for reclaim.
    deferrals: u64,
}

/// What the flusher had done at one look (F1).
#[derive(Debug, Clone, Copy)]
struct Since {
    errors: u64,
    written: u64,
    rounds: u64,
    deferrals: u64,
}

/// A future's wait for a frame (F1): what the flusher had done when the
/// wait began (or pages were last written), the flusher's loop count when
/// the future began to wait for it while it was busy, and the write-back
/// error count before the first try (never reset while the future waits).
#[derive(Debug, Default)]
pub(crate) struct FrameWait {
    since: Option<Since>,
    busy_since: Option<u64>,
    first_errors: Option<u64>,
}

/// F1's verdict on a try that found no frame.
#[derive(Debug)]
pub(crate) enum NoFrame {
    /// Look the page up and try again now.
    Retry,
    /// Wait for the next frame event.
    Wait,
    /// Poll again after the executor's other tasks (another reclaimer or
    /// a truncate ends in a moment, with no event).
    Yield,
    /// The blocking path's answer.
    Fail(io::Error),
}

impl FrameEvents {
    /// The counts F1 reads before a try. Context: any.
    pub(crate) fn before_try(&self) -> Before {
        Before {
            seen: self.seen(),
            errors: self.wb_errors(),
            deferrals: self.deferrals(),
        }
    }
}

impl Inner {
    /// F1 after `try_insert` found no frame (`e`, reclaim's
    /// `OutOfMemory`) for page `index` of `fs`; `before` was read before
    /// the try. Context: no sleep (a look at every frame's state word).
    pub(crate) fn no_frame(
        &self,
        w: &mut FrameWait,
        before: Before,
        e: io::Error,
        fs: &FileShared,
        index: u64,
    ) -> NoFrame {
        let write_failed = |c: &Inner| {
            c.async_frames.wb_error(format!(
                "{}: page {index}: no frame free: every evictable page is dirty and \
                 writing it back failed",
                fs.path.display()
            ))
        };
        // Relaxed: hints (frames that come back by themselves); a stale
        // non-zero costs one wait until the next event.
        let mut in_flight = self.filling_now() + self.async_frames.handed.load(Ordering::Relaxed);
        // As reclaim's last look: some page evictable (dirty: this
        // thread's reclaim passed every dirty one to the flusher), or
        // frames on their way back (a write-back in flight, a read, a
        // frame between its last release and the pool).
        let (evictable, moving) = self.outlook_now();
        // What the flusher did since the wait began: its writes failed
        // with none succeeding (the blocking path's error: the last
        // write-back error); the hooks kept pages it took for reclaim
        // dirty (a thread's reclaim would have met the same deferrals and
        // given up: `OutOfMemory`); rounds of its work for reclaim wrote
        // nothing; or pages were written (look again).
        let now = Since {
            errors: self.async_frames.wb_errors(),
            written: self.counters.sum(Counter::Writebacks),
            rounds: self.async_frames.rounds(),
            deferrals: self.async_frames.deferrals(),
        };
        match w.since {
            Some(s) if now.deferrals > s.deferrals => {
                return NoFrame::Fail(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "{}: page {index}: no frame free: the dirty pages that could be \
                         evicted were deferred by their files' write-back hooks (make the \
                         log durable, then retry)",
                        fs.path.display()
                    ),
                ));
            }
            Some(s) if now.written == s.written && now.errors > s.errors => {
                return NoFrame::Fail(write_failed(self));
            }
            // ... unless frames are on their way back (a write-back in
            // flight, a frame between its last release and the pool):
            // those end by themselves, with a frame event, as a thread's
            // reclaim waits for them however long the device takes. (Under
            // oversubscription the flusher's rounds can pass while the
            // writes it started are still in flight: 48 tasks on a 24-frame
            // cache, `async_never_blocks`' mixed test, failed this way in 3
            // of 180 runs, three at once beside four CPU hogs; 0 of 180
            // with this condition.)
            Some(s)
                if now.written == s.written
                    && now.rounds >= s.rounds + NO_WRITE_ROUNDS
                    && !moving =>
            {
                return NoFrame::Fail(e);
            }
            Some(s) if now.written == s.written => {}
            Some(_) => {
                // Pages were written since: look again.
                w.since = Some(now);
                return NoFrame::Retry;
            }
            None => {
                // The first look: errors and deferrals from before this
                // try count (its dirty victims went to the flusher during
                // it).
                w.since = Some(Since {
                    errors: before.errors,
                    deferrals: before.deferrals,
                    ..now
                });
                w.first_errors.get_or_insert(before.errors);
                if now.errors > before.errors || now.deferrals > before.deferrals {
                    return NoFrame::Retry;
                }
            }
        }
        // Dirty pages nobody holds (reclaim queued them for the flusher
        // and kicked it), or frames on their way back: the next frame
        // event says when to look again. So does the flusher at work (its
        // write-back pins make frames neither evictable nor on their way
        // back for a moment), for two rounds of its loop at most.
        if evictable || moving {
            in_flight += 1;
        } else if self.flusher_busy() {
            let loops = self.async_frames.loops();
            let l0 = *w.busy_since.get_or_insert(loops);
            if loops < l0 + 2 {
                in_flight += 1;
            }
        }
        if in_flight > 0 {
            return NoFrame::Wait;
        }
        // Other reclaimers holding candidates, truncates freeing frames:
        // they end in a moment, with no event to wait for (a patient
        // thread waits for them in reclaim). RMW reads: the latest counts,
        // as reclaim reads them.
        if self.in_flight_latest(&self.words.reclaiming)
            || self.in_flight_latest(&self.words.freeing)
        {
            return NoFrame::Yield;
        }
        // Write-backs failed while the future waited (the flusher's, of
        // the dirty victims it was passed): the frames stayed dirty
        // because of them, and a thread's reclaim would report its own
        // such failure.
        if self.async_frames.wb_errors() > w.first_errors.unwrap_or(before.errors) {
            return NoFrame::Fail(write_failed(self));
        }
        NoFrame::Fail(e)
    }
}
