//! Protocol 5.9: asynchronous waits. The misses of 5.3 and the latch
//! waits of 5.1 and 5.5 for a caller that must not block its thread (a
//! future on an async runtime, a C event loop): where a thread would park,
//! a future leaves its waker where the thread that ends the wait will find
//! it, and returns `Pending`.
//!
//! ```text
//!  future (GetPage::poll)                   completer (any thread)
//!  L. 5.1 steps 1-3 once (pin_as)
//!     hit -> Ready (no allocation)
//!     latched -> A1; miss -> M1
//!  A1. load the state (Acquire): not
//!      LATCHED, or not our page any more
//!      -> cancel, retry from L
//!  A2. CAS AWAITERS into the word (on
//!      the state A1 saw; failure -> A1)     C1. the RMW that clears LATCHED
//!  A3. lock the queue's bucket (key: the        clears AWAITERS too, and
//!      descriptor); re-check under it          returns the word before
//!      LATCHED && AWAITERS && identity;     C2. AWAITERS was set -> lock the
//!      yes -> leave (or refresh) the            bucket, take every waker of
//!      waker, Pending; no -> retry from L       the key, unlock, wake them
//!
//!  M1. 5.3 steps 1-2 without waiting for
//!      a frame (try_insert, impatient); no
//!      frame while reads are in flight or
//!      pages are handed over -> F1
//!  M2. a hand-off slot holding the waker;
//!      queue one read of the page (the
//!      engine; with io_uring not yet
//!      submitted: wake ourselves), Pending
//!  M2'. polled again (the executor ran its
//!      other ready tasks, which queued
//!      theirs): submit every queued read
//!      with one enter, unless an enter
//!      since did                            H1. the read's completion: 5.3
//!                                              step 4 (complete_fill); a
//!                                              reader's page is unlatched
//!                                              (C1-C2 for others waiting);
//!  M3. lock the slot: a result -> take it,     lock the slot: the future was
//!      Ready (the pin, and for page_mut        dropped -> give the pin (and
//!      the latch, are ours now); none ->       latch) back; else leave the
//!      refresh the waker, Pending              result, take the waker,
//!                                              unlock, wake
//!  W. page_mut: latched -> drain as a
//!     future (DRAIN, its queue); then 5.7
//!     W2-W3 as a future (`poll_run_pins`:
//!     W3's extra pin, the slot's waiter
//!     bit, fence, re-check, the waker on
//!     the slot's key; R4 wakes it), then
//!     drain again if it waited
//!  D. drop: registered -> remove our entry
//!     (a wake may have taken it: nothing
//!     to do); queued -> submit (M2');
//!     reading -> lock the slot,
//!     mark it dropped, give back a result
//!     already there; draining or waiting
//!     for runs (page_mut) -> W3's extra
//!     pin, then unlatch, unpin (DRAIN
//!     cleared)
//! ```
//!
//! Why no wake-up is lost (A against C): A2 and C1 are RMWs of one word.
//! If C1 comes first, A2's CAS fails (it expected `LATCHED`), or A1 sees
//! the latch gone. If A2 comes first, C1 sees `AWAITERS` and C2 takes the
//! bucket's lock: after A3's unlock, it finds the waker; before A3's lock,
//! its RMW happens-before A3's re-check (unlock-lock order), which then
//! reads `LATCHED` or `AWAITERS` clear (or a later latch, whose own C1
//! will see the bit A3 saw) and retries. The same two sides as parking
//! (`FrameDesc::wait_clear`), with the waker in place of the thread: the
//! model `async_waiter_vs_completion` (`tests/loom.rs`) fails without A3's
//! re-check.
//!
//! Why a dropped future strands nothing (D against H1): the slot's mutex
//! orders them. H1 first: D finds the result and gives its pin back. D
//! first: H1 finds `dropped` and gives the pin back itself. Either way the
//! read's frame ends cached and unpinned (or removed, on error), and the
//! other waiters of the page were woken by C1-C2, not by the dropped
//! future. A dropped waiter's entry (A3) is removed, or already taken by a
//! wake-up that then wakes a future that no longer exists (wakers allow
//! it). So dropping a future at any await point leaks no pin, latch or
//! frame (`async_drop_vs_completion`, `tests/async_cancel.rs`).
//!
//! Submission (M2-M2'): a miss's read is queued in the ring and its
//! future wakes itself; executors run the other ready tasks before
//! polling it again, so the reads a round of tasks starts go to the kernel
//! with one `io_uring_enter` and one device notification (on this
//! machine's virtio disk a notification costs more CPU than the rest of a
//! read). Any enter after the queueing submits it (a blocking submission,
//! another future's flush). A future that is never polled again still has
//! its read go out: a reaper waiting with nothing in flight (no timeout)
//! is seen by the queueing submitter, which then enters at once (the
//! reaper sets `idle`, then reads the in-flight count; the submitter
//! counts, then reads `idle`: both `SeqCst`, so one sees the other);
//! otherwise the reaper waits at most `BATCH_WAIT` (500 us) at a time
//! and submits entries it has seen queued for `BATCH_WAIT` with no enter
//! since: an entry goes out within about 1 ms of its queueing. A dropped
//! future submits it (its page stays latched until the read ends). The
//! reaper submits nothing sooner: taking entries at every completion took
//! a round's reads one by one.
//!
//! Completions (H1) run on whichever thread reaps them: the reaper thread,
//! which waits in the kernel for them, or a future's poll that finds its
//! read still pending (`Engine::reap_now`: a try-lock of the completion
//! queue, then every completion posted), so a runtime thread that is
//! awake takes its tasks' completions without waiting for the reaper to be
//! scheduled; a completion that would go on with blocking calls (a short
//! transfer, a refused `O_DIRECT` read) goes to the thread pool instead.
//! The reaper stays as the fallback for a runtime thread asleep.
//!
//! Frames (F1): a future that finds no frame does not wait in reclaim (a
//! thread would; its frames may be pinned by completions handed to
//! futures of its own thread, which only it can poll). While reads are in
//! flight or completed pins wait for their futures, it registers on the
//! cache's frame queue with the count of frame events it saw before
//! trying; every end of a fill and every claim of a hand-off bumps the
//! count (SeqCst) and then wakes the queue if a waiter set the flag
//! (SeqCst, before its re-check): a Dekker handshake, so one of the two
//! sees the other. While other reclaimers hold candidates or a truncate
//! frees frames (no event marks their end) it yields (wakes itself and
//! returns `Pending`). With nothing of that under way, the error is the
//! blocking path's `OutOfMemory` (every frame pinned or latched by its
//! holders, which a future holding a page across an await is).
//!
//! A future's reclaim writes no dirty victim back (`DeferDirty`): every
//! dirty candidate goes to the flusher. Finding no frame, the future
//! looks as reclaim's last look does (`outlook_now`): pages evictable but
//! dirty, or frames on their way back, or the flusher at work (for two
//! rounds of its loop at most), it waits for frame events (the flusher's
//! rounds, write-backs ending, fills ending, hand-offs taken). What the
//! flusher met since the wait began ends it as the blocking path would
//! end: its writes failing with none succeeding, the last write-back
//! error; the hooks deferring pages it took for reclaim, `OutOfMemory`;
//! two rounds of its work for reclaim writing nothing with no write-back
//! still in flight, `OutOfMemory`.
//! Nothing evictable and nothing on its way back: `OutOfMemory`, or the
//! last write-back error if write-backs failed while it waited.
//!
//! No poll blocks its thread (checked: in debug builds every blocking
//! wait calls `sync::may_block`, which panics inside a poll of the
//! crate's futures). The other waits a future meets are registrations
//! too: the dirty throttle (`Passes::poll_throttle`: the waker beside the
//! throttled threads' condition variable), the size lock of a write
//! (`SizeLock::poll_read`: taken within one poll, never held across one;
//! refused, the waker waits on the phase's key), and `sync_async`, whose
//! write-back runs on the cache's helper threads (`cache/helpers.rs`).

