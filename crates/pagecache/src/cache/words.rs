//! The cache-wide counters every thread of every process using the cache
//! updates: in one block, each on a line of its own, so that a shared
//! cache keeps them in its segment (`segment/`, `TableId::Words`) and a
//! private one on its heap, reached alike through [`Inner::words`].
//!
//! [`Inner::words`]: super::Inner

use crate::sync::AtomicUsize;
use crossbeam_utils::CachePadded;

/// The cache-wide words (see the module docs).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Words {
    /// (A) pages of runs (`batch.rs`) inserted and not yet unlatched, read
    /// synchronously or not: reclaim waits for them rather than report
    /// `OutOfMemory` (they end by themselves), asynchronous reads start
    /// only while it is under half the cache, and `validate` waits for 0.
    pub(crate) filling: CachePadded<crate::sync::unmodelled::AtomicUsize>,
    /// (A) dirty pages (`flusher.rs`); may dip below 0 for a moment.
    pub(crate) dirty: CachePadded<crate::sync::unmodelled::AtomicIsize>,
    /// (A) reclaimers holding eviction candidates right now: frames in their
    /// hands are in no policy queue, so an empty queue means "wait", not
    /// "out of memory", while this is non-zero. A hint.
    pub(crate) reclaiming: CachePadded<AtomicUsize>,
    /// (A) truncates and discards removing pages right now: their frames
    /// are on the way back to the pool (a reclaimer that finds nothing to
    /// evict waits for them rather than report `OutOfMemory`; a hint read
    /// by RMW, as `reclaiming`).
    pub(crate) freeing: CachePadded<AtomicUsize>,
    /// (A) the dirty sequence: the next `FileShared::dirtied_when`.
    pub(crate) dirty_seq: CachePadded<crate::sync::unmodelled::AtomicU64>,
    /// (A) the CLOCK policy's hand (`reclaim/clock.rs`), when it is the
    /// policy.
    pub(crate) clock_hand: CachePadded<AtomicUsize>,
    /// (A) entries in the deferred-free queue (`deferred.rs`): a run's end
    /// reads it after its fence (`run.rs` R4, D1).
    pub(crate) deferred_n: CachePadded<AtomicUsize>,
    /// (A) a shared cache's streams' per-device choices (`streams.rs`).
    pub(crate) streams: CachePadded<super::streams::StreamBoard>,
    /// (A) a shared cache's age flusher: the tag of the process whose
    /// flusher writes pages past the age bound (W1) for every file it has
    /// open for writing (0: none yet; `cache/shared.rs`, "the age lease").
    pub(crate) age_flusher: CachePadded<std::sync::atomic::AtomicU32>,
}

impl Words {
    /// The words of a new cache.
    pub(crate) fn new() -> Words {
        Words {
            filling: Default::default(),
            dirty: Default::default(),
            reclaiming: CachePadded::new(AtomicUsize::new(0)),
            freeing: CachePadded::new(AtomicUsize::new(0)),
            dirty_seq: CachePadded::new(crate::sync::unmodelled::AtomicU64::new(1)),
            clock_hand: CachePadded::new(AtomicUsize::new(0)),
            deferred_n: CachePadded::new(AtomicUsize::new(0)),
            streams: Default::default(),
            age_flusher: Default::default(),
        }
    }
}

/// Counts `n` added to the counter `w` (negative: taken from it) as the
/// calling thread's, when `w` lies in a cache shared by processes (5.15:
/// after an increment, before a decrement), so that what a dead process
/// left in it is taken back ([`Words::take_back`]); nothing otherwise.
#[inline(always)]
pub(crate) fn counted<T>(w: &T, n: i64) {
    #[cfg(not(loom))]
    crate::frame::ledger::count_word(w as *const T as usize, n);
    #[cfg(loom)]
    let _ = (w, n);
}

impl Words {
    /// Takes back `n` that a dead process added to the counter at `addr`
    /// (5.15), if it is one of the counters counted so (`filling`,
    /// `reclaiming`, `freeing`), never below zero; whether it was.
    /// Context: the recovery's thread.
    #[cfg(not(loom))]
    pub(crate) fn take_back(&self, addr: usize, n: usize) -> bool {
        let w = [&*self.filling, &*self.reclaiming, &*self.freeing]
            .into_iter()
            .find(|w| std::ptr::from_ref(*w) as usize == addr);
        w.inspect(|w| take_back_from(w, n)).is_some()
    }
}

/// Takes `n` a dead process had added back from counter `w` (5.15), never
/// below zero. Context: the recovery's thread.
#[cfg(not(loom))]
pub(crate) fn take_back_from(w: &std::sync::atomic::AtomicUsize, n: usize) {
    // Release: as the counters' own decrements.
    let _ = w.fetch_update(
        std::sync::atomic::Ordering::Release,
        std::sync::atomic::Ordering::Relaxed,
        |v| Some(v.saturating_sub(n)),
    );
}
