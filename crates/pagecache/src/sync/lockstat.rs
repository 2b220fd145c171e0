//! Lock profiling (cargo feature `lockstat`), in the shape of FreeBSD's
//! `debug.lock.prof.stats` that seed 003 printed.
//!
//! Every lock class counts acquisitions, contended acquisitions (the lock
//! was held when asked for), total and maximum wait, and total and maximum
//! hold. Page latches are not a lock object but a bit in the frame's state
//! word: their class counts the *waits* (a lookup or writer parking until a
//! latch is released, and a latch holder parking until pins drain), with
//! their durations; a latch's hold time is not measured.
//!
//! With the feature off this module is not compiled, the locks are the plain
//! `parking_lot` types, and `PageCache::lock_profile()` returns an empty list:
//! the hot paths contain no profiling code at all (`docs/benchmarks.md`
//! shows the miss and allocation paths at the same speed with it off).
//!
//! The counters are process-wide (one set per class, shared by every cache
//! in the process), updated with relaxed atomic adds: profiling adds
//! shared-line writes to every profiled acquisition, so measure scalability
//! with the feature off and use it to find *which* lock hurts.

use crate::sync::unmodelled::{AtomicU64, Ordering};
use std::time::Instant;

/// A class of locks, profiled together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum LockClass {
    /// The global free-frame pool (`GlobalPool` or `PerCpuPool`'s pool).
    Pool,
    /// Per-CPU free-frame shards.
    PcpShard,
    /// Per-file index (tree) locks.
    Tree,
    /// Replacement-policy shard locks.
    Replacement,
    /// Replacement insertion batches (per CPU).
    ReplacementBatch,
    /// Waits for a page latch to be released (lookups, writers).
    PageLatchWait,
    /// A latch holder's waits for older pins to drain.
    PageDrainWait,
    /// Baseline: strict LRU's one global list lock.
    LruGlobal,
    /// Baseline: seed 004's two-mode LRU rwlock taken shared (smp_list
    /// add/delete).
    LruShared,
    /// Baseline: seed 004's two-mode LRU rwlock taken exclusive (isolation
    /// for eviction).
    LruExclusive,
    /// Baseline: one global page mutex around every pin and release.
    PageMutex,
    /// Baseline: a hashed array of page locks around every pin and release.
    PageLockHash,
    /// The cache's file registry (RwLock; open, last close, eviction's id
    /// lookup).
    Registry,
    /// Per-file size locks (over page ranges; shared by writes and
    /// write-back, exclusive for `set_len` from the page it cuts).
    SizeLock,
    /// The futures' wait queues (`sync/waitq.rs`): registrations and
    /// wake-ups of asynchronous waits.
    AsyncWaitQueue,
    /// Anything not classified.
    Other,
}

/// Number of classes.
pub const NCLASSES: usize = 16;

impl LockClass {
    /// All classes.
    pub const ALL: [LockClass; NCLASSES] = [
        LockClass::Pool,
        LockClass::PcpShard,
        LockClass::Tree,
        LockClass::Replacement,
        LockClass::ReplacementBatch,
        LockClass::PageLatchWait,
        LockClass::PageDrainWait,
        LockClass::LruGlobal,
        LockClass::LruShared,
        LockClass::LruExclusive,
        LockClass::PageMutex,
        LockClass::PageLockHash,
        LockClass::Registry,
        LockClass::SizeLock,
        LockClass::AsyncWaitQueue,
        LockClass::Other,
    ];

    /// The name printed in profiles.
    pub fn name(self) -> &'static str {
        match self {
            LockClass::Pool => "frame pool (global)",
            LockClass::PcpShard => "frame pool (per-CPU shard)",
            LockClass::Tree => "file index (tree lock)",
            LockClass::Replacement => "replacement shard",
            LockClass::ReplacementBatch => "replacement insertion batch",
            LockClass::PageLatchWait => "page latch (waits)",
            LockClass::PageDrainWait => "page latch drain (waits)",
            LockClass::LruGlobal => "LRU list (global lock)",
            LockClass::LruShared => "LRU rwlock (shared: smp_list)",
            LockClass::LruExclusive => "LRU rwlock (exclusive)",
            LockClass::PageMutex => "page mutex (global)",
            LockClass::PageLockHash => "page locks (hashed)",
            LockClass::Registry => "file registry (rwlock)",
            LockClass::SizeLock => "file size lock (range lock)",
            LockClass::AsyncWaitQueue => "async wait queues",
            LockClass::Other => "other",
        }
    }
}

/// The counters of one lock class: acquisitions, contention, wait and hold
/// times. Public so that other lock implementations (the lab's baseline page
/// locks) profile themselves with the same counters and table.
#[derive(Debug)]
pub struct LockCounters {
    count: AtomicU64,
    contended: AtomicU64,
    wait_total: AtomicU64,
    wait_max: AtomicU64,
    hold_total: AtomicU64,
    hold_max: AtomicU64,
}

impl Default for LockCounters {
    fn default() -> Self {
        Self::new()
    }
}

// Relaxed everywhere below: statistics, read as a snapshot.
impl LockCounters {
    /// All zero.
    pub const fn new() -> Self {
        LockCounters {
            count: AtomicU64::new(0),
            contended: AtomicU64::new(0),
            wait_total: AtomicU64::new(0),
            wait_max: AtomicU64::new(0),
            hold_total: AtomicU64::new(0),
            hold_max: AtomicU64::new(0),
        }
    }

