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
    pub(crate) filling: Counts<crate::sync::unmodelled::AtomicUsize>,
    /// (A) dirty pages (`flusher.rs`); may dip below 0 for a moment.
    pub(crate) dirty: CachePadded<crate::sync::unmodelled::AtomicIsize>,
    /// (A) reclaimers holding eviction candidates right now: frames in their
    /// hands are in no policy queue, so an empty queue means "wait", not
    /// "out of memory", while this is non-zero. A hint.
    pub(crate) reclaiming: Counts<AtomicUsize>,
    /// (A) truncates and discards removing pages right now: their frames
    /// are on the way back to the pool (a reclaimer that finds nothing to
    /// evict waits for them rather than report `OutOfMemory`; a hint read
    /// by RMW, as `reclaiming`).
    pub(crate) freeing: Counts<AtomicUsize>,
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
            filling: Counts::new(|| crate::sync::unmodelled::AtomicUsize::new(0)),
            dirty: Default::default(),
            reclaiming: Counts::new(|| AtomicUsize::new(0)),
            freeing: Counts::new(|| AtomicUsize::new(0)),
            dirty_seq: CachePadded::new(crate::sync::unmodelled::AtomicU64::new(1)),
            clock_hand: CachePadded::new(AtomicUsize::new(0)),
            deferred_n: CachePadded::new(AtomicUsize::new(0)),
            streams: Default::default(),
            age_flusher: Default::default(),
        }
    }
}

/// Count slots of a [`Counts`]: one per process slot of a shared cache.
#[cfg(not(loom))]
const COUNT_SLOTS: usize = crate::segment::MAX_PROCS;
#[cfg(loom)]
const COUNT_SLOTS: usize = 1;

/// A cache-wide count of operations in flight kept per process (protocol
/// 5.15): each process adds to and takes from its own (by its slot in a
/// shared cache; a private cache's all in the first), each on a line of
/// its own, and readers look at them all. No other process writes a
/// process's count, so the recovery of a dead one zeroes it: a process
/// killed between the RMW that raised it and anything else leaves nothing
/// no one can take back.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct Counts<A>([CachePadded<A>; COUNT_SLOTS]);

impl<A> Counts<A> {
    /// Counts made by `zero`.
    pub(crate) fn new(zero: impl Fn() -> A) -> Self {
        Counts(std::array::from_fn(|_| CachePadded::new(zero())))
    }

    /// The count of the process in slot `slot` (its own, to change).
    #[inline]
    pub(crate) fn of(&self, slot: usize) -> &A {
        // (A slot past the table, which a segment never gives: the last.)
        self.0.get(slot).unwrap_or(&self.0[COUNT_SLOTS - 1])
    }

    /// Every process's count (to read: any non-zero, or their sum).
    #[inline]
    pub(crate) fn all(&self) -> impl Iterator<Item = &A> {
        self.0.iter().map(|c| &**c)
    }
}

impl super::Inner {
    /// This process's slot in its shared cache (0 in a private cache):
    /// which of each [`Counts`] is its own. Context: any.
    #[inline]
    pub(crate) fn proc_slot(&self) -> usize {
        self.shared.as_ref().map_or(0, |sh| sh.slot())
    }

    /// This process's own count of `counts`, to change. Context: any.
    #[inline]
    pub(crate) fn own<'a, A>(&self, counts: &'a Counts<A>) -> &'a A {
        counts.of(self.proc_slot())
    }

    /// How many of each [`Counts`] may be in use: every process slot's in
    /// a shared cache, the first alone in a private one (its readers look
    /// at one line). Context: any.
    #[inline]
    fn count_slots(&self) -> usize {
        if self.shared.is_some() {
            COUNT_SLOTS
        } else {
            1
        }
    }

    /// Pages of runs being read now, in every process (a hint: relaxed
    /// loads). Context: any.
    pub(crate) fn filling_now(&self) -> usize {
        // Relaxed: a hint (see the callers).
        self.words
            .filling
            .all()
            .take(self.count_slots())
            .map(|c| c.load(crate::sync::unmodelled::Ordering::Relaxed))
            .sum()
    }

    /// Whether any process counts an operation of `counts` in flight, by
    /// RMWs: each count's latest value (a load may return an old 0, and
    /// loom finds the `OutOfMemory` that follows), Acquire pairing with
    /// the Release decrements, so a 0 read means the frames that
    /// operation freed are in the pool for the reader's next try.
    /// Context: any.
    pub(crate) fn in_flight_latest(&self, counts: &Counts<AtomicUsize>) -> bool {
        counts
            .all()
            .take(self.count_slots())
            .any(|c| c.fetch_add(0, crate::sync::Ordering::AcqRel) > 0)
    }
}
