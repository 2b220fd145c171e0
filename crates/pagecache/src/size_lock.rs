//! The per-file size lock: a reader-writer lock over page ranges. A shared
//! holder names the last page it may touch; the exclusive holder (`set_len`)
//! names the first page it changes, and excludes only the shared holders
//! that reach it. Writers of pages below a cut neither wait for it nor are
//! waited for.
//!
//! Why a range is enough: `set_len` to `new` from `old` changes only pages
//! from `min(old, new) / page size` on (the new last page's tail, the pages
//! removed, the length a writer past the old end would extend). A writer or
//! write-back of pages wholly below that neither extends the file (its end
//! is at most the shorter length) nor writes past the new end, and the
//! index's own locks order it against the removal of other pages.
//!
//! The protocol (the steps are marked where the code is):
//!
//! ```text
//!  shared holder of pages ..=hi                 exclusive holder from page `from`
//!  S1. RMW its shard's word: holders + 1,       X1. one at a time (a mutex); `from`
//!      highest page = max(highest, hi)              is computed under it
//!  S2. fence(SeqCst); load the phase            X2. phase = WAITING(from); fence(SeqCst)
//!  S3. IDLE, or hi < from: held.                X3. no shard has holders with a
//!      HELD, hi >= from: undo S1 (as S5) and        highest page >= from? If some do,
//!      sleep until the phase changes; S1.           sleep until a release (S5) wakes
//!      WAITING, hi >= from: held if nested or       it, X3 again
//!      held back once already; otherwise undo   X4. phase = HELD(from); fence(SeqCst);
//!      S1 and hold back (at most HOLD_BACK,         X3's check again: a holder that came
//!      while the phase stays); S1.                  meanwhile sends it back to WAITING
//!  S4. (the holder's work)                          (waking S3's sleepers) and X3
//!  S5. RMW: holders - 1 (highest = 0 at 0);     X5. (the holder's work)
//!      fence(SeqCst); load the phase: not       X6. phase = IDLE (Release); wake
//!      IDLE: wake X3's sleeper                      S3's sleepers; drop X1's mutex
//! ```
//!
//! Exclusion: S1-S2 against X2/X4-X3 is Dekker's pattern with `SeqCst`
//! fences: either X3 (or X4's re-check) sees a holder's S1, or that
//! holder's S2 sees the phase; so no holder reaching `from` is inside S4
//! while X5 runs. A shard's highest page only grows while it has holders
//! (it is reset when the last leaves), so it is never below any current
//! holder's. No lost wake-up: X3 sleeps with its check re-made after the
//! park's fence (protocol 5.10); S5's RMW either precedes that check or
//! S5's load sees WAITING (the fences again) and wakes it after.
//!
//! Deadlock freedom (`docs/locking.md`, rules 8-10): shared holders never
//! queue behind a waiting exclusive one but for the bounded hold-back
//! (which cannot close a cycle: a thread holding a pin across calls, which
//! a shared holder waits for, still gets through after it), and a nested
//! acquisition (the thread already holds a size lock) never holds back.
//! Waiting for a HELD exclusive holder is safe: it waits for no page and
//! allocates no frame (rule 8). The exclusive side holds nothing but X1's
//! mutex while it waits (X1's holders wait only for shared holders).
//!
//! Progress of the exclusive side: a shared holder that reaches `from`
//! holds back while it waits, so only holders already inside (and nested
//! ones) are waited for; writers below `from` are not waited for at all.
//! But a shard's highest page is reset only when its holders are all gone,
//! so threads that share a shard and keep overlapping could keep it at or
//! past `from`: once X3 has waited [`HOLD_BACK`], it announces page 0
//! (every outermost arrival holds back, and the shards drain); X4 still
//! names `from`.
//!
//! The shared side is sharded by thread, so that writers of one file do
//! not bounce one word between their CPUs: a thread's shard is fixed for
//! its life, so a nested shared hold (`write_at` -> eviction -> write-back
//! of the same file) counts on the shard it holds. Under loom there is one
//! shard, and the hold-back is one yield.
//!
//! In a cache shared by processes the shards are by process, then by
//! thread: each attached process counts its holds on [`PROC_SHARDS`]
//! shards of its own (by its slot in the segment), which no other process
//! touches, in a block of the segment beside the file table (the lock
//! finds it by its distance from itself: no address inside); and X1's
//! mutex word names its holder's process (5.14 R1). So what a process
//! that dies held is known exactly, with no window between a hold and its
//! record (protocol 5.15): its recovery zeroes its shards and, if X1 names
//! it, takes X1 over and sets the phase back to idle
//! ([`SizeLock::release_dead`]). Processes never share a shard.