use super::miss::Fill;
use super::{FileShared, Inner};
use crate::frame::state::PinFail;
use crate::frame::FrameNo;
use crate::io::engine::Ticket;
use crate::stats::Counter;
use crate::sync::waitq::{self, Registration};
use crate::sync::{Mutex, Ordering};
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use super::async_frames::{FrameWait, NoFrame};
use super::PinMiss;

/// Frozen-frame retries before waiting for the remover on the tree lock
/// (as `lookup.rs`).
const SPIN_RETRIES: u32 = 4;

/// A value handed from a completion to the future that waits for it
/// (M2-M3, H1, D): a mutex, so "completed" and "dropped" are ordered.
#[derive(Debug)]
pub(crate) struct Handoff<T> {
    slot: Mutex<Slot<T>>,
}

#[derive(Debug)]
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    dropped: bool,
}

impl<T> Handoff<T> {
    /// An empty slot that wakes `waker` when completed.
    pub(crate) fn new(waker: &Waker) -> Arc<Handoff<T>> {
        Arc::new(Handoff {
            slot: Mutex::with_class(
                Slot {
                    value: None,
                    waker: Some(waker.clone()),
                    dropped: false,
                },
                crate::sync::LockClass::AsyncWaitQueue,
            ),
        })
    }

    /// H1: leaves `v` for the future and wakes it; returns `v` back if the
    /// future was dropped (the caller disposes of it). Context: no sleep.
    pub(crate) fn complete(&self, v: T) -> Option<T> {
        let mut g = self.slot.lock();
        if g.dropped {
            return Some(v);
        }
        g.value = Some(v);
        let w = g.waker.take();
        drop(g);
        if let Some(w) = w {
            w.wake();
        }
        None
    }

