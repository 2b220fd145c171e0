//! Anonymous regions: zero-filled pages that share the cache's frame budget.
//!
//! An [`AnonRegion`] is an array of page slots (`frame + 1`, 0 = never
//! touched or freed). Its frames are ordinary frames of the arena, marked
//! `UNEVICTABLE` so that eviction skips them (there is no swap yet), with
//! an owner id no file has; pins, latches and the common release path are
//! the same as for file pages.
//!
//! # Protocol: first touch (fault) vs. free
//!
//! ```text
//!  toucher of page i (no lock)               free(range) / drop (no lock)
//!  1. e = slot[i] (Acquire); e != 0 ->       A. e = slot[i].swap(0) (AcqRel);
//!     pin it as in 5.1 (CAS, identity           0 -> nothing to free
//!     (region, i) and !REMOVED re-check),    B. orphan(frame): REMOVED and the
//!     then re-load the slot: still e, or        region's reference dropped in
//!     release and retry from 1                  one RMW; last reference -> free
//!  2. e == 0: allocate a frame (free list,      the frame now, else the last
//!     else reclaim file pages), zero it         pin's release frees it
//!     with atomic stores, set identity
//!     (version odd/even), publish
//!     refs = 1 (the region's) + 1 (ours)
//!  3. CAS slot[i] 0 -> frame + 1 (Release);
//!     lost -> orphan our frame and drop our
//!     reference through the common release
//!     path; retry from 1 (pin the winner's)
//! ```
//!
//! Ordering: the slot CAS (3) is Release, so a toucher that loads the new
//! entry (Acquire, 1) sees the zeroed bytes, identity and state published
//! before it. Two touchers race only on the CAS.
//!
//! The loser's frame is *not* invisible: a toucher holding a stale entry
//! for a frame that was freed and then reused by the loser for the same
//! page finds the right identity and pins it (ABA; found by the loom model
//! on the real code, where the loser used to reset the frame under that
//! pin). Hence the re-load in step 1 — the slot holds `e` after the pin
//! only if `e`'s CAS won, and a pinned frame cannot be freed and
//! republished — and the loser's undo through `orphan` and `release`, so a
//! stray pin keeps the frame alive until it lets go.
//!
//! A free (A) and a toucher's pin (1) are ordered as 5.1 vs 5.6: a
//! pin taken before the orphan step keeps valid bytes until released; one
//! taken after sees `REMOVED` and retries, finding the slot empty and
//! faulting a fresh zero page. Zeroing uses atomic stores because an
//! optimistic file reader may still be validating a copy from the recycled
//! frame (its version check discards it).
//!
//! The loom model `anon_first_touch_vs_free` (`tests/loom.rs`) runs this
//! code: two racing touchers (one writing) and a free.

use crate::cache::{FrameLatch, FramePin, Handle, PinMiss};
use crate::error::context;
use crate::frame::state::{PinFail, Released, State};
use crate::frame::FrameNo;
use crate::stats::Counter;
use crate::sync::unmodelled::AtomicU64 as IdCounter;
use crate::sync::{AtomicU32, Ordering};
use std::io;
use std::ops::{Deref, DerefMut, Range};
use std::sync::Arc;

/// Owner ids of anonymous regions have this bit set; file ids never do, so
/// a region's pages never match a file page's identity. (The cache itself
/// tells anonymous frames apart by their `UNEVICTABLE` state, not by id.)
/// Below it, the tag of the process that made the region (bits 31-62; 0
/// in a private cache), so that the recovery of a dead process finds the
/// frames of its regions (`Inner::recover_dead_anon`); then a counter.
const ANON_BIT: u64 = 1 << 63;

/// Where a region id's process tag starts.
const TAG_SHIFT: u32 = 31;

/// The tag of the process whose region owns pages of `owner`, if `owner`
/// is a region's id.
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn region_process(owner: u64) -> Option<u32> {
    (owner & ANON_BIT != 0).then_some((owner >> TAG_SHIFT) as u32)
}

/// Region ids (an id generator: unmodelled under loom).
static NEXT_REGION: IdCounter = IdCounter::new(1);

