//! The free-frame pool's stacks in memory of their own: one block holds a
//! small head (shard count, batch, frames), one padded mutex per stack
//! around its length, and each stack's frame numbers. Nothing inside is an
//! address, so the same block serves a private pool (boxed memory) and a
//! pool that several processes map at different addresses (a segment's
//! table, [`Stacks::init`] then [`Stacks::over`]).
//!
//! ```text
//! Head (64 bytes)   shards, batch, frames
//! locks             1 + shards x CachePadded<Mutex<u32>>: stack 0 is the
//!                   global pool, stack 1 + i shard i; the u32 is the length
//! shard slots       shards x SHARD_CAP frame numbers
//! global slots      frames frame numbers
//! ```
//!
//! A stack's slots are read and written only by the holder of its mutex
//! (through [`Locked`]), as a `Vec` behind a mutex would be.

use super::FrameNo;
use crate::sync::{LockClass, Mutex, MutexGuard};
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
#[cfg(not(loom))]
use std::io;
use std::ptr::NonNull;

/// Largest batch moved between a shard and the global pool.
pub const MAX_BATCH: usize = 63;
/// Frames a shard can hold: its high mark (2 batches) plus one more batch
/// taken from elsewhere before it drains back down, rounded up to whole
/// 128-byte lines (no two stacks' slots share a line).
pub const SHARD_CAP: usize = (3 * MAX_BATCH).next_multiple_of(LINE_SLOTS);
/// Frame numbers per 128-byte line.
const LINE_SLOTS: usize = 128 / std::mem::size_of::<FrameNo>();

/// A 128-byte line of slots (the unit of a private block's slots, so that
/// each stack's slots start on a line of their own).
#[repr(C, align(128))]
struct Line([UnsafeCell<FrameNo>; LINE_SLOTS]);
/// Shards a placed pool has room for (a segment's pool is sized for this
/// many and uses the creator's CPU count, at most this).
pub const MAX_SHARDS: usize = 256;

/// The block's first bytes: what every user of the block must agree on.
#[derive(Debug)]
#[repr(C, align(64))]
struct Head {
    shards: u32,
    batch: u32,
    frames: u32,
}

type Lock = CachePadded<Mutex<u32>>;

/// Stack `i`'s lock, empty (stack 0 is the global pool).
fn lock(i: usize) -> Lock {
    let class = if i == 0 {
        LockClass::Pool
    } else {
        LockClass::PcpShard
    };
    CachePadded::new(Mutex::with_class(0, class))
}

/// Byte offsets of the block's parts for `frames` and `shards`.
fn offsets(frames: usize, shards: usize) -> (usize, usize, usize, usize) {
    let locks = std::mem::size_of::<Head>().next_multiple_of(std::mem::align_of::<Lock>());
    // (A lock is a whole number of 128-byte lines: the slots start on one.)
    let shard_slots = locks + (1 + shards) * std::mem::size_of::<Lock>();
    let global_slots = shard_slots + shards * SHARD_CAP * std::mem::size_of::<FrameNo>();
    let end = global_slots + frames * std::mem::size_of::<FrameNo>();
    (locks, shard_slots, global_slots, end)
}

/// Who frees the memory.
#[derive(Debug)]
enum Owner {
    /// Boxed by [`Stacks::new`] (raw, so that the pointers into them stay
    /// the only way in; given back to their boxes on drop).
    Boxed {
        locks: *mut [Lock],
        slots: *mut [Line],
    },
    /// Someone else's (a segment's table).
    #[cfg_attr(loom, allow(dead_code))]
    Placed,
}

/// The stacks of one pool (see module docs).
#[derive(Debug)]
pub struct Stacks {
    locks: NonNull<Lock>,
    shard_slots: NonNull<FrameNo>,
    global_slots: NonNull<FrameNo>,
    shards: usize,
    batch: usize,
    frames: usize,
    owner: Owner,
}

// SAFETY: the locks are mutexes; the slots are reached only under their
// stack's lock (`Locked`); the memory lives as long as `self` (boxed) or as
// the caller of `over` promised.
unsafe impl Send for Stacks {}
// SAFETY: as above.
unsafe impl Sync for Stacks {}

