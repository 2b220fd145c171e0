//! Layer 2, alloc: free frames.
//!
//! [`FrameAllocator`] is the narrow interface the cache uses. Two
//! implementations:
//!
//! * [`PerCpuPool`], the default: per-CPU caches of free frames over one
//!   global pool, as Linux's per-CPU page lists (`per_cpu_pages`) over
//!   `zone->lock`. A thread picks its shard with `sched_getcpu` (only a
//!   hint: each shard has its own small lock, so migrating between the call
//!   and the lock is harmless). Refill and drain move a *batch* (63 frames,
//!   `zone_batchsize`'s value for large zones, fewer for tiny caches) under
//!   one acquisition of the global lock; the shard itself is last-in
//!   first-out, so the frame just freed (still warm in this CPU's cache) is
//!   the next one handed out, and drains send the coldest (oldest) frames
//!   back. Counts are clamped (`min(batch, len)`), which is what Linux's 2020
//!   `free_pcppages_bulk` fix added after a race made a drain loop forever.
//!   When the global pool is empty, an allocation takes half of another
//!   shard's frames before reporting none, so small caches never fail while
//!   frames sit idle in another CPU's shard.
//! * [`GlobalPool`], the baseline the lab compares against (seed 002's
//!   "before"): one LIFO list under one lock.
//!
//! Neither touches descriptors or frame bytes (zeroing and any other
//! per-frame work happen in the caller, outside every allocator lock), does
//! I/O, or wakes anybody under a lock; and no code path holds two allocator
//! locks at once (refill, drain and steal release one before taking the
//! next), so they add no edge to the lock order.
//!
//! # Protocol: refill and drain
//!
//! ```text
//!  alloc on shard i                          free on shard i
//!  1. lock(i); pop -> done                   1. lock(i); push
//!  2. unlock(i); lock(G); take k = min(B,    2. len > high: remove the k =
//!     |G|) from G's top; unlock(G)              min(B, len) oldest; unlock(i)
//!  3. k > 0: keep one, lock(i), push the     3. lock(G); push them; unlock(G)
//!     rest (past high: free's 2-3) -> done
//!  4. k == 0: for each other shard j:
//!     lock(j); take ceil(len/2); unlock(j);
//!     found -> keep one, push rest as 3
//!  5. none -> None (the caller reclaims)
//! ```
//!
//! Frames in flight between two locks (the batch in a local array) belong to
//! the thread moving them; they are counted by nobody, so `free_count` is a
//! snapshot that may miss them, never count them twice. The loom model
//! `percpu_refill_and_drain` checks that no frame is ever handed to two
//! owners and none is lost.

use super::FrameNo;
use crate::sync::{LockClass, Mutex};

/// Hands out and takes back free frames.
///
/// Callers MUST only `free` a frame they own exclusively (refcount 0 after a
/// freeze or the last release, descriptor reset), and never free one twice.
pub trait FrameAllocator: Send + Sync + std::fmt::Debug {
    /// A free frame, or `None` if none is free (the caller reclaims).
    fn alloc(&self) -> Option<FrameNo>;
    /// Returns a frame.
    fn free(&self, f: FrameNo);
    /// Number of free frames (a snapshot, for stats and tests).
    fn free_count(&self) -> usize;
}

/// One global LIFO free list under one mutex (the baseline).
#[derive(Debug)]
pub struct GlobalPool {
    /// (L) the pool lock.
    free: Mutex<Vec<FrameNo>>,
}

impl GlobalPool {
    /// A pool holding frames `0..n`, lowest numbers handed out first.
    pub fn new(n: usize) -> Self {
        GlobalPool {
            free: Mutex::with_class((0..n as FrameNo).rev().collect(), LockClass::Pool),
        }
    }
}

impl FrameAllocator for GlobalPool {
    fn alloc(&self) -> Option<FrameNo> {
        self.free.lock().pop()
    }

    fn free(&self, f: FrameNo) {
        let mut v = self.free.lock();
        debug_assert!(!v.contains(&f), "double free of frame {f}");
        v.push(f);
    }

    fn free_count(&self) -> usize {
        self.free.lock().len()
    }
}