use crate::sync::lockstat::LockClass;
use crate::sync::{fence, AtomicU64, Mutex, Ordering};

/// A shard word: holders in the low [`COUNT_BITS`] bits, the highest page
/// any of them may touch (since the shard was last idle) above.
const COUNT_BITS: u32 = 20;
const COUNT: u64 = (1 << COUNT_BITS) - 1;

/// The last page a shared holder that may touch any page names (also the
/// cap of every page number here: a page at or past it is treated as it).
pub const ALL_PAGES: u64 = u64::MAX >> COUNT_BITS;

/// The phase word: the phase in the top two bits, `from` below.
const PHASE: u64 = 3 << 62;
const IDLE: u64 = 0;
const WAITING: u64 = 1 << 62;
const HELD: u64 = 2 << 62;

/// How long an outermost shared acquisition holds back for an exclusive
/// one under way (S3).
#[cfg(not(loom))]
const HOLD_BACK: std::time::Duration = std::time::Duration::from_millis(5);

#[cfg(not(loom))]
thread_local! {
    /// Shared holds of size locks this thread has (nested ones never hold
    /// back).
    static SHARED_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Shards a lock has room for (it uses a power of two of them, at most
/// this): fixed, so that a lock holds no pointer and can live in memory
/// processes share.
pub const MAX_SHARDS: usize = if cfg!(loom) { 1 } else { 16 };

/// Shards of each process in a shared cache's lock (by thread).
pub const PROC_SHARDS: usize = 4;

/// A shared cache's lock's shards, [`PROC_SHARDS`] per process slot.
#[cfg(not(loom))]
pub type ProcShards =
    [crossbeam_utils::CachePadded<AtomicU64>; crate::segment::MAX_PROCS * PROC_SHARDS];
/// (Under loom no cache is shared: one process's.)
#[cfg(loom)]
pub type ProcShards = [crossbeam_utils::CachePadded<AtomicU64>; PROC_SHARDS];

/// The per-file size lock (see the module docs). No address inside: it
/// works wherever it is placed, its waits keyed by where it is (5.10).
#[derive(Debug)]
#[repr(C)]
pub struct SizeLock {
    shards: [crossbeam_utils::CachePadded<AtomicU64>; MAX_SHARDS],
    /// Shards in use: a power of two, at most [`MAX_SHARDS`].
    used: usize,
    /// A shared cache's lock: where its [`ProcShards`] lie, in bytes from
    /// the lock (0: a private lock, sharded by thread only).
    #[cfg_attr(loom, allow(dead_code))]
    procs: isize,
    /// The phase and the exclusive holder's first page.
    phase: crossbeam_utils::CachePadded<AtomicU64>,
    /// X1: one exclusive holder at a time.
    exclusive: Mutex<()>,
}

/// A shared hold of pages up to the one named (see [`SizeLock::read`]).
#[derive(Debug)]
pub struct SizeShared<'a> {
    lock: &'a SizeLock,
    shard: &'a AtomicU64,
    #[cfg(all(feature = "lockstat", not(loom)))]
    since: std::time::Instant,
}

/// An exclusive hold from a page on (see [`SizeLock::write`]).
#[derive(Debug)]
pub struct SizeExclusive<'a> {
    lock: &'a SizeLock,
    _one: crate::sync::MutexGuard<'a, ()>,
    #[cfg(all(feature = "lockstat", not(loom)))]
    since: std::time::Instant,
}