impl Stacks {
    /// Bytes a placed block of `frames` frames and `shards` shards takes.
    pub fn bytes(frames: usize, shards: usize) -> usize {
        offsets(frames, shards).3
    }

    /// Alignment a placed block needs.
    pub fn align() -> usize {
        std::mem::align_of::<Lock>().max(std::mem::align_of::<Head>())
    }

    /// The batch for `frames` frames over `shards` shards: the shards
    /// together hold at most about half of the frames, so that a 16-frame
    /// cache still works.
    pub fn batch_for(frames: usize, shards: usize) -> usize {
        (frames / (4 * shards)).clamp(1, MAX_BATCH)
    }

    /// Private stacks: the global one holding frames `0..frames` (lowest
    /// handed out first), `shards` empty shards.
    pub fn new(frames: usize, shards: usize) -> Self {
        let shards = shards.max(1);
        let locks: Box<[Lock]> = (0..=shards).map(lock).collect();
        let lines = (shards * SHARD_CAP + frames).div_ceil(LINE_SLOTS);
        let slots: Box<[Line]> = (0..lines)
            .map(|_| Line(std::array::from_fn(|_| UnsafeCell::new(0))))
            .collect();
        let (locks, slots) = (Box::into_raw(locks), Box::into_raw(slots));
        // Lines are arrays of cells: a cell pointer to the first reaches
        // them all.
        let at = UnsafeCell::raw_get(slots.cast::<UnsafeCell<FrameNo>>());
        let s = Stacks {
            // SAFETY: from a box (non-null).
            locks: unsafe { NonNull::new_unchecked(locks.cast()) },
            // SAFETY: inside the boxed slice (non-null); shard slots first,
            // then the global stack's.
            shard_slots: unsafe { NonNull::new_unchecked(at) },
            // SAFETY: as above.
            global_slots: unsafe { NonNull::new_unchecked(at.add(shards * SHARD_CAP)) },
            shards,
            batch: Self::batch_for(frames, shards),
            frames,
            owner: Owner::Boxed { locks, slots },
        };
        s.fill();
        s
    }

    /// Writes a fresh block at `base` for `frames` frames and `shards`
    /// shards (at most [`MAX_SHARDS`]): the same state as [`Stacks::new`].
    ///
    /// # Safety
    ///
    /// `base` is [`Stacks::bytes`]`(frames, shards)` writable bytes aligned
    /// to [`Stacks::align`], that no one else uses yet.
    #[cfg(not(loom))]
    pub unsafe fn init(base: NonNull<u8>, frames: usize, shards: usize) {
        let shards = shards.clamp(1, MAX_SHARDS);
        let (locks, ..) = offsets(frames, shards);
        // SAFETY: the caller's promise: in bounds, aligned, ours.
        unsafe {
            base.cast::<Head>().as_ptr().write(Head {
                shards: shards as u32,
                batch: Self::batch_for(frames, shards) as u32,
                frames: frames as u32,
            });
            let l = base.as_ptr().add(locks).cast::<Lock>();
            for i in 0..=shards {
                l.add(i).write(lock(i));
            }
            Self::over(base, frames)
                .expect("a block just written")
                .fill();
        }
    }

