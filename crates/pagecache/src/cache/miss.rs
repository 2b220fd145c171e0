//! Protocol 5.3: the miss. Split in two halves so that the thread that
//! completes a read need not be the one that started it (an I/O completion
//! reaped by another thread, readahead): [`Inner::insert_latched`] puts the
//! page in the index latched, [`Inner::complete_fill`] finishes it with the
//! read's result.
//!
//! ```text
//!  inserter (no lock held on entry)          waiters (5.1 on the same page)
//!  1. allocate a frame (free list, else
//!     reclaim: evict a clean page, writing
//!     a dirty one back first)
//!  2. tree lock; re-check the slot            see LATCHED at 5.1 step 2:
//!     (authoritative). Taken: free our        park on the page's latch
//!     frame, drop the lock, back to 5.1.      (wait_unlatched_as)
//!     Empty:
//!     assign identity (version odd/even)
//!     and state {refs = cache + inserter,
//!     LATCHED}, store the slot (Release);
//!     drop the tree lock
//!  3. read the page, no lock held (the
//!     latch is the page's; its holder is
//!     "the fill", not a thread)
//!  4. complete with the result:
//!     Ok(n): zero past n and past EOF;        wake: pin the valid page
//!       readers unlatch with UPTODATE,
//!       writers keep the latch and write
//!     Err:  take the page out of the index    wake: slot empty or REMOVED,
//!       (orphan), unlatch, drop the pin,      retry from 5.1, miss, and
//!       return the error with context         read again
//! ```
//!
//! Ordering: the slot store of 2 is Release after the Release of the
//! state's publication, so a waiter that loads the slot sees the latched
//! state and parks; the unlatch of 4 (Release) publishes the bytes and
//! `UPTODATE` to the waiter's Acquire pin. Concurrent misses on one page
//! cause exactly one read (`tests/single_read.rs`). A page whose read failed
//! is never seen valid: it is removed before it is unlatched.

use super::{atomic_zero, FileShared, Inner};
use crate::error::context;
use crate::frame::alloc::FrameAllocator;
use crate::frame::state::{Released, State};
use crate::frame::FrameNo;
use crate::io::read_full;
use crate::stats::Counter;
use crate::sync::Ordering;
use std::io;

/// Where a page's frame came from.
pub(crate) enum Got {
    /// Found cached and pinned.
    Hit(FrameNo),
    /// Inserted by us: pinned, latched, drained, not yet up to date; the
    /// caller must fill it ([`Inner::begin_fill`] .. [`Inner::complete_fill`]).
    Inserted(FrameNo),
}

/// A fill in progress (5.3 steps 3-4): the latched page and the file length
/// seen when it began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fill {
    pub(crate) index: u64,
    pub(crate) frame: FrameNo,
    /// Logical length when the fill began: bytes past it are zero.
    len: u64,
}

impl Fill {
    /// The file offset the read starts at, or `None` when the page lies
    /// wholly past end of file (nothing to read: it is all zeros).
    pub(crate) fn read_offset(&self, shift: u32) -> Option<u64> {
        let start = self.index << shift;
        (start < self.len).then_some(start)
    }
}

impl Inner {
    /// Lookup, else protocol 5.3 steps 1-2. On [`Got::Inserted`] the caller
    /// holds the latch of a page that is not up to date and must complete
    /// its fill. Context: may sleep (latch waits, eviction's write-back);
    /// no latch or tree lock held; takes the tree lock.
    pub(crate) fn insert_latched(&self, fs: &FileShared, index: u64) -> io::Result<Got> {
        loop {
            if let Some(f) = self.find_get(fs, index)? {
                return Ok(Got::Hit(f));
            }
            if let Some(f) = self.try_insert(fs, index, true)? {
                return Ok(Got::Inserted(f));
            }
            // theirs: pin it or wait on its latch
        }
    }

    /// 5.3 steps 1-2 once: a frame, then the page inserted latched if its
    /// slot is still empty (`None` if another thread's page is there now).
    /// Never waits for a latch, so callers may hold latches of lower pages
    /// (batched misses, readahead). Context: may sleep (eviction's
    /// write-back); takes the tree lock; the caller holds no tree lock.
    /// `patient` as for [`Inner::alloc_frame_as`].
    pub(crate) fn try_insert(
        &self,
        fs: &FileShared,
        index: u64,
        patient: bool,
    ) -> io::Result<Option<FrameNo>> {
        // 1. a frame, with no lock held
        let f = self
            .alloc_frame_as(patient)
            .map_err(|e| context(e, format!("{}: page {index}", fs.path.display())))?;
        let d = self.desc(f);
        // 2. insert under the tree lock, re-checking the slot
        let mut g = fs.tree.lock();
        if g.get(&self.nodes, index).is_some() {
            drop(g);
            self.alloc.free(f);
            return Ok(None);
        }
        d.assign(fs.id, index, d.with_holder(State::INSERTED_LATCHED));
        match g.insert(&self.nodes, index, f) {
            Ok(Ok(())) => {}
            Ok(Err(_)) => unreachable!("slot checked empty under the lock"),
            Err(e) => {
                drop(g);
                // Not inserted, but published: a lookup holding a stale
                // slot for this frame's previous use as the same page
                // may have found it and be waiting on its latch. Undo
                // as `abandon` does: orphan, unlatch (wakes them: they
                // retry), release (the last reference frees it).
                let _ = d.orphan();
                d.unlatch();
                self.release(f);
                return Err(context(e, format!("{}: page {index}", fs.path.display())));
            }
        }
        drop(g);
        self.policy.inserted(&self.frames, f);
        self.count(Counter::Misses);
        Ok(Some(f))
    }

