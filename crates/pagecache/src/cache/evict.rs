//! Eviction: protocol 5.2 from the evictor's side, and the allocation
//! path that falls back to it.
//!
//! ```text
//!  evictor (no lock held on entry)           reader (5.1, cache/lookup.rs)
//!  1. the policy hands out candidates        2. pin CAS: refs+1 unless 0 or
//!     (re-validated here, never trusted)        LATCHED
//!  2. try_pin(Evict): fails at once on a     3. identity re-check
//!     latch or a free frame, never parks
//!  3. dirty: if the round found a clean
//!     page and a flusher runs, pass it
//!     over (the flusher is asked to
//!     write it); else write back, with its dirty
//!     neighbours pinned too (one write),
//!     under the size lock shared (recursive:
//!     the allocating thread may hold it);
//!     failure keeps the pages dirty (the
//!     error goes to the caller if no
//!     frame can be had); a page the
//!     write-back hook defers is not
//!     offered to it again by the same
//!     reclaim call
//!  4. tree lock; A. freeze {cache + ours}
//!     -> 0 (fails if a reader pinned it, or
//!     it was dirtied, latched, removed);
//!     then (5.7 E2-E3, `cache/run.rs`) a
//!     SeqCst fence and the page's run pins:
//!     a run holds it -> unfreeze, give up;
//!     C. clear the slot; reset identity
//! ```
//!
//! Ordering: the freeze (A) and a reader's pin CAS are RMWs on one word; see
//! `cache/lookup.rs`. A candidate the evictor could not take goes back to
//! the policy (`not_evicted`), so a racy policy only costs a retry.

use crate::cache::registry::FileSlot;
use crate::cache::Inner;
use crate::error::context;
use crate::frame::alloc::FrameAllocator;
use crate::frame::state::{PinKind, Released};
use crate::frame::FrameNo;
use crate::stats::Counter;
use crate::sync::Ordering;
use std::io;

/// Most pages eviction writes back in one write around a dirty victim.
const CLUSTER: usize = 64;

/// What one reclaim call keeps of the dirty victims it could not take.
#[derive(Default)]
struct Kept {
    /// The last failed write-back: what the caller needs to hear (a full
    /// disk, say) if no frame can be had, rather than "out of memory".
    wb_failed: Option<io::Error>,
    /// Frames whose write-back hook deferred them during this call.
    deferred: Vec<FrameNo>,
}

impl Inner {
    /// A free frame (refcount 0, no identity), reclaiming if none is free.
    /// Context: may sleep (eviction's write-back, waits for reads and
    /// write-backs in flight); no tree lock, no latch of a cached page (a
    /// run's own fills excepted, with `alloc_frame_as(false)`), no policy
    /// or pool lock held.
    pub(crate) fn alloc_frame(&self) -> io::Result<FrameNo> {
        self.alloc_frame_as(true)
    }

    /// [`Inner::alloc_frame`]; `patient`: false for a caller that holds
    /// latches of pages it is filling (a run being formed, `batch.rs`),
    /// which must not wait for other runs' reads while its own cannot
    /// start: it gets an error at once where a patient caller would wait.
    pub(crate) fn alloc_frame_as(&self, patient: bool) -> io::Result<FrameNo> {
        if let Some(f) = self.take_free() {
            return Ok(f);
        }
        self.reclaim(patient)
    }

    /// A frame from the free pool, if any; the arena is kept faulted in
    /// ahead of it (`frame::ahead`). Context: any, no lock held.
    #[inline]
    fn take_free(&self) -> Option<FrameNo> {
        let f = self.alloc.alloc()?;
        self.frames.note_alloc(f);
        Some(f)
    }

