//! The cache's statistics across processes: each attached process's
//! watcher publishes its counters in its process slot every
//! `WATCH_EVERY` and once more when it detaches; a process that left, or
//! died and was recovered, has its counters moved to the segment's totals;
//! [`Segment::stats`] sums them all (`pagecache shared NAME`).

use super::death::Hooks;
use super::{Header, Segment};
use crate::stats::NCOUNTERS;
use std::sync::atomic::Ordering;

/// What a watcher calls every round for this process's counters, which
/// it publishes in the segment (`pagecache shared NAME` sums them).
pub type StatsHook = Box<dyn Fn() -> [u64; NCOUNTERS] + Send + Sync>;

/// Moves slot `slot`'s published counters into the totals of processes
/// gone (it detached, or died and was recovered).
pub(super) fn retire(h: &Header, slot: usize) {
    for (r, c) in h.retired.iter().zip(&h.stats[slot]) {
        // Relaxed (both): statistics.
        r.fetch_add(c.swap(0, Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Publishes this process's counters in its slot (the watcher's round).
///
/// # Safety
///
/// `base` is an attached segment's mapping, mapped during the call.
pub(super) unsafe fn publish(base: usize, slot: usize, hooks: &Hooks) {
    // SAFETY: the caller's.
    let h = unsafe { super::death::header(base) };
    if let Some(f) = hooks.0.lock().unwrap_or_else(|e| e.into_inner()).1.as_ref() {
        for (c, v) in h.stats[slot].iter().zip(f()) {
            // Relaxed: statistics.
            c.store(v, Ordering::Relaxed);
        }
    }
}

impl Segment {
    /// Every process's counters, as last published (within
    /// [`WATCH_EVERY`](super::WATCH_EVERY)), those attached now and those gone: the cache's
    /// statistics. A snapshot: a process leaving meanwhile may count
    /// twice or not at all.
    pub fn stats(&self) -> crate::Stats {
        let h = self.header();
        let mut sum = [0u64; NCOUNTERS];
        for (i, o) in sum.iter_mut().enumerate() {
            // Relaxed (both): statistics.
            *o = h.retired[i].load(Ordering::Relaxed)
                + h.stats
                    .iter()
                    .map(|s| s[i].load(Ordering::Relaxed))
                    .sum::<u64>();
        }
        crate::Stats::from_sums(&sum)
    }
}