    /// M3: the value if it is there, else the waker refreshed.
    pub(crate) fn poll(&self, waker: &Waker) -> Poll<T> {
        let mut g = self.slot.lock();
        if let Some(v) = g.value.take() {
            return Poll::Ready(v);
        }
        match &g.waker {
            Some(w) if w.will_wake(waker) => {}
            _ => g.waker = Some(waker.clone()),
        }
        Poll::Pending
    }

    /// D: the future is dropped; returns a value completed and not taken
    /// (the caller disposes of it). Context: no sleep.
    pub(crate) fn cancel(&self) -> Option<T> {
        let mut g = self.slot.lock();
        g.dropped = true;
        g.waker = None;
        g.value.take()
    }
}

/// Where a [`GetPage`] is.
#[derive(Debug)]
enum St {
    /// L: look the page up (again).
    Look,
    /// M2-M3: our read of the page is in flight (or queued: the ticket
    /// to submit it with on the next poll, `Engine::submit_batched`).
    Read(Arc<Handoff<io::Result<FrameNo>>>, Option<Ticket>),
    /// `page_mut`: latched and pinned, waiting for older pins to drain.
    Drain(FrameNo),
    /// `page_mut`: latched, pinned and drained, waiting for runs over the
    /// page to go (5.7 W3); with W3's extra reference once taken.
    Runs(FrameNo, bool),
    /// Returned its page (or error).
    Done,
}

/// The one future behind the asynchronous page calls: a pinned page
/// (unlatched), or with `latch` a pinned, latched and drained one (5.5
/// steps 1-2), reading it on a miss. Poll it with the cache and file it
/// was made for; [`GetPage::cancel`] must run if it is dropped unfinished.
#[derive(Debug)]
pub(crate) struct GetPage {
    index: u64,
    latch: bool,
    /// With `latch`: a missing page is not read (the caller overwrites
    /// every byte), as `get_page_latched`'s `overwrite`.
    overwrite: bool,
    st: St,
    reg: Registration,
    retries: u32,
    /// F1: what the flusher did since this future began to wait for a
    /// frame.
    frames: FrameWait,
}

