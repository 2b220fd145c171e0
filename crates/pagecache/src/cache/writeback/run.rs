//! One run's write-back: its pages pinned and started (steps 1-2 of the
//! block in `writeback/mod.rs`), their bytes written in one I/O (3),
//! written back or dirty again when it ends (4-5), and the runs a pass
//! keeps in flight.

use crate::cache::{FileShared, Inner, SizeShared};
use crate::error::context;
use crate::frame::state::{PinFail, PinKind};
use crate::frame::FrameNo;
use crate::io::engine::{Dir, Oneshot, Op};
use crate::io::{write_full, BackendFile};
use crate::stats::Counter;
use crate::sync::Ordering;
use std::io;
use std::sync::Arc;

/// The write-back hook's verdict on a page (see `Inner::hook_verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Write,
    Defer,
    /// Latched: a writer may be changing it.
    Busy,
}

/// Most bytes the flusher has in flight at once (a sync keeps up to a
/// quarter of the cache in flight). Background write-back gains nothing
/// from a deeper queue once the device is busy (this machine's disk peaks
/// with 2 MiB in flight: 128 KiB at depth 16), but every request waits
/// behind the whole queue: with a quarter of a 256 MiB cache in flight, a
/// writer throttled at the dirty limit, which waits for the flusher's next
/// run to start and so for its oldest write to end, waited 4-18 ms at a
/// time (a sequential writer's p99 3.8-9.5 ms; 1.8-2.1 ms with 8 MiB, at
/// the same rate). The kernel bounds its background write-back's queue
/// depth for the same reason (blk-wbt).
pub(super) const BACKGROUND_FLIGHT: usize = 8 << 20;

/// Most writes the flusher has in flight at once, whatever their size. A
/// reader's miss queues behind them at the device: with random dirty pages
/// (one 4 KiB write each) the byte bound alone let 2048 writes queue, and
/// the readers of a 70/30 random 4 KiB mix had a p99 of 1.9 ms (1.86-1.90
/// over two rounds; 0.53-0.55 ms with 16, 0.40 ms with 4, at 6% less
/// throughput; the kernel's own mix: 0.72 ms). Sequential write-back is
/// bound by bytes first (8 runs of 1 MiB).
pub(super) const BACKGROUND_OPS: usize = 16;

/// A flush's runs whose writes are in flight.
#[derive(Default)]
pub(super) struct InFlight {
    /// Oldest first: each run's page count and the result of its
    /// completion, which ends the run's write-back and drops its pins as
    /// soon as the write finishes (writers of those pages wait only for
    /// their own write, not for the rest of the pass).
    pub(super) runs: std::collections::VecDeque<(usize, Arc<Oneshot<io::Result<()>>>)>,
    pub(super) pages: usize,
    /// The cache and the file, owned, for those completions (`None` at
    /// teardown, with no cache to own: runs are then written one at a
    /// time on the calling thread).
    pub(super) owner: Option<(Arc<Inner>, Arc<FileShared>)>,
}

/// Outcome of pinning a tagged page for write-back.
pub(super) enum WbPin {
    /// Pinned, write-back started.
    Pinned,
    /// Not this file's dirty page any more.
    Skip,
    /// Latched by a writer, or dirty with an earlier write of it still in
    /// flight; retry with no pins held.
    Busy,
    /// The write-back hook deferred it: dirty and tagged again, not pinned.
    Deferred,
}

