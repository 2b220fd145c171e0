//! Protocol 5.1 (lookup: speculative pin) against 5.2 (removal: freeze),
//! and the gang lookup built on it.
//!
//! ```text
//!  reader (no lock, no guard)               remover (file's tree lock held)
//!  1. f = tree.lookup(index)                A. freeze: CAS state from exactly
//!     empty -> miss (5.3, miss.rs)             {refs = cache + remover, clean,
//!  2. CAS state: refs+1 unless refs == 0       unlatched} to 0; failure means
//!     or LATCHED (Acquire on success)          a reader holds it: leave it
//!     refs == 0 -> retry from 1             B. the CAS compared the flags: the
//!     LATCHED   -> park while the frame        page was clean and idle when
//!                  still is (file, index),     frozen (freeze-then-test)
//!                  then retry from 1        C. clear the slot, make the
//!  3. re-check identity (owner, index)         version odd, clear identity,
//!     and !REMOVED; mismatch -> release        hand the frame to its next use
//!     through the common path, retry
//! ```
//!
//! Ordering: 2 and A are RMWs on one word, so they are totally ordered. If 2
//! comes first, A sees the extra reference and fails. If A comes first, 2
//! sees 0 and retries. If the frame was freed and reused before 2, the CAS
//! reads from the new owner's publication (`FrameDesc::assign`, Release) and
//! so sees the new identity, which step 3 rejects (identity only changes
//! while the refcount is 0, so it is stable while we hold the pin: this is
//! why step 3 checks identity rather than re-loading the slot, which with
//! type-stable index nodes could come from a recycled node). The stray
//! reference is dropped by the common release path, which frees the frame
//! if it was the last.
//!
//! The remover's side lives in `cache/evict.rs` (eviction) and
//! `truncate.rs` (5.6, which orphans instead of freezing).
//!
//! Waiting in step 2 is restricted to the latch of the page being looked up
//! (`FrameDesc::wait_unlatched_as`): gang lookups hold pins of lower pages
//! while they look up the next one, and are deadlock-free with writers only
//! because every such wait is for a higher page of the same file.
//!
//! # Gang lookup
//!
//! `pages(start, max)` walks to a leaf once and pins consecutive slots of it,
//! each with steps 2-3 above; a busy page at `i` takes the full path for
//! `i`, a miss reads the run of missing pages from `i` with one I/O
//! (`batch.rs`), and the walk resumes after them.

use super::{FileShared, Inner};
use crate::frame::state::{PinFail, PinKind, State};
use crate::frame::FrameNo;
use crate::stats::Counter;
use std::io;

/// Frozen-frame retries before waiting on the tree lock instead of spinning
/// (a remover preempted between freeze and slot clear must not make readers
/// burn their time slice).
const SPIN_RETRIES: usize = 4;

/// Why [`Inner::pin_as`] did not return a pinned page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PinMiss {
    /// The pin itself failed (frame free/frozen, latched, or overflow).
    Fail(PinFail),
    /// Pinned, but the frame holds another page (or a removed one), or the
    /// frame number was out of range; the reference was dropped.
    Stale,
}

impl Inner {
    /// Protocol 5.1 steps 2-3 on frame `f`, read from a slot without a
    /// pin: take a reference unless free or latched, then re-check that the
    /// frame still holds page `(owner, index)` and was not removed. The one
    /// place these steps are written; every lookup (file pages, gang,
    /// anonymous pages) goes through it. Baseline builds take a page mutex
    /// around the pin CAS and report the hit to strict LRU; the default
    /// build tests `hooks` twice (one byte, already in a register for the
    /// second test) and calls neither. Context: any, no sleep.
    #[inline(always)]
    pub(crate) fn pin_as(&self, f: FrameNo, owner: u64, index: u64) -> Result<FrameNo, PinMiss> {
        if f as usize >= self.frames.len() {
            return Err(PinMiss::Stale); // garbage from a recycled index node
        }
        let d = self.desc(f);
        let s = if self.hooks & super::HOOK_PAGE_LOCKS == 0 {
            d.try_pin(PinKind::User)
        } else {
            self.try_pin_locked(f)
        }
        .map_err(PinMiss::Fail)?;
        if !s.is_removed() && d.identity() == (owner, index) {
            debug_assert!(s.is_uptodate(), "unlatched page not up to date");
            self.hit_hook(f);
            return Ok(f);
        }
        self.release(f);
        Err(PinMiss::Stale)
    }

    /// The pin CAS of [`Inner::pin_as`] under the page's baseline mutex.
    /// Context: no sleep beyond the page mutex (a leaf).
    #[cold]
    #[inline(never)]
    fn try_pin_locked(&self, f: FrameNo) -> Result<State, PinFail> {
        let _g = self.page_locks.as_ref().map(|l| l.lock(f));
        self.desc(f).try_pin(PinKind::User)
    }

