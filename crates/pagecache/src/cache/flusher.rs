//! Background write-back and dirty throttling, in the kernel's style
//! (`balance_dirty_pages`, the flusher threads), scaled down to one cache.
//!
//! - The cache counts its dirty pages (`Inner::dirty`): +1 when a page
//!   becomes dirty (a write unlatches a clean page, a failed write-back
//!   re-dirties one), -1 when it stops being dirty (write-back starts, a
//!   truncate or discard drops it). Each transition is one RMW on the page's
//!   state word, so each is counted once.
//! - Which pages it writes, and when (numbered block below): by age (a
//!   page dirty longer than `Config::dirty_expire`), by need (reclaim's
//!   cold end), and past the hard limit; never the hot set just because
//!   much is dirty. At most 8 MiB and 16 writes are in flight
//!   (`writeback/`). A pass resumes each file where its last pass
//!   stopped (the kernel's `writeback_index`) and goes through the files
//!   dirtied longest ago first (the kernel's `dirtied_when` order).
//!
//! ```text
//!  W1. age: every `dirty_expire`/6 (10 ms to 5 s), a pass writes every
//!      page dirtied at or before now - `dirty_expire` (its descriptor's
//!      clean-to-dirty time), whatever else is going on. A page rewritten
//!      again and again is written once per bound.
//!  W2. need: reclaim evicts clean candidates first and hands the flusher
//!      the dirty ones it passed over (the cold end of the replacement
//!      order, a batch per reclaim round; `kick_flusher_for_reclaim`),
//!      written at once, in index order, batched per file; a reclaimer
//!      whose round found only dirty candidates writes its victim with
//!      its cold dirty neighbours itself (`evict.rs`).
//!  W3. the hard limit (`dirty_limit_percent`): a pass writes cold pages
//!      (accessed bit clear: not used since the policy last looked; or
//!      past the age bound), then any, down to `dirty_background_percent`;
//!      throttled writers wait for it (below).
//!  W4. nothing else: with the count under the hard limit, a page is
//!      written by age, for eviction, or by `sync`. A cache that holds its
//!      working set writes what `sync` asks for and what ages past the
//!      bound; out of memory, a page is written about once per eviction.
//!      The one exception is a long sequential write stream past the
//!      background threshold: its pages are written behind it and
//!      dropped (`write_behind.rs`, B1-B4), since no one rewrites them.
//! ```
//!
//! Writing ahead of need was tried and dropped: a pass that wrote cold
//! pages (accessed bit clear) whenever reclaim ran and more than the
//! background threshold was dirty wrote TPC-C's stock pages, which the
//! next transactions dirtied again before their eviction: 3.2-4.9 pages
//! written per page evicted, 1.18 without it.
//!
//! The policy only chooses pages: each write is the write-back protocol
//! of `writeback/` (the tag taken under the tree lock, pinned, the hook
//! asked, errors counted), so sync's truth, write-back errors and the hook
//! hold whatever the flusher picks. A `sync` writes every dirty page.
//!
//! - Past the hard limit (`Config::dirty_limit_percent`) a `write_at`
//!   waits, before taking any lock, until write-back brings the count back
//!   under it (it wakes waiting writers as soon as the pages it takes do,
//!   not at the end of a pass), a pass writes nothing (a failing disk, or
//!   a hook that defers every page, must not hang writers), or 2 s pass.
//!   The handshake of kicks, passes and these waits is `passes.rs`.
//!   `page_mut` is throttled the same way. Its callers may hold other
//!   latches (a `PageMut` of another page), and so may a `write_at`'s, so
//!   the flusher never waits for a latch: it puts such a page's dirty tag
//!   back and goes on (`write_dirty`), and a pass that could write nothing
//!   releases the throttled writers.
//! - A write-back error of the flusher is counted in `Stats` (and in the
//!   file's `wb_undone`, for a `sync` running meanwhile); the
//!   pages stay dirty.
//! - The thread starts the first time it is needed and stops (joined) when
//!   the cache's last handle drops, before the I/O engine stops.