/// A region of anonymous, zero-filled pages from the cache's budget: pages
/// appear on first touch, are never evicted (there is no swap yet), and go
/// back to the cache when freed or when the region drops.
///
/// ```
/// use pagecache::{Config, PageCache};
/// # fn main() -> std::io::Result<()> {
/// let cache = PageCache::new(Config { capacity: 1 << 20, ..Config::default() })?;
/// let region = cache.anon(64 << 10)?; // 16 pages, none resident yet
/// assert_eq!(region.resident(), 0);
/// region.page_mut(3)?[0] = 42; // first touch: a zeroed frame
/// assert_eq!(region.page(3)?[0], 42);
/// assert_eq!(region.resident(), 1);
/// region.free(3..4); // back to the cache; reads as zeros next time
/// assert_eq!(region.page(3)?[0], 0);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct AnonRegion {
    cache: Arc<Handle>,
    /// (C) owner id of this region's frames.
    id: u64,
    /// (C) length in bytes.
    len: u64,
    /// (A) `frame + 1` per page, 0 = not present.
    slots: Box<[AtomicU32]>,
}

impl AnonRegion {
    pub(crate) fn new(cache: Arc<Handle>, len: u64) -> io::Result<AnonRegion> {
        let ps = cache.page_size as u64;
        let pages = len.div_ceil(ps);
        if pages > cache.frames.len() as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "anonymous region of {len} bytes needs {pages} pages; the cache has {} frames",
                    cache.frames.len()
                ),
            ));
        }
        // Relaxed: a unique number (among this process's live regions).
        let n = NEXT_REGION.fetch_add(1, Ordering::Relaxed) & ((1 << TAG_SHIFT) - 1);
        let id = ANON_BIT | (cache.process_tag() as u64) << TAG_SHIFT | n;
        Ok(AnonRegion {
            cache,
            id,
            len,
            slots: (0..pages).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of pages.
    pub fn pages(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Pages currently holding a frame (a snapshot).
    pub fn resident(&self) -> usize {
        // Relaxed: a snapshot.
        self.slots
            .iter()
            .filter(|s| s.load(Ordering::Relaxed) != 0)
            .count()
    }

    fn check(&self, index: u64) -> io::Result<()> {
        if index >= self.pages() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "anonymous region: page {index} is past the end ({} pages)",
                    self.pages()
                ),
            ));
        }
        Ok(())
    }

    /// Pins page `index`, zero-filled on first touch. While the `AnonRef`
    /// lives the bytes do not change (`page_mut` of the page waits).
    /// Context: may sleep, as a first touch evicts file pages; no `AnonMut` of this page held by the caller.
    pub fn page(&self, index: u64) -> io::Result<AnonRef<'_>> {
        self.check(index)?;
        let frame = self.get(index)?;
        Ok(AnonRef {
            pin: FramePin::new(&self.cache, frame),
        })
    }

    /// Latches page `index` for writing, zero-filled on first touch; waits
    /// for its pins to drop, and readers and writers wait for the `AnonMut`.
    /// Context: may sleep (latch and drain waits, first touch); no pin of this page held by the caller.
    pub fn page_mut(&self, index: u64) -> io::Result<AnonMut<'_>> {
        self.check(index)?;
        loop {
            let f = self.get(index)?;
            if self.cache.latch_pinned(f, self.id, index) {
                return Ok(AnonMut {
                    latch: FrameLatch::new(&self.cache, f, None),
                });
            }
        }
    }

    /// Frees the pages in `range` (page indices, clamped to the region):
    /// their frames return to the cache now, or when their last pin drops.
    /// They read as zeros when touched again.
    /// Context: no sleep; no lock (a slot swap and an RMW per page).
    pub fn free(&self, range: Range<u64>) {
        let end = range.end.min(self.pages());
        for i in range.start.min(end)..end {
            // A. AcqRel: takes the entry exactly once against racing frees
            // and orders after the toucher's publishing CAS.
            let e = self.slots[i as usize].swap(0, Ordering::AcqRel);
            if e == 0 {
                continue;
            }
            let f = e - 1;
            // B.
            if self.cache.desc(f).orphan() == Released::Last {
                self.cache.free_frame(f);
            }
        }
    }

    /// The pinned frame of page `index`, faulting it in if absent.
    /// Context: may sleep (latch waits, eviction of file pages for a frame); no pin of this page held.
    fn get(&self, index: u64) -> io::Result<FrameNo> {
        let slot = &self.slots[index as usize];
        loop {
            // 1. Acquire: pairs with the Release CAS of step 3.
            let e = slot.load(Ordering::Acquire);
            if e != 0 {
                let f = e - 1;
                match self.cache.pin_as(f, self.id, index) {
                    // Acquire: orders the re-load after the pin (as 5.1's
                    // identity re-check is ordered by the pin's Acquire).
                    Ok(f) if slot.load(Ordering::Acquire) == e => {
                        self.cache.counters.add(Counter::Hits, 1);
                        return Ok(f);
                    }
                    // A loser's frame (see the module docs): not the page.
                    Ok(f) => self.cache.release(f),
                    Err(PinMiss::Stale) => {}
                    Err(PinMiss::Fail(PinFail::Latched)) => {
                        // Anonymous regions are never shared: no latch of
                        // theirs is taken over.
                        let torn = self.cache.desc(f).wait_unlatched_as(self.id, index);
                        debug_assert!(!torn);
                    }
                    // Being freed by `free`: the slot is about to read 0.
                    Err(PinMiss::Fail(PinFail::Free)) => crate::sync::yield_now(),
                    Err(PinMiss::Fail(PinFail::Overflow)) => {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!("anonymous region: page {index}: too many pins"),
                        ))
                    }
                }
                crate::sync::retry_point();
                continue;
            }
            // 2. fault: a frame, zeroed outside every lock
            let f = self
                .cache
                .alloc_frame()
                .map_err(|e| context(e, format!("anonymous region: page {index}")))?;
            let d = self.cache.desc(f);
            // SAFETY: we own `f` (allocated, refcount 0, unpublished); the
            // range is the whole frame. `atomic_zero`, not a plain memset: a
            // stale optimistic reader may still be copying (`cache::copy`).
            unsafe {
                crate::cache::atomic_zero(
                    d.witness(),
                    self.cache.frames.ptr(f),
                    self.cache.page_size,
                )
            };
            d.assign(self.id, index, State::ANON_FAULTED);
            // 3. Release: publishes bytes, identity and state with the entry.
            match slot.compare_exchange(0, f + 1, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => {
                    self.cache.anon_inserted(f);
                    self.cache.counters.add(Counter::AnonFaults, 1);
                    return Ok(f);
                }
                Err(_) => {
                    // Lost the race. A stray pin may hold our frame (module
                    // docs): drop the region's reference and ours through
                    // the common paths; the last one frees it.
                    let _ = d.orphan();
                    self.cache.release(f);
                }
            }
        }
    }
}

