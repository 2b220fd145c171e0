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
//! Neither touches frame bytes (zeroing and any other per-frame work
//! happen in the caller, outside every allocator lock), does I/O, or wakes
//! anybody under a lock. Only a shared cache's pool writes descriptors:
//! one word of the frame it pops or pushes (5.15 P8b, below).
//!
//! # Protocol: refill and drain
//!
//! ```text
//!  alloc on shard i                          free on shard i
//!  1. lock(i); pop -> done                   1. lock(i); push
//!  2. lock(G) (i still held); move k =       2. len > high: lock(G) (i still
//!     min(B, |G|) from G's top to i;            held); move the k = min(B,
//!     unlock(G)                                 len) oldest to G; unlock both
//!  3. k > 0: pop -> done; unlock(i)
//!  4. k == 0: unlock(i); for each other
//!     shard j: lock both (lower number
//!     first); i empty: move ceil(|j|/2)
//!     from j to i; pop -> done
//!  5. none -> None (the caller reclaims)
//! ```
//!
//! Two locks are held at once only as here: a shard before the global
//! pool, two shards in the order of their numbers; a census takes them
//! all in that order (5.15 P8c). No other lock is taken under them. A
//! batch moves inside both locks with its source's length committed
//! first, so no frame is ever in two stacks, and none in flight between
//! two lock holds: a census holding every lock sees each free frame in a
//! stack. (Moving batches between two separate holds, as Linux's
//! `rmqueue_bulk` and `free_pcppages_bulk` do with the zone lock, leaves
//! frames that no stack and no holder names while no lock is held.)
//! The loom model `percpu_refill_and_drain` checks that no frame is ever
//! handed to two owners and none is lost.
//!
//! In a cache shared by processes (5.15 P8, `desc_hand.rs`), a pop writes
//! the taker's tag in the frame's state word under the stack's lock
//! before the pop is committed, and a push writes 0 after it is, so that
//! the frames a dead process held with no reference can be told from
//! every other ([`PerCpuPool::census`]).

use super::desc::FrameDesc;
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
    /// In a cache shared by processes, the descriptors the pool marks as
    /// frames leave and enter its stacks (5.15 P8b); `None` otherwise.
    hand: Option<Hand>,
}

/// The descriptors of a shared cache's frames and this process's tag in
/// place (`HOLDER`), which its pool writes in the frames it hands out
/// (`docs/design.md`, 5.15 P8).
#[derive(Debug, Clone, Copy)]
pub struct Hand {
    descs: std::ptr::NonNull<FrameDesc>,
    frames: usize,
    holder: u64,
}

// SAFETY: descriptors are atomics, shared by design; `Hand::new`'s caller
// keeps them alive as long as the pool.
unsafe impl Send for Hand {}
// SAFETY: as above.
unsafe impl Sync for Hand {}

impl Hand {
    /// The `frames` descriptors from `first` on, for the process whose tag
    /// in place is `holder` (`FrameDesc::holder`).
    ///
    /// # Safety
    ///
    /// `first` is the first of `frames` contiguous descriptors that outlive
    /// the pool given this hand.
    pub unsafe fn new(first: &FrameDesc, frames: usize, holder: u64) -> Hand {
        Hand {
            descs: std::ptr::NonNull::from(first),
            frames,
            holder,
        }
    }

