//! Protocol 5.6: truncate (`set_len` shorter), and `set_len` in general.
//!
//! ```text
//!  truncater                                 readers / pin holders / writers
//!  0. size lock exclusive from the new       pins, writes and syncs of other
//!     last page on (writers and write-back   pages are never kept waiting:
//!     that reach it wait from here on)       the truncater never waits for a
//! T0. record the cut in the file's slot      page with the size lock held
//!     (`cut`, `cut_by`: its length, its
//!     process), under X1's mutex
//!  1. ftruncate; on failure stop: nothing
//!     has changed, a later call can succeed;
//!     on success mark the record done
//!  2. tree lock. If the new last page's
//!     tail must be zeroed, take its latch
//!     *without waiting* (pinned, latched,
//!     drained); if it is busy, drop both
//!     locks, wait for that page alone to be
//!     idle, and start again at 0
//!  3. store the new length (Release), still  a miss that inserts a page after
//!     under the tree lock; drop it           3 sees the new length and
//!                                            zero-fills past it; one that
//!                                            inserted before was found in 2
//!  4. tree lock: for every page past the    a lookup that pins before 4 keeps
//!     new end, mark_removed (REMOVED, DIRTY  valid bytes until it releases;
//!     cleared, one RMW), clear its slot and  one after sees REMOVED (5.1 step
//!     drop the cache's reference: frames     3) or an empty slot: a miss past
//!     nobody pinned are freed now, pinned    EOF reads zeros; a run (5.7)
//!     ones by their last release, and ones   holding the page keeps reading
//!     a run holds when the run ends (5.7     it, its frame kept for it
//!     T1-T3, `run.rs`)
//!  5. zero the tail of the new last page
//!     under the latch taken in 2; unlatch;
//!     clear the record (T0)
//! ```
//!
//! A truncater that dies (a cache shared by processes, 5.14): the record
//! outlives it, and whoever holds X1's mutex next finishes the cut before
//! its own work: the next `set_len` of the file, or the dead process's
//! recovery (which finds its records by `cut_by` once all it held is
//! given back and its slot freed: finishing waits for the size lock's
//! shared holders that reach the cut), each as the call would have ended
//! (`ftruncate` again through its own descriptor; without one, a cut whose
//! `ftruncate` is not known done is let go, nothing in the cache having
//! changed yet).
//! A live truncater waiting for its new last page (step 2, no lock held)
//! leaves its record too; a `set_len` that finishes it meanwhile makes the
//! cut the waiter would have made, and the waiter then makes it again.
//! A death inside step 4 leaves a page marked REMOVED in the index with
//! the tree lock free, which a live remover never does (it holds the tree
//! lock from T1 until the slot is cleared): its readers, after a few
//! finds, take it out themselves (`finish_removal`).
//!
//! Between 1 and 3 a reader may see zeros read from disk in the range
//! being cut (its pages are removed in 4). No write-back of the new last
//! page or past it can run (it holds the size lock shared for its pages),
//! so none re-extends the file past the new end. Writers and write-back of
//! pages below the new last page run on: they neither extend the file
//! (their end is at most the new length) nor touch the pages removed, and
//! the tree lock orders their inserts against step 4.
//!
//! Waiting for pinned pages past the end is wrong (their holders may wait
//! for us): they are marked and freed by their last release (or, held by
//! a run, when it ends). No write-back of them
//! can race: write-back holds the size lock shared for its pages. Waiting for the new
//! last page is right (the truncate touches it), but not with the size lock
//! held exclusively: a thread pinning that page may be about to write or
//! sync another page, which takes the size lock shared.
//!
//! Growing (`new_len >= len`) is `ftruncate` first, then the length: a
//! failure changes nothing. Bytes past the end of the old last page are
//! zero already (every path that writes a page keeps them so).