/// The recovery of a dead process's regions (5.14 D5): their pages are
/// reached only through the regions' slots, which died with it.
#[cfg(not(loom))]
impl crate::cache::Inner {
    /// Frees the pages of the regions of the process tagged `tag` (dead,
    /// its latches taken over and its pins given back first): each page
    /// still cached under one of its regions' ids is pinned (the identity
    /// checked under the pin, so a frame freed and taken by a live process
    /// meanwhile is left alone), orphaned as `free` does (step B), and
    /// released, which frees it. A frame it held with no reference (in a
    /// fault, between the pool and its slot) is not found. Context: the
    /// recovery's thread; no sleep.
    pub(crate) fn recover_dead_anon(&self, tag: u32) {
        if tag == 0 {
            return;
        }
        for f in 0..self.frames.len() as FrameNo {
            let d = self.desc(f);
            // Relaxed: a first look; the pin below checks it.
            let (owner, index) = d.identity();
            if region_process(owner) != Some(tag) || !d.snapshot().is_unevictable() {
                continue;
            }
            if self.pin_as(f, owner, index).is_ok() {
                // Pinned with that identity, not removed: the region's
                // reference is still there (only a free drops it, and its
                // region died). The last reference goes with the release
                // below, or with a stray pin's (a toucher of a live region
                // holding a stale entry, step 1).
                let _ = d.orphan();
                self.release(f);
            }
        }
    }
}

impl Drop for AnonRegion {
    fn drop(&mut self) {
        self.free(0..self.pages());
    }
}

/// A pinned anonymous page; dereferences to its bytes.
#[derive(Debug, Clone)]
pub struct AnonRef<'a> {
    pin: FramePin<'a>,
}

impl Deref for AnonRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.pin
    }
}

/// An exclusively latched anonymous page; dereferences mutably to its
/// bytes, released when dropped.
#[derive(Debug)]
pub struct AnonMut<'a> {
    latch: FrameLatch<'a>,
}

impl Deref for AnonMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.latch
    }
}

impl DerefMut for AnonMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.latch
    }
}
