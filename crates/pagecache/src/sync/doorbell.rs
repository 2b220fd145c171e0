//! Futures woken across processes (protocol 5.13): doorbells in a shared
//! region's wait table.
//!
//! A future waits by leaving its waker in its own process's wait queues
//! (`waitq.rs`), which another process cannot reach. So a region's table
//! (`futex.rs`) also holds one [`Mailbox`] per attached process (its slot
//! in the segment's process table): 256 *waiting* bits (a hash of the
//! offsets its futures wait on), 256 *pending* bits, and a doorbell word
//! that a thread of that process (`pagecache-doorbell`, one per region)
//! sleeps on. A waker of an object in the region rings the mailboxes of
//! the processes whose waiting bits cover the object's offset; their
//! doorbell threads wake their own futures waiting on offsets with those
//! bits, which poll again (a spurious wake-up is a poll that finds the
//! page still busy and waits again).
//!
//! ```text
//!  future in process B, key k              waker in process A, after it
//!  (waitq::register)                       changed the state (wake_all)
//!  D1. B.waiting |= bit(k); any |= B;      R1. fence(SeqCst); for each p in
//!      fence(SeqCst)                           `any` but A with bit(k) in
//!  D2. under B's queue lock: the state         p.waiting:
//!      still blocks? leave the waker       R2. p.pending |= bit(k) (Release);
//!                                              p.bell += 1 (Release); wake
//!  doorbell thread of B
//!  T1. seq = bell (Acquire)
//!  T2. bits = pending.swap(0) (Acquire); under each of B's queue locks,
//!      take the wakers of keys in the region with those bits; wake them
//!  T3. FUTEX_WAIT(bell, seq)
//! ```
//!
//! No lost wake-up. The fences of D1 and R1 are ordered one way or the
//! other. If R1's is first, D2 (after D1's fence) reads the state A changed
//! before R1 and does not wait. If D1's is first, R1 sees B's bit and rings
//! (R2). The doorbell thread then runs T2 after R2: if it was before T1,
//! T1 reads the new count; if between T1 and T3, T3's futex finds the word
//! changed and returns; if in T3, R2's wake ends it; in every case a T2
//! follows that reads R2's pending bit (Acquire against R2's Release). That
//! T2 takes the queue lock of k's bucket. If it takes it after D2 released
//! it, it finds the waker and wakes it. If before, D2 happens after T2's
//! unlock, which happens after R2, which happens after A's state change:
//! D2 sees the change and does not wait.
//!
//! Waiting bits are never cleared (a bit left set costs a ring that wakes
//! nobody, or a poll that finds the page busy). D1 is two RMWs, one on a
//! line only this process writes and one on the table's summary word, and
//! the fence: paid by a future's wait for a page of a shared region only.
//! A waker whose object is in no region, or in one where no other process
//! ever waited, pays nothing more than the fence and a load of `any`.

use super::futex::{futex_wait, futex_wake, WaitTable};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Mailboxes of a table: one per process slot of a segment.
pub const MAILBOXES: usize = 64;
/// Waiting and pending bits per mailbox.
const BITS: usize = 256;

/// One process's mailbox (see module docs).
#[derive(Debug, Default)]
#[repr(C, align(128))]
pub struct Mailbox {
    /// Offsets (hashed) this process's futures have waited on.
    waiting: [AtomicU64; BITS / 64],
    /// Offsets (hashed) woken since its doorbell thread last looked.
    pending: [AtomicU64; BITS / 64],
    /// The doorbell: bumped by every ring, slept on by the thread.
    bell: AtomicU32,
}

/// A table's mailboxes (all zeros: none waiting, none pending).
#[derive(Debug)]
#[repr(C)]
pub struct Mailboxes {
    /// Bit p: mailbox p has waiting bits (never cleared).
    any: AtomicU64,
    boxes: [Mailbox; MAILBOXES],
}