use super::registry::{FileSlot, SizeExclusive};
use super::run::RunHold;
use super::{FileShared, FrameLatch, Inner, PinMiss, LEAF_PAGES};
use crate::error::context;
use crate::frame::state::Released;
use crate::frame::FrameNo;
use crate::io::BackendFile;
use crate::sync::Ordering;
use std::io;

/// Set in [`FileSlot::cut`] once the cut's `ftruncate` returned.
pub(crate) const CUT_DONE: u64 = 1 << 63;

/// The cut recorded in `fs` (T0): its new length, and whether its
/// `ftruncate` is done. Context: under the size lock's exclusive mutex.
pub(crate) fn pending_cut(fs: &FileSlot) -> Option<(u64, bool)> {
    // Relaxed: read and written under X1's mutex only.
    let c = fs.cut.load(Ordering::Relaxed);
    (c != 0).then(|| ((c & !CUT_DONE) - 1, c & CUT_DONE != 0))
}

/// How [`Inner::cut`] ended.
pub(crate) enum Cut {
    /// Cut: the length stored, the pages past it removed, the tail zeroed.
    Done,
    /// The new last page (this index) is held by others.
    Busy(u64),
}

/// What [`Inner::unlinked`] left for after the tree lock.
enum Unlinked {
    /// Queued for a run (D1 to run).
    Queued,
    /// The cache's reference was the last: the frame to free.
    Last,
    /// Not taken out, or pinned still.
    Kept,
}

/// The new last page's latch, or why there is none.
enum Tail<'a> {
    /// Latched and drained: zero it after the shrink.
    Latched(FrameLatch<'a>),
    /// Not cached: nothing to zero.
    Absent,
    /// Pinned by others, latched or being freed: wait for it with no lock
    /// held, then retry.
    Busy,
}

impl Inner {
    /// Removes every page at index >= `first` (orphaning pinned ones).
    /// Context: no sleep; takes the tree lock; callers hold the size lock
    /// exclusively or the file has no handle left.
    pub(crate) fn remove_pages_from(&self, fs: &FileSlot, first: u64) {
        // Counted from before the first page is marked until its frame is
        // in the pool (or queued for a run): a reclaimer that finds every
        // frame busy meanwhile waits for these instead of failing.
        // Relaxed: a hint; the reclaimer reads it by RMW and rescans.
        self.own(&self.words.freeing)
            .fetch_add(1, Ordering::Relaxed);
        let mut victims = Vec::new();
        let mut to_free = Vec::new();
        let mut deferred = Vec::new();
        let queued = {
            let mut g = fs.tree.lock();
            g.entries_from(&self.nodes, first, &mut victims);
            for &(index, f) in &victims {
                let d = self.desc(f);
                // A frame with no reference in its index under this lock
                // was frozen by an evictor whose process died before it
                // took the page out (5.15 P5; a live one holds this lock
                // from its freeze to its unlink): given its cache
                // reference back, as the recovery would (a run may still
                // read it, E3), and removed as any.
                if d.snapshot().refs() == 0 {
                    d.unfreeze(crate::frame::state::State::cached(1));
                }
                // T1 of protocol 5.7 (`run.rs`): REMOVED, keeping the
                // cache's reference for now. A page REMOVED already was
                // left in its index by a remover whose process died after
                // its T1 (it held this lock, taken over since: 5.14); what
                // it left undone is done here, as `finish_removal` does.
                let old = d.mark_removed();
                debug_assert!(
                    !old.is_removed() || self.shared.is_some(),
                    "page {index} REMOVED in its index under the tree lock"
                );
                // T2: a run may hold the page; if one pins the slot, the
                // slot is marked STALE before the page leaves it.
                crate::sync::fence(Ordering::SeqCst);
                let run = g.mark_run_stale(&self.nodes, index);
                let removed = g.remove(&self.nodes, index, f);
                debug_assert!(removed, "page {index} listed but not removed");
                if old.is_dirty() {
                    self.cleaned();
                }
                // T3.
                match run {
                    Some(leaf) => deferred.push((leaf, (index % LEAF_PAGES) as usize, f)),
                    None => {
                        if d.release_base() == Released::Last {
                            to_free.push(f);
                        }
                    }
                }
            }
            // Queued under the lock that unlinked them (5.15 P6e).
            self.queue_frees(&deferred);
            !deferred.is_empty()
        };
        for f in to_free {
            self.free_frame(f);
        }
        if queued {
            self.run_deferred();
        }
        // Release: the frees above happen-before a reclaimer's Acquire RMW
        // that reads this decrement (its next alloc finds them).
        self.own(&self.words.freeing)
            .fetch_sub(1, Ordering::Release);
    }