    /// The block [`Stacks::init`] wrote at `base` (maybe in another
    /// process), for `frames` frames: an error if its head says otherwise.
    ///
    /// # Safety
    ///
    /// `base` is aligned to [`Stacks::align`] and holds a block written by
    /// `init` for `frames` frames and at most [`MAX_SHARDS`] shards (room
    /// for [`Stacks::bytes`]`(frames, MAX_SHARDS)` bytes at least, when the
    /// head is not trusted), which stays mapped while the result lives.
    #[cfg(not(loom))]
    pub unsafe fn over(base: NonNull<u8>, frames: usize) -> io::Result<Self> {
        // SAFETY: the caller's promise; the head is plain data.
        let h = unsafe { &*base.cast::<Head>().as_ptr() };
        let (shards, batch) = (h.shards as usize, h.batch as usize);
        if h.frames as usize != frames
            || !(1..=MAX_SHARDS).contains(&shards)
            || !(1..=MAX_BATCH).contains(&batch)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "free-frame pool says {} frames, {shards} shards, batch {batch}; expected {frames} frames, 1-{MAX_SHARDS} shards, batch 1-{MAX_BATCH}",
                    h.frames
                ),
            ));
        }
        let (locks, shard_slots, global_slots, _) = offsets(frames, shards);
        // SAFETY: offsets inside the block the caller vouches for.
        unsafe {
            Ok(Stacks {
                locks: NonNull::new_unchecked(base.as_ptr().add(locks).cast()),
                shard_slots: NonNull::new_unchecked(base.as_ptr().add(shard_slots).cast()),
                global_slots: NonNull::new_unchecked(base.as_ptr().add(global_slots).cast()),
                shards,
                batch,
                frames,
                owner: Owner::Placed,
            })
        }
    }

    /// Puts every frame on the global stack, lowest on top.
    fn fill(&self) {
        let mut g = self.global();
        for f in (0..self.frames as FrameNo).rev() {
            g.push(f);
        }
    }

    /// Shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Frames of the pool (the global stack's room).
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Frames per refill or drain.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// Locks the global stack.
    #[inline]
    pub fn global(&self) -> Locked<'_> {
        // SAFETY: lock 0 is inside the block; the global slots hold
        // `frames` numbers.
        unsafe { self.locked(0, self.global_slots, self.frames) }
    }

    /// Locks shard `i`'s stack.
    #[inline]
    pub fn shard(&self, i: usize) -> Locked<'_> {
        assert!(i < self.shards);
        // SAFETY: lock 1 + i and shard i's SHARD_CAP slots are inside the
        // block.
        unsafe {
            let slots = NonNull::new_unchecked(self.shard_slots.as_ptr().add(i * SHARD_CAP));
            self.locked(1 + i, slots, SHARD_CAP)
        }
    }

    /// # Safety
    ///
    /// Lock `l` guards the `cap` slots at `slots`, inside the block.
    #[inline]
    unsafe fn locked(&self, l: usize, slots: NonNull<FrameNo>, cap: usize) -> Locked<'_> {
        // SAFETY: the caller's promise.
        let len = unsafe { (*self.locks.as_ptr().add(l)).lock() };
        // A length past the capacity (memory another process scribbled on)
        // is clamped, never trusted for an access.
        #[cfg_attr(loom, allow(unused_mut))]
        let mut s = Locked { len, slots, cap };
        // (Only a placed block's lock can have a holder in another process.)
        #[cfg(not(loom))]
        if matches!(self.owner, Owner::Placed) && crate::sync::futex::took_over() {
            s.repair(self.frames);
        }
        s
    }
}

impl Drop for Stacks {
    fn drop(&mut self) {
        if let Owner::Boxed { locks, slots } = self.owner {
            // SAFETY: the boxes `new` leaked, given back once; no `Locked`
            // outlives `self`.
            unsafe {
                drop(Box::from_raw(locks));
                drop(Box::from_raw(slots));
            }
        }
    }
}

/// One locked stack: its length under the lock, its slots.
pub struct Locked<'a> {
    len: MutexGuard<'a, u32>,
    slots: NonNull<FrameNo>,
    cap: usize,
}

