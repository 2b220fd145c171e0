//! Layer 5, reclaim: which frames to take back when none is free. The
//! eviction and write-back that take them are the cache's own
//! (`cache/evict.rs`, `cache/writeback/`, `cache/flusher.rs`); this module
//! knows nothing of the cache.
//!
//! A [`ReplacementPolicy`] only *orders* frames and hands back candidates; it
//! never frees them, takes no page latch and does no I/O. The cache
//! re-validates every candidate (pin, identity, freeze: `evict.rs`) before
//! evicting it, and hands back the ones it could not evict, so a policy may
//! be racy and stale without harming correctness.
//!
//! "Mark accessed" is the accessed bit that the pin CAS sets for free: the
//! hit path writes no other policy state, and an optimistic read writes the
//! bit only when it is clear. Every policy judges a frame it scans with the
//! one [`examine`].
//!
//! # Policies are plug-ins
//!
//! Each policy is one file implementing [`ReplacementPolicy`] (the trait's
//! default methods cover what a policy does not care about) plus one line
//! in the registry below, which makes it a [`PolicyKind`] users can choose
//! with `Config::policy`:
//!
//! * [`S3Fifo`] (`s3fifo.rs`), the default: S3-FIFO (small/main/ghost
//!   FIFOs) sharded per CPU, insertions submitted in batches per shard-lock
//!   acquisition, evictions taken in batches of 16. Chosen from measured hit
//!   ratios (`docs/benchmarks.md`, "Replacement: hit ratios").
//! * [`Clock`] (`clock.rs`), the first policy, kept as a baseline.
//! * [`StrictLru`] (`strict_lru.rs`) and [`SmpLru`] (`smp_lru.rs`),
//!   baselines for the lab: strict LRU under one global lock with
//!   move-to-front on every hit, and seed 004's two-mode rwlock over an
//!   SMP-safe list (`smp_list.rs`). They use two hooks the default policies
//!   do not: every hit ([`ReplacementPolicy::wants_hits`]) and frames leaving
//!   the cache ([`ReplacementPolicy::removed`]). The cache calls the hit hook
//!   only behind a flag test (`Inner::hooks`), so the default hit path pays
//!   a predictable branch and nothing else.

pub mod s3fifo;
pub mod smp_list;

pub use imp::*;

mod imp {
    pub use super::clock::{Clock, CLAIM};
    pub use super::s3fifo::S3Fifo;
    pub use super::s3fifo::Verdict;
    pub use super::smp_lru::SmpLru;
    pub use super::strict_lru::StrictLru;
    use crate::frame::{FrameNo, FrameTable};

    /// Orders frames for eviction.
    ///
    /// Implementations MUST NOT free frames, latch pages, or do I/O; they
    /// may clear accessed bits (that is their aging). Callers MUST hand
    /// every candidate they do not evict back through `not_evicted`.
    /// Context of every method: no sleep; called with no page latch or tree
    /// lock held (the policy's own locks are leaves of the lock order).
    pub trait ReplacementPolicy: Send + Sync + std::fmt::Debug {
        /// A page was just inserted into frame `f` (its identity is set).
        fn inserted(&self, frames: &FrameTable, f: FrameNo);
        /// Appends up to `want` eviction candidates to `out`; returns how
        /// many entries it examined. With `urgent` (a full pass already
        /// found nothing), accessed pages are candidates too: the accessed
        /// bit is a preference, and only pinned, latched or unevictable
        /// pages may make the caller report `OutOfMemory`.
        fn candidates(
            &self,
            frames: &FrameTable,
            out: &mut Vec<FrameNo>,
            want: usize,
            urgent: bool,
        ) -> usize;
        /// Entries one full pass examines (frames for CLOCK, queued entries
        /// for S3-FIFO): the caller declares `OutOfMemory` after two
        /// fruitless passes. Called every reclaim round: keep it lock-free.
        fn pass_len(&self, frames: &FrameTable) -> usize;
        /// A candidate could not be evicted (pinned meanwhile, write-back
        /// failed, ...) and is still cached.
        fn not_evicted(&self, _frames: &FrameTable, _f: FrameNo) {}
        /// A dirty candidate passed over while clean ones were found: the
        /// flusher is asked to write it, and it should come up again once
        /// it is clean, not be kept as if it had been used (the kernel
        /// rotates such pages to the list's tail). By default as
        /// [`ReplacementPolicy::not_evicted`].
        fn deferred(&self, frames: &FrameTable, f: FrameNo) {
            self.not_evicted(frames, f);
        }
        /// Page `f` (pinned by the caller) was just written back so that
        /// reclaim could evict it, and is clean: it should be the next
        /// evicted unless used meanwhile (the kernel's `PG_reclaim`). By
        /// default nothing.
        fn written_for_reclaim(&self, _frames: &FrameTable, _f: FrameNo) {}
        /// Frame `f` left the cache (freed after its last reference, or
        /// evicted by a reclaimer), before it returns to the allocator. List
        /// policies delete its node; lazy ones ignore it.
        fn removed(&self, _frames: &FrameTable, _f: FrameNo) {}
        /// Whether every hit must be reported through
        /// [`ReplacementPolicy::hit`] (asked once, when the cache is built).
        fn wants_hits(&self) -> bool {
            false
        }
        /// A hit on frame `f` (only called when `wants_hits`).
        fn hit(&self, _f: FrameNo) {}
        /// An anonymous page was faulted into frame `f`. Only list
        /// baselines list them (the kernel's LRU does); the default
        /// policies never look at unevictable pages.
        fn anon_inserted(&self, _frames: &FrameTable, _f: FrameNo) {}
        /// New pages a reader may have cached ahead of use (inserted, not
        /// yet referenced) before this policy evicts them first: readahead
        /// keeps its two windows in flight inside it. S3-FIFO: the
        /// probationary queue of one CPU's shard (a reader's pages land in
        /// its CPU's shard). The default: no bound beyond the cache's.
        fn readahead_room(&self) -> Option<usize> {
            None
        }
        /// The frames on a list policy's list (`None` for others), for
        /// `validate`; `Err` if its links are broken.
        fn listed(&self) -> Option<Result<Vec<FrameNo>, String>> {
            None
        }
    }

