//! Write-back: `sync`, close and eviction write dirty pages through here.
//!
//! ```text
//!  write-back (pin held, size lock shared)   writer (5.5) / truncate (5.6)
//!  1. collect the file's dirty-tagged        a writer sets DIRTY on unlatch
//!     pages under the tree lock, clearing    and re-tags (index dirty-tag
//!     the tags (index S1)                    protocol, D1-D2)
//!  2. pin each (PinKind::Writeback passes
//!     a writer still draining: rule 7);
//!     start_writeback: DIRTY -> WRITEBACK    a writer latching the page now
//!     (RMW; a removed page is skipped; one   does not wait for the write-
//!     already under write-back and dirty     back's pin (latch_base counts
//!     again: wait for that write to end      it) unless pages are STABLE; it
//!     first, with no pins held)              rewrites the bytes under the
//!                                            I/O, sets DIRTY, re-tags
//!  3. read the length (Acquire) and write    truncate stores the new length
//!     the run's bytes below it, one I/O      before removing pages, and waits
//!  4. end_writeback: clear WRITEBACK; on     for the size lock exclusively,
//!     failure set DIRTY again and re-tag     so no write lands past it
//!  5. release the pins
//! ```
//!
//! Rewrites during the I/O: the page is dirty again when its write ends, so
//! the next pass writes it again; a sync covers only writes that ended
//! before it began, and those bytes are in the frame before its pass starts
//! the write, so they reach the disk whatever a concurrent writer does to
//! other bytes. What a crash may leave is a page mixing the two writes,
//! the same as the kernel's buffered writes to devices without stable
//! pages: readers of the cache never see that (they see pages wholly
//! before or after each write, 5.4/5.5). Soundness: the write's reads of
//! the frame are the kernel's (a DMA or `copy_from_user`), outside Rust's
//! abstract machine, like a device reading shared memory, and write-back
//! makes no `&[u8]` of the frames it writes: raw iovecs all the way to the
//! syscall (`BackendFile::write_raw`, `io::write_full`; a backend that
//! writes through slices keeps the default `stable_writes`, so its pages
//! are stable). What the write takes of bytes being changed is unspecified
//! and never used again (the page is dirty again and rewritten).
//! Transiently, after `end_writeback` and before the pin's release, a
//! write-back pin can pass an active writer (rule 7's test sees one pin
//! more than `latch_base`): such a write-back starts on a page being
//! rewritten, the same case. The pin is what keeps the frame from being
//! evicted, freed or reused under the I/O; it is held from before
//! `start_writeback` until after `end_writeback` (the frame
//! invariant `latch_base` relies on: WRITEBACK set means that pin exists).
//!
//! Steps 4-5 of a `sync`'s or the flusher's write run on the I/O engine's
//! thread when the write completes (the pins go as soon as their own write
//! ends); the pass still holds the size lock shared until every run has
//! ended, so a truncate never overtakes one. Eviction writes a dirty victim
//! with its dirty neighbours in one blocking write (split where a page
//! stopped being dirty). Before a pass, blocks and length are allocated up
//! to its last dirty page (never past the file's length), so the filesystem
//! runs its direct writes as concurrent overwrites.
//!
//! A failed write leaves its pages dirty (and counts in the file's
//! `wb_undone`); eviction's error goes to the call that needed the frame,
//! the flusher's to `Stats`. A write-back that eviction or the flusher
//! starts and then gives up (the hook defers the page, or a writer holds
//! it) leaves its page dirty too, and counts there the same way. A `sync`
//! reports what is true when it returns: `Ok` once every page dirty at its
//! call is on disk, whatever failed or was deferred before (see `flush`).
//! Never wait for a latch while holding pins (lock rule 6): a run stops at
//! a latched page, is written, and only then does the flush wait.

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
const BACKGROUND_FLIGHT: usize = 8 << 20;