// Under loom there is no flusher thread (models drive write-back directly).
#![cfg_attr(loom, allow(dead_code, unused_imports))]

use crate::cache::Inner;
use crate::reclaim::passes::Passes;
use crate::sync::unmodelled::{Mutex, Ordering};
use std::time::Duration;

/// Longest a throttled writer waits for the flusher (per `write_at`):
/// throttling slows writers down, it must never hang one.
const THROTTLE_MAX: Duration = Duration::from_secs(2);

/// The background flusher of one cache.
#[derive(Debug, Default)]
pub(crate) struct Flusher {
    /// Kicks, passes and throttled writers' waits (`passes.rs`).
    passes: Passes,
    /// (A) writers waiting in `throttle` right now.
    throttled: crate::sync::unmodelled::AtomicUsize,
    /// The dirty pages reclaim passed over since the flusher last looked
    /// (frames; checked again when written): the flusher writes them, below
    /// the background threshold too. Bounded (`RECLAIM_MAX`): past it,
    /// reclaim writes its dirty victims itself.
    for_reclaim: Mutex<Vec<crate::frame::FrameNo>>,
    /// Pages behind long write streams to write at once, by file
    /// (`write_behind.rs` B2-B3): each batch counted in its stream's
    /// `pending` until written.
    pub(crate) behind: Mutex<
        Vec<(
            std::sync::Arc<crate::cache::registry::FileShared>,
            Vec<crate::frame::FrameNo>,
        )>,
    >,
    /// (A) The thread was started (the first dirty page starts it, for W1).
    started: crate::sync::unmodelled::AtomicBool,
}

/// Milliseconds of the coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`,
/// a few nanoseconds, a few milliseconds' resolution): pages' dirty times.
/// Context: any.
#[inline]
pub(crate) fn now_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is valid on
    // every Linux since 2.6.32 (on failure `ts` stays 0: every page then
    // looks old, written at the next age pass, which is safe).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Most pages reclaim hands the flusher at once.
const RECLAIM_MAX: usize = 4096;

impl Inner {
    /// A page became dirty. Context: any, no sleep but the flusher's
    /// leaf mutex when the hard limit is crossed (W3) or the flusher has
    /// yet to start (W1).
    #[inline]
    pub(crate) fn dirtied(&self) {
        // Relaxed: a count for thresholds, not a protocol.
        let n = self.words.dirty.fetch_add(1, Ordering::Relaxed) + 1;
        // Relaxed: hints; a kick too many costs a look.
        if n > self.dirty_limit as isize || !self.flusher.started.load(Ordering::Relaxed) {
            // SeqCst: Dekker's pattern with the flusher going idle
            // (`Passes::wait_kick_for`: it clears `busy`, fences, and looks
            // at the count): either it sees our count past the limit, or
            // we see `busy` clear and kick. Without it, a writer that
            // crossed the limit while the flusher finished a pass that
            // had seen the count under it left the pages for the next
            // writer (a test waited 20 s for a pass that never came).
            crate::sync::fence(crate::sync::Ordering::SeqCst);
            if !self.flusher.passes.busy() {
                self.kick_flusher();
            }
        }
    }

    /// A failed write-back made a page dirty again: counted like
    /// [`Inner::dirtied`] but without waking the flusher. Context: any.
    #[inline]
    pub(crate) fn redirtied(&self) {
        // Relaxed: as `dirtied`.
        self.words.dirty.fetch_add(1, Ordering::Relaxed);
    }