impl SizeLock {
    /// A lock with [`SizeLock::default_shards`] shards.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self::with_shards(Self::default_shards())
    }

    /// A lock of `shards` shards (rounded up to a power of two, at least 1,
    /// at most [`MAX_SHARDS`]).
    pub fn with_shards(shards: usize) -> Self {
        SizeLock {
            shards: std::array::from_fn(|_| crossbeam_utils::CachePadded::new(AtomicU64::new(0))),
            used: shards.max(1).next_power_of_two().min(MAX_SHARDS),
            procs: 0,
            phase: crossbeam_utils::CachePadded::new(AtomicU64::new(IDLE)),
            exclusive: Mutex::with_class((), LockClass::Other),
        }
    }

    /// A lock in a cache shared by processes whose [`ProcShards`] lie
    /// `procs` bytes from where the lock will be (see the module docs).
    ///
    /// # Safety
    ///
    /// The shards lie there, zeroed, in the memory the lock lies in, for as
    /// long as the lock is used, and are used by this lock only.
    pub unsafe fn per_process(procs: isize) -> Self {
        SizeLock {
            procs,
            ..Self::new()
        }
    }

    /// A shared cache's lock's shards (`None`: a private lock).
    #[cfg(not(loom))]
    #[inline]
    fn procs(&self) -> Option<&ProcShards> {
        (self.procs != 0).then(|| {
            // SAFETY: `per_process`'s contract: the shards lie there for as
            // long as the lock is used; aligned (the segment's block is).
            unsafe {
                &*(self as *const Self)
                    .cast::<u8>()
                    .offset(self.procs)
                    .cast::<ProcShards>()
            }
        })
    }

    /// The shards of the process in slot `slot`, of a shared cache's lock.
    #[cfg(not(loom))]
    fn shards_of(&self, slot: usize) -> &[crossbeam_utils::CachePadded<AtomicU64>] {
        self.procs()
            .and_then(|p| p.get(slot * PROC_SHARDS..(slot + 1) * PROC_SHARDS))
            .unwrap_or(&[])
    }

    /// Shards for a lock taken shared by every writer of a file: four per
    /// CPU (so that a few threads rarely share one), a power of two, at
    /// most 16 (128 bytes each, per open file); one under loom.
    pub(crate) fn default_shards() -> usize {
        if cfg!(loom) {
            return 1;
        }
        (4 * crate::frame::alloc::num_cpus())
            .next_power_of_two()
            .min(MAX_SHARDS)
    }

    /// The calling thread's shard: by thread, in a shared cache among its
    /// process's (a thread of no member process, which only tests make,
    /// on the lock's own shards, by thread).
    #[inline]
    fn my_shard(&self) -> &AtomicU64 {
        #[cfg(not(loom))]
        if self.procs != 0 {
            if let Some((_, m)) = crate::sync::futex::member_at(self as *const Self as usize) {
                let mine = self.shards_of(crate::segment::slot_of_tag(m.tag));
                if let Some(s) = mine.get(thread_shard() & (PROC_SHARDS - 1)) {
                    return s;
                }
            }
        }
        &self.shards[thread_shard() & (self.used - 1)]
    }

    /// The wait-queue key of X3's sleeper.
    fn exclusive_key(&self) -> usize {
        &*self.phase as *const AtomicU64 as usize
    }

    /// The wait-queue key of S3's sleepers.
    fn shared_key(&self) -> usize {
        self.exclusive_key() + 1
    }

    /// A shared hold for a caller that touches pages `..=last` only
    /// ([`ALL_PAGES`]: any), S1-S3. Below an exclusive one's first page it
    /// never waits; reaching it, it waits while the exclusive side holds
    /// (which waits for nothing, `docs/locking.md` rule 8), and while the
    /// exclusive side still waits only for the bounded hold-back of an
    /// outermost acquisition. Context: may sleep as said.
    #[inline]
    pub fn read(&self, last: u64) -> SizeShared<'_> {
        let hi = last.min(ALL_PAGES);
        let shard = self.my_shard();
        #[cfg(not(loom))]
        let nested = SHARED_DEPTH.try_with(|d| d.get()).unwrap_or(1) != 0;
        #[cfg(loom)]
        let nested = false;
        #[cfg(all(feature = "lockstat", not(loom)))]
        let mut waited: Option<std::time::Instant> = None;
        let mut held_back = nested;
        loop {
            // S1. Relaxed: the fence below orders it before S2's load.
            self.enter(shard, hi);
            // S2. SeqCst: Dekker's pattern with X2/X4 (module docs).
            fence(Ordering::SeqCst);
            // Acquire: pairs with X6's Release store (an exclusive holder's
            // work happens-before ours).
            let st = self.phase.load(Ordering::Acquire);
            // S3.
            let blocked = st & PHASE != IDLE && hi >= st & !PHASE;
            if !blocked || (st & PHASE == WAITING && held_back) {
                break;
            }
            self.leave(shard);
            #[cfg(all(feature = "lockstat", not(loom)))]
            waited.get_or_insert_with(std::time::Instant::now);
            if st & PHASE == HELD {
                // Relaxed: re-checked after the park's fence (5.10); X6's
                // and X4's wake-ups follow their stores.
                crate::sync::park(self.shared_key(), || {
                    self.phase.load(Ordering::Relaxed) == st
                });
            } else {
                self.hold_back(st);
                held_back = true;
            }
            crate::sync::retry_point();
        }
        #[cfg(not(loom))]
        let _ = SHARED_DEPTH.try_with(|d| d.set(d.get() + 1));
        #[cfg(all(feature = "lockstat", not(loom)))]
        crate::sync::lockstat::acquired(LockClass::SizeLock, waited);
        SizeShared {
            lock: self,
            shard,
            #[cfg(all(feature = "lockstat", not(loom)))]
            since: std::time::Instant::now(),
        }
    }

    /// S1-S3 for a future (protocol 5.9): a shared hold of pages
    /// `..=last` if it needs no wait; else S1 is undone and the future's
    /// waker left on S3's key until the phase changes (X4's return to
    /// X3 and X6 wake it), `Pending`. Unlike a thread, a future does not
    /// hold back while an exclusive acquisition waits (it waits for the
    /// phase instead: it holds nothing meanwhile, so the exclusive side
    /// never waits for it). Hold the result only within one poll: shared
    /// holds are counted per thread. Context: no sleep.
    pub(crate) fn poll_read(
        &self,
        last: u64,
        reg: &mut crate::sync::waitq::Registration,
        waker: &std::task::Waker,
    ) -> std::task::Poll<SizeShared<'_>> {
        let hi = last.min(ALL_PAGES);
        let shard = self.my_shard();
        #[cfg(not(loom))]
        let nested = SHARED_DEPTH.try_with(|d| d.get()).unwrap_or(1) != 0;
        #[cfg(loom)]
        let nested = false;
        loop {
            // S1-S3, as `read`.
            self.enter(shard, hi);
            fence(Ordering::SeqCst);
            // Acquire: as in `read`.
            let st = self.phase.load(Ordering::Acquire);
            let blocked = st & PHASE != IDLE && hi >= st & !PHASE;
            if !blocked || (st & PHASE == WAITING && nested) {
                crate::sync::waitq::cancel(reg);
                #[cfg(not(loom))]
                let _ = SHARED_DEPTH.try_with(|d| d.set(d.get() + 1));
                #[cfg(all(feature = "lockstat", not(loom)))]
                crate::sync::lockstat::acquired(LockClass::SizeLock, None);
                return std::task::Poll::Ready(SizeShared {
                    lock: self,
                    shard,
                    #[cfg(all(feature = "lockstat", not(loom)))]
                    since: std::time::Instant::now(),
                });
            }
            self.leave(shard);
            // Relaxed: re-checked under the queue's lock; the phase's
            // changers store, then wake (X4, X6).
            if crate::sync::waitq::register(reg, self.shared_key(), waker, || {
                self.phase.load(Ordering::Relaxed) == st
            }) {
                return std::task::Poll::Pending;
            }
            crate::sync::retry_point();
        }
    }

    /// S3's hold-back: while the phase stays `st` (an exclusive acquisition
    /// waiting), for at most [`HOLD_BACK`]. One yield under loom.
    #[cold]
    fn hold_back(&self, st: u64) {
        crate::sync::may_block("the size lock's hold-back");
        #[cfg(not(loom))]
        {
            let until = std::time::Instant::now() + HOLD_BACK;
            // Relaxed: a hint; S2 decides.
            while self.phase.load(Ordering::Relaxed) == st && std::time::Instant::now() < until {
                std::thread::yield_now();
            }
        }
        #[cfg(loom)]
        {
            let _ = st;
            crate::sync::yield_now();
        }
    }

    /// S1: one more holder of `shard`, of pages up to `hi`.
    #[inline]
    fn enter(&self, shard: &AtomicU64, hi: u64) {
        // Relaxed: the callers' fence orders it before S2's load.
        let _ = shard.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            debug_assert!(w & COUNT < COUNT, "size lock shard holders overflow");
            Some((((w >> COUNT_BITS).max(hi)) << COUNT_BITS) | ((w & COUNT) + 1))
        });
    }

    /// Whether the process in slot `slot`, tagged `tag`, holds this lock
    /// (a shard hold, or X1 by its mutex word): for its recovery, once it
    /// is dead. Context: any.
    #[cfg(not(loom))]
    pub(crate) fn held_by(&self, slot: usize, tag: u32) -> bool {
        // Relaxed: the process is dead; its last stores are not needed.
        self.shards_of(slot)
            .iter()
            .any(|s| s.load(Ordering::Relaxed) & COUNT != 0)
            || self.exclusive.holder() == Some(tag)
    }

    /// Gives back what the dead process in slot `slot`, tagged `tag`, held
    /// (5.15): its shards' holds (zeroed: no other process counts there,
    /// and none of its threads runs) and, if it held X1, the exclusive
    /// hold's phase, reset under X1's mutex taken over from it (5.14): a
    /// live exclusive holder that took X1 over first has set the phase
    /// itself, and must not see it reset under it. Wakes who waits.
    /// Context: may sleep (X1, with nothing else held); the recovery's
    /// thread.
    #[cfg(not(loom))]
    pub(crate) fn release_dead(&self, slot: usize, tag: u32) {
        for s in self.shards_of(slot) {
            // Release: as `leave`'s.
            s.store(0, Ordering::Release);
        }
        if self.exclusive.holder() == Some(tag) {
            let _one = self.exclusive.lock();
            // The repair a takeover asks for is this reset.
            let _ = crate::sync::futex::took_over();
            // X6, as `SizeExclusive`'s drop.
            self.phase.store(IDLE, Ordering::Release);
            crate::sync::unpark_all(self.shared_key());
            crate::sync::waitq::wake_all(self.shared_key());
        }
        fence(Ordering::SeqCst);
        crate::sync::unpark_all(self.exclusive_key());
    }

    /// S5 (and S3's undo of S1).
    #[inline]
    fn leave(&self, shard: &AtomicU64) {
        // Release: the holder's work happens-before X3's Acquire load that
        // sees this.
        let _ = shard.fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
            debug_assert!(w & COUNT != 0, "size lock shard released unheld");
            Some(if w & COUNT == 1 { 0 } else { w - 1 })
        });
        // SeqCst: Dekker's pattern with X2 (no lost wake-up).
        fence(Ordering::SeqCst);
        // Relaxed: only whether to wake; the sleeper re-checks after its
        // park's fence (5.10).
        if self.phase.load(Ordering::Relaxed) & PHASE == WAITING {
            crate::sync::unpark_all(self.exclusive_key());
        }
    }

    /// Whether a shard has holders that may touch page `from` or later
    /// (X3). Acquire: pairs with S5's Release RMW.
    fn reached(&self, from: u64) -> bool {
        let reaches = |s: &crossbeam_utils::CachePadded<AtomicU64>| {
            let w = s.load(Ordering::Acquire);
            w & COUNT != 0 && w >> COUNT_BITS >= from
        };
        #[cfg(not(loom))]
        if self.procs().is_some_and(|p| p.iter().any(reaches)) {
            return true;
        }
        self.shards[..self.used].iter().any(reaches)
    }

    /// The exclusive hold of pages `from()..` (computed once the caller is
    /// the only exclusive acquirer, X1): waits for the shared holders that
    /// reach them (X2-X4). Context: may sleep; holds nothing else while it
    /// waits.
    pub fn write(&self, from: impl FnOnce() -> u64) -> SizeExclusive<'_> {
        #[cfg(all(feature = "lockstat", not(loom)))]
        let asked = std::time::Instant::now();
        #[cfg(all(feature = "lockstat", not(loom)))]
        let mut waited = false;
        // X1.
        let one = self.exclusive.lock();
        // A holder that died left X1 to us: what it left half-done is the
        // file's cut under way (5.6 T0), which the caller looks at.
        #[cfg(not(loom))]
        let _ = crate::sync::futex::took_over();
        let from = from().min(ALL_PAGES);
        // X2. Relaxed: the fence orders it before X3's loads.
        self.phase.store(WAITING | from, Ordering::Relaxed);
        #[cfg(not(loom))]
        let mut strict_at = Some(std::time::Instant::now() + HOLD_BACK);
        loop {
            fence(Ordering::SeqCst);
            // X3.
            if self.reached(from) {
                #[cfg(all(feature = "lockstat", not(loom)))]
                {
                    waited = true;
                }
                // A shard's highest page is reset only when its holders are
                // all gone: threads that share a shard and keep overlapping
                // could keep it up. Past the hold-back, every outermost
                // arrival holds back (as if all pages were cut), so the
                // shards drain; X4 still names `from`.
                #[cfg(not(loom))]
                if strict_at.is_some_and(|t| std::time::Instant::now() >= t) {
                    strict_at = None;
                    // Relaxed: the fence at the top of the loop orders it.
                    self.phase.store(WAITING, Ordering::Relaxed);
                    continue;
                }
                crate::sync::park(self.exclusive_key(), || self.reached(from));
                crate::sync::retry_point();
                continue;
            }
            // X4.
            self.phase.store(HELD | from, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if !self.reached(from) {
                break;
            }
            // Back to X3, as strict as before.
            #[cfg(not(loom))]
            let back = if strict_at.is_some() {
                WAITING | from
            } else {
                WAITING
            };
            #[cfg(loom)]
            let back = WAITING | from;
            self.phase.store(back, Ordering::Relaxed);
            crate::sync::unpark_all(self.shared_key());
            crate::sync::waitq::wake_all(self.shared_key());
        }
        #[cfg(all(feature = "lockstat", not(loom)))]
        crate::sync::lockstat::acquired(LockClass::SizeLock, waited.then_some(asked));
        SizeExclusive {
            lock: self,
            _one: one,
            #[cfg(all(feature = "lockstat", not(loom)))]
            since: std::time::Instant::now(),
        }
    }
}