    /// The cache's policy: dynamic dispatch, on the miss, eviction and free
    /// paths only (the hit path never calls the policy in the default
    /// build).
    pub type Policy = Box<dyn ReplacementPolicy>;

    /// How a scan judges frame `f`: [`Verdict::Busy`] unless it is
    /// evictable (`State::is_evictable`: only the cache holds it, idle,
    /// valid, in its index, not anonymous); then, unless `urgent`, an
    /// accessed page gets a second chance ([`Verdict::Referenced`], its bit
    /// cleared now); otherwise [`Verdict::Cold`]. Never [`Verdict::Gone`]
    /// (identity checks are the caller's).
    pub fn examine(frames: &FrameTable, f: FrameNo, urgent: bool) -> Verdict {
        let d = frames.desc(f);
        let s = d.snapshot();
        if !s.is_evictable() {
            return Verdict::Busy;
        }
        if s.is_accessed() && !urgent {
            d.clear_accessed();
            return Verdict::Referenced;
        }
        Verdict::Cold
    }
}

mod clock;
pub mod passes;
mod smp_lru;
mod strict_lru;

/// Declares the policies users can choose: one line each, `Name =>
/// constructor` (`#[default]` marks the default), in the order they are
/// listed; makes [`PolicyKind`] and its `build`.
macro_rules! policies {
    ($($(#[$doc:meta])* $name:ident => $new:path,)*) => {
        /// Which replacement policy a cache uses (`Config::policy`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub enum PolicyKind {
            $($(#[$doc])* $name,)*
        }

        impl PolicyKind {
            /// A policy of this kind for `frames` frames.
            pub(crate) fn build(self, frames: usize) -> Policy {
                match self {
                    $(PolicyKind::$name => Box::new($new(frames)),)*
                }
            }
        }
    };
}

policies! {
    /// Sharded, batched S3-FIFO (the default).
    #[default]
    S3Fifo => S3Fifo::new,
    /// CLOCK over the frame array (a baseline).
    Clock => Clock::new,
    /// Strict LRU under one global lock, move-to-front on every hit (a
    /// baseline).
    StrictLru => StrictLru::new,
    /// Seed 004's two-mode rwlock over an SMP-safe list (a baseline).
    SmpLru => SmpLru::new,
}

/// A table of `n` cached, clean frames of file 1 (policy unit tests).
#[cfg(all(test, not(loom)))]
pub(crate) fn test_table(n: usize) -> crate::frame::FrameTable {
    use crate::frame::state::State;
    let t = crate::frame::FrameTable::new(n, 4096).unwrap();
    for f in 0..n as u32 {
        t.desc(f).assign(1, f as u64, State::cached(1));
    }
    t
}