    /// One acquisition; `wait_since` is when a contended acquirer started
    /// waiting (`None` if it got the lock at once).
    pub fn acquired(&self, wait_since: Option<Instant>) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Some(t) = wait_since {
            let w = ns(t);
            self.contended.fetch_add(1, Ordering::Relaxed);
            self.wait_total.fetch_add(w, Ordering::Relaxed);
            self.wait_max.fetch_max(w, Ordering::Relaxed);
        }
    }

    /// One release of a lock acquired (after any wait) at `since`.
    pub fn released(&self, since: Instant) {
        let h = ns(since);
        self.hold_total.fetch_add(h, Ordering::Relaxed);
        self.hold_max.fetch_max(h, Ordering::Relaxed);
    }

    /// A snapshot under `name`.
    pub fn profile(&self, name: &'static str) -> LockProfile {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LockProfile {
            name,
            count: l(&self.count),
            contended: l(&self.contended),
            wait_total: l(&self.wait_total),
            wait_max: l(&self.wait_max),
            hold_total: l(&self.hold_total),
            hold_max: l(&self.hold_max),
        }
    }
}

#[cfg(feature = "lockstat")]
static CLASSES: [LockCounters; NCLASSES] = [const { LockCounters::new() }; NCLASSES];

fn ns(since: Instant) -> u64 {
    since.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

#[cfg(feature = "lockstat")]
/// Records one acquisition of `class`, with the time waited if contended.
pub(crate) fn acquired(class: LockClass, wait_since: Option<Instant>) {
    CLASSES[class as usize].acquired(wait_since);
}

#[cfg(feature = "lockstat")]
/// Records the release of a `class` lock acquired at `since`.
pub(crate) fn released(class: LockClass, since: Instant) {
    CLASSES[class as usize].released(since);
}

#[cfg(feature = "lockstat")]
/// Records one wait (page latches): counted as a contended acquisition.
pub(crate) fn waited(class: LockClass, since: Instant) {
    acquired(class, Some(since));
}

/// One class's counters (times in nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockProfile {
    /// Class name.
    pub name: &'static str,
    /// Acquisitions (or waits, for page latches).
    pub count: u64,
    /// Acquisitions that found the lock held.
    pub contended: u64,
    /// Total time spent waiting.
    pub wait_total: u64,
    /// Longest single wait.
    pub wait_max: u64,
    /// Total time held (0 for page latches: not measured).
    pub hold_total: u64,
    /// Longest single hold.
    pub hold_max: u64,
}

/// Whether this build profiles locks (cargo feature `lockstat`).
pub const ENABLED: bool = cfg!(feature = "lockstat");

/// A snapshot of every class, sorted by `wait_total`, largest first; empty
/// when the feature is off.
#[cfg(not(feature = "lockstat"))]
pub fn snapshot() -> Vec<LockProfile> {
    Vec::new()
}

/// A snapshot of every class, sorted by `wait_total`, largest first.
#[cfg(feature = "lockstat")]
pub fn snapshot() -> Vec<LockProfile> {
    let mut v: Vec<LockProfile> = LockClass::ALL
        .iter()
        .map(|&k| CLASSES[k as usize].profile(k.name()))
        .collect();
    v.sort_by_key(|p| std::cmp::Reverse(p.wait_total));
    v
}

/// Formats profiles as seed 003's table (times in microseconds, as
/// FreeBSD's): `max wait_max total wait_total count avg wait_avg cnt_lock
/// name`, where `max`/`total`/`avg` are hold times and `cnt_lock` counts
/// contended acquisitions. (FreeBSD's `cnt_hold` is not measured.)
pub fn format(profiles: &[LockProfile]) -> String {
    let us = |n: u64| n / 1000;
    let mut s = format!(
        "{:>10} {:>10} {:>12} {:>12} {:>10} {:>6} {:>8} {:>10} name\n",
        "max", "wait_max", "total", "wait_total", "count", "avg", "wait_avg", "cnt_lock"
    );
    let mut v = profiles.to_vec();
    v.sort_by_key(|p| std::cmp::Reverse(p.wait_total));
    for p in &v {
        let avg = p.hold_total.checked_div(p.count).unwrap_or(0);
        let wavg = p.wait_total.checked_div(p.count).unwrap_or(0);
        s.push_str(&format!(
            "{:>10} {:>10} {:>12} {:>12} {:>10} {:>6} {:>8} {:>10} {}\n",
            us(p.hold_max),
            us(p.wait_max),
            us(p.hold_total),
            us(p.wait_total),
            p.count,
            us(avg),
            us(wavg),
            p.contended,
            p.name
        ));
    }
    s
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn format_sorts_by_wait_total_and_prints_microseconds() {
        let mk = |name, wait_total| LockProfile {
            name,
            count: 4,
            contended: 1,
            wait_total,
            wait_max: 3000,
            hold_total: 8000,
            hold_max: 5000,
        };
        let out = format(&[mk("a", 1000), mk("b", 9000)]);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].contains("wait_total"));
        assert!(lines[1].ends_with(" b"), "{out}");
        assert!(lines[2].ends_with(" a"), "{out}");
        // hold max 5 us, wait max 3 us, hold total 8 us, wait total 9 us,
        // count 4, avg 2 us, wait avg 2 us, 1 contended
        let cols: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(cols[..8], ["5", "3", "8", "9", "4", "2", "2", "1"]);
    }
}