const _: () = assert!(MAILBOXES <= 64);

impl Default for Mailboxes {
    fn default() -> Self {
        Mailboxes {
            any: AtomicU64::new(0),
            boxes: std::array::from_fn(|_| Mailbox::default()),
        }
    }
}

/// The waiting bit of the object at `offset` in its region: (word, mask).
#[inline]
fn bit(offset: usize) -> (usize, u64) {
    let h = ((offset as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
    (h / 64, 1 << (h % 64))
}

impl Mailboxes {
    /// D1 for a future of mailbox `me` about to wait on `offset`.
    #[inline]
    pub(crate) fn announce(&self, me: usize, offset: usize) {
        let (w, m) = bit(offset);
        // Relaxed RMWs, always (not a load that skips a bit already set):
        // the fence rule that makes R1 see them needs our own write before
        // our fence; a bit another thread set and fenced later would not
        // count.
        self.boxes[me].waiting[w].fetch_or(m, Ordering::Relaxed);
        self.any.fetch_or(1 << me, Ordering::Relaxed);
        // D1's fence: Dekker's pattern with R1.
        fence(Ordering::SeqCst);
    }

    /// R1-R2 for a waker of the object at `offset`, from mailbox `me`
    /// (`None`: a process with no mailbox here): rings every other mailbox
    /// whose futures may wait on it.
    #[inline]
    pub(crate) fn ring(&self, me: Option<usize>, offset: usize) {
        // R1. SeqCst: see the module docs.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence.
        let mut any = self.any.load(Ordering::Relaxed);
        if let Some(me) = me {
            any &= !(1 << me);
        }
        if any == 0 {
            return;
        }
        let (w, m) = bit(offset);
        while any != 0 {
            let p = any.trailing_zeros() as usize;
            any &= any - 1;
            let b = &self.boxes[p];
            // Relaxed: ordered by R1's fence.
            if b.waiting[w].load(Ordering::Relaxed) & m != 0 {
                // R2. Release: pairs with T2's Acquire swap.
                b.pending[w].fetch_or(m, Ordering::Release);
                // Release: T1's Acquire load.
                b.bell.fetch_add(1, Ordering::Release);
                futex_wake(&b.bell, true, 1);
            }
        }
    }
}

/// The doorbell thread of mailbox `me` of the region `[base, base + len)`
/// whose table is `table`: T1-T3 until `stop`.
pub(crate) fn serve(table: &WaitTable, base: usize, len: usize, me: usize, stop: &AtomicBool) {
    let b = &table.mail.boxes[me];
    loop {
        // T1. Acquire: pairs with R2's bump.
        let seq = b.bell.load(Ordering::Acquire);
        // Acquire: pairs with `stop_serving`'s Release store.
        if stop.load(Ordering::Acquire) {
            return;
        }
        // T2.
        for w in 0..BITS / 64 {
            // Acquire: pairs with R2's Release.
            let bits = b.pending[w].swap(0, Ordering::Acquire);
            if bits != 0 {
                super::waitq::wake_region(base, len, |off| {
                    let (ow, om) = bit(off);
                    ow == w && bits & om != 0
                });
                // A waker may have ended the region's last user (and the
                // mapping with it) on this thread: touch nothing after.
                // Acquire: as above.
                if stop.load(Ordering::Acquire) {
                    return;
                }
            }
        }
        // T3.
        futex_wait(&b.bell, seq, true, None);
    }
}

/// Ends [`serve`] of mailbox `me` (its thread returns once it runs).
pub(crate) fn stop_serving(table: &WaitTable, me: usize, stop: &AtomicBool) {
    // Release: pairs with the thread's Acquire load.
    stop.store(true, Ordering::Release);
    let b = &table.mail.boxes[me];
    // Release: T1's Acquire.
    b.bell.fetch_add(1, Ordering::Release);
    futex_wake(&b.bell, true, i32::MAX);
}