    /// Protocol 5.1, first attempt only, inlined into the hit paths. `None`
    /// means "take the full path" ([`Inner::find_get`]), which also decides
    /// misses authoritatively. Context: any, no sleep.
    #[inline(always)]
    pub(crate) fn find_get_fast(&self, fs: &FileShared, index: u64) -> Option<FrameNo> {
        let f = fs.tree.lookup(&self.nodes, index)?;
        self.pin_as(f, fs.id, index).ok()
    }

    /// Protocol 5.1. Returns the pinned frame of `(fs, index)` if cached.
    /// Context: may sleep (parks on this page's latch only); the caller
    /// holds no latch and no tree lock, and pins only lower pages of `fs`
    /// (lock rule 4).
    #[inline(never)]
    pub(crate) fn find_get(&self, fs: &FileShared, index: u64) -> io::Result<Option<FrameNo>> {
        let mut retries = 0;
        loop {
            // 1. load the slot
            let Some(f) = fs.tree.lookup(&self.nodes, index) else {
                return Ok(None);
            };
            // 2-3. pin unless free/frozen or latched; re-check identity
            match self.pin_as(f, fs.id, index) {
                Ok(f) => return Ok(Some(f)),
                Err(PinMiss::Stale) if f as usize >= self.frames.len() => {
                    return Ok(None); // garbage from a recycled node: locked path decides
                }
                Err(PinMiss::Stale) => {
                    if retries >= SPIN_RETRIES {
                        // A page whose remover died half-way (5.6 step 4).
                        self.finish_removal(fs, index, f);
                    }
                }
                Err(PinMiss::Fail(PinFail::Free)) => {
                    if retries >= SPIN_RETRIES {
                        // Wait for the remover (it holds the tree lock until
                        // the slot is cleared) instead of spinning.
                        drop(fs.tree.lock());
                    }
                }
                // Only this page's latch: see `wait_unlatched_as`.
                Err(PinMiss::Fail(PinFail::Latched)) => {
                    if self.desc(f).wait_unlatched_as(fs.id, index) {
                        self.drop_torn(fs.id, index, f);
                    }
                }
                Err(PinMiss::Fail(PinFail::Overflow)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{}: page {index}: too many pins on one page",
                            fs.path.display()
                        ),
                    ))
                }
            }
            retries += 1;
            self.count(Counter::LookupRetries);
            crate::sync::retry_point();
        }
    }

    /// A pinned, up-to-date page (hit, or miss filled by us). Context: may
    /// sleep (latch waits, the read of a miss); as [`Inner::find_get`].
    #[inline(always)]
    pub(crate) fn get_page(&self, fs: &FileShared, index: u64) -> io::Result<FrameNo> {
        if let Some(f) = self.find_get_fast(fs, index) {
            self.count(Counter::Hits);
            return Ok(f);
        }
        self.get_page_slow(fs, index)
    }

    /// Gang lookup: pins up to `end - start` consecutive pages from `start`
    /// (all below end of file), reading missing ones, and hands each pinned
    /// frame to `out` in page order. Context: may sleep, as
    /// [`Inner::get_page`]; waits only in ascending page order (rule 4).
    pub(crate) fn gang(
        &self,
        fs: &FileShared,
        start: u64,
        end: u64,
        mut out: impl FnMut(u64, FrameNo),
    ) -> io::Result<()> {
        let mut i = start;
        while i < end {
            // Fast path: one walk to the leaf, then pin consecutive slots
            // (each with the 5.1 pin and identity check).
            let mut advanced = false;
            if let Some(leaf) = fs.tree.leaf(&self.nodes, i) {
                while i < end {
                    let Some(f) = leaf.slot((i & 63) as usize) else {
                        break;
                    };
                    let Ok(f) = self.pin_as(f, fs.id, i) else {
                        break;
                    };
                    self.count(Counter::Hits);
                    out(i, f);
                    i += 1;
                    advanced = true;
                    if i & 63 == 0 {
                        break; // next leaf
                    }
                }
            }
            if i < end && !(advanced && i & 63 == 0) {
                // A miss or contention at `i`: the full path, and on a miss
                // the missing pages from `i` on read in one run (batch.rs).
                if let Some(f) = self.find_get(fs, i)? {
                    self.count(Counter::Hits);
                    out(i, f);
                    i += 1;
                    continue;
                }
                let run = self.insert_run(fs, i, end, true)?;
                if run.len() == 0 {
                    continue; // appeared meanwhile: look it up again
                }
                for f in self.read_run(fs, run, || {})? {
                    out(i, f);
                    i += 1;
                }
            }
        }
        Ok(())
    }
}