impl Locked<'_> {
    /// Frames on the stack.
    #[inline]
    pub fn len(&self) -> usize {
        (*self.len as usize).min(self.cap)
    }

    /// The frames, oldest (bottom) first.
    #[inline]
    pub fn as_slice(&self) -> &[FrameNo] {
        // SAFETY: the first `len` slots, which the lock we hold guards.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr(), self.len()) }
    }

    #[inline]
    fn slots_mut(&mut self) -> &mut [FrameNo] {
        // SAFETY: all `cap` slots, guarded by the lock we hold.
        unsafe { std::slice::from_raw_parts_mut(self.slots.as_ptr(), self.cap) }
    }

    /// The top (the next popped), if any.
    #[inline]
    pub fn top(&self) -> Option<FrameNo> {
        self.as_slice().last().copied()
    }

    /// The stack taken over from a holder whose process died inside
    /// (5.14 R3): a `take_bottom` stopped halfway through its shift leaves
    /// some frames twice below the length (the ones it took out are in no
    /// stack then, which the census finds, 5.15 P8c). Keeps the first of
    /// each and drops numbers past `frames`. Context: under the lock.
    #[cfg(not(loom))]
    #[cold]
    fn repair(&mut self, frames: usize) {
        let mut seen = vec![false; frames];
        let n = self.len();
        let s = self.slots_mut();
        let mut kept = 0;
        for i in 0..n {
            let f = s[i];
            if (f as usize) < frames && !std::mem::replace(&mut seen[f as usize], true) {
                s[kept] = f;
                kept += 1;
            }
        }
        *self.len = kept as u32;
    }

    /// Pops the top (the last pushed).
    #[inline]
    pub fn pop(&mut self) -> Option<FrameNo> {
        let n = self.len();
        if n == 0 {
            return None;
        }
        let f = self.slots_mut()[n - 1];
        *self.len = (n - 1) as u32;
        Some(f)
    }

    /// Pushes `f` on top.
    ///
    /// # Panics
    ///
    /// If the stack is full: the pool's protocol keeps every stack within
    /// its capacity, so this is a bug, never a state users cause.
    #[inline]
    pub fn push(&mut self, f: FrameNo) {
        self.extend(&[f]);
    }

    /// Pushes `fs` on top, in order. Panics as [`Locked::push`].
    #[inline]
    pub fn extend(&mut self, fs: &[FrameNo]) {
        let n = self.len();
        assert!(
            n + fs.len() <= self.cap,
            "free-frame stack over its capacity ({n} + {} > {})",
            fs.len(),
            self.cap
        );
        self.slots_mut()[n..n + fs.len()].copy_from_slice(fs);
        // The slots before the length, in program order and in the
        // compiler's: a process killed between the two (its lock taken
        // over, 5.14) leaves a frame uncounted (leaked), never a stale
        // slot counted (a frame handed out twice). No instruction on x86.
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        *self.len = (n + fs.len()) as u32;
    }

    /// Moves the top `out.len()` frames (the last pushed, the hottest) into
    /// `out`, in order; the caller asks for at most `len()`.
    #[inline]
    pub fn take_top(&mut self, out: &mut [FrameNo]) -> usize {
        let n = self.len();
        let from = n - out.len();
        out.copy_from_slice(&self.slots_mut()[from..n]);
        *self.len = from as u32;
        out.len()
    }

    /// Moves the bottom `out.len()` frames (the oldest, the coldest) into
    /// `out`; the caller asks for at most `len()`. A process killed inside
    /// the shift leaves frames twice below the length, which the next
    /// holder's `repair` drops.
    #[inline]
    pub fn take_bottom(&mut self, out: &mut [FrameNo]) -> usize {
        let (n, k) = (self.len(), out.len());
        let s = self.slots_mut();
        out.copy_from_slice(&s[..k]);
        s.copy_within(k..n, 0);
        *self.len = (n - k) as u32;
        k
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// What a holder killed inside `take_bottom`'s shift leaves (frames
    /// twice below the length), and a number past the pool's frames, are
    /// what the taker's `repair` drops; each other frame stays once.
    #[test]
    fn repair_drops_what_a_half_shift_left_twice() {
        let s = Stacks::new(8, 1);
        let mut t = s.shard(0);
        t.extend(&[0, 1, 2, 3, 4, 5]);
        // `take_bottom` of two stopped after two slots of its shift: 0 and
        // 1 are out (in no stack), 2 and 3 are at the bottom and above.
        t.slots_mut()[..2].copy_from_slice(&[2, 3]);
        t.push(9);
        t.repair(8);
        assert_eq!(t.as_slice(), &[2, 3, 4, 5]);
    }
}