    /// 5.3 step 3 begins: snapshots the length the fill zero-fills past.
    /// Context: any; the caller holds the latch of the inserted page.
    pub(crate) fn begin_fill(&self, fs: &FileShared, index: u64, frame: FrameNo) -> Fill {
        // Acquire: pairs with writers' `fetch_max` (AcqRel) and `set_len`'s
        // Release store, so a length we see covers bytes already written.
        let len = fs.len.load(Ordering::Acquire);
        Fill { index, frame, len }
    }

    /// 5.3 step 3, synchronously: reads the page into its frame. Returns the
    /// bytes read (0 past end of file). Context: may sleep (I/O); no lock
    /// held but the page's latch (owned by the fill).
    pub(crate) fn read_fill(&self, fs: &FileShared, fill: &Fill) -> io::Result<usize> {
        let Some(offset) = fill.read_offset(self.shift) else {
            return Ok(0);
        };
        crate::sync::may_block("a miss's read");
        self.count(Counter::Reads);
        // SAFETY: the fill owns the latch of a page whose content is not
        // published (not UPTODATE, refs = cache + inserter, drained);
        // optimistic readers see !UPTODATE and back off.
        let buf = unsafe { self.frames.bytes_mut(fill.frame) };
        // The read writes the frame's bytes: to loom's models a writer of
        // them (`crate::sync::Witness`), ordered after the frame's new
        // version by the Release fence of its reassignment, so a stale
        // optimistic reader that copies these bytes fails validation.
        self.desc(fill.frame).witness().touch();
        fs.disk.touch();
        read_full(&*fs.read_fd, buf, offset)
    }

    /// 5.3 step 4: completes a fill with the read's result, on any thread.
    /// `Ok(n)`: zeroes the bytes past `n` and past end of file; the page
    /// stays latched and pinned (the caller unlatches with `UPTODATE`, or
    /// writes it first). `Err`: takes the page out of the index, unlatches
    /// it (waiters retry and read again), drops the fill's pin and returns
    /// the error with the file and page. Context: no sleep; takes the tree
    /// lock on error.
    pub(crate) fn complete_fill(
        &self,
        fs: &FileShared,
        fill: Fill,
        res: io::Result<usize>,
    ) -> io::Result<()> {
        let ps = self.page_size as u64;
        let start = fill.index << self.shift;
        match res {
            Ok(n) => {
                // Bytes past what the file holds, and past the logical end,
                // are zero (never stale bytes of a previous frame user).
                // Atomic stores: a stale optimistic reader of the frame's
                // previous page may still be copying (and will discard it).
                let valid = (n as u64).min(fill.len.saturating_sub(start)).min(ps) as usize;
                // SAFETY: the fill owns the latch of the unpublished page;
                // the range ends at the end of the frame.
                unsafe {
                    atomic_zero(
                        self.desc(fill.frame).witness(),
                        self.frames.ptr(fill.frame).add(valid),
                        self.page_size - valid,
                    )
                };
                Ok(())
            }
            Err(e) => {
                self.count(Counter::ReadErrors);
                self.abandon(fs, fill.index, fill.frame);
                Err(context(
                    e,
                    format!("{}: reading page {}", fs.path.display(), fill.index),
                ))
            }
        }
    }

    /// Steps 3-4 on the calling thread. The page stays latched on success.
    /// Context: may sleep (I/O); holds only the page's latch.
    pub(crate) fn fill(&self, fs: &FileShared, index: u64, f: FrameNo) -> io::Result<()> {
        let fill = self.begin_fill(fs, index, f);
        let res = self.read_fill(fs, &fill);
        self.complete_fill(fs, fill, res)
    }

    /// Takes a latched page that never became valid out of the index,
    /// unlatches it (waking waiters, who retry) and drops the caller's pin.
    /// Context: no sleep; takes the tree lock.
    pub(crate) fn abandon(&self, fs: &FileShared, index: u64, f: FrameNo) {
        self.abandon_unindex(fs, index, f);
        self.abandon_unlatch(f);
    }

    /// `abandon`'s first half, all that needs the file: the page leaves the
    /// index (it stays latched). Context: takes the tree lock.
    pub(crate) fn abandon_unindex(&self, fs: &FileShared, index: u64, f: FrameNo) {
        let d = self.desc(f);
        let mut g = fs.tree.lock();
        let orphaned = if g.remove(&self.nodes, index, f) {
            Some(d.orphan())
        } else {
            None // truncate removed it already
        };
        drop(g);
        debug_assert!(orphaned != Some(Released::Last), "caller still holds a pin");
    }

    /// `abandon`'s second half: unlatch (waiters retry and miss) and drop
    /// the fill's pin, which frees the frame. Context: no sleep.
    pub(crate) fn abandon_unlatch(&self, f: FrameNo) {
        self.desc(f).unlatch();
        self.release(f);
    }

    /// The miss side of [`Inner::get_page`]: a pinned, up-to-date page.
    /// Context: as `insert_latched`, plus the read's I/O.
    #[cold]
    #[inline(never)]
    pub(crate) fn get_page_slow(&self, fs: &FileShared, index: u64) -> io::Result<FrameNo> {
        match self.insert_latched(fs, index)? {
            Got::Hit(f) => {
                self.count(Counter::Hits);
                Ok(f)
            }
            Got::Inserted(f) => {
                self.fill(fs, index, f)?;
                self.desc(f).unlatch_uptodate();
                Ok(f)
            }
        }
    }
}