    /// A page of `fs` became dirty: unless the file has a dirty time
    /// already, it gets the next one (the kernel's `inode->dirtied_when`;
    /// the flusher writes files oldest-dirtied first). Context: any, no
    /// sleep.
    #[inline]
    pub(crate) fn file_dirtied(&self, fs: &crate::cache::registry::FileSlot) {
        // Relaxed: an order for the flusher, which also writes files that
        // have none (last), so a lost race costs order, never data.
        if fs.dirtied_when.load(Ordering::Relaxed) == 0 {
            let t = self.words.dirty_seq.fetch_add(1, Ordering::Relaxed);
            let _ = fs
                .dirtied_when
                .compare_exchange(0, t, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// A page stopped being dirty. Context: any, no sleep.
    #[inline]
    pub(crate) fn cleaned(&self) {
        // Relaxed: as `dirtied`.
        self.words.dirty.fetch_sub(1, Ordering::Relaxed);
    }

    /// Dirty pages now (a snapshot).
    pub(crate) fn dirty_pages(&self) -> usize {
        // Relaxed: a snapshot.
        self.words.dirty.load(Ordering::Relaxed).max(0) as usize
    }

    /// Wakes the flusher, starting it if need be. Context: no sleep but a
    /// leaf mutex (and a thread spawn, once).
    #[cold]
    pub(crate) fn kick_flusher(&self) {
        #[cfg(not(loom))]
        self.flusher.passes.kick(|| {
            let me = self.me.get().cloned()?;
            // No thread: writers write back themselves on eviction (and
            // the next kick tries again).
            let h = std::thread::Builder::new()
                .name("pagecache-flush".into())
                .spawn(move || flusher(me))
                .ok()?;
            // Relaxed: a hint for `dirtied`.
            self.flusher.started.store(true, Ordering::Relaxed);
            Some(h)
        });
    }

    /// Reclaim passed over dirty pages (it evicts clean ones first): wake
    /// the flusher to write every dirty page, whatever the background
    /// threshold, so that reclaim finds them clean next time (the kernel's
    /// `wakeup_flusher_threads` from reclaim). Context: as `kick_flusher`.
    #[cold]
    pub(crate) fn kick_flusher_for_reclaim(&self, dirty: &[crate::frame::FrameNo]) {
        let first = {
            let mut q = self.flusher.for_reclaim.lock();
            let first = q.is_empty();
            let room = RECLAIM_MAX.saturating_sub(q.len());
            q.extend_from_slice(&dirty[..dirty.len().min(room)]);
            first
        };
        if first {
            self.kick_flusher();
        }
    }

    /// The flusher's part for reclaim: writes back the dirty pages reclaim
    /// passed over (those still dirty and cached as the same page), each
    /// file's in index order, consecutive ones in one write. Returns how
    /// many it took. Context: may sleep (I/O); no lock held.
    fn write_for_reclaim(&self) -> usize {
        let mut frames = std::mem::take(&mut *self.flusher.for_reclaim.lock());
        if frames.is_empty() {
            return 0;
        }
        // A frame queued twice (passed over by two rounds) is pinned once.
        frames.sort_unstable();
        frames.dedup();
        self.as_reclaimer(|| self.write_pinned_for_reclaim(frames))
    }

    /// Runs `work`, which pins pages for write-back, counted as a
    /// reclaimer: the pages are neither evictable nor under write-back
    /// until their writes start, and a patient reclaimer that found nothing
    /// else must wait for us, not report `OutOfMemory` (the model check
    /// found that window).
    fn as_reclaimer<R>(&self, work: impl FnOnce() -> R) -> R {
        // Relaxed: as reclaim's own increment (`evict.rs`).
        let mine = self.own(&self.words.reclaiming);
        mine.fetch_add(1, crate::sync::Ordering::Relaxed);
        let r = work();
        // Release: our releases of the pins happen-before a waiter's Acquire
        // RMW that reads this decrement (as reclaim's own).
        mine.fetch_sub(1, crate::sync::Ordering::Release);
        r
    }

    /// B3 (`write_behind.rs`): writes the pages queued behind write
    /// streams, then lets their writers know. Returns how many it took.
    /// Context: as `write_for_reclaim`.
    fn write_behind_queued(&self) -> usize {
        let batches = std::mem::take(&mut *self.flusher.behind.lock());
        if batches.is_empty() {
            return 0;
        }
        self.as_reclaimer(|| {
            let mut taken = 0;
            for (fs, frames) in batches {
                let n = frames.len() as u64;
                taken += self.write_pinned_for_reclaim(frames);
                fs.behind.written(n);
                self.flusher.passes.wake_waiters();
            }
            taken
        })
    }

    /// [`Inner::write_for_reclaim`]'s pins and writes.
    fn write_pinned_for_reclaim(&self, frames: Vec<crate::frame::FrameNo>) -> usize {
        // Pinned for write-back, grouped by file.
        let mut by_file: std::collections::HashMap<u64, Vec<(u64, crate::frame::FrameNo)>> =
            std::collections::HashMap::new();
        // Pages behind a long write run that someone else was writing
        // when we looked (B4 once their write ends, below).
        let mut others = Vec::new();
        for f in frames {
            let d = self.desc(f);
            let Ok(s) = d.try_pin(crate::frame::state::PinKind::Writeback) else {
                continue;
            };
            if !s.is_dirty() || s.is_removed() || s.is_under_writeback() || !s.is_uptodate() {
                // Written already, or being written, by someone else (a
                // `sync`, reclaim): a page behind a long write run still
                // leaves the cache (B4; `drop_written_behind` checks the
                // rest), or it would stay for as long as nothing evicts it.
                let (owner, index) = d.identity();
                let fs = (!s.is_dirty() && !s.is_removed())
                    .then(|| self.file_by_id(owner))
                    .flatten();
                let busy = s.is_under_writeback();
                match fs {
                    Some(fs) if busy && fs.behind.behind(index) => others.push((fs, index, f)),
                    Some(fs) if !busy && self.drop_written_behind(&fs, index, f) => continue,
                    _ => {}
                }
                self.release(f);
                continue;
            }
            let (owner, index) = d.identity();
            by_file.entry(owner).or_default().push((index, f));
        }
        let mut taken = 0;
        for (owner, mut pages) in by_file {
            pages.sort_unstable();
            taken += pages.len();
            let fs = self.file_by_id(owner);
            if let Some(fs) = &fs {
                // Sorted: the last is the highest page written.
                let last = pages.last().map_or(0, |&(i, _)| i);
                let size = fs.size.read(last);
                // Errors: counted by the write-back (the pages stay dirty).
                let mut deferred = Vec::new();
                let _ = self.writeback_run(
                    fs,
                    &size,
                    &pages,
                    crate::cache::WritebackCause::Eviction,
                    &mut deferred,
                );
                if !deferred.is_empty() {
                    // The hook kept them dirty: futures waiting for these
                    // frames give up, as a thread's reclaim does (F1).
                    self.async_frames.reclaim_deferred(deferred.len());
                }
            }
            for (index, f) in pages {
                // A long write stream's page, clean now: its frame back to
                // the pool at once (`write_behind.rs`, B4).
                if fs
                    .as_ref()
                    .is_some_and(|fs| self.drop_written_behind(fs, index, f))
                {
                    continue;
                }
                self.written_for_reclaim(f);
                self.release(f);
            }
        }
        // B4 for the pages others were writing: once each write ends (we
        // hold no pin while we wait: the write's end waits for nothing;
        // a dead writer's is ended by its recovery, W3).
        for (fs, index, f) in others {
            let d = self.desc(f);
            d.wait_writeback_as(fs.id, index);
            if d.try_pin(crate::frame::state::PinKind::Writeback).is_err() {
                continue;
            }
            if d.identity() != (fs.id, index) || !self.drop_written_behind(&fs, index, f) {
                self.release(f);
            }
        }
        taken
    }

    /// Dirty throttling, at the start of `write_at` and `page_mut`: past the hard limit,
    /// wake the flusher and wait until the count is back under it, a pass
    /// ends without bringing it there, or `THROTTLE_MAX` passes.
    /// Context: may sleep; the caller holds no lock (it may hold pins and
    /// latches of other pages: the flusher never waits for them).
    #[inline]
    pub(crate) fn balance_dirty(&self) {
        if self.dirty_pages() > self.dirty_limit {
            self.throttle();
        }
    }

    /// Waits while `over()`, kicking the flusher, as a throttled writer
    /// does (a pass with no progress, or `THROTTLE_MAX`, ends it): a long
    /// write stream's writer while too many of its pages are queued
    /// (`write_behind.rs`). Context: as `throttle`.
    pub(crate) fn throttle_while(&self, over: impl Fn() -> bool) {
        #[cfg(not(loom))]
        let _ = self
            .flusher
            .passes
            .throttle(over, || self.kick_flusher(), THROTTLE_MAX);
        #[cfg(loom)]
        let _ = over;
    }

    #[cold]
    fn throttle(&self) {
        #[cfg(not(loom))]
        {
            // Counted before the waits: `wake_throttled` checks the count,
            // then takes the lock to notify, so a waiter that saw the count
            // over the limit under the lock is woken (or looks again).
            self.flusher.throttled.fetch_add(1, Ordering::SeqCst);
            let _count = Uncount(&self.flusher.throttled);
            self.flusher.passes.throttle(
                || self.dirty_pages() > self.dirty_limit,
                || self.kick_flusher(),
                THROTTLE_MAX,
            );
        }
    }

    /// [`Inner::balance_dirty`] for a future: ready at once under the
    /// limit; past it, the throttle's wait as a registration (the same
    /// kick, passes and bound as a thread's, `Passes::poll_throttle`).
    /// `at` is the future's state between polls, `counted` whether it is
    /// counted in `throttled` (the caller's drop undoes it with
    /// [`Inner::throttle_cancel`]). Context: no sleep.
    pub(crate) fn poll_balance_dirty(
        &self,
        at: &mut Option<(u64, std::time::Instant)>,
        counted: &mut bool,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if !*counted && self.dirty_pages() <= self.dirty_limit {
            return std::task::Poll::Ready(());
        }
        #[cfg(not(loom))]
        {
            if !*counted {
                // SeqCst: as `throttle`.
                self.flusher.throttled.fetch_add(1, Ordering::SeqCst);
                *counted = true;
            }
            let r = self.flusher.passes.poll_throttle(
                at,
                || self.dirty_pages() > self.dirty_limit,
                || self.kick_flusher(),
                THROTTLE_MAX,
                cx,
            );
            if r.is_pending() {
                return std::task::Poll::Pending;
            }
            self.throttle_cancel(counted);
        }
        #[cfg(loom)]
        let _ = (at, cx);
        std::task::Poll::Ready(())
    }

    /// A throttled future is done or dropped: uncounts it. Context: any.
    pub(crate) fn throttle_cancel(&self, counted: &mut bool) {
        if std::mem::take(counted) {
            // SeqCst: as `Uncount`.
            self.flusher.throttled.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Whether the flusher is at work or has reclaim's dirty pages to
    /// write (frames a future waiting for one may get back: F1). A hint.
    /// Context: any, no sleep but a leaf mutex.
    pub(crate) fn flusher_busy(&self) -> bool {
        self.flusher.passes.busy() || !self.flusher.for_reclaim.lock().is_empty()
    }

    /// Write-back took pages (their count went down): wakes writers
    /// waiting in `throttle` as soon as the count is back under the hard
    /// limit, rather than at the end of the flusher's pass (which takes
    /// tens of milliseconds at the device's rate: writers paced by passes
    /// stalled 10 ms at a time, the p99 of a sequential writer). Context:
    /// any, no sleep but the flusher's leaf mutex when a writer waits.
    #[inline]
    pub(crate) fn wake_throttled(&self) {
        // SeqCst: pairs with the waiter's increment (see `throttle`).
        if self.flusher.throttled.load(Ordering::SeqCst) > 0
            && self.dirty_pages() <= self.dirty_limit
        {
            self.flusher.passes.wake_waiters();
        }
    }

    /// Stops the flusher and waits for it. Context: sleeps; not on the
    /// flusher thread.
    pub(crate) fn stop_flusher(&self) {
        if let Some(h) = self.flusher.passes.stop() {
            let _ = h.join();
        }
        #[cfg(not(loom))]
        self.release_age_lease();
    }

    /// One pass: writes back registered files' dirty pages that `sweep`
    /// picks, the file dirtied longest ago first (files with no dirty time
    /// last: clean as far as known, but a race may have lost a time),
    /// until the dirty count is at most its goal. Errors are counted by the
    /// write-back itself (the pages stay dirty); a file with no handle
    /// whose pages are now clean is released. Context: may sleep (I/O); no
    /// lock held.
    fn flush_pass(&self, sweep: crate::cache::Sweep) {
        self.flush_pass_of(sweep, |_| true);
    }

    /// [`Inner::flush_pass`] over the registered files `which` picks.
    fn flush_pass_of(
        &self,
        sweep: crate::cache::Sweep,
        which: impl Fn(&crate::cache::registry::FileShared) -> bool,
    ) {
        let mut files: Vec<_> = self
            .registry
            .read()
            .by_id
            .values()
            .filter(|fs| which(fs))
            .cloned()
            .collect();
        // Relaxed: a hint (see `file_dirtied`).
        files.sort_by_key(|fs| match fs.dirtied_when.load(Ordering::Relaxed) {
            0 => u64::MAX,
            t => t,
        });
        for fs in files {
            if self.dirty_pages() <= sweep.goal {
                break;
            }
            // Relaxed: a hint, re-checked under the registry lock.
            if self.write_dirty_file(&fs, sweep).is_ok() && fs.handles.load(Ordering::Relaxed) == 0
            {
                self.release_idle(&fs);
            }
        }
    }

    /// The age bound in milliseconds (`u64::MAX`: none).
    fn expire_ms(&self) -> u64 {
        u64::try_from(self.dirty_expire.as_millis()).unwrap_or(u64::MAX)
    }

    /// How often W1 looks: a sixth of the bound, from 10 ms to 5 s (the
    /// kernel: 30 s and 5 s), at most 500 ms in a cache shared by
    /// processes (a flusher takes the age lease over from a dead holder at
    /// its next look); `None` without a bound.
    fn age_tick(&self) -> Option<Duration> {
        let most = if self.shared.is_some() {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(5)
        };
        (self.dirty_expire != Duration::MAX)
            .then(|| (self.dirty_expire / 6).clamp(Duration::from_millis(10), most))
    }

    /// W1: writes every page dirtied at or before `now` - the bound: of
    /// every file, or, in a cache shared by processes whose age lease
    /// another process holds, of the files that process cannot write.
    /// Context: may sleep (I/O); no lock held; the flusher thread.
    fn age_pass(&self, now: u64) {
        let expire = self.expire_ms();
        if expire == u64::MAX {
            return; // no bound here: the lease is for a process with one
        }
        #[cfg(not(loom))]
        let holder = self.age_lease();
        #[cfg(loom)]
        let holder: Option<usize> = None;
        if now < expire || self.dirty_pages() == 0 {
            return;
        }
        let sweep = crate::cache::Sweep {
            pick: crate::cache::Pick::Expired(now - expire),
            goal: 0,
        };
        match holder {
            None => self.flush_pass(sweep),
            // Relaxed: a hint (a file both write is written twice at most).
            Some(h) => self.flush_pass_of(sweep, |fs| {
                fs.writers.load(Ordering::Relaxed) & (1 << h) == 0
            }),
        }
    }

    /// The kicked part of the flusher's work (F2-F4 of `passes.rs`):
    /// reclaim's pages (W2), then, past the hard limit, passes down to the
    /// background threshold (W3). `None` once the cache stops; else
    /// whether it stalled (a pass past the limit wrote nothing). Context:
    /// may sleep (I/O); no lock held; the flusher thread.
    fn kicked_passes(&self) -> Option<bool> {
        let mut passing = false;
        loop {
            // Reclaim's request first: the pages it passed over; then the
            // pages behind long write streams.
            let reclaimed = self.write_for_reclaim() + self.write_behind_queued();
            if reclaimed > 0 {
                // Clean now (or deferred, or failed): futures waiting for
                // a frame look again (F1).
                self.async_frames.round_ended();
            }
            let goal = self.dirty_background;
            let dirty = self.dirty_pages();
            // A pass starts past the limit and goes on to the goal.
            if dirty <= goal || (!passing && dirty <= self.dirty_limit) {
                // F3 for reclaim's part.
                if reclaimed > 0 && !self.flusher.passes.end_pass(true) {
                    return None;
                }
                // (Pages queued meanwhile kicked us: the outer loop sees it.)
                return Some(false);
            }
            passing = true;
            // Progress is pages written, not the count going down: writers
            // may dirty pages faster than one pass writes them.
            let written = self.counters.sum(crate::stats::Counter::Writebacks);
            let cold = now_ms().saturating_sub(self.expire_ms());
            for pick in [crate::cache::Pick::Cold(cold), crate::cache::Pick::Any] {
                if self.dirty_pages() > goal {
                    self.flush_pass(crate::cache::Sweep { pick, goal });
                }
            }
            let progress = self.counters.sum(crate::stats::Counter::Writebacks) > written;
            if progress {
                self.async_frames.event();
            }
            // F3.
            if !self.flusher.passes.end_pass(progress) {
                return None;
            }
            if !progress {
                return Some(true); // stalled: failing writes, or nothing to take
            }
        }
    }

    /// Waits until the flusher is idle (tests: `validate`). Context: sleeps.
    pub(crate) fn wait_flusher_idle(&self) {
        // Relaxed: a poll; the flusher's work is ordered by the locks and
        // state words it used.
        while self.flusher.passes.busy() {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

/// How long a flusher whose round past the hard limit wrote nothing waits
/// for a kick before it tries again.
const STALL_RETRY: Duration = Duration::from_secs(1);

/// The flusher thread: sleeps until kicked (F1) or its next look (W1),
/// then does what is due. Holds the cache only while it works.
fn flusher(me: std::sync::Weak<Inner>) {
    let mut next_age = 0;
    // Whether the last kicked round stalled (a pass past the hard limit
    // wrote nothing: a failing disk, a hook deferring every page, or every
    // page it looked at latched by a writer): then the flusher waits for
    // the next kick, or `STALL_RETRY`, instead of going round again at
    // once. Not for longer: with no writer left to kick it, the pages past
    // the limit would wait for the age pass (`dirty_expire`, 30 s).
    let mut stalled = false;
    loop {
        let Some(inner) = me.upgrade() else { return };
        // F1 (`passes.rs`). Holding the cache while idle is fine:
        // `stop_flusher` runs when the last handle drops, before the cache
        // can.
        let over_limit = || !stalled && inner.dirty_pages() > inner.dirty_limit;
        let tick = match inner.age_tick() {
            Some(t) if stalled => Some(t.min(STALL_RETRY)),
            None if stalled => Some(STALL_RETRY),
            t => t,
        };
        match inner.flusher.passes.wait_kick_for(tick, over_limit) {
            None => return,
            Some(true) => match inner.kicked_passes() {
                None => return,
                Some(s) => stalled = s,
            },
            // Timed: a stalled round is tried again (the next look).
            Some(false) => stalled = false,
        }
        // (Timed work runs busy, as a kicked pass: see `wait_kick_for`.)
        let now = now_ms();
        if now >= next_age {
            inner.age_pass(now);
            next_age = now
                + inner
                    .age_tick()
                    .map_or(u64::MAX / 2, |t| t.as_millis() as u64);
        }
        // The round's end: a future that found the flusher busy and waits
        // for a frame (F1) looks again, whatever the round wrote.
        inner.async_frames.flusher_looked();
        drop(inner);
    }
}

/// Decrements a count when dropped (a throttled writer leaving `throttle`).
struct Uncount<'a>(&'a crate::sync::unmodelled::AtomicUsize);

impl Drop for Uncount<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