impl Drop for SizeShared<'_> {
    #[inline]
    fn drop(&mut self) {
        #[cfg(all(feature = "lockstat", not(loom)))]
        crate::sync::lockstat::released(LockClass::SizeLock, self.since);
        // S5.
        self.lock.leave(self.shard);
        #[cfg(not(loom))]
        let _ = SHARED_DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl Drop for SizeExclusive<'_> {
    fn drop(&mut self) {
        #[cfg(all(feature = "lockstat", not(loom)))]
        crate::sync::lockstat::released(LockClass::SizeLock, self.since);
        // X6. Release: our work happens-before S2's Acquire load of it.
        self.lock.phase.store(IDLE, Ordering::Release);
        crate::sync::unpark_all(self.lock.shared_key());
        // Futures refused by `poll_read` wait on the same key.
        crate::sync::waitq::wake_all(self.lock.shared_key());
        // X1's mutex goes with `_one`.
    }
}

/// This thread's shard index (any value; masked by the lock): threads are
/// numbered as they first ask, from the pid on, so threads started
/// together get different shards. 0 under loom (one shard).
#[inline]
pub(crate) fn thread_shard() -> usize {
    #[cfg(loom)]
    return 0;
    #[cfg(not(loom))]
    {
        use crate::sync::unmodelled;
        static NEXT: unmodelled::AtomicUsize = unmodelled::AtomicUsize::new(0);
        thread_local! {
            static SHARD: std::cell::Cell<usize> = const { std::cell::Cell::new(usize::MAX) };
        }
        SHARD
            .try_with(|c| {
                let mut v = c.get();
                if v == usize::MAX {
                    // Relaxed: a number, not a publication. Offset by the
                    // pid, so that the first threads of two processes
                    // sharing a file's lock (a shared cache) do not start
                    // on the same shard.
                    v = NEXT
                        .fetch_add(1, unmodelled::Ordering::Relaxed)
                        .wrapping_add(std::process::id() as usize);
                    c.set(v);
                }
                v
            })
            .unwrap_or(0)
    }
}

#[cfg(all(test, not(loom)))]
#[path = "size_lock_tests.rs"]
mod tests;
