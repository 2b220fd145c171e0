//! Wait queues for futures: the asynchronous twin of [`park`](super::park).
//!
//! A future that must wait for a page (its latch, a latch holder's drain)
//! cannot sleep: it leaves its [`Waker`] in a queue hashed from the same
//! key a thread would park on (the frame descriptor's address), returns
//! `Pending`, and whoever changes the state wakes the queue. The
//! predicate that says the wait is still needed is evaluated under the
//! bucket's lock (where `park` re-checks after a fence, 5.10), and every
//! waker changes the state *before* it takes that lock ([`wake_all`]), so
//! a wake-up cannot fall between the check and the registration
//! (protocol 5.9, `cache/asynch.rs`).
//!
//! One table per process, as the kernel's `page_waitqueue()` hash: keys
//! are addresses, unique while their object lives. It holds wakers of this
//! process only; for an object in a region shared by processes, a future
//! also announces itself in the region's mailbox of this process and a
//! waker rings the mailboxes of the others, whose doorbell threads wake
//! their futures (`doorbell.rs`, protocol 5.13). Entries carry an id so
//! that a future polled again replaces its waker instead of adding one,
//! and a dropped future removes exactly its own entry ([`cancel`]). Wakers
//! run after the bucket's lock is dropped (a waker may do anything, even
//! poll), at most [`BATCH`] per lock round.

use super::LockClass;
use super::Mutex;
use std::task::Waker;

/// Buckets of the table (a power of two). Loom models see a handful (each
/// is a modelled mutex); collisions only cost a longer scan.
#[cfg(not(loom))]
const BUCKETS: usize = 256;
#[cfg(loom)]
const BUCKETS: usize = 2;
/// Wakers taken out of a bucket per lock round.
const BATCH: usize = 16;

#[derive(Debug)]
struct Entry {
    key: usize,
    id: u64,
    waker: Waker,
}

#[derive(Debug)]
struct Table {
    buckets: Vec<crossbeam_utils::CachePadded<Mutex<Vec<Entry>>>>,
}

impl Table {
    fn new() -> Table {
        Table {
            buckets: (0..BUCKETS)
                .map(|_| {
                    crossbeam_utils::CachePadded::new(Mutex::with_class(
                        Vec::new(),
                        LockClass::AsyncWaitQueue,
                    ))
                })
                .collect(),
        }
    }

    fn bucket(&self, key: usize) -> &Mutex<Vec<Entry>> {
        // Fibonacci hashing of the address (descriptors are 64 bytes apart:
        // the low bits carry nothing).
        let h = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        &self.buckets[h as usize & (BUCKETS - 1)]
    }
}

#[cfg(not(loom))]
fn table() -> &'static Table {
    static T: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    T.get_or_init(Table::new)
}

#[cfg(loom)]
fn table() -> &'static Table {
    loom::lazy_static! {
        static ref T: Table = Table::new();
    }
    &T
}

/// A future's place in the table: nothing, or the key and id of the entry
/// it left there (which a wake-up may have taken out since).
#[derive(Debug, Default)]
pub struct Registration {
    at: Option<(usize, u64)>,
}

impl Registration {
    /// Whether an entry was left (and maybe woken since).
    pub fn is_registered(&self) -> bool {
        self.at.is_some()
    }
}

/// Leaves `waker` in the queue of `key` if `still_blocked()` holds under
/// the bucket's lock; returns whether it did (then the caller returns
/// `Pending`; else it re-checks the state itself). A registration left on
/// another key is removed first; one on the same key gets the new waker.
/// Context: no sleep (a leaf lock); `still_blocked` must only load atomics.
pub(crate) fn register(
    reg: &mut Registration,
    key: usize,
    waker: &Waker,
    still_blocked: impl FnOnce() -> bool,
) -> bool {
    if matches!(reg.at, Some((k, _)) if k != key) {
        cancel(reg);
    }
    // 5.13 D1, before D2's re-check under the bucket's lock.
    #[cfg(not(loom))]
    if let Some((t, off, Some(me))) = super::futex::region_of(key) {
        t.mail.announce(me, off);
    }
    let b = table().bucket(key);
    let mut q = b.lock();
    if !still_blocked() {
        drop(q);
        cancel(reg);
        return false;
    }
    if let Some((_, id)) = reg.at {
        if let Some(e) = q.iter_mut().find(|e| e.id == id) {
            if !e.waker.will_wake(waker) {
                e.waker = waker.clone();
            }
            return true;
        }
    }
    let id = next_id();
    q.push(Entry {
        key,
        id,
        waker: waker.clone(),
    });
    reg.at = Some((key, id));
    true
}

/// Removes the entry `reg` left, if a wake-up has not taken it already.
/// Context: no sleep (a leaf lock).
pub(crate) fn cancel(reg: &mut Registration) {
    if let Some((key, id)) = reg.at.take() {
        let mut q = table().bucket(key).lock();
        if let Some(i) = q.iter().position(|e| e.id == id) {
            q.swap_remove(i);
        }
    }
}

/// Wakes every future waiting on `key`. The caller has changed the state
/// their predicates read before this call. Context: no sleep but the
/// wakers' own work; takes the bucket's lock (never while holding one).
pub(crate) fn wake_all(key: usize) {
    // 5.13 R1-R2: other processes' futures.
    #[cfg(not(loom))]
    if let Some((t, off, me)) = super::futex::region_of(key) {
        t.mail.ring(me, off);
    }
    wake_where(table().bucket(key), |k| k == key);
}

/// 5.13 T2: wakes every future of this process waiting on a key in
/// `[base, base + len)` whose offset `hit` accepts. Takes each bucket's
/// lock in turn (the doorbell thread; no lock held).
#[cfg(not(loom))]
pub(crate) fn wake_region(base: usize, len: usize, hit: impl Fn(usize) -> bool) {
    for b in &table().buckets {
        wake_where(b, |k| k.wrapping_sub(base) < len && hit(k - base));
    }
}

/// Wakes the futures of bucket `b` whose key `is` accepts: takes at most
/// [`BATCH`] wakers per round under the lock, wakes them after it.
fn wake_where(b: &Mutex<Vec<Entry>>, is: impl Fn(usize) -> bool) {
    loop {
        let mut woken: [Option<Waker>; BATCH] = Default::default();
        let mut n = 0;
        let more = {
            let mut q = b.lock();
            let mut i = 0;
            while i < q.len() && n < BATCH {
                if is(q[i].key) {
                    woken[n] = Some(q.swap_remove(i).waker);
                    n += 1;
                } else {
                    i += 1;
                }
            }
            n == BATCH && q.iter().any(|e| is(e.key))
        };
        for w in woken.iter_mut().take(n) {
            if let Some(w) = w.take() {
                w.wake();
            }
        }
        if !more {
            return;
        }
    }
}

/// Ids of entries: unique for the process's life (a counter no protocol
/// reads, so not modelled).
fn next_id() -> u64 {
    use super::unmodelled::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    // Relaxed: uniqueness only.
    NEXT.fetch_add(1, Ordering::Relaxed)
}