use super::stacks::{Locked, Stacks};
pub use super::stacks::{MAX_BATCH, MAX_SHARDS};

/// Per-CPU free-frame caches over a global pool, in a block of their own
/// (`stacks.rs`: boxed for a private cache, a segment's table for a cache
/// shared by processes).
#[derive(Debug)]
pub struct PerCpuPool {
    /// (M) stack 0 the global pool, coldest frames at the bottom; one LIFO
    /// stack per CPU, each under its own mutex on its own cache line; (C)
    /// the batch per refill or drain. A shard drains once it holds more
    /// than two batches ([`PerCpuPool::high`]).
    stacks: Stacks,
}

impl PerCpuPool {
    /// A pool of frames `0..n` with one shard per CPU of this machine.
    pub fn new(n: usize) -> Self {
        Self::with_shards(n, num_cpus())
    }

    /// A pool of frames `0..n` with `shards` shards. The batch shrinks for
    /// small pools so that the shards together hold at most about half of
    /// the frames: a 16-frame cache must still work.
    pub fn with_shards(n: usize, shards: usize) -> Self {
        PerCpuPool {
            stacks: Stacks::new(n, shards),
        }
    }

    /// Bytes a pool of `n` frames placed in shared memory takes
    /// ([`PerCpuPool::place`]), with room for [`MAX_SHARDS`] shards.
    pub fn placed_bytes(n: usize) -> usize {
        Stacks::bytes(n, MAX_SHARDS)
    }

    /// Alignment a placed pool needs.
    pub fn placed_align() -> usize {
        Stacks::align()
    }

    /// Writes a fresh pool of frames `0..n` at `base`, one shard per CPU
    /// of this machine (at most [`MAX_SHARDS`]).
    ///
    /// # Safety
    ///
    /// `base` is [`PerCpuPool::placed_bytes`]`(n)` writable bytes aligned
    /// to [`PerCpuPool::placed_align`] that no one else uses yet.
    #[cfg(not(loom))]
    pub unsafe fn place(base: std::ptr::NonNull<u8>, n: usize) {
        // SAFETY: the caller's promise (`init` keeps the shards within
        // MAX_SHARDS).
        unsafe { Stacks::init(base, n, num_cpus()) }
    }

    /// The pool [`PerCpuPool::place`] wrote at `base`, maybe in another
    /// process (an error if its head does not say `n` frames).
    ///
    /// # Safety
    ///
    /// `base` holds what `place(base, n)` wrote and stays mapped while
    /// the pool lives.
    #[cfg(not(loom))]
    pub unsafe fn over(base: std::ptr::NonNull<u8>, n: usize) -> std::io::Result<Self> {
        // SAFETY: the caller's promise.
        let stacks = unsafe { Stacks::over(base, n)? };
        Ok(PerCpuPool { stacks })
    }

    /// Frames per refill or drain.
    #[inline]
    pub fn batch(&self) -> usize {
        self.stacks.batch()
    }

    /// A shard drains once it holds more than this: two batches.
    #[inline]
    fn high(&self) -> usize {
        2 * self.batch()
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.stacks.shards()
    }

    /// The calling thread's shard: its current CPU (a hint).
    #[inline]
    fn here(&self) -> usize {
        current_cpu() % self.stacks.shards()
    }

    /// Allocation on shard `i` (protocol steps 1-5).
    pub fn alloc_on(&self, i: usize) -> Option<FrameNo> {
        // 1.
        if let Some(f) = self.stacks.shard(i).pop() {
            return Some(f);
        }
        let mut buf = [0 as FrameNo; MAX_BATCH];
        // 2. one acquisition of the global lock for a whole batch
        let k = {
            let mut g = self.stacks.global();
            let k = self.batch().min(g.len());
            g.take_top(&mut buf[..k])
        };
        if k > 0 {
            return Some(self.keep_hottest(i, &buf[..k])); // 3.
        }
        // 4. the global pool is dry: take half of another shard's frames
        let n = self.stacks.shards();
        for d in 1..n {
            let j = (i + d) % n;
            let k = {
                let mut s = self.stacks.shard(j);
                let k = s.len().div_ceil(2).min(MAX_BATCH);
                s.take_top(&mut buf[..k])
            };
            if k > 0 {
                return Some(self.keep_hottest(i, &buf[..k]));
            }
        }
        // 5.
        None
    }