/// Most writes the flusher has in flight at once, whatever their size. A
/// reader's miss queues behind them at the device: with random dirty pages
/// (one 4 KiB write each) the byte bound alone let 2048 writes queue, and
/// the readers of a 70/30 random 4 KiB mix had a p99 of 1.9 ms (1.86-1.90
/// over two rounds; 0.53-0.55 ms with 16, 0.40 ms with 4, at 6% less
/// throughput; the kernel's own mix: 0.72 ms). Sequential write-back is
/// bound by bytes first (8 runs of 1 MiB).
const BACKGROUND_OPS: usize = 16;

/// Most tagged pages a background take looks at under one hold of the
/// tree lock (a few microseconds of a writer's wait for it; a pass goes
/// on to the next chunk after writing what this one took).
const TAKE_VISITS: usize = 4096;

/// A flush's runs whose writes are in flight.
#[derive(Default)]
struct InFlight {
    /// Oldest first: each run's page count and the result of its
    /// completion, which ends the run's write-back and drops its pins as
    /// soon as the write finishes (writers of those pages wait only for
    /// their own write, not for the rest of the pass).
    runs: std::collections::VecDeque<(usize, Arc<Oneshot<io::Result<()>>>)>,
    pages: usize,
    /// The cache and the file, owned, for those completions (`None` at
    /// teardown, with no cache to own: runs are then written one at a
    /// time on the calling thread).
    owner: Option<(Arc<Inner>, Arc<FileShared>)>,
}

/// The write-back hook's verdict on a page (see `Inner::hook_verdict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Write,
    Defer,
    /// Latched: a writer may be changing it.
    Busy,
}

/// Outcome of pinning a tagged page for write-back.
enum WbPin {
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

/// What a background pass writes of a file (`flusher.rs` says when each
/// runs; `docs/design.md`, "Which dirty pages background write-back
/// writes", why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Any dirty page (the dirty count past the hard limit, after the cold
    /// ones; `internals::background_pass`).
    Any,
    /// Pages the replacement policy will evict soon (accessed bit clear:
    /// not used since the policy last looked) or dirtied at or before the
    /// given time (milliseconds of `flusher::now_ms`).
    Cold(u64),
    /// Pages dirtied at or before the given time only (the age bound).
    Expired(u64),
}

/// A background pass over one file: what it writes, and the cache's
/// dirty count it works down to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sweep {
    pub(crate) pick: Pick,
    pub(crate) goal: usize,
}

impl Inner {
    /// Writes back a run of consecutive pages `(index, frame)` that the
    /// caller has pinned, `start_writeback()` succeeded on, and (for sync)
    /// ordered, with one blocking I/O on this thread. Caller holds the size
    /// lock shared. Ends write-back on each page (dirty again on failure,
    /// re-tagged) but keeps the pins.
    /// Context: may sleep (I/O); the caller holds the run's pins and, proved
    /// by `_size`, the file's size lock shared; no tree lock.
    fn write_pages(
        &self,
        fs: &FileShared,
        _size: &SizeShared<'_>,
        run: &[(u64, FrameNo)],
    ) -> io::Result<()> {
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
    fn run_buffers(
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
    fn end_run(
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
                Err(e)
            }
        };
        // Release: the pages' end of write-back (dirty again, tagged) and
        // the failure count happen-before a waiting sync's Acquire load.
        fs.writeback.fetch_sub(run.len(), Ordering::Release);
        res
    }

    /// Whether write-back of `fs` must keep its pages' bytes stable until
    /// each write ends (writers wait; see `FrameDesc::start_writeback`).
    /// Context: any.
    fn stable_pages(&self, fs: &FileShared) -> bool {
        self.stable_writes
            || fs.write_fd.get().is_some_and(|w| w.stable_writes())
            // Relaxed: a hint; a hook set meanwhile sees the write-backs
            // started after its store.
            || fs.hooked.load(crate::sync::unmodelled::Ordering::Relaxed)
    }

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
    fn hook_verdict(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        cause: crate::api::WritebackCause,
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
        let page = crate::api::WritebackPage {
            index,
            bytes,
            cause,
        };
        let verdict = match (hook.0)(&page) {
            crate::api::WritebackDecision::Write => Verdict::Write,
            crate::api::WritebackDecision::Defer => Verdict::Defer,
        };
        // A latch holder that began changing the bytes while the hook read
        // them: what it saw may not be what would be written.
        match seen {
            Some(v) if !d.read_validate(v) => Verdict::Busy,
            _ => verdict,
        }
    }