impl GetPage {
    pub(crate) fn new(index: u64, latch: bool) -> GetPage {
        GetPage {
            index,
            latch,
            overwrite: false,
            st: St::Look,
            reg: Registration::default(),
            retries: 0,
            frames: FrameWait::default(),
        }
    }

    /// A latched page for a writer of all of it: a miss reads nothing.
    pub(crate) fn overwrite(index: u64) -> GetPage {
        GetPage {
            overwrite: true,
            ..GetPage::new(index, true)
        }
    }

    /// The page it gets.
    #[inline]
    pub(crate) fn index(&self) -> u64 {
        self.index
    }

    /// Whether it still holds or waits for something (the caller's drop
    /// must call [`GetPage::cancel`]).
    #[inline]
    pub(crate) fn is_live(&self) -> bool {
        !matches!(self.st, St::Look | St::Done) || self.reg.is_registered()
    }

    /// L, then A1-A3 / M1-M3 as needed. Ready with the frame pinned (and
    /// latched and drained with `latch`; a reader's page up to date), or
    /// with the error a blocking call would return.
    /// Context: no sleep.
    #[inline]
    pub(crate) fn poll(
        &mut self,
        c: &Inner,
        fs: &Arc<FileShared>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<FrameNo>> {
        // A hit, first time round: 5.1 once, no waiting, nothing stored.
        if matches!(self.st, St::Look) && !self.latch && !self.reg.is_registered() {
            if let Some(f) = c.find_get_fast(fs, self.index) {
                c.count(Counter::Hits);
                self.st = St::Done;
                return Poll::Ready(Ok(f));
            }
        }
        self.poll_slow(c, fs, cx)
    }

    #[inline(never)]
    fn poll_slow(
        &mut self,
        c: &Inner,
        fs: &Arc<FileShared>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<FrameNo>> {
        let index = self.index;
        loop {
            match &self.st {
                St::Done => {
                    return Poll::Ready(Err(io::Error::other(format!(
                        "{}: page {index}: future polled after it completed",
                        fs.path.display()
                    ))))
                }
                St::Read(h, ticket) => {
                    if let Some(t) = *ticket {
                        // Polled again after the executor's other ready
                        // tasks queued their reads: submit them all.
                        c.engine.flush(t);
                        let h = h.clone();
                        self.st = St::Read(h, None);
                        continue;
                    }
                    // Completions posted, ours among them perhaps: run
                    // them here rather than wait for the reaper.
                    c.engine.reap_now();
                    let r = match h.poll(cx.waker()) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(r) => r,
                    };
                    self.st = St::Done;
                    if r.is_ok() {
                        c.async_frames.claimed();
                    }
                    return Poll::Ready(r);
                }
                St::Drain(f) => {
                    let f = *f;
                    let d = c.desc(f);
                    if !d.poll_drained(&mut self.reg, cx.waker()) {
                        return Poll::Pending;
                    }
                    self.st = St::Runs(f, false);
                }
                St::Runs(f, extra) => {
                    // 5.7 W2-W3: a run may be reading it.
                    let (f, mut extra) = (*f, *extra);
                    let r = c.poll_run_pins(fs, index, f, &mut extra, &mut self.reg, cx.waker());
                    self.st = St::Runs(f, extra);
                    match r {
                        Poll::Pending => return Poll::Pending,
                        // No run: drained before, unless W3 waited (then
                        // write-back pins may have come: drain again).
                        Poll::Ready(Some(false)) => {
                            self.st = St::Done;
                            return Poll::Ready(Ok(f));
                        }
                        Poll::Ready(Some(true)) => self.st = St::Drain(f),
                        Poll::Ready(None) => {
                            c.desc(f).unlatch();
                            c.release(f);
                            self.st = St::Look;
                        }
                    }
                }
                St::Look => {
                    if let Some(p) = self.look(c, fs, cx) {
                        return p;
                    }
                    self.retries += 1;
                    c.count(Counter::LookupRetries);
                    crate::sync::retry_point();
                }
            }
        }
    }

    /// L and what follows it; `None`: retry from L.
    fn look(
        &mut self,
        c: &Inner,
        fs: &Arc<FileShared>,
        cx: &mut Context<'_>,
    ) -> Option<Poll<io::Result<FrameNo>>> {
        let index = self.index;
        let Some(f) = fs.tree.lookup(&c.nodes, index) else {
            return self.miss(c, fs, cx);
        };
        match c.pin_as(f, fs.id, index) {
            Ok(f) => {
                waitq::cancel(&mut self.reg);
                c.count(Counter::Hits);
                if !self.latch {
                    self.st = St::Done;
                    return Some(Poll::Ready(Ok(f)));
                }
                // 5.5 step 1 as `latch_pinned`, without waiting.
                let d = c.desc(f);
                if !d.try_latch() {
                    c.release(f);
                    return d
                        .poll_unlatched_as(fs.id, index, &mut self.reg, cx.waker())
                        .then_some(Poll::Pending);
                }
                if d.snapshot().is_removed() {
                    d.unlatch();
                    c.release(f);
                    return None;
                }
                self.st = St::Drain(f);
                None
            }
            Err(PinMiss::Stale) if f as usize >= c.frames.len() => self.miss(c, fs, cx),
            Err(PinMiss::Stale) => {
                if self.retries >= SPIN_RETRIES {
                    // A page whose remover died half-way (5.6 step 4).
                    c.finish_removal(fs, index, f);
                }
                None
            }
            Err(PinMiss::Fail(PinFail::Free)) => {
                if self.retries >= SPIN_RETRIES {
                    // The remover holds the tree lock until the slot is
                    // cleared: a short wait, as the blocking lookup's.
                    drop(fs.tree.lock());
                }
                None
            }
            // A1-A3.
            Err(PinMiss::Fail(PinFail::Latched)) => c
                .desc(f)
                .poll_unlatched_as(fs.id, index, &mut self.reg, cx.waker())
                .then_some(Poll::Pending),
            Err(PinMiss::Fail(PinFail::Overflow)) => Some(Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: page {index}: too many pins on one page",
                    fs.path.display()
                ),
            )))),
        }
    }

    /// M1-M2 (and F1); `None`: retry from L.
    fn miss(
        &mut self,
        c: &Inner,
        fs: &Arc<FileShared>,
        cx: &mut Context<'_>,
    ) -> Option<Poll<io::Result<FrameNo>>> {
        let index = self.index;
        let before = c.async_frames.before_try();
        // No dirty victim written back on this thread: its write would
        // block the executor (F1: the flusher writes them).
        let defer = super::evict::DeferDirty::new();
        let got = c.try_insert(fs, index, false);
        drop(defer);
        let f = match got {
            Ok(Some(f)) => f,
            Ok(None) => return None, // another's page: look it up
            Err(e) if e.kind() == io::ErrorKind::OutOfMemory => {
                return match c.no_frame(&mut self.frames, before, e, fs, index) {
                    NoFrame::Retry => None,
                    NoFrame::Fail(e) => Some(Poll::Ready(Err(e))),
                    NoFrame::Yield => {
                        cx.waker().wake_by_ref();
                        Some(Poll::Pending)
                    }
                    NoFrame::Wait => c
                        .async_frames
                        .wait(before.seen, &mut self.reg, cx.waker())
                        .then_some(Poll::Pending),
                };
            }
            Err(e) => return Some(Poll::Ready(Err(e))),
        };
        waitq::cancel(&mut self.reg);
        self.frames = FrameWait::default();
        if self.overwrite {
            // Inserted latched, not up to date: the writer fills every
            // byte (as `get_page_latched` with `overwrite`).
            self.st = St::Done;
            return Some(Poll::Ready(Ok(f)));
        }
        // Relaxed: a hint for reclaim (as `insert_run`).
        c.own(&c.words.filling).fetch_add(1, Ordering::Relaxed);
        let fill = c.begin_fill(fs, index, f);
        let latch = self.latch;
        let me = c.me.get().and_then(std::sync::Weak::upgrade);
        let (Some(_), Some(me)) = (fill.read_offset(c.shift), me) else {
            // Past end of file (zeros), or the cache is going away (its
            // engine with it): no read to wait for.
            let res = c.read_fill(fs, &fill);
            let r = c.complete_fill(fs, fill, res);
            c.fills_ended(1);
            self.st = St::Done;
            if r.is_ok() && !latch {
                c.desc(f).unlatch_uptodate();
            }
            return Some(Poll::Ready(r.map(|()| f)));
        };
        let h = Handoff::new(cx.waker());
        let (done, file) = (h.clone(), fs.clone());
        let op = c.fill_op(fs, fill, move |fill, res| {
            // H1. 5.3 step 4: on error the page leaves the index, unlatched.
            let r = me.complete_fill(&file, fill, res).map(|()| fill.frame);
            drop(file);
            if r.is_ok() && !latch {
                me.desc(fill.frame).unlatch_uptodate();
            }
            // Handed over before the fill's end is counted: frames in
            // flight never read as none while a pin waits for its future.
            if r.is_ok() {
                me.async_frames.handed.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(Ok(f)) = done.complete(r) {
                me.async_frames.give_back(&me, f, latch);
            }
            me.fills_ended(1);
        });
        let ticket = c.engine.submit_batched(vec![op]);
        if ticket.is_some() {
            // Queued, not submitted: poll again once the executor has run
            // the other ready tasks (their misses queue theirs).
            cx.waker().wake_by_ref();
        }
        self.st = St::Read(h, ticket);
        Some(Poll::Pending)
    }

    /// D: gives back whatever the future holds or waits for. Context: no
    /// sleep. Idempotent.
    pub(crate) fn cancel(&mut self, c: &Inner) {
        waitq::cancel(&mut self.reg);
        match std::mem::replace(&mut self.st, St::Done) {
            St::Read(h, ticket) => {
                // A queued read must still be submitted: its page is
                // latched until it completes.
                if let Some(t) = ticket {
                    c.engine.flush(t);
                }
                if let Some(Ok(f)) = h.cancel() {
                    c.async_frames.give_back(c, f, self.latch);
                }
            }
            St::Drain(f) | St::Runs(f, false) => {
                // DRAIN is cleared with the latch (`unlatch_release`).
                if c.desc(f).unlatch_release() == crate::frame::state::Released::Last {
                    c.free_frame(f);
                }
            }
            St::Runs(f, true) => {
                // W3's extra reference, then as above.
                let r = c.desc(f).release();
                debug_assert_eq!(r, crate::frame::state::Released::Alive);
                if c.desc(f).unlatch_release() == crate::frame::state::Released::Last {
                    c.free_frame(f);
                }
            }
            St::Look | St::Done => {}
        }
    }
}

impl Inner {
    /// The end of `n` fills (read or failed, unlatched or handed over):
    /// reclaim's count, and F1's event. Context: no sleep.
    pub(crate) fn fills_ended(&self, n: usize) {
        // Release: the pages are unlatched; pairs with `wait_runs`.
        self.own(&self.words.filling)
            .fetch_sub(n, Ordering::Release);
        self.async_frames.event();
    }

    /// An asynchronous read of one latched page whose fill began
    /// (`begin_fill`), completed by `done` on the engine's thread.
    pub(crate) fn fill_op(
        &self,
        fs: &FileShared,
        fill: Fill,
        done: impl FnOnce(Fill, io::Result<usize>) + Send + 'static,
    ) -> crate::io::engine::Op {
        let run = super::batch::Run::one(fill);
        self.run_op(fs, run, false, move |run, res| done(run.first(), res))
    }
}