impl Inner {
    /// The write-back hook's verdict on page `index` (frame `f`), whose
    /// write-back the caller has just started: pinned, `WRITEBACK` and,
    /// since a hook is set, `STABLE`. From that start no writer can begin
    /// changing the bytes (its drain waits for our stable pin), so the
    /// hook sees exactly what will be written.
    ///
    /// A latch holder found now is either still draining (it waits for
    /// our pin, or for a run that the caller itself may hold: lock rule 7)
    /// or drained before our pin and changing the bytes (our pin passed a
    /// non-stable write-back's pin that it counted). The second is in its
    /// write section (version odd) or enters it while the hook runs
    /// (version moved): `Busy`, and waiting for it is safe. The first
    /// leaves the version alone until our pin goes, and must not be
    /// waited for (a sync by the holder of a pin or run the writer waits
    /// for would deadlock, as the model check found with a run): the hook
    /// is asked, and shown a copy taken as a seqlock reader takes one,
    /// which is what will be written. (The second kind exists only where
    /// a non-stable write-back's pin lingered, one started before the
    /// hook was set: such a writer may still begin after our last look,
    /// and then what reaches the disk is what a non-stable write-back
    /// writes, as before the hook.) Context: calls the user's hook; the
    /// caller holds the page's pin and the size lock shared, no other lock.
    pub(super) fn hook_verdict(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        cause: crate::cache::WritebackCause,
    ) -> Verdict {
        // Relaxed: a hint (see `stable_pages`).
        if !fs.hooked.load(crate::sync::unmodelled::Ordering::Relaxed) {
            return Verdict::Write;
        }
        let Some(hook) = fs.hook.read().clone() else {
            return Verdict::Write;
        };
        let d = self.desc(f);
        // With a latch holder, the hook sees a copy taken as a seqlock
        // reader takes one (atomic loads, then the version re-checked): the
        // holder may be one that drained before our pin, about to write.
        let mut copy = Vec::new();
        let seen = if d.snapshot_latest().is_latched() {
            let Some(v) = d.read_begin() else {
                return Verdict::Busy;
            };
            copy.resize(self.page_size, 0);
            // SAFETY: the frame is pinned and `page_size` bytes long; atomic
            // loads race a writer soundly, and the copy counts only if the
            // version is unchanged afterwards.
            unsafe { crate::cache::atomic_load_copy(d.witness(), &mut copy, self.frames.ptr(f)) };
            if !d.read_validate(v) {
                return Verdict::Busy;
            }
            Some(v)
        } else {
            None
        };
        let bytes = if seen.is_some() {
            &copy[..]
        } else {
            // SAFETY: pinned (the frame stays this page's) and under stable
            // write-back with no latch holder: no writer changes the bytes
            // until the write ends (a latch taken from now on waits for our
            // pin to drain); readers only read.
            unsafe { self.frames.bytes(f) }
        };
        let page = crate::cache::WritebackPage {
            index,
            bytes,
            cause,
        };
        let verdict = match (hook.0)(&page) {
            crate::cache::WritebackDecision::Write => Verdict::Write,
            crate::cache::WritebackDecision::Defer => Verdict::Defer,
        };
        // A latch holder that began changing the bytes while the hook read
        // them: what it saw may not be what would be written.
        match seen {
            Some(v) if !d.read_validate(v) => Verdict::Busy,
            _ => verdict,
        }
    }

    /// Writes back a run of consecutive pages `(index, frame)` that the
    /// caller has pinned, `start_writeback()` succeeded on, and (for sync)
    /// ordered, with one blocking I/O on this thread. Caller holds the size
    /// lock shared. Ends write-back on each page (dirty again on failure,
    /// re-tagged) but keeps the pins.
    /// Context: may sleep (I/O); the caller holds the run's pins and, proved
    /// by `_size`, the file's size lock shared; no tree lock.
    pub(super) fn write_pages(
        &self,
        fs: &FileShared,
        _size: &SizeShared<'_>,
        run: &[(u64, FrameNo)],
    ) -> io::Result<()> {
        crate::sync::may_block("a write-back's write");
        let res = match self.run_buffers(fs, run) {
            Err(e) => Err(e),
            Ok(None) => Ok(()),
            // SAFETY: the frames are pinned by the caller, so the buffers
            // stay valid (the bytes may change: raw buffers, see
            // `BackendFile::write_raw`); lengths are within the frames.
            Ok(Some((w, offset, iov))) => unsafe { write_full(&*w, &iov, offset) },
        };
        self.end_run(fs, run, res)
    }