    /// Steps 3-4's end: hands out the hottest of `got` (the last pushed
    /// where it came from) and caches the rest on shard `i`; frees that
    /// landed there meanwhile may put it past its high mark, which then
    /// drains as a free does.
    fn keep_hottest(&self, i: usize, got: &[FrameNo]) -> FrameNo {
        let (&f, rest) = got.split_last().expect("a non-empty batch");
        if !rest.is_empty() {
            let mut s = self.stacks.shard(i);
            s.extend(rest);
            self.drain_past_high(s);
        }
        f
    }

    /// Free on shard `i` (protocol steps 1-3).
    pub fn free_on(&self, i: usize, f: FrameNo) {
        let mut s = self.stacks.shard(i);
        debug_assert!(!s.as_slice().contains(&f), "double free of frame {f}");
        s.push(f);
        self.drain_past_high(s);
    }

    /// Free's steps 2-3 on a locked shard: past its high mark, the oldest
    /// (coldest) batch goes back to the global pool (the count clamped).
    #[inline]
    fn drain_past_high(&self, mut s: Locked<'_>) {
        if s.len() <= self.high() {
            return;
        }
        let mut buf = [0 as FrameNo; MAX_BATCH];
        // 2. the oldest frames (bottom) are the coldest; clamp the count
        let k = self.batch().min(s.len());
        s.take_bottom(&mut buf[..k]);
        drop(s);
        // 3.
        self.stacks.global().extend(&buf[..k]);
    }

    /// Checks that every frame below `n` is free exactly once (tests; call
    /// with no allocation in flight).
    pub fn validate(&self, n: usize) {
        let mut seen = vec![false; n];
        let mut check = |f: FrameNo| {
            assert!((f as usize) < n, "frame {f} out of range");
            assert!(!seen[f as usize], "frame {f} free twice");
            seen[f as usize] = true;
        };
        self.stacks
            .global()
            .as_slice()
            .iter()
            .copied()
            .for_each(&mut check);
        for i in 0..self.stacks.shards() {
            let s = self.stacks.shard(i);
            assert!(s.len() <= self.high(), "shard over its high mark");
            s.as_slice().iter().copied().for_each(&mut check);
        }
    }
}

impl FrameAllocator for PerCpuPool {
    #[inline]
    fn alloc(&self) -> Option<FrameNo> {
        self.alloc_on(self.here())
    }

    #[inline]
    fn free(&self, f: FrameNo) {
        self.free_on(self.here(), f)
    }

    fn free_count(&self) -> usize {
        self.stacks.global().len()
            + (0..self.stacks.shards())
                .map(|i| self.stacks.shard(i).len())
                .sum::<usize>()
    }
}

/// Which free-frame allocator a cache uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolKind {
    /// Per-CPU caches over a global pool (the default).
    #[default]
    PerCpu,
    /// One global list under one lock (a baseline for comparisons).
    Global,
}

/// The cache's allocator: an enum, so the choice costs a predictable branch
/// on the miss path and nothing on the hit path.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per cache; a Box would add a pointer chase per miss
pub enum Pool {
    /// See [`PerCpuPool`].
    PerCpu(PerCpuPool),
    /// See [`GlobalPool`].
    Global(GlobalPool),
}

impl Pool {
    /// A pool of frames `0..n` of the given kind.
    pub fn new(kind: PoolKind, n: usize) -> Pool {
        match kind {
            PoolKind::PerCpu => Pool::PerCpu(PerCpuPool::new(n)),
            PoolKind::Global => Pool::Global(GlobalPool::new(n)),
        }
    }
}

impl FrameAllocator for Pool {
    #[inline]
    fn alloc(&self) -> Option<FrameNo> {
        match self {
            Pool::PerCpu(p) => p.alloc(),
            Pool::Global(p) => p.alloc(),
        }
    }

    #[inline]
    fn free(&self, f: FrameNo) {
        match self {
            Pool::PerCpu(p) => p.free(f),
            Pool::Global(p) => p.free(f),
        }
    }