    #[inline]
    fn desc(&self, f: FrameNo) -> &FrameDesc {
        assert!((f as usize) < self.frames, "frame {f} out of range");
        // SAFETY: in range, alive (`new`'s contract).
        unsafe { &*self.descs.as_ptr().add(f as usize) }
    }
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
            hand: None,
        }
    }

    /// This pool marking the descriptors of `hand` (a shared cache's pool,
    /// 5.15 P8b).
    pub fn with_hand(self, hand: Hand) -> Self {
        PerCpuPool {
            hand: Some(hand),
            ..self
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
        Ok(PerCpuPool { stacks, hand: None })
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
        self.alloc_as(i, self.hand.map_or(0, |h| h.holder))
    }

    /// [`PerCpuPool::alloc_on`] for the process whose tag in place is
    /// `holder` (what the frame's word names while it is in that
    /// process's hands, 5.15 P8b).
    #[inline]
    pub fn alloc_as(&self, i: usize, holder: u64) -> Option<FrameNo> {
        let mut s = self.stacks.shard(i);
        // 1.
        if let Some(f) = self.pop(&mut s, holder) {
            return Some(f);
        }
        self.refill(i, s, holder)
    }

    /// Steps 2-5 of an allocation on shard `i`, whose stack `s` is empty.
    #[cold]
    fn refill(&self, i: usize, mut s: Locked<'_>, holder: u64) -> Option<FrameNo> {
        // 2-3. one acquisition of the global lock for a whole batch, moved
        // under both locks (the shard's, then the global one)
        {
            let mut g = self.stacks.global();
            let k = self.batch().min(g.len());
            if k > 0 {
                move_top(&mut g, &mut s, k);
                drop(g);
                return self.pop(&mut s, holder);
            }
        }
        drop(s);
        // 4. the global pool is dry: half of another shard's frames, under
        // both shards' locks (the lower-numbered first)
        let n = self.stacks.shards();
        for d in 1..n {
            let j = (i + d) % n;
            let (mut s, mut t) = if i < j {
                let s = self.stacks.shard(i);
                (s, self.stacks.shard(j))
            } else {
                let t = self.stacks.shard(j);
                (self.stacks.shard(i), t)
            };
            // (A free may have landed on ours meanwhile.)
            if s.len() == 0 {
                let k = t.len().div_ceil(2).min(MAX_BATCH);
                move_top(&mut t, &mut s, k);
            }
            drop(t);
            if let Some(f) = self.pop(&mut s, holder) {
                return Some(f);
            }
        }
        // 5.
        None
    }

    /// Pops the top of the locked stack `s` (the hottest frame): marked
    /// held by `holder` before the pop is committed (5.15 P8b).
    #[inline]
    fn pop(&self, s: &mut Locked<'_>, holder: u64) -> Option<FrameNo> {
        let f = s.top()?;
        if let Some(h) = &self.hand {
            h.desc(f).unpooled(holder);
        }
        s.pop()
    }

    /// Free on shard `i` (protocol steps 1-3).
    #[inline]
    pub fn free_on(&self, i: usize, f: FrameNo) {
        let mut s = self.stacks.shard(i);
        debug_assert!(!s.as_slice().contains(&f), "double free of frame {f}");
        s.push(f);
        if let Some(h) = &self.hand {
            h.desc(f).pooled(); // (P8b: after the push is committed)
        }
        if s.len() > self.high() {
            self.drain(s);
        }
    }

    /// Free's steps 2-3: past its high mark, the oldest (coldest) batch of
    /// the locked shard `s` goes back to the global pool, under both
    /// locks; the count clamped.
    #[cold]
    fn drain(&self, mut s: Locked<'_>) {
        let k = self.batch().min(s.len());
        let mut g = self.stacks.global();
        let mut buf = [0 as FrameNo; MAX_BATCH];
        // The source's length first (5.15 P8b), as `move_top`.
        s.take_bottom(&mut buf[..k]);
        g.extend(&buf[..k]);
    }

    /// 5.15 P8c: with every stack locked, so that no live process is
    /// inside the pool, each frame in no stack that `lost` judges lost,
    /// marked held by this process (the hand's holder: the caller frees
    /// them after); a frame
    /// in a stack whose word a dead process left half-written is set back
    /// to free. Only the frames `lost` judges lost beforehand, with no
    /// lock held, are looked at again under the locks: a dead process's
    /// frames are what they are before the census starts (nobody else
    /// reaches them), and the locks are held for the stacks and those
    /// frames only, not for every descriptor. Nothing without a hand.
    /// Context: takes every pool lock (as [`PerCpuPool::with_stacked`]);
    /// no other lock held.
    pub fn census(&self, lost: impl Fn(&FrameDesc) -> bool) -> Vec<FrameNo> {
        let Some(h) = &self.hand else {
            return Vec::new();
        };
        let suspects: Vec<FrameNo> = (0..h.frames as FrameNo)
            .filter(|&f| lost(h.desc(f)))
            .collect();
        self.with_stacked(|stacked| {
            let mut found = Vec::new();
            for f in suspects {
                let d = h.desc(f);
                if stacked[f as usize] {
                    d.settle_pooled();
                } else if lost(d) {
                    d.unpooled(h.holder);
                    found.push(f);
                }
            }
            found
        })
    }

    /// Tests of 5.15 P8: takes a batch off the global stack as a move
    /// between two stacks does before its second commit, and leaves it in
    /// no stack (the caller's process is about to die). How many.
    #[doc(hidden)]
    pub fn take_batch(&self) -> usize {
        let mut g = self.stacks.global();
        let k = self.batch().min(g.len());
        let mut buf = [0 as FrameNo; MAX_BATCH];
        g.take_top(&mut buf[..k])
    }

    /// Runs `f` with every stack locked (`lock_all`) on which frames of
    /// the pool are in a stack. Context: takes every pool lock; no other
    /// lock held.
    pub fn with_stacked<R>(&self, f: impl FnOnce(&[bool]) -> R) -> R {
        let all = self.lock_all();
        let mut stacked = vec![false; self.stacks.frames()];
        for s in &all {
            for &f in s.as_slice() {
                if let Some(b) = stacked.get_mut(f as usize) {
                    *b = true;
                }
            }
        }
        f(&stacked)
    }

    /// Every stack locked, in the order of the two-lock moves (the shards
    /// by number, then the global one: the reverse deadlocks against a
    /// refill or drain), the global one last.
    fn lock_all(&self) -> Vec<Locked<'_>> {
        let mut all: Vec<_> = (0..self.stacks.shards())
            .map(|i| self.stacks.shard(i))
            .collect();
        all.push(self.stacks.global());
        all
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

/// Moves the top `k` frames of `from` onto `to`, both locked: `from`'s
/// length committed first, so that a process killed between leaves the
/// batch in no stack, where the census finds it (5.15 P8c), never in two.
#[inline]
fn move_top(from: &mut Locked<'_>, to: &mut Locked<'_>, k: usize) {
    let mut buf = [0 as FrameNo; MAX_BATCH];
    from.take_top(&mut buf[..k]);
    to.extend(&buf[..k]);
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
        // Every stack's lock at once, so that a batch moving between two
        // stacks is counted once: one lock at a time could count it twice
        // or never.
        self.lock_all().iter().map(|s| s.len()).sum()
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

    /// 5.15 P8: what a census finds of a dead process's frames: one it
    /// took from the pool, a batch it was moving between two stacks, and
    /// a pop it did not finish; never a live process's frame.
    #[test]
    fn a_census_finds_what_a_dead_process_held_and_nothing_else() {
        use crate::frame::state::HOLDER_SHIFT;
        const N: usize = 300;
        let descs: Vec<FrameDesc> = (0..N).map(|_| FrameDesc::new()).collect();
        let (live, dead) = (1u64 << HOLDER_SHIFT, 2u64 << HOLDER_SHIFT);
        // SAFETY: the descriptors outlive the pool (dropped after it).
        let p = PerCpuPool::with_shards(N, 2).with_hand(unsafe { Hand::new(&descs[0], N, live) });
        let held = p.alloc_on(0).unwrap();
        assert_eq!(
            descs[held as usize].snapshot().latch_holder(),
            1,
            "the taker named"
        );
        let lost = p.alloc_as(1, dead).unwrap();
        // A batch taken off the global stack and never pushed anywhere.
        let mut batch = [0 as FrameNo; 3];
        p.stacks.global().take_top(&mut batch);
        // A pop marked and not committed: still in its stack.
        let top = p.stacks.shard(0).top().unwrap();
        descs[top as usize].unpooled(dead);
        let mut found = p.census(|d| d.lost_in_hand(2));
        found.sort_unstable();
        let mut want = vec![lost, batch[0], batch[1], batch[2]];
        want.sort_unstable();
        assert_eq!(
            found, want,
            "the dead one's frame and the batch, not the live one's {held}"
        );
        assert_eq!(
            descs[top as usize].snapshot().latch_holder(),
            0,
            "the half pop settled"
        );
        for &f in &found {
            assert_eq!(
                descs[f as usize].snapshot().latch_holder(),
                1,
                "marked the census taker's (the pool's process)"
            );
        }
        assert!(
            p.census(|d| d.lost_in_hand(2)).is_empty(),
            "the second finds none"
        );
        for f in found.into_iter().chain([held]) {
            descs[f as usize].reset();
            p.free_on(0, f);
        }
        assert_eq!(p.free_count(), N);
        p.validate(N);
        assert!(descs.iter().all(|d| d.snapshot().latch_holder() == 0));
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
                        if t == 0 && k % 16 == 0 {
                            // Counts and the two-lock moves at once: the
                            // lock order (a count that held the global
                            // lock across the shards' deadlocked), and a
                            // batch between two stacks counted once.
                            assert!(p.free_count() <= 256);
                            assert_eq!(p.with_stacked(|s| s.len()), 256);
                        } else if (k + t) % 3 != 0 && held.len() < 40 {
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