    /// Step 3's buffers for `run`: the pages' bytes below the length read
    /// now, as `(descriptor, offset, iovecs)`; `None` if every page lies
    /// past end of file. Context: any; the caller holds the run's pins and
    /// the size lock shared.
    #[allow(clippy::type_complexity)]
    pub(super) fn run_buffers(
        &self,
        fs: &FileShared,
        run: &[(u64, FrameNo)],
    ) -> io::Result<Option<(Arc<dyn BackendFile>, u64, Vec<libc::iovec>)>> {
        let ps = self.page_size as u64;
        // Acquire: read after pinning the run, so a shrink that began later
        // (it latches the last page, waiting for our pin) cannot be missed;
        // pairs with `set_len`'s Release store.
        let len = fs.len.load(Ordering::Acquire);
        let first = run[0].0;
        let mut iov = Vec::with_capacity(run.len());
        for &(index, f) in run {
            let start = index << self.shift;
            let n = len.saturating_sub(start).min(ps) as usize;
            if n == 0 {
                break;
            }
            iov.push(libc::iovec {
                iov_base: self.frames.ptr(f).cast(),
                iov_len: n,
            });
        }
        if iov.is_empty() {
            return Ok(None);
        }
        // Before the write is issued (and so before any of these pages can
        // be evicted): a `page_new` that finds one of them gone sees that
        // its bytes may be on disk. AcqRel: pairs with `page_new`'s Acquire.
        let end = (first << self.shift) + iov.iter().map(|v| v.iov_len as u64).sum::<u64>();
        fs.disk_end.fetch_max(end, Ordering::AcqRel);
        let w = fs.write_fd.get().cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "dirty pages but no writable descriptor",
            )
        })?;
        self.count(Counter::Writes);
        fs.disk.touch();
        Ok(Some((w, first << self.shift, iov)))
    }

    /// Step 4 for `run` with the write's result: ends write-back on each
    /// page (dirty again and re-tagged on failure); keeps the pins.
    /// Context: no sleep; the caller holds the run's pins.
    ///
    /// A failure also counts in the file's `wb_undone`, before the pages
    /// stop counting as in flight: a `sync` that waited for them
    /// (`wait_writeback`) sees that their pages are dirty again.
    pub(super) fn end_run(
        &self,
        fs: &FileShared,
        run: &[(u64, FrameNo)],
        res: io::Result<()>,
    ) -> io::Result<()> {
        let first = run[0].0;
        let failed = res.is_err();
        for &(index, f) in run {
            let d = self.desc(f);
            let old = d.end_writeback(failed);
            if failed && !old.is_removed() {
                fs.tree.tag_dirty(&self.nodes, index);
                // Counted (unless a writer rewrote the page during the
                // write: dirty and counted already), but no kick: a flusher
                // whose writes fail must not wake itself to fail again.
                if !old.is_dirty() {
                    self.redirtied();
                    self.file_dirtied(fs);
                }
            }
        }
        let res = match res {
            Ok(()) => {
                self.counters.add(Counter::Writebacks, run.len() as u64);
                Ok(())
            }
            Err(e) => {
                self.count(Counter::WriteErrors);
                let last = run[run.len() - 1].0;
                let e = context(
                    e,
                    format!("{}: writing back pages {first}..={last}", fs.path.display()),
                );
                // Release: after the pages' re-tagging (see `flush`).
                fs.wb_undone.fetch_add(1, Ordering::Release);
                // For a future that waits for the flusher to clean frames.
                self.async_frames.note_wb_error(&e);
                Err(e)
            }
        };
        // Release: the pages' end of write-back (dirty again, tagged) and
        // the failure count happen-before a waiting sync's Acquire load.
        fs.writeback_done(run.len());
        // Frames may be evictable now: futures waiting for one look again
        // (5.9 F1).
        self.async_frames.event();
        res
    }

    /// Whether write-back of `fs` must keep its pages' bytes stable until
    /// each write ends (writers wait; see `FrameDesc::start_writeback`).
    /// Context: any.
    pub(super) fn stable_pages(&self, fs: &FileShared) -> bool {
        self.stable_writes
            || fs.write_fd.get().is_some_and(|w| w.stable_writes())
            // Relaxed: a hint; a hook set meanwhile sees the write-backs
            // started after its store.
            || fs.hooked.load(crate::sync::unmodelled::Ordering::Relaxed)
    }

    /// Undoes a write-back the caller started on page `index` (frame `f`)
    /// and will not write (the hook deferred it, or a writer holds it): the
    /// page is dirty and tagged again. Unless the caller is a sync (which
    /// deals with its own pages), counted in `fs.wb_undone` after the
    /// re-tag: a sync that skipped the page because this write-back was
    /// under way writes it itself. The caller still holds the pin and then
    /// drops the page's count in `fs.writeback` (after this). Context: no
    /// sleep.
    pub(crate) fn cancel_writeback(
        &self,
        fs: &crate::cache::registry::FileSlot,
        index: u64,
        f: FrameNo,
        cause: crate::cache::WritebackCause,
    ) {
        let old = self.desc(f).end_writeback(true);
        if !old.is_removed() {
            fs.tree.tag_dirty(&self.nodes, index);
            if !old.is_dirty() {
                self.redirtied();
                self.file_dirtied(fs);
            }
        }
        if cause != crate::cache::WritebackCause::Sync {
            // Release: after the re-tag; pairs with `flush`'s Acquire load
            // (through the Release decrement of `fs.writeback` that follows,
            // which its wait reads).
            fs.wb_undone.fetch_add(1, Ordering::Release);
        }
    }

    /// Starts write-back of one page of `fs` outside `write_dirty` (its
    /// DIRTY bit becomes WRITEBACK), counted in `fs.writeback` *before* the
    /// start: a `discard` whose `mark_removed` (an RMW on the same state
    /// word) comes after our start then sees the count, and waits for the
    /// write (`Inner::discard`). Returns whether it started; the
    /// caller holds a pin of `f`. Context: any, no sleep.
    pub(super) fn start_one(&self, fs: &FileShared, f: FrameNo, stable: bool) -> bool {
        // Relaxed: the Release half of `start_writeback`'s RMW below
        // publishes it to a remover whose RMW reads that start.
        fs.writeback_started(1);
        if self.desc(f).start_writeback(stable) {
            self.cleaned();
            true
        } else {
            // Release: as `end_run`'s decrement.
            fs.writeback_done(1);
            false
        }
    }

    /// Waits until no page of `fs` is under write-back by anyone: `sync`
    /// must not return while another thread's write of a page it did not
    /// find dirty (the flusher took the tag) is still in flight, or before
    /// that write's failure is counted; `discard` must not return before
    /// a write of a page it dropped has landed. Context: may sleep; holds
    /// nothing but (a sync) the size lock shared.
    pub(crate) fn wait_writeback(&self, fs: &FileShared) {
        let mut rounds = 0u32;
        // Acquire: pairs with `end_run`'s Release decrement.
        while fs.writeback_in_flight() != 0 {
            crate::sync::wait_step(&mut rounds);
        }
    }

    /// Write-back of consecutive pages the caller has pinned (eviction: a
    /// dirty victim and its dirty neighbours); starts write-back on each
    /// and writes those still dirty, one write per stretch of consecutive
    /// pages that are (a page that stopped being dirty meanwhile, written
    /// back by someone else, splits the run: its neighbours' bytes must not
    /// slide into its place). Returns the first error; the frames whose
    /// hook deferred them are pushed on `deferred`.
    /// Context: may sleep (I/O); the caller holds the pins and, proved by
    /// `size`, the file's size lock shared.
    pub(crate) fn writeback_run(
        &self,
        fs: &FileShared,
        size: &SizeShared<'_>,
        pages: &[(u64, FrameNo)],
        cause: crate::cache::WritebackCause,
        deferred: &mut Vec<FrameNo>,
    ) -> io::Result<()> {
        let mut res = Ok(());
        let stable = self.stable_pages(fs);
        let mut run: Vec<(u64, FrameNo)> = Vec::with_capacity(pages.len());
        for &(index, f) in pages {
            if run.last().is_some_and(|&(last, _)| index != last + 1) {
                let r = self.write_pages(fs, size, &run);
                res = res.and(r);
                run.clear();
            }
            let started = self.start_one(fs, f, stable)
                && match self.hook_verdict(fs, index, f, cause) {
                    Verdict::Write => true,
                    v @ (Verdict::Defer | Verdict::Busy) => {
                        if v == Verdict::Defer {
                            deferred.push(f);
                        }
                        self.cancel_writeback(fs, index, f, cause);
                        // Release: after the re-tag, as `end_run`'s.
                        fs.writeback_done(1);
                        false
                    }
                };
            if started {
                run.push((index, f));
            } else if !run.is_empty() {
                let r = self.write_pages(fs, size, &run);
                res = res.and(r);
                run.clear();
            }
        }
        if !run.is_empty() {
            res = res.and(self.write_pages(fs, size, &run));
        }
        res
    }

    /// Step 3 for a flush: submits `run`'s write to the engine (all of a
    /// sync's runs are in flight at once, up to its pin bound). Context: no
    /// sleep beyond the engine's submission; the caller holds the run's
    /// pins and, proved by `_size`, the size lock shared.
    pub(super) fn start_run(
        &self,
        fs: &FileShared,
        size: &SizeShared<'_>,
        run: Vec<(u64, FrameNo)>,
        flight: &mut InFlight,
        first_err: &mut Option<io::Error>,
    ) {
        let res = match (&flight.owner, self.run_buffers(fs, &run)) {
            (Some((inner, owned)), Ok(Some((file, offset, iov)))) => {
                let w = Oneshot::new();
                let signal = w.done();
                let (inner, owned, pages) = (inner.clone(), owned.clone(), run.len());
                self.engine.submit(vec![Op {
                    file,
                    dir: Dir::Write,
                    iov,
                    offset,
                    stream: false,
                    done: Box::new(move |res: io::Result<usize>| {
                        // Steps 4-5 here, at once: end the pages'
                        // write-back, then drop their pins.
                        let r = inner.end_run(&owned, &run, res.map(|_| ()));
                        // The file before the pins and the signal: the
                        // waiter may let it go at once and expect its
                        // descriptor closed (see `Op::complete`).
                        drop(owned);
                        for &(_, f) in &run {
                            inner.release(f);
                        }
                        drop(inner);
                        signal(r);
                    }),
                }]);
                flight.pages += pages;
                flight.runs.push_back((pages, w));
                return;
            }
            // Teardown: one blocking write.
            (None, Ok(Some(_))) => self.write_pages(fs, size, &run),
            // Nothing to write (past end of file), or no descriptor.
            (_, res) => self.end_run(fs, &run, res.map(|_| ())),
        };
        if let Err(e) = res {
            first_err.get_or_insert(e);
        }
        for &(_, f) in &run {
            self.release(f);
        }
    }

    /// Waits for every run in flight (their completions end them).
    /// Context: may sleep (waits for the I/O).
    pub(super) fn finish_flight(&self, flight: &mut InFlight, first_err: &mut Option<io::Error>) {
        self.finish_flight_to(flight, 0, 0, first_err);
    }

    /// Waits for the oldest runs in flight until at most `pages` pages in
    /// at most `runs` runs are in flight. Context: may sleep (waits for the
    /// I/O).
    pub(super) fn finish_flight_to(
        &self,
        flight: &mut InFlight,
        pages: usize,
        runs: usize,
        first_err: &mut Option<io::Error>,
    ) {
        while flight.pages > pages || flight.runs.len() > runs {
            let Some((pages, w)) = flight.runs.pop_front() else {
                break;
            };
            flight.pages -= pages;
            if let Err(e) = w.wait() {
                first_err.get_or_insert(e);
            }
        }
    }

    /// Pins `f` for write-back if it still holds page `index` of `fs` and is
    /// dirty, starts write-back on it, and asks the write-back hook, if any
    /// (`cause`). Waits for a latch only if `wait`.
    /// Context: may sleep only if `wait` (then the caller holds no pins); no lock held.
    ///
    /// A page rewritten while an earlier write of it is still in flight
    /// (eviction's, which a writer does not wait for unless pages are
    /// stable) is dirty and under write-back at once: its new write waits
    /// for the old one to end, as the kernel's `folio_wait_writeback`
    /// before a data-integrity write — two writes of one page in flight
    /// could land in either order, the older last.
    pub(super) fn pin_for_writeback(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        wait: bool,
        cause: crate::cache::WritebackCause,
    ) -> WbPin {
        let d = self.desc(f);
        let stable = self.stable_pages(fs);
        loop {
            match d.try_pin(PinKind::Writeback) {
                Ok(s) => {
                    if s.is_removed() || d.identity() != (fs.id, index) {
                        self.release(f);
                        return WbPin::Skip;
                    }
                    if d.start_writeback(stable) {
                        // Counted in `fs.writeback` since `write_dirty` took it.
                        self.cleaned();
                        match self.hook_verdict(fs, index, f, cause) {
                            Verdict::Write => return WbPin::Pinned,
                            Verdict::Defer => {
                                self.cancel_writeback(fs, index, f, cause);
                                self.release(f);
                                return WbPin::Deferred;
                            }
                            Verdict::Busy => {
                                // A writer may be changing it: as a latched
                                // page (below).
                                self.cancel_writeback(fs, index, f, cause);
                                self.release(f);
                                if !wait {
                                    return WbPin::Busy;
                                }
                                if d.wait_unlatched_as(fs.id, index) {
                                    self.drop_torn(fs.id, index, f);
                                }
                                continue;
                            }
                        }
                    }
                    let now = d.snapshot();
                    self.release(f);
                    if !now.is_dirty() || now.is_removed() {
                        return WbPin::Skip;
                    }
                    // Dirty, and a write of it was in flight a moment ago
                    // (we took its tag: it must not be skipped).
                    if !wait {
                        return WbPin::Busy;
                    }
                    d.wait_writeback_as(fs.id, index);
                }
                Err(PinFail::Latched) if wait => {
                    // Until unlatched, or passable: a writer that waits
                    // for a run this thread may hold takes a reference
                    // that lets this pin pass (W3, lock rule 7).
                    if d.wait_latch_passable_as(fs.id, index) {
                        self.drop_torn(fs.id, index, f);
                    }
                }
                Err(PinFail::Latched) => return WbPin::Busy,
                // Freed or frozen: the page was written back and evicted.
                Err(_) => return WbPin::Skip,
            }
        }
    }
}