    /// Finishes the removal of page `index` (frame `f`) if it is still in
    /// its index marked REMOVED with the tree lock free: a live remover
    /// holds the tree lock from its mark (T1) until the slot is cleared
    /// (step 4, `drop_torn`), so such a page was left by a remover whose
    /// process died there, and its readers would find it again and again
    /// (they call this after a few such finds). T2-T3 as
    /// `remove_pages_from`. Context: no sleep; takes the tree lock.
    #[cold]
    pub(crate) fn finish_removal(&self, fs: &FileSlot, index: u64, f: FrameNo) {
        let d = self.desc(f);
        if !d.snapshot().is_removed() {
            return;
        }
        let mut g = fs.tree.lock();
        if fs.tree.lookup(&self.nodes, index) != Some(f)
            || d.identity() != (fs.id, index)
            || !d.snapshot().is_removed()
        {
            return; // its remover was alive, and is done
        }
        crate::sync::fence(Ordering::SeqCst);
        let run = g.mark_run_stale(&self.nodes, index);
        let removed = g.remove(&self.nodes, index, f);
        let after = self.unlinked(run, removed, index, f);
        drop(g);
        self.after_unlink(after, f);
    }

    /// T3 for page `index` (frame `f`) just taken out of its index under
    /// the tree lock (`removed`), `run` the leaf whose slot a run pins, if
    /// one does: the frame queued, kept for the run until it ends, else
    /// the cache's reference dropped, both under the tree lock (5.15 P6e).
    /// Shared by `drop_torn` and `finish_removal`; the caller then calls
    /// [`Inner::after_unlink`] with what this returns, the lock released.
    /// Context: no sleep; the tree lock held.
    fn unlinked(
        &self,
        run: Option<&crate::index::Node>,
        removed: bool,
        index: u64,
        f: FrameNo,
    ) -> Unlinked {
        match run {
            Some(leaf) if removed => {
                self.queue_frees(&[(leaf, (index % LEAF_PAGES) as usize, f)]);
                Unlinked::Queued
            }
            _ if removed && self.desc(f).release_base() == Released::Last => Unlinked::Last,
            _ => Unlinked::Kept,
        }
    }

    /// What follows [`Inner::unlinked`] with the tree lock released: D1
    /// for a queued frame, the free of a frame whose last reference the
    /// cache's was.
    fn after_unlink(&self, after: Unlinked, f: FrameNo) {
        match after {
            Unlinked::Queued => self.run_deferred(),
            Unlinked::Last => self.free_frame(f),
            Unlinked::Kept => {}
        }
    }