    /// Evicts one page and returns its frame. Fails when two full passes
    /// of the policy found nothing evictable and a look at every frame
    /// agrees, and, for a patient caller, only once nothing that will hand
    /// frames back is under way: no other reclaimer holds candidates, no
    /// write-back or read is in flight, no truncate or discard is freeing
    /// frames (it waits for those however long they take: a slow or busy
    /// device is not a lack of memory). Then
    /// with the write-back error that kept the last dirty victim, if any,
    /// else `OutOfMemory` (every frame pinned, latched or unevictable).
    /// `patient`: as for `alloc_frame_as` (an impatient caller may be
    /// filling pages of a run that is itself what is in flight, and never
    /// waits). Context: as `alloc_frame_as`.
    fn reclaim(&self, patient: bool) -> io::Result<FrameNo> {
        const WANT: usize = 16; // evicted per round: a batch per policy lock
        let mut cands = Vec::with_capacity(WANT);
        let mut scanned = 0;
        let mut empty_rounds = 0;
        let mut waits = 0u32;
        let mut rechecks = 0;
        // What the dirty victims that could not be taken leave: the last
        // failed write-back, and the pages the hook deferred.
        let mut kept = Kept::default();
        loop {
            // A concurrent free may have refilled the pool.
            if let Some(f) = self.take_free() {
                return Ok(f);
            }
            // A full pass found nothing: take referenced pages too; a
            // second, urgent pass that also finds nothing means every frame
            // is pinned, latched or unevictable, or busy for a while.
            let pass = self.policy.pass_len(&self.frames) + crate::reclaim::CLAIM;
            let urgent = scanned >= pass;
            // Frames in other reclaimers' batches are in no queue; while
            // any reclaimer holds some, a patient caller waits for it (it
            // may be preempted mid-batch, or writing a dirty victim back)
            // instead of failing. An RMW, not a load: it reads the latest
            // count (a relaxed load may return an old 0, and loom finds the
            // OutOfMemory that follows); Acquire pairs with the Release
            // decrement below, so a 0 read from it means its batch's
            // leftovers are in the pool for the last try.
            if (scanned >= 2 * pass || empty_rounds >= 2)
                && patient
                && self.in_flight_latest(&self.words.reclaiming)
            {
                crate::sync::wait_step(&mut waits);
                scanned = 0;
                empty_rounds = 0;
                continue;
            }
            if scanned >= 2 * pass || empty_rounds >= 2 {
                // The scans judged frames by plain loads, which may return
                // old states (loom finds this: a frame freed by another
                // thread's release still looked pinned). Before claiming
                // that every frame is busy, look again with RMW reads,
                // which see the latest state; rescan if one is evictable.
                // A write-back or a read in flight ends by itself and
                // leaves a page to evict: a patient caller waits for it,
                // however long the device takes (a false `OutOfMemory`
                // here, after a bounded number of yields, failed twelve
                // writers of a 16-frame cache on a 30 ms device, every
                // frame under a write another had started).
                let (evictable, in_flight) = self.outlook_now();
                // Last try, after the look: a reclaimer that finished
                // meanwhile freed its leftovers before its decrement (read
                // above), and a truncate or discard that the look missed
                // (it read `freeing` after its end) freed its frames.
                if let Some(f) = self.take_free() {
                    return Ok(f);
                }
                if (evictable && rechecks < 2) || (in_flight && patient) {
                    if evictable {
                        rechecks += 1;
                    } else {
                        crate::sync::wait_step(&mut waits);
                    }
                    scanned = 0;
                    empty_rounds = 0;
                    continue;
                }
                if let Some(e) = kept.wb_failed {
                    return Err(context(
                        e,
                        "no frame free: every evictable page is dirty and writing it back failed",
                    ));
                }
                if !kept.deferred.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!(
                            "no evictable frame: {} dirty pages were deferred by their files' \
                             write-back hooks (make the log durable, then retry), the other \
                             frames of {} are pinned, latched or dirty with failing write-back",
                            kept.deferred.len(),
                            self.frames.len(),
                        ),
                    ));
                }
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "no evictable frame: all {} frames are pinned, latched or dirty \
                         with failing write-back (examined {scanned} policy entries of \
                         {} queued, {empty_rounds} empty rounds)",
                        self.frames.len(),
                        self.policy.pass_len(&self.frames),
                    ),
                ));
            }
            cands.clear();
            // Relaxed: a hint for the wait above; the candidates themselves
            // are re-validated by try_evict.
            self.own(&self.words.reclaiming)
                .fetch_add(1, Ordering::Relaxed);
            let examined = self
                .policy
                .candidates(&self.frames, &mut cands, WANT, urgent);
            scanned += examined;
            let mut got = None;
            // Clean pages first, when there is a flusher to clean the
            // others (background write-back on): a dirty candidate is
            // written back here (the caller waits for that write) only if
            // the round finds no clean one; else it is passed over and the
            // flusher asked to write it (`ReplacementPolicy::deferred`,
            // `kick_flusher_for_reclaim`), as the kernel's reclaim leaves
            // dirty pages to the flusher. In a 70/30 random 4 KiB mix,
            // writers' p999 went from 0.93-1.03 ms to 0.28-0.35 ms.
            // A future's reclaim (`DeferDirty`) never writes a victim back
            // itself: that would block its executor's thread on the write.
            // Its dirty candidates all go to the flusher, and the future
            // waits for a frame event (protocol 5.9 F1).
            let defer_all = defer_dirty_here();
            let defer_dirty = defer_all || (!urgent && self.dirty_background < self.frames.len());
            let mut dirty = Vec::new();
            for &f in &cands {
                // A plain load: a stale answer only changes the order.
                if defer_dirty && self.desc(f).snapshot().is_dirty() {
                    dirty.push(f);
                } else {
                    self.evict_into(f, &mut got, &mut kept);
                }
            }
            if (got.is_some() || defer_all) && !dirty.is_empty() {
                for &f in &dirty {
                    self.policy.deferred(&self.frames, f);
                }
                self.kick_flusher_for_reclaim(&dirty);
            } else {
                for &f in &dirty {
                    self.evict_into(f, &mut got, &mut kept);
                }
            }
            // Release: the leftovers freed above happen-before a waiter's
            // Acquire RMW that reads this decrement.
            self.own(&self.words.reclaiming)
                .fetch_sub(1, Ordering::Release);
            // Nothing queued at all (every frame pinned, latched, anonymous,
            // or in another reclaimer's batch): see the checks at the top.
            empty_rounds = if examined == 0 && got.is_none() {
                empty_rounds + 1
            } else {
                0
            };
            if let Some(f) = got {
                return Ok(f);
            }
        }
    }

    /// Whether some frame is evictable right now, and whether some frame
    /// is on its way back (worth waiting for, not a reason to give up): a
    /// page held only by a write-back in flight (released when the write
    /// ends), a read in flight, a frame with no reference left (frozen by
    /// another evictor, or between its last release and the pool), or a
    /// truncate or discard removing pages right now (`freeing`: loom found
    /// a miss reporting `OutOfMemory` while a discard was freeing the frame
    /// it needed). Judged by the latest value of each state word
    /// (`FrameDesc::snapshot_latest`). Context: no sleep; the
    /// `OutOfMemory` path only.
    #[cold]
    pub(crate) fn outlook_now(&self) -> (bool, bool) {
        let (mut evictable, mut in_flight) = (false, false);
        for f in 0..self.frames.len() as FrameNo {
            let s = self.desc(f).snapshot_latest();
            evictable |= s.is_evictable();
            in_flight |= s.is_under_writeback() || s.refs() == 0;
        }
        // Relaxed: a hint; runs being read end by themselves.
        in_flight |= self.filling_now() > 0;
        // An RMW: the latest count (as `reclaiming`); Acquire pairs with
        // the remover's Release decrement, so a 0 means its frees are in
        // the pool for the next try.
        in_flight |= self.in_flight_latest(&self.words.freeing);
        (evictable, in_flight)
    }

    /// One candidate of a reclaim round: evicted (the round's first frame
    /// goes to `got`, the others refill the allocator) or given back to
    /// the policy. Context: as `try_evict`.
    fn evict_into(&self, f: FrameNo, got: &mut Option<FrameNo>, kept: &mut Kept) {
        match self.try_evict(f, kept) {
            Some(f) => {
                self.policy.removed(&self.frames, f);
                match got {
                    None => *got = Some(f),
                    Some(_) => self.alloc.free(f),
                }
            }
            None => self.policy.not_evicted(&self.frames, f),
        }
    }

    /// Protocol 5.2 from the evictor's side. Returns the frame, owned by the
    /// caller, if the page could be evicted.
    /// A failed write-back of a dirty victim is left in `kept`, with the
    /// frames whose hook deferred them, which this call then passes over
    /// (asking the hook about the same pages pass after pass, round after
    /// round, asked it thousands of times in one call: seconds, with a
    /// hook that takes milliseconds to defer).
    /// Context: may sleep (write-back I/O, the victim file's size lock
    /// shared); takes the registry lock shared and the tree lock.
    fn try_evict(&self, f: FrameNo, kept: &mut Kept) -> Option<FrameNo> {
        if kept.deferred.contains(&f) {
            return None;
        }
        let d = self.desc(f);
        let s = d.try_pin(PinKind::Evict).ok()?;
        if s.is_removed() || !s.is_uptodate() || s.is_unevictable() {
            return self.drop_evict_pin(f);
        }
        let (owner, index) = d.identity();
        let Some(fs) = self.file_by_id(owner) else {
            return self.evict_borrowed(f, s.is_dirty(), owner, index);
        };
        if s.is_dirty() && defer_dirty_here() {
            // A future's reclaim (the round's plain load saw it clean):
            // the flusher writes it, not this thread.
            self.kick_flusher_for_reclaim(&[f]);
            return self.drop_evict_pin(f);
        }
        if s.is_dirty() {
            // A cluster: the victim's dirty neighbours go in the same write
            // (FreeBSD's vm_pageout_cluster), so a writer outrunning the
            // flusher is not written back a page at a time. Pinned before
            // the size lock, as the flusher's pages are: a page `set_len`
            // removes meanwhile is no longer dirty, and its write-back
            // does not start.
            let run = self.dirty_cluster(&fs, index, f);
            // Write back under the size lock shared for the cluster's pages
            // (keeps `set_len` from cutting them under the write). Waiting
            // for it is safe: its exclusive holder (`set_len`) waits for no
            // page and allocates no frame while it holds it, and a shared
            // holder (this thread, in `write_at`) re-enters recursively.
            let last = run.last().map_or(index, |&(i, _)| i);
            let size = fs.size.read(last);
            let res = self.writeback_run(
                &fs,
                &size,
                &run,
                crate::cache::WritebackCause::Eviction,
                &mut kept.deferred,
            );
            // The neighbours stay where the policy has them: sent to its
            // cold end too (as the flusher's pages for reclaim are), TPC-C
            // out of memory read 18% more pages per transaction and ran
            // 10-16% slower (`docs/benchmarks.md`, "Write-back").
            for &(_, n) in run.iter().filter(|&&(_, n)| n != f) {
                self.release(n);
            }
            if let Err(e) = res {
                // For our caller if no frame can be had at all (the pages
                // stay dirty; the next sync writes them).
                kept.wb_failed = Some(e);
                return self.drop_evict_pin(f);
            }
        }
        if !self.evict_from(&fs, f, index) {
            return self.drop_evict_pin(f);
        }
        // Relaxed: a hint; `release_idle` re-checks under the registry lock.
        if fs.handles.load(Ordering::Relaxed) == 0 {
            // A file whose last close failed to write back: now that its
            // pages are going clean, release it and its descriptors.
            self.release_idle(&fs);
        }
        Some(f)
    }

    /// Protocol 5.2 steps A-C for page `index` of `slot` in frame `f`,
    /// which the caller pinned (`PinKind::Evict`) and found clean: frozen,
    /// checked against runs, removed from the index, reset. Whether it
    /// was; if not, the caller still holds its pin. Context: no sleep;
    /// takes the tree lock.
    pub(crate) fn evict_from(&self, slot: &FileSlot, f: FrameNo, index: u64) -> bool {
        let d = self.desc(f);
        let mut g = slot.tree.lock();
        // A. freeze from exactly {cache + our pin}, clean and idle. (In a
        // shared cache, recorded first: a death from the freeze to C
        // leaves the frame frozen in its index, where the recovery finds
        // it, 5.15 P5.)
        d.intend_evict(true);
        let Ok(frozen) = d.freeze(2) else {
            d.intend_evict(false);
            return false;
        };
        let out = self.frozen_out(&mut g, f, index, frozen);
        d.intend_evict(false);
        drop(g);
        if out {
            d.reset();
            self.count(Counter::Evictions);
        }
        out
    }

    /// Protocol 5.2 B-C for frame `f`, frozen from `frozen` and holding
    /// page `index` of the file whose tree `g` holds locked: unfrozen back
    /// to `frozen` if a run pinned the slot (5.7 E2-E3: it may be reading
    /// the frame), else taken out of the index. Whether it was not
    /// unfrozen (the caller then owns the frame).
    fn frozen_out(
        &self,
        g: &mut crate::index::TreeLocked<'_>,
        f: FrameNo,
        index: u64,
        frozen: crate::frame::state::State,
    ) -> bool {
        // 5.7 E2-E3 (`cache/run.rs`): a run may be reading it.
        crate::sync::fence(Ordering::SeqCst);
        if g.run_pinned(&self.nodes, index).is_some() {
            self.desc(f).unfreeze(frozen);
            return false;
        }
        // C. clear the slot (identity was stable under the freeze, so it
        // is ours unless something is badly wrong).
        let removed = g.remove(&self.nodes, index, f);
        debug_assert!(removed, "frozen page {index} (frame {f}) not in its index");
        true
    }

    /// 5.15 P5: frame `f`, which a dead process's eviction had frozen and
    /// not yet taken out of its index: under the tree lock (taken over if
    /// it died holding it), a frame with no reference still in its index
    /// is such a one (a live eviction does A-C under the same lock), taken
    /// out and freed as C-D would have; or, if a run pinned the slot
    /// meanwhile, it stays, clean and cached (the dead evictor's pin was
    /// uncounted by its freeze). Whether it was in its index (a frame
    /// that was not is left as it is). Context: takes the tree lock; the
    /// recovery's thread.
    #[cfg(not(loom))]
    pub(crate) fn finish_dead_eviction(&self, f: FrameNo) -> bool {
        let d = self.desc(f);
        let (owner, index) = d.identity();
        if owner == crate::frame::state::NO_OWNER || crate::anon::region_process(owner).is_some() {
            // No file's page: in no index.
            return false;
        }
        let mut indexed = false;
        self.with_slot(owner, |fs| {
            let mut g = fs.tree.lock();
            if d.snapshot().refs() != 0 || fs.tree.lookup(&self.nodes, index) != Some(f) {
                return;
            }
            indexed = true;
            let cached = crate::frame::state::State::cached(1);
            if self.frozen_out(&mut g, f, index, cached) {
                drop(g);
                self.free_frame(f);
            }
        });
        indexed
    }

    /// A shared cache: the victim `f` (pinned by the caller) is a page of
    /// file `owner`, which this process does not have open. Clean, it is
    /// evicted through the file's slot, borrowed from the file table; dirty,
    /// it stays for a process that has the file open to write back (this
    /// one has no descriptor of it). Context: as `try_evict`.
    fn evict_borrowed(&self, f: FrameNo, dirty: bool, owner: u64, index: u64) -> Option<FrameNo> {
        let t = match self.file_table() {
            Some(t) if !dirty => t,
            _ => return self.drop_evict_pin(f),
        };
        let Some(slot) = t.borrow(owner) else {
            return self.drop_evict_pin(f);
        };
        let done = self.evict_from(slot, f, index);
        let emptied = done && slot.tree.is_empty();
        t.unborrow(owner);
        if done {
            if emptied {
                // Its last page: the entry of a file no one has open (or
                // a stale one) is free for another file.
                t.free_if_unused(owner);
            }
            Some(f)
        } else {
            self.drop_evict_pin(f)
        }
    }

    /// The dirty victim `(index, f)` (pinned by the caller) with up to
    /// [`CLUSTER`] - 1 consecutive cold dirty neighbours around it, each pinned
    /// here (released by the caller), in index order. A neighbour that is
    /// missing, clean, latched or otherwise busy ends the cluster on its
    /// side: nothing here waits. Context: no sleep; no lock held.
    fn dirty_cluster(
        &self,
        fs: &crate::cache::FileShared,
        index: u64,
        f: FrameNo,
    ) -> Vec<(u64, FrameNo)> {
        let pin = |i: u64| -> Option<FrameNo> {
            let n = fs.tree.lookup(&self.nodes, i)?;
            let s = self.desc(n).try_pin(PinKind::Writeback).ok()?;
            // Cold neighbours only (accessed bit clear: the policy aged
            // them): a hot page written now is dirtied again before its
            // eviction, and its write was wasted (writing hot neighbours
            // too gave 2.4-2.8 pages written per page evicted under TPC-C).
            if !s.is_removed()
                && s.is_dirty()
                && !s.is_accessed()
                && self.desc(n).identity() == (fs.id, i)
            {
                Some(n)
            } else {
                self.release(n);
                None
            }
        };
        let mut after = Vec::new();
        let mut i = index;
        while after.len() + 1 < CLUSTER {
            let Some(n) = i.checked_add(1).and_then(pin) else {
                break;
            };
            i += 1;
            after.push((i, n));
        }
        let mut run = Vec::with_capacity(CLUSTER);
        let mut i = index;
        while run.len() + after.len() + 1 < CLUSTER && i > 0 {
            let Some(n) = pin(i - 1) else { break };
            i -= 1;
            run.push((i, n));
        }
        run.reverse();
        run.push((index, f));
        run.extend(after);
        run
    }

    /// Page `f`, pinned by the caller, was written back for reclaim (a
    /// victim reclaim passed to the flusher): if it is
    /// clean now, the policy makes it the next evicted unless it is used
    /// meanwhile (the kernel's `PG_reclaim`). A page still dirty (a hook
    /// deferred it, the write failed, a writer dirtied it again) is left
    /// where it is. Context: no sleep.
    pub(crate) fn written_for_reclaim(&self, f: FrameNo) {
        let s = self.desc(f).snapshot();
        if !s.is_dirty() && !s.is_under_writeback() && !s.is_removed() && s.is_uptodate() {
            self.policy.written_for_reclaim(&self.frames, f);
        }
    }

    /// Context: no sleep.
    fn drop_evict_pin(&self, f: FrameNo) -> Option<FrameNo> {
        if self.desc(f).release() == Released::Last {
            // The page was truncated while we looked: it is ours now.
            self.desc(f).reset();
            return Some(f);
        }
        None
    }
}

#[cfg(not(loom))]
thread_local! {
    /// Reclaim on this thread passes every dirty victim to the flusher
    /// (set by a future's miss, [`DeferDirty`]).
    static DEFER_DIRTY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether reclaim on this thread must not write dirty victims back itself.
#[inline]
fn defer_dirty_here() -> bool {
    #[cfg(not(loom))]
    return DEFER_DIRTY.try_with(|d| d.get()).unwrap_or(false);
    #[cfg(loom)]
    false
}

/// While it lives, reclaim on this thread writes no dirty victim back
/// itself (it hands them to the flusher): a future's miss, whose poll
/// must not block on a write (protocol 5.9 F1). Read once per reclaim,
/// so it costs the hit path nothing.
#[derive(Debug)]
pub(crate) struct DeferDirty {
    #[cfg(not(loom))]
    was: bool,
}

impl DeferDirty {
    pub(crate) fn new() -> DeferDirty {
        DeferDirty {
            #[cfg(not(loom))]
            was: DEFER_DIRTY.try_with(|d| d.replace(true)).unwrap_or(false),
        }
    }
}

impl Drop for DeferDirty {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        let _ = DEFER_DIRTY.try_with(|d| d.set(self.was));
    }
}