    fn free_count(&self) -> usize {
        match self {
            Pool::PerCpu(p) => p.free_count(),
            Pool::Global(p) => p.free_count(),
        }
    }
}

/// The CPU this thread runs on now (0 if unknown).
#[cfg(not(loom))]
#[inline]
pub fn current_cpu() -> usize {
    if cfg!(miri) {
        return 0; // Miri has no sched_getcpu
    }
    // SAFETY: sched_getcpu has no preconditions; -1 means unknown.
    let c = unsafe { libc::sched_getcpu() };
    if c < 0 {
        0
    } else {
        c as usize
    }
}

/// The CPU this thread runs on: always 0 under loom.
#[cfg(loom)]
pub fn current_cpu() -> usize {
    0
}

/// Number of CPUs (shards), at least 1; 1 under loom (one shard keeps the
/// models small).
pub fn num_cpus() -> usize {
    if cfg!(loom) {
        return 1;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn pool_is_lifo_and_counts() {
        let p = GlobalPool::new(3);
        assert_eq!(p.free_count(), 3);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        assert_eq!((a, b), (0, 1));
        p.free(a);
        assert_eq!(p.alloc(), Some(a), "most recently freed first");
        p.alloc().unwrap();
        assert_eq!(p.alloc(), None);
        assert_eq!(p.free_count(), 0);
    }

    #[test]
    fn percpu_refills_a_batch_and_reuses_hot_frames_first() {
        let p = PerCpuPool::with_shards(1000, 2);
        assert_eq!(p.batch(), 63);
        let f = p.alloc_on(0).unwrap();
        // one refill moved a batch: 62 stay cached on shard 0
        assert_eq!(p.stacks.shard(0).len(), 62);
        assert_eq!(p.stacks.global().len(), 1000 - 63);
        p.free_on(0, f);
        assert_eq!(
            p.alloc_on(0),
            Some(f),
            "LIFO: the frame just freed comes back"
        );
        p.free_on(0, f);
        p.validate(1000);
    }

    #[test]
    fn percpu_drains_the_coldest_batch_past_the_high_mark() {
        let p = PerCpuPool::with_shards(1000, 1);
        let frames: Vec<_> = (0..200).map(|_| p.alloc_on(0).unwrap()).collect();
        for &f in &frames {
            p.free_on(0, f);
        }
        let s = p.stacks.shard(0).len();
        assert!(s <= p.high(), "shard holds {s} > high {}", p.high());
        assert_eq!(p.free_count(), 1000);
        // the hottest frame (freed last) is still cached locally
        assert_eq!(p.alloc_on(0), Some(*frames.last().unwrap()));
        p.free_on(0, *frames.last().unwrap());
        p.validate(1000);
    }

    #[test]
    fn tiny_pools_shrink_batches_and_steal_from_other_shards() {
        let p = PerCpuPool::with_shards(16, 4);
        assert_eq!(p.batch(), 1);
        // Park frames in shard 3, then drain the rest from shard 0: every
        // frame must still be allocatable.
        let a: Vec<_> = (0..2).map(|_| p.alloc_on(3).unwrap()).collect();
        for f in a {
            p.free_on(3, f);
        }
        let mut got = Vec::new();
        while let Some(f) = p.alloc_on(0) {
            got.push(f);
        }
        assert_eq!(got.len(), 16, "no frame stranded in another shard");
        for f in got {
            p.free_on(1, f);
        }
        assert_eq!(p.free_count(), 16);
        p.validate(16);
    }

    #[test]
    fn percpu_pool_under_threads_keeps_every_frame() {
        let p = std::sync::Arc::new(PerCpuPool::with_shards(256, 2));
        let ts: Vec<_> = (0..8)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for k in 0..20_000usize {
                        if (k + t) % 3 != 0 && held.len() < 40 {
                            if let Some(f) = p.alloc() {
                                held.push(f);
                            }
                        } else if let Some(f) = held.pop() {
                            p.free(f);
                        }
                    }
                    for f in held {
                        p.free(f);
                    }
                })
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(p.free_count(), 256);
        p.validate(256);
    }
}