    /// A page whose latch holder's process died, its latch taken over by
    /// the caller (a waiter: `wait_unlatched_as` returned true; it holds
    /// the latch and no pin). The page may be torn: it leaves the index as
    /// a truncated page does (runs holding it keep the frame until they
    /// end), its frame is freed once the references left go (the dead
    /// holder's pin stays until pins are recovered: 5.14), and if it was
    /// dirty its unwritten changes are lost: recorded for the file's next
    /// `sync` (in any process) to report. Waiters then miss and read the
    /// page from the file. Context: no sleep; takes the tree lock.
    #[cold]
    pub(crate) fn drop_torn(&self, owner: u64, index: u64, f: FrameNo) {
        let d = self.desc(f);
        // A file not open here (the watcher's recovery, 5.14 D5) is reached
        // through its slot, borrowed from the file table.
        self.with_slot(owner, |fs| {
            // Relaxed: a hint.
            self.own(&self.words.freeing)
                .fetch_add(1, Ordering::Relaxed);
            let mut g = fs.tree.lock();
            if d.identity() == (owner, index) && !d.snapshot().is_removed() {
                // T1-T3 of protocol 5.7, as `remove_pages_from`.
                let old = d.mark_removed();
                crate::sync::fence(Ordering::SeqCst);
                let run = g.mark_run_stale(&self.nodes, index);
                let removed = g.remove(&self.nodes, index, f);
                let after = self.unlinked(run, removed, index, f);
                drop(g);
                if old.is_dirty() {
                    self.cleaned();
                    // Relaxed: read by `sync`'s swap; the first page lost
                    // is the one named.
                    let _ = fs.lost.compare_exchange(
                        0,
                        index + 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                self.after_unlink(after, f);
            } else {
                drop(g);
            }
            // Release: as `remove_pages_from`.
            self.own(&self.words.freeing)
                .fetch_sub(1, Ordering::Release);
        });
        // Waiters retry: the page is gone from the index.
        d.unlatch();
    }

    /// The watcher's recovery of a dead process (5.14 D5): every page
    /// still latched by the process tagged `tag` is taken over and dropped
    /// (L3-L4), whether or not anyone waits for it (a future waiting on it
    /// is woken by the unlatch), and every write-back it had started is
    /// ended as failed (W3: the page dirty and tagged again; the file's
    /// count of write-backs comes down in `recover_dead_pins`, after, and a
    /// sync waiting for it writes the page). One pass over the
    /// descriptors, then one more that tags again every dirty page still
    /// in its index. Context: no sleep but the tree and table locks; a
    /// thread of the recovery's own.
    #[cfg(not(loom))]
    pub(crate) fn recover_dead_pages(&self, tag: u32) {
        for f in 0..self.frames.len() as FrameNo {
            let d = self.desc(f);
            if d.writeback_owner() == tag {
                if d.snapshot().is_under_writeback() {
                    let (owner, index) = d.identity();
                    self.with_slot(owner, |fs| {
                        self.cancel_writeback(
                            fs,
                            index,
                            f,
                            crate::cache::WritebackCause::Background,
                        );
                        // Its count in `fs.writeback` is the dead
                        // process's to give back: its counts say how much
                        // it added (5.15), taken back after this pass.
                    });
                }
                d.clear_writeback_owner(tag);
            }
            if d.take_dead_latch(tag) {
                let (owner, index) = d.identity();
                self.drop_torn(owner, index, f);
            }
        }
        // Dirty pages whose tags the dead process took for a write-back it
        // never started (or a sync's take it never finished): tagged again,
        // so that the next sync writes them rather than misses them. A tag
        // on a page a live process is writing back just now costs at most
        // a second write of it.
        for f in 0..self.frames.len() as FrameNo {
            let d = self.desc(f);
            let s = d.snapshot();
            if s.is_dirty() && !s.is_removed() && s.refs() > 0 {
                let (owner, index) = d.identity();
                self.with_slot(owner, |fs| {
                    if fs.tree.lookup(&self.nodes, index) == Some(f) {
                        fs.tree.tag_dirty(&self.nodes, index);
                    }
                });
            }
        }
    }

    /// Runs `f` on the slot of file `owner`: this process's, or one
    /// borrowed from the file table (a file not open here: then, if `f`
    /// left its index empty, its entry is freed when nothing else holds
    /// it). Nothing if no such file is known.
    pub(super) fn with_slot(&self, owner: u64, f: impl FnOnce(&super::registry::FileSlot)) {
        if let Some(fs) = self.file_by_id(owner) {
            f(&fs);
        } else if let Some(t) = self.file_table() {
            if let Some(slot) = t.borrow(owner) {
                f(slot);
                let emptied = slot.tree.is_empty();
                t.unborrow(owner);
                if emptied {
                    t.free_if_unused(owner);
                }
            }
        }
    }

    /// `File::set_len`. Context: may sleep (I/O; waits for the new last
    /// page to be idle, with no lock held); takes the size lock
    /// exclusively, never waiting for a page under it. The caller holds no
    /// pin of the new last page and no `PageMut` of this file.
    pub(crate) fn set_len(&self, fs: &FileShared, new_len: u64) -> io::Result<()> {
        self.check_len(fs, new_len, "set_len")?;
        let w = fs.write_fd.get().cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: set_len through a read-only handle", fs.path.display()),
            )
        })?;
        let ps = self.page_size as u64;
        // The cut recorded is this call's own (it waits for its new last
        // page): not another's to finish first.
        let mut mine = false;
        loop {
            // Exclusive from the first page the change touches: the shorter
            // length's page (the new last page's tail, the pages removed,
            // or the page a writer past the old end would extend), or a
            // cut left under way (T0) if that is lower.
            // Acquire: pairs with writers' `fetch_max`; the length only
            // grows until we hold the lock (`set_len`s are one at a time),
            // so a page computed from an older length is no later.
            let size = fs.size.write(|| {
                let len = fs.len.load(Ordering::Acquire).min(new_len);
                pending_cut(fs).map_or(len, |(to, _)| to.min(len)) / ps
            });
            // T0: a cut left under way by a `set_len` whose process died
            // (or that waits for its new last page): finished first, as
            // that call would have.
            if let Some((to, _)) = pending_cut(fs).filter(|_| !mine) {
                fs.disk.touch();
                match self.cut(fs, &size, to, Some(&*w), false)? {
                    Cut::Done => {}
                    Cut::Busy(last) => {
                        drop(size);
                        self.wait_idle(fs, last)?;
                        continue;
                    }
                }
            }
            // Acquire: exclusive size lock; pairs with writers' `fetch_max`.
            let old = fs.len.load(Ordering::Acquire);
            if new_len >= old {
                fs.disk.touch();
                w.set_len(new_len).map_err(|e| {
                    context(e, format!("{}: extending to {new_len}", fs.path.display()))
                })?;
                // Release: readers that see the new length see the extension
                // (the file bytes are zero; no cached page covers them).
                fs.len.store(new_len, Ordering::Release);
                return Ok(());
            }
            fs.disk.touch();
            match self.cut(fs, &size, new_len, Some(&*w), true) {
                Ok(Cut::Done) => return Ok(()),
                Ok(Cut::Busy(last)) => {
                    drop(size);
                    mine = true;
                    self.wait_idle(fs, last)?;
                }
                Err(e) => {
                    return Err(context(
                        e,
                        format!("{}: truncating to {new_len}", fs.path.display()),
                    ))
                }
            }
        }
    }

    /// Steps T0-5 of a cut to `to` bytes (shorter than the length), under
    /// the size lock held exclusively from `to`'s page (`_size`). `w`: the
    /// file's descriptor, to `ftruncate` (step 1); without one (the
    /// recovery of a dead process that does not have the file open) only
    /// a cut whose `ftruncate` is known done is finished, and one that may
    /// not have reached it is let go: the cache had changed nothing yet.
    /// `Busy(last)`: the new last page is held by others; the caller drops
    /// the size lock, waits for that page alone and calls again (the cut
    /// stays recorded meanwhile, T0). `own`: the cut is the caller's own
    /// `set_len` (a failed `ftruncate` then clears the record: the call
    /// fails, and no later call makes its cut); else it finishes one left
    /// under way (kept recorded on failure, for the next taker). Context:
    /// may sleep (I/O); takes the tree lock.
    pub(crate) fn cut(
        &self,
        fs: &FileSlot,
        _size: &SizeExclusive<'_>,
        to: u64,
        w: Option<&dyn BackendFile>,
        own: bool,
    ) -> io::Result<Cut> {
        let ps = self.page_size as u64;
        // T0. Relaxed: read and written under X1's mutex only (a dead
        // process's recovery reads them under it too).
        let done = fs.cut.load(Ordering::Relaxed) == (to + 1) | CUT_DONE;
        #[cfg(not(loom))]
        fs.cut_by.store(
            crate::sync::futex::member_at(&fs.cut as *const _ as usize).map_or(0, |(_, m)| m.tag),
            Ordering::Relaxed,
        );
        fs.cut.store(
            (to + 1) | if done { CUT_DONE } else { 0 },
            Ordering::Relaxed,
        );
        // 1. ftruncate first: if it fails, nothing has changed. Until
        // the length is stored, readers may see zeros read from disk
        // in the range being cut (pages there are removed in 4);
        // writers and write-back wait for the size lock.
        match w {
            Some(w) => {
                if let Err(e) = w.set_len(to) {
                    // Relaxed: as above. A cut left under way and known
                    // done stays recorded (a later taker tries it again).
                    if own || !done {
                        fs.cut.store(0, Ordering::Relaxed);
                    }
                    return Err(e);
                }
                fs.cut.store((to + 1) | CUT_DONE, Ordering::Relaxed);
            }
            None if !done => {
                fs.cut.store(0, Ordering::Relaxed);
                return Ok(Cut::Done);
            }
            None => {}
        }
        // Nothing past the cut is on disk now (no write-back runs: they
        // hold the size lock shared). Release: as `len`'s store below.
        fs.disk_end.fetch_min(to, Ordering::AcqRel);
        let last = to / ps;
        // 2-3 under the tree lock: a miss that inserts the new last
        // page after it sees the new length (and zero-fills past
        // it); one that inserted before is found here.
        let g = fs.tree.lock();
        let tail = if to % ps != 0 {
            self.try_latch_now(fs, last)
        } else {
            Tail::Absent
        };
        if let Tail::Busy = tail {
            return Ok(Cut::Busy(last)); // `ftruncate` again: writes may have landed
        }
        // 3. The length: no write-back after this point writes past
        // the new end (write-backs read the length under their pin).
        // Release: pairs with the Acquire loads of write-back and
        // `fill`.
        fs.len.store(to, Ordering::Release);
        drop(g);
        // 4.
        self.remove_pages_from(fs, to.div_ceil(ps));
        // 5.
        if let Tail::Latched(latch) = tail {
            let off = (to % ps) as usize;
            // SAFETY: latched, drained, version odd: exclusive; the
            // range ends at the end of the frame.
            unsafe { latch.zero(off, self.page_size - off) };
        }
        // T0's end. Relaxed: as above.
        fs.cut.store(0, Ordering::Relaxed);
        Ok(Cut::Done)
    }

    /// A cut that a `set_len` of the process tagged `tag` (dead, all it
    /// held given back) left under way on file `id` (5.6 T0: killed
    /// inside the cut, or while it waited for the new last page):
    /// finished as that call would have, with the file's `ftruncate`
    /// again if this process has it open for writing, else only if that
    /// is known done (otherwise the cache had changed nothing yet, and it
    /// is let go). Context: may sleep (the size lock held exclusively,
    /// then, with nothing held, the new last page idle); the recovery's
    /// thread.
    #[cfg(not(loom))]
    pub(crate) fn finish_dead_cut(&self, id: u64, tag: u32) {
        let open = self.file_by_id(id);
        let fd = open.as_ref().and_then(|fs| fs.write_fd.get().cloned());
        let ps = self.page_size as u64;
        // Relaxed: read and written under X1's mutex (here a first look).
        let its = |fs: &FileSlot| {
            fs.cut.load(Ordering::Relaxed) != 0 && fs.cut_by.load(Ordering::Relaxed) == tag
        };
        self.with_slot(id, |fs| loop {
            if !its(fs) {
                return;
            }
            let size = fs.size.write(|| {
                let len = fs.len.load(Ordering::Acquire);
                pending_cut(fs).map_or(len, |(to, _)| to.min(len)) / ps
            });
            let Some((to, _)) = pending_cut(fs).filter(|_| its(fs)) else {
                return;
            };
            match self.cut(fs, &size, to, fd.as_deref(), false) {
                Ok(Cut::Busy(last)) => {
                    drop(size);
                    match &open {
                        Some(fs) => {
                            let _ = self.wait_idle(fs, last);
                        }
                        None => std::thread::sleep(std::time::Duration::from_millis(1)),
                    }
                }
                // A failed `ftruncate` leaves it recorded for the next
                // `set_len` of the file, which reports its own.
                Ok(Cut::Done) | Err(_) => return,
            }
        });
    }

    /// Step 2 without waiting: page `index` pinned, latched and drained now,
    /// or absent, or busy. Context: no sleep; called under the size lock
    /// held exclusively and the tree lock (pins, latch attempts and a
    /// release that frees take only leaf locks).
    fn try_latch_now(&self, fs: &FileSlot, index: u64) -> Tail<'_> {
        let Some(f) = fs.tree.lookup(&self.nodes, index) else {
            return Tail::Absent;
        };
        let f: FrameNo = match self.pin_as(f, fs.id, index) {
            Ok(f) => f,
            // Recycled: another page's frame now; the slot is stale.
            Err(PinMiss::Stale) if fs.tree.lookup(&self.nodes, index).is_none() => {
                return Tail::Absent
            }
            Err(_) => return Tail::Busy,
        };
        let d = self.desc(f);
        if !d.try_latch() {
            self.release(f);
            return Tail::Busy;
        }
        // Protocol 5.7 W2 without W3: a run holding the page makes it busy.
        let run = self.run_over(fs, index, f);
        let s = d.snapshot();
        let removed = s.is_removed() || matches!(run, RunHold::Removed);
        if removed || s.refs() > s.latch_base() || matches!(run, RunHold::Held(..)) {
            d.unlatch();
            self.release(f);
            return if removed { Tail::Absent } else { Tail::Busy };
        }
        Tail::Latched(FrameLatch::new(self, f, None))
    }

    /// Waits, holding no lock, until page `index` of `fs` is neither
    /// latched nor pinned by others (or gone). Context: may sleep; waits
    /// for this one page only.
    fn wait_idle(&self, fs: &FileShared, index: u64) -> io::Result<()> {
        while let Some(f) = self.find_get(fs, index)? {
            if self.latch_pinned(f, fs.id, index) {
                // Removed or not, the caller looks again.
                let _ = self.wait_run_pins(fs, index, f);
                // Latched and drained: idle. Let go; the caller retries.
                self.desc(f).unlatch();
                self.release(f);
                return Ok(());
            }
        }
        Ok(())
    }

    /// Rejects a length the file cannot have: past `i64::MAX` or the
    /// filesystem's largest file (`EFBIG`, as the kernel's write and
    /// truncate do). Context: any.
    pub(crate) fn check_len(&self, fs: &FileShared, len: u64, what: &str) -> io::Result<()> {
        if len > i64::MAX as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: {what} to length {len}: not a file length",
                    fs.path.display()
                ),
            ));
        }
        if len > fs.max_len {
            return Err(context(
                io::Error::from_raw_os_error(libc::EFBIG),
                format!(
                    "{}: {what} to length {len}: past the largest file this filesystem holds ({} bytes)",
                    fs.path.display(),
                    fs.max_len
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
#[path = "truncate_tests.rs"]
mod tests;