    /// Undoes a write-back the caller started on page `index` (frame `f`)
    /// and will not write (the hook deferred it, or a writer holds it): the
    /// page is dirty and tagged again. Unless the caller is a sync (which
    /// deals with its own pages), counted in `fs.wb_undone` after the
    /// re-tag: a sync that skipped the page because this write-back was
    /// under way writes it itself. The caller still holds the pin and then
    /// drops the page's count in `fs.writeback` (after this). Context: no
    /// sleep.
    fn cancel_writeback(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        cause: crate::api::WritebackCause,
    ) {
        let old = self.desc(f).end_writeback(true);
        if !old.is_removed() {
            fs.tree.tag_dirty(&self.nodes, index);
            if !old.is_dirty() {
                self.redirtied();
                self.file_dirtied(fs);
            }
        }
        if cause != crate::api::WritebackCause::Sync {
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
    fn start_one(&self, fs: &FileShared, f: FrameNo, stable: bool) -> bool {
        // Relaxed: the Release half of `start_writeback`'s RMW below
        // publishes it to a remover whose RMW reads that start.
        fs.writeback.fetch_add(1, Ordering::Relaxed);
        if self.desc(f).start_writeback(stable) {
            self.cleaned();
            true
        } else {
            // Release: as `end_run`'s decrement.
            fs.writeback.fetch_sub(1, Ordering::Release);
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
        while fs.writeback.load(Ordering::Acquire) != 0 {
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
        cause: crate::api::WritebackCause,
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
                        fs.writeback.fetch_sub(1, Ordering::Release);
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

    /// Writes every dirty page of `fs` back; with `durable`, also persists
    /// the length and calls `fdatasync`. Returns the truth about
    /// durability now: `Ok` exactly when every page dirty at the call (and,
    /// with `durable`, the length) is on disk. An earlier write-back that
    /// failed (eviction's, reported to the call that needed the frame; the
    /// flusher's, counted in `Stats`) left its pages dirty, so this writes
    /// them and is not failed by that earlier error: a database that rolled
    /// back on the first report must not see its next, successful commit
    /// fail. Its own failure it returns; the next call retries.
    /// Context: may sleep (I/O, latch waits with no pins held); takes the
    /// size lock shared (exclusive-free: `read_recursive`), the tree lock
    /// briefly; the caller holds no `PageMut` of this file.
    pub(crate) fn flush(&self, fs: &Arc<FileShared>, durable: bool) -> io::Result<()> {
        // One sync of a file at a time, and none while the flusher writes
        // it back (it skips the file while we hold this).
        let _flushing = fs.flushing.lock();
        // Shared for the whole sync: excludes only `set_len`. Writers and
        // eviction's write-back run concurrently.
        let size = fs.size.read(crate::size_lock::ALL_PAGES);
        // Acquire: pairs with the Release increments of `end_run` and
        // `cancel_writeback`, which follow the pages' re-tagging: a page
        // counted here is tagged for the take below.
        let mut undone = fs.wb_undone.load(Ordering::Acquire);
        let mut res = self.write_dirty(fs, &size, None);
        // Others' write-backs of pages we did not find dirty (the flusher
        // took their tags, eviction started them) end before we report.
        // One that failed, or that its starter gave up (the hook deferred
        // the page, a writer held it), left its pages dirty and tagged
        // again: write them ourselves (asking the hook ourselves), and look
        // again, until a round in which no other write-back was undone.
        // Then every page dirty at our call is on disk, written by us or by
        // a write-back that succeeded. Our own failure or deferral ends it,
        // and is what we return.
        while res.is_ok() {
            self.wait_writeback(fs);
            // Acquire: as above.
            let now = fs.wb_undone.load(Ordering::Acquire);
            if now == undone {
                break;
            }
            undone = now;
            res = self.write_dirty(fs, &size, None);
        }
        match res {
            Err(e) => Err(e),
            Ok(()) => self.persist(fs, size, durable),
        }
    }

    /// Writes every dirty page of `fs` back: runs submitted to the engine
    /// without waiting, in a sliding window of a quarter of the cache, each
    /// ended (pins dropped) by its completion; returns once every run has
    /// ended. Returns the first error; failed pages stay dirty. Context: may
    /// sleep (I/O, latch waits with no pins held); the caller holds, proved
    /// by `size`, the size lock shared.
    ///
    /// `background`: the flusher's pass: which pages it writes, and the
    /// cache's dirty count it works down to (`Sweep`). Its failures are
    /// counted in `Stats` (nobody waits for it; a `sync` writes the pages
    /// again), and it never waits for a
    /// page: one latched, or dirty with an older write still in flight,
    /// gets its dirty tag back and is left to a later pass or a sync. A
    /// writer throttled at the dirty limit may hold that latch (a `PageMut`
    /// of another page): waiting for it stalled the writer for the
    /// throttle's whole bound. And once it has started every page it took,
    /// while the count is still over its goal, it takes the file's tags
    /// again (up to a cache's worth of pages per call, so other files get
    /// their turn) with its earlier writes still in flight: a writer
    /// dirtying pages faster than the device writes them, throttled at the
    /// limit, then waits for the next runs to start, not for every write
    /// of the pass to end (36-60 ms stalls, each a whole window of writes,
    /// were the p99 of a sequential writer).
    fn write_dirty(
        &self,
        fs: &Arc<FileShared>,
        size: &SizeShared<'_>,
        background: Option<Sweep>,
    ) -> io::Result<()> {
        // Pages per write: up to 1 MiB (256 pages of 4 KiB; the size the
        // kernel's write-back sends down), but never more than a quarter of the
        // cache, so a sync's pins cannot starve other threads of frames (a
        // tiny cache found it: 8 threads and a syncer over 16 frames). The
        // same bound holds for all the runs in flight at once.
        let run_max = ((1 << 20) / self.page_size)
            .clamp(1, 256)
            .min(self.frames.len() / 4)
            .max(1);
        // Pages in flight at once (runs are submitted without waiting, the
        // oldest waited for when this is reached): the same quarter of the
        // cache, and for the flusher at most `BACKGROUND_FLIGHT` bytes.
        let mut flight_max = (self.frames.len() / 4).max(1);
        // Writes in flight at once: for the flusher `BACKGROUND_OPS`.
        let mut runs_max = usize::MAX;
        if background.is_some() {
            flight_max = flight_max.min((BACKGROUND_FLIGHT / self.page_size).max(run_max));
            runs_max = BACKGROUND_OPS;
        }
        let mut first_err: Option<io::Error> = None;
        // The cache and the file, owned, so that each completion can end
        // its run on the engine's thread (no cache to own while it is
        // being dropped: `flush_all` at teardown writes each run here).
        let owner = self
            .me
            .get()
            .and_then(std::sync::Weak::upgrade)
            .map(|inner| (inner, fs.clone()));
        let mut flight = InFlight {
            owner,
            ..InFlight::default()
        };
        let mut dirty = Vec::new();
        let mut taken = 0;
        // Tagged pages this pass may still look at: at most one round of
        // the file's tags (a take resumes where the last stopped, so a
        // filter that keeps refusing every page would otherwise go round
        // and round).
        let mut visits = match background {
            Some(_) => self.dirty_pages() + TAKE_VISITS,
            None => usize::MAX,
        };
        // Where the age pass goes on (see `take_dirty_of`).
        let mut from = 0;
        loop {
            let round_done = self.take_dirty_of(fs, &mut dirty, background, &mut visits, &mut from);
            taken += dirty.len();
            let mut started = false;
            let mut i = 0;
            while i < dirty.len() {
                // Gather a run of consecutive dirty pages, pinned. Never wait
                // for a latch while holding pins (the latch holder may be
                // waiting, through a pending writer, for one of them): runs
                // in flight are finished first.
                let mut run: Vec<(u64, FrameNo)> = Vec::with_capacity(run_max);
                while i < dirty.len() && run.len() < run_max {
                    let (index, f) = dirty[i];
                    if run.last().is_some_and(|&(li, _)| index != li + 1) {
                        break;
                    }
                    let wait = background.is_none() && run.is_empty() && flight.pages == 0;
                    let cause = if background.is_some() {
                        crate::api::WritebackCause::Background
                    } else {
                        crate::api::WritebackCause::Sync
                    };
                    let pinned = self.pin_for_writeback(fs, index, f, wait, cause);
                    match pinned {
                        WbPin::Pinned => {
                            run.push((index, f));
                            i += 1;
                        }
                        WbPin::Deferred => {
                            // Release: as `end_run`'s decrement (the page
                            // is tagged again already).
                            fs.writeback.fetch_sub(1, Ordering::Release);
                            if background.is_none() {
                                first_err.get_or_insert_with(|| {
                                    io::Error::new(
                                        io::ErrorKind::WouldBlock,
                                        format!(
                                            "{}: page {index}: its write-back hook deferred it",
                                            fs.path.display()
                                        ),
                                    )
                                });
                            }
                            i += 1;
                            break;
                        }
                        WbPin::Skip => {
                            // Release: as `end_run`'s decrement.
                            fs.writeback.fetch_sub(1, Ordering::Release);
                            i += 1;
                            break;
                        }
                        WbPin::Busy if background.is_some() => {
                            self.untake(fs, index, f);
                            // Release: after the tag is back (see `untake`).
                            fs.writeback.fetch_sub(1, Ordering::Release);
                            i += 1;
                            break;
                        }
                        WbPin::Busy if run.is_empty() => {
                            // Latched (or its older write in flight): finish
                            // what is in flight, then wait for it with no
                            // pins held.
                            self.finish_flight(&mut flight, &mut first_err);
                            break;
                        }
                        WbPin::Busy => break,
                    }
                }
                if !run.is_empty() {
                    started = true;
                    self.start_run(fs, size, run, &mut flight, &mut first_err);
                    self.wake_throttled();
                    // A sliding window: wait for the oldest runs until one
                    // more fits (in pages, and for the flusher in writes),
                    // so the device never runs dry while we wait (waiting
                    // for all would).
                    let pages = flight_max.saturating_sub(run_max);
                    self.finish_flight_to(&mut flight, pages, runs_max - 1, &mut first_err);
                }
            }
            // The flusher takes again while its goal is not reached (see
            // above) and this take started a write (pages it had to put
            // back, latched or busy, would only be taken again); the tags
            // taken so far are all started or put back.
            let more = background.is_some_and(|b| {
                // A take that found nothing to write in its chunk goes on
                // to the next chunk.
                (started || dirty.is_empty())
                    && !round_done
                    && visits > 0
                    && taken < self.frames.len()
                    && self.dirty_pages() > b.goal
            });
            if !more {
                break;
            }
        }
        self.finish_flight(&mut flight, &mut first_err);
        first_err.map_or(Ok(()), Err)
    }

    /// Takes the dirty tags of `fs` (clearing `dirty` first): the pages, in
    /// index order, count as under write-back from now on. A sync
    /// (`background` is `None`) takes every tag. The flusher, working the
    /// cache's dirty count down to its goal, takes only that many pages
    /// (all of them for `Pick::Expired`) of those its `Pick` accepts
    /// (the others keep their tags), looking at no more than `visits`
    /// tagged pages (decremented), from the file's cursor (where its last
    /// pass stopped, the kernel's `writeback_index`) to the end and then
    /// from the start, and moves the cursor past the last page it looked
    /// at: a file whose hot pages stay dirty is written a round at a time,
    /// each page once per round, not every dirty page at every pass; and
    /// the tree lock, which writers inserting pages need, is held for the
    /// pages looked at, not for the file's whole dirty set. The age pass
    /// goes from the start to the end once instead, `from` where its last
    /// take stopped, and leaves the cursor alone. Returns whether
    /// the flusher's take looked at every tagged page (a sync's: true).
    /// Then reserves the file's blocks and length up to the last page
    /// taken. Context: takes the tree lock; may sleep (`fallocate`).
    fn take_dirty_of(
        &self,
        fs: &FileShared,
        dirty: &mut Vec<(u64, FrameNo)>,
        background: Option<Sweep>,
        visits: &mut usize,
        from: &mut u64,
    ) -> bool {
        dirty.clear();
        let mut partial = false;
        let mut round_done = true;
        {
            let g = fs.tree.lock();
            // Taken now: a page dirtied from here on gives the file a new
            // dirty time (a hint: a race only reorders the flusher).
            // Relaxed: see `FileShared::dirtied_when`.
            fs.dirtied_when
                .store(0, crate::sync::unmodelled::Ordering::Relaxed);
            match background {
                None => g.take_dirty(&self.nodes, dirty),
                Some(sweep) => {
                    let budget = match sweep.pick {
                        Pick::Expired(_) => usize::MAX,
                        _ => self.dirty_pages().saturating_sub(sweep.goal).max(1),
                    };
                    // Reads the descriptor only (see `take_dirty_if`).
                    let mut keep = |f: FrameNo| -> bool {
                        let d = self.desc(f);
                        match sweep.pick {
                            Pick::Any => true,
                            Pick::Cold(t) => !d.snapshot().is_accessed() || d.dirtied() <= t,
                            Pick::Expired(t) => d.dirtied() <= t,
                        }
                    };
                    // The age pass looks at every tag once, from the
                    // start (`from`), and leaves the file's cursor to the
                    // others: it writes what it finds whatever the round.
                    let aged = matches!(sweep.pick, Pick::Expired(_));
                    // Relaxed: a hint.
                    let cursor = if aged {
                        *from
                    } else {
                        fs.wb_cursor
                            .load(crate::sync::unmodelled::Ordering::Relaxed)
                    };
                    // Looked at under this hold of the lock.
                    let chunk = (*visits).min(TAKE_VISITS);
                    let mut left = chunk;
                    let mut last = g.take_dirty_if(
                        &self.nodes,
                        (cursor, u64::MAX),
                        budget,
                        &mut left,
                        &mut keep,
                        dirty,
                    );
                    let wrapped = dirty.len();
                    let wrap = if aged { (0, 0) } else { (0, cursor) };
                    if let Some(l) =
                        g.take_dirty_if(&self.nodes, wrap, budget, &mut left, &mut keep, dirty)
                    {
                        last = Some(l);
                    }
                    *visits -= chunk - left;
                    // The last looked at in round order: the next pass
                    // starts after it.
                    match last {
                        Some(last) if aged => *from = last.saturating_add(1),
                        // Relaxed: a hint.
                        Some(last) => fs.wb_cursor.store(
                            last.wrapping_add(1),
                            crate::sync::unmodelled::Ordering::Relaxed,
                        ),
                        None => {}
                    }
                    // In index order: the wrapped part first.
                    dirty.rotate_left(wrapped);
                    partial = dirty.len() >= budget || left == 0 || chunk - left > dirty.len();
                    round_done = dirty.len() < budget && left > 0;
                }
            }
            // The taken pages count as under write-back from now on (not
            // from their pin): a sync that finds their tags gone must
            // find them here. Under the tree lock, which a later take
            // also takes. Relaxed: ordered by that lock.
            fs.writeback.fetch_add(dirty.len(), Ordering::Relaxed);
        }
        if partial {
            // Tags are left: the file keeps a dirty time.
            self.file_dirtied(fs);
        }
        // Blocks and length up to the last dirty page's end (never past
        // the file's length), so the writes are overwrites the filesystem
        // runs concurrently.
        if let (Some(&(last, _)), Some(w)) = (dirty.last(), fs.write_fd.get()) {
            // Acquire: as in `run_buffers`.
            let len = fs.len.load(Ordering::Acquire);
            w.allocate_to(len.min((last + 1) << self.shift));
        }
        round_done
    }

    /// The flusher took the dirty tag of page `index` (frame `f`) and will
    /// not write it now: puts the tag back if the page is still there and
    /// dirty, so that a later pass or a sync finds it (a writer that
    /// unlatches an already dirty page does not tag it again). A page that
    /// is clean now needs no tag: it is tagged when next dirtied. Tagging a
    /// page that a write-back cleans meanwhile leaves a spurious tag, which
    /// is harmless (the tag protocol, `index` module). Before the caller's
    /// release of its `writeback` count, so that a sync that waits for that
    /// count to reach 0 finds the tag. Context: no sleep; takes the tree
    /// lock (the page cannot leave the index meanwhile).
    fn untake(&self, fs: &FileShared, index: u64, f: FrameNo) {
        let g = fs.tree.lock();
        if fs.tree.lookup(&self.nodes, index) == Some(f) && self.desc(f).snapshot().is_dirty() {
            fs.tree.tag_dirty(&self.nodes, index);
            drop(g);
            self.file_dirtied(fs);
        }
    }

    /// [`Inner::write_dirty`] for the flusher, one `sweep` of `fs`: takes
    /// the size lock shared itself. Context: as
    /// `write_dirty`; no lock held. Skips (`Ok`) a file that a sync or
    /// close is flushing now.
    pub(crate) fn write_dirty_file(&self, fs: &Arc<FileShared>, sweep: Sweep) -> io::Result<()> {
        let Some(_flushing) = fs.flushing.try_lock() else {
            return Ok(());
        };
        let size = fs.size.read(crate::size_lock::ALL_PAGES);
        self.write_dirty(fs, &size, Some(sweep))
    }

    /// The end of a flush whose page writes succeeded: with `durable`,
    /// persists the length (never shrinking the file) and calls
    /// `fdatasync`. Context: may sleep (I/O); releases `size` before the
    /// `fdatasync`.
    fn persist(&self, fs: &FileShared, size: SizeShared<'_>, durable: bool) -> io::Result<()> {
        if !durable {
            return Ok(());
        }
        let Some(w) = fs.write_fd.get() else {
            return Ok(());
        };
        // Acquire: pairs with the writers' AcqRel `fetch_max`.
        let len = fs.len.load(Ordering::Acquire);
        // Never shrinks the file: a concurrent eviction may have written
        // past `len` already (see `grow_to`).
        fs.disk.touch();
        w.grow_to(len)
            .map_err(|e| context(e, format!("{}: persisting length {len}", fs.path.display())))?;
        drop(size);
        w.sync_data().map_err(|e| {
            context(
                e,
                format!("{}: fdatasync (length {len})", fs.path.display()),
            )
        })
    }

    /// Step 3 for a flush: submits `run`'s write to the engine (all of a
    /// sync's runs are in flight at once, up to its pin bound). Context: no
    /// sleep beyond the engine's submission; the caller holds the run's
    /// pins and, proved by `_size`, the size lock shared.
    fn start_run(
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
    fn finish_flight(&self, flight: &mut InFlight, first_err: &mut Option<io::Error>) {
        self.finish_flight_to(flight, 0, 0, first_err);
    }

    /// Waits for the oldest runs in flight until at most `pages` pages in
    /// at most `runs` runs are in flight. Context: may sleep (waits for the
    /// I/O).
    fn finish_flight_to(
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
    fn pin_for_writeback(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        wait: bool,
        cause: crate::api::WritebackCause,
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
                                d.wait_unlatched_as(fs.id, index);
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
                Err(PinFail::Latched) if wait => d.wait_unlatched_as(fs.id, index),
                Err(PinFail::Latched) => return WbPin::Busy,
                // Freed or frozen: the page was written back and evicted.
                Err(_) => return WbPin::Skip,
            }
        }
    }

    /// Best-effort write-back of every registered file (cache teardown).
    /// Context: may sleep (I/O); no lock held (cache teardown).
    pub(crate) fn flush_all(&self) {
        let files: Vec<_> = self.registry.read().by_id.values().cloned().collect();
        for fs in files {
            let _ = self.flush(&fs, false);
        }
    }
}
