//! Seed 004's SMP-safe list: a doubly-linked circular list of frame numbers
//! on which several threads may add at the head and delete entries at the
//! same time, under a two-mode lock held *shared*; anything else (walking,
//! popping the tail for eviction) holds it *exclusive*.
//!
//! This is a baseline for the lab (the RFC "lru_lock scalability and SMP
//! list functions", 2018, which the kernel did not merge): the cache's
//! default replacement needs no list at all. Nodes are indices (frame
//! numbers `0..n`, the head sentinel is `n`); links are `u32` atomics, and
//! [`NIL`] in a `next` field plays the RFC's `NULL`: "this link is locked".
//!
//! Deletion uses two locks per entry, both `next` fields: the entry's own
//! and its predecessor's. The entry's `next` is *locked* by pointing it back
//! at its predecessor (a successor being deleted waits on that, and a
//! predecessor being deleted learns from it whom to wait for); the
//! predecessor's `next` is locked by setting it to [`NIL`].
//!
//! # Protocol: concurrent head add and delete (shared mode)
//!
//! ```text
//!  add(E) at the head H                 del(E), E between D and F
//!  a1. lock H.next: CAS s -> NIL       1. lock E: CAS E.next F -> D (F is
//!      (s != NIL; else wait)              reread; NIL = F's deleter holds
//!  a2. E.next = s; E.prev = H;            our next in its step 3: wait)
//!      s.prev = E (Release)            2. reread E.prev until stable, each
//!  a3. H.next = E (Release): unlocks      new value republished in E.next
//!      H and publishes E                  (then a SeqCst fence)
//!                                      3. lock D: CAS D.next E -> NIL; if D
//!                                         does not point at E, D is being
//!                                         deleted: wait, rereading E.prev
//!                                         and republishing as in 2
//!                                      4. F.prev = D; SeqCst fence; wait
//!                                         while F.next == E (F's deleter
//!                                         has not seen its new prev yet);
//!                                         D.next = F (Release): unlinks E
//!                                         and unlocks D at once
//! ```
//!
//! Why it works (the RFC's argument, restated for these steps):
//! * No one deletes D while E is locked pointing at it: D's deleter waits
//!   in its step 4 while `E.next == D`. It is released when E republishes
//!   D's own predecessor C (which D wrote into `E.prev` in its step 4), so
//!   E then locks C instead.
//! * No one deletes F while E is locked: F's step 3 needs `E.next == F`.
//! * Step 4's store `F.prev = D` then load `F.next`, and F's deleter's
//!   store `F.next = X` then load `F.prev` (steps 2-3) are a store-load
//!   pair on each side, each with a SeqCst fence between: at least one side
//!   sees the other's store, so F never locks a predecessor that is gone.
//! * An add locks `H.next` exactly as a deleter of H's successor locks its
//!   predecessor, so adds and the deletion of the first entry serialize on
//!   that one field; an add's `s.prev = E` is seen by a concurrent deleter
//!   of `s` in its step 2/3 reread, which then locks E (a2 wrote `E.next =
//!   s` before, Release).
//! * Precondition (as in the RFC): no two threads delete the same entry,
//!   and an entry is added only when it is on no list. [`Members`] (below)
//!   guarantees it with a per-node membership state.
//!
//! Waits are bounded spins that yield (`crate::sync::spin`): a deleter
//! waiting on a preempted neighbour burns no more than its time slice.
//!
//! The loom models `smp_list_*` (`tests/loom.rs`) run this code with
//! loom's atomics: adjacent deletes in the middle and at the tail, and head
//! adds against deletes of the first and second entries (mutation-checked:
//! dropping the predecessor lock of step 3 or the republishing of steps 2-3
//! fails them).

use crate::sync::{fence, spin, AtomicU32, AtomicU8, Ordering};

/// "No node" in a link, and "locked" in a `next` field.
pub const NIL: u32 = u32::MAX;

/// Membership state: not on the list, nobody adding it.
pub const OFF: u8 = 0;
/// On the list.
pub const ON: u8 = 1;
/// Taken off the list by an exclusive-mode scan and in its caller's hands.
pub const ISOLATED: u8 = 2;
/// Being added by the thread that moved it here.
pub const LINKING: u8 = 3;
/// Its frame left while it was being added: the adder deletes it again.
pub const UNLINKING: u8 = 4;

/// One node's links, side by side in one 8-byte word pair.
#[derive(Debug)]
struct Link {
    next: AtomicU32,
    prev: AtomicU32,
}

/// See the module docs.
#[derive(Debug)]
pub struct SmpList {
    links: Box<[Link]>,
    head: u32,
}

impl SmpList {
    /// An empty list able to hold nodes `0..n`.
    ///
    /// # Panics
    /// If `n >= u32::MAX` (node numbers are `u32` and `NIL` is reserved).
    pub fn new(n: usize) -> SmpList {
        assert!(n < NIL as usize, "too many list nodes");
        let head = n as u32;
        let links = (0..=n)
            .map(|i| {
                let me = if i == n { head } else { NIL };
                Link {
                    next: AtomicU32::new(me),
                    prev: AtomicU32::new(me),
                }
            })
            .collect();
        SmpList { links, head }
    }

    #[inline]
    fn link(&self, node: u32) -> &Link {
        &self.links[node as usize]
    }

    /// Adds `e` at the head. Shared mode: concurrent adds and deletes are
    /// allowed; `e` must be on no list.
    pub fn add_head(&self, e: u32) {
        debug_assert!(e < self.head);
        let h = self.link(self.head);
        let mut round = 0;
        // a1. Acquire: the previous adder's (or deleter's) unlock store
        // published the links we are about to overwrite.
        let succ = loop {
            let s = h.next.load(Ordering::Acquire);
            // AcqRel: the lock is an RMW after the last unlock (Release).
            if s != NIL
                && h.next
                    .compare_exchange(s, NIL, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break s;
            }
            spin(&mut round);
        };
        // a2. Our node is private until a3 (or until a deleter of `succ`
        // reads `succ.prev`, which the Release below orders after these).
        let l = self.link(e);
        l.next.store(succ, Ordering::Relaxed);
        l.prev.store(self.head, Ordering::Relaxed);
        self.link(succ).prev.store(e, Ordering::Release);
        // a3. Release: publishes `e`'s links with the unlock.
        h.next.store(e, Ordering::Release);
    }

    /// Deletes `e`. Shared mode: concurrent adds and deletes of other
    /// entries are allowed; nobody else may delete `e`.
    pub fn del(&self, e: u32) {
        debug_assert!(e < self.head);
        let l = self.link(e);
        let mut round = 0;
        // Steps 2-3: if our prev moved (a deleter of `pred` finished its
        // step 4), lock the new one instead: publish it in our next, where
        // that deleter's step-4 wait looks. Returns whether it moved.
        let republish = |pred: &mut u32| {
            // Acquire: pairs with the Release store of step 4 (or a2) that
            // wrote our prev, so the new predecessor's links are visible.
            let now = l.prev.load(Ordering::Acquire);
            if now == *pred {
                return false;
            }
            *pred = now;
            // Release: the deleter of our old predecessor reads it in its
            // step-4 wait.
            l.next.store(now, Ordering::Release);
            // Store-load pair with the fence of a deleter's step 4: either
            // it sees our new next, or we see its new prev next time.
            fence(Ordering::SeqCst);
            true
        };
        // 1. lock `e` by pointing its next at its predecessor.
        let (succ, mut pred) = loop {
            // Acquire: pairs with the Release stores that linked `e` (a2,
            // a neighbour's step 4), so the neighbours we name are visible.
            let s = l.next.load(Ordering::Acquire);
            let p = l.prev.load(Ordering::Acquire);
            // AcqRel: taking the lock is a read-modify-write on our next,
            // ordered after whoever wrote it last.
            if s != NIL
                && l.next
                    .compare_exchange(s, p, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break (s, p);
            }
            spin(&mut round);
        };
        // 2. until stable, so that a deleter of `pred` is not waiting for us.
        while republish(&mut pred) {}
        // 3. lock the predecessor's next (it must point at us).
        loop {
            let pn = &self.link(pred).next;
            // AcqRel: after the unlock store (Release) of whoever held it.
            if pn.load(Ordering::Acquire) == e
                && pn
                    .compare_exchange(e, NIL, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break;
            }
            // `pred` is being deleted: wait for our prev to change.
            spin(&mut round);
            republish(&mut pred);
        }
        // 4. both locks held: unlink. `succ` cannot go away (step 1).
        let sl = self.link(succ);
        // Release: `succ`'s deleter rereads its prev (steps 2-3) and then
        // follows it.
        sl.prev.store(pred, Ordering::Release);
        // Store-load pair with steps 2/3 of a deleter of `succ`.
        fence(Ordering::SeqCst);
        // The RFC needs this wait before its deleter frees `e`; our nodes
        // are never freed, but `e` may be added again at once, and `succ`'s
        // deleter must have let go of it first.
        // Acquire: pairs with that deleter's republishing store.
        while sl.next.load(Ordering::Acquire) == e {
            spin(&mut round); // `succ`'s deleter has not republished yet
        }
        // Release: unlinks `e` and unlocks `pred` at once; orders the
        // `succ.prev` store before it for whoever locks `pred.next` next.
        self.link(pred).next.store(succ, Ordering::Release);
        // `e` is unreachable now; poison it (no one reads it any more).
        l.next.store(NIL, Ordering::Relaxed);
        l.prev.store(NIL, Ordering::Relaxed);
    }

    /// Removes and returns the tail entry. Exclusive mode only (no
    /// concurrent list operation).
    pub fn pop_tail(&self) -> Option<u32> {
        // Relaxed: the exclusive lock orders us after every shared-mode
        // operation.
        let t = self.link(self.head).prev.load(Ordering::Relaxed);
        if t == self.head {
            return None;
        }
        self.unlink_exclusive(t);
        Some(t)
    }

    /// Unlinks `e`. Exclusive mode only.
    fn unlink_exclusive(&self, e: u32) {
        let l = self.link(e);
        let (n, p) = (
            l.next.load(Ordering::Relaxed),
            l.prev.load(Ordering::Relaxed),
        );
        debug_assert!(
            n != NIL && p != NIL,
            "unlinking node {e} that is not linked"
        );
        self.link(p).next.store(n, Ordering::Relaxed);
        self.link(n).prev.store(p, Ordering::Relaxed);
        l.next.store(NIL, Ordering::Relaxed);
        l.prev.store(NIL, Ordering::Relaxed);
    }

    /// The entries from head to tail, checking every back link. Exclusive
    /// mode only (or quiescent). `Err` names the first broken link.
    pub fn entries(&self) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        let mut prev = self.head;
        let mut cur = self.link(self.head).next.load(Ordering::Relaxed);
        while cur != self.head {
            if cur == NIL || cur > self.head {
                return Err(format!("node {prev}: next is {cur}"));
            }
            let back = self.link(cur).prev.load(Ordering::Relaxed);
            if back != prev {
                return Err(format!("node {cur}: prev is {back}, expected {prev}"));
            }
            out.push(cur);
            if out.len() > self.links.len() {
                return Err("cycle not through the head".into());
            }
            prev = cur;
            cur = self.link(cur).next.load(Ordering::Relaxed);
        }
        let back = self.link(self.head).prev.load(Ordering::Relaxed);
        if back != prev {
            return Err(format!("head: prev is {back}, expected {prev}"));
        }
        Ok(out)
    }
}

/// An [`SmpList`] of nodes `0..n` with a membership state per node, which
/// makes the list's precondition (one deleter per node, no add of a linked
/// node) hold when adds and deletes of one node come from several threads:
/// an add after a frame is inserted or put back, a delete when the frame
/// leaves the cache, maybe at the same moment.
///
/// # Protocol: membership (shared mode unless marked)
///
/// ```text
///  link(f, from)                          unlink(f)
///  1. CAS state from -> LINKING;          A. state ON -> OFF (CAS): delete
///     UNLINKING -> wait (a linker is         the node -> true
///     deleting it); other -> false        B. LINKING -> UNLINKING (CAS): the
///  2. add_head(f)                            linker deletes it -> false
///  3. CAS LINKING -> ON -> true;          C. ISOLATED -> OFF (CAS): off the
///     failed (UNLINKING, set by B):          list already -> false
///     del(f), store OFF -> false          D. OFF, UNLINKING: nothing -> false
///
///  isolate(f) (exclusive mode, after pop_tail): store ISOLATED
/// ```
///
/// Every transition that unlinks a node is taken by exactly one thread (a
/// successful CAS, or the linker whose step-3 CAS failed), so a node has one
/// deleter; an adder waits while a node is UNLINKING, so a node is never
/// added while linked; and the caller runs `unlink` before a freed frame
/// can be reused, so a new `link(f, OFF)` never meets an old ON. Orderings:
/// every state CAS is AcqRel, so the list operations of the thread that
/// moved a node into a state happen-before those of the next thread that
/// moves it out. The loom model `smp_members_put_back_vs_free_and_reuse`
/// (`tests/loom.rs`) checks the core.
#[derive(Debug)]
pub struct Members {
    list: SmpList,
    state: Box<[AtomicU8]>,
}

impl Members {
    /// Nodes `0..n`, all `OFF`.
    pub fn new(n: usize) -> Members {
        Members {
            list: SmpList::new(n),
            state: (0..n).map(|_| AtomicU8::new(OFF)).collect(),
        }
    }

    /// The list (exclusive-mode scans pop and re-add through it).
    pub fn list(&self) -> &SmpList {
        &self.list
    }

    /// Steps 1-3: adds `f` if its state is `from`. Returns whether `f` is
    /// listed because of this call.
    pub fn link(&self, f: u32, from: u8) -> bool {
        let st = &self.state[f as usize];
        let mut round = 0;
        // 1. AcqRel: after the previous mover's list operations; before ours.
        loop {
            match st.compare_exchange(from, LINKING, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(UNLINKING) => spin(&mut round),
                Err(_) => return false, // not ours to add (freed, or listed again)
            }
        }
        // 2.
        self.list.add_head(f);
        // 3. AcqRel: publishes the add to the next mover.
        if st
            .compare_exchange(LINKING, ON, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return true;
        }
        // `unlink` ran meanwhile (B) and left the deletion to us.
        self.list.del(f);
        // Release: our delete happens-before the next linker's add.
        st.store(OFF, Ordering::Release);
        false
    }

    /// Steps A-D: `f`'s frame left. Returns whether this call deleted `f`
    /// from the list.
    pub fn unlink(&self, f: u32) -> bool {
        let st = &self.state[f as usize];
        // Acquire: seeds the CAS (which re-checks with AcqRel).
        let mut cur = st.load(Ordering::Acquire);
        loop {
            let to = match cur {
                ON | ISOLATED => OFF,
                LINKING => UNLINKING,
                _ => return false, // D.
            };
            // AcqRel: after the previous mover's list operations.
            match st.compare_exchange(cur, to, Ordering::AcqRel, Ordering::Acquire) {
                Ok(ON) => {
                    // A.
                    self.list.del(f);
                    return true;
                }
                Ok(_) => return false, // B, C.
                Err(now) => cur = now,
            }
        }
    }

    /// Exclusive mode: `f` (just popped by the caller) is now in its hands.
    pub fn isolate(&self, f: u32) {
        // Relaxed: exclusive mode orders it against every shared-mode CAS.
        self.state[f as usize].store(ISOLATED, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn sequential_add_del_pop_keep_order() {
        let l = SmpList::new(8);
        assert_eq!(l.entries().unwrap(), Vec::<u32>::new());
        for e in [0, 1, 2, 3] {
            l.add_head(e);
        }
        assert_eq!(l.entries().unwrap(), vec![3, 2, 1, 0]);
        l.del(2);
        assert_eq!(l.entries().unwrap(), vec![3, 1, 0]);
        l.del(3); // first
        l.del(0); // last
        assert_eq!(l.entries().unwrap(), vec![1]);
        assert_eq!(l.pop_tail(), Some(1));
        assert_eq!(l.pop_tail(), None);
        l.add_head(5);
        assert_eq!(l.entries().unwrap(), vec![5]);
    }

    /// Oversubscribed: 16 threads on 2 cores, each repeatedly adding its own
    /// nodes and deleting them again, many of them adjacent (they were added
    /// back to back). The list must end exactly as the model says.
    #[test]
    fn concurrent_adds_and_adjacent_deletes_keep_the_list_whole() {
        const T: u32 = 16;
        const PER: u32 = 8;
        const ROUNDS: usize = 3000;
        let l = Arc::new(SmpList::new((T * PER) as usize));
        let bar = Arc::new(Barrier::new(T as usize));
        let hs: Vec<_> = (0..T)
            .map(|t| {
                let (l, bar) = (l.clone(), bar.clone());
                std::thread::spawn(move || {
                    let mine: Vec<u32> = (0..PER).map(|i| t * PER + i).collect();
                    bar.wait();
                    for r in 0..ROUNDS {
                        for &e in &mine {
                            l.add_head(e);
                        }
                        // Delete in an order that differs by round, leaving
                        // the last round's odd nodes in place.
                        let last = r + 1 == ROUNDS;
                        for k in 0..mine.len() {
                            let e = mine[(k + r) % mine.len()];
                            if !last || e % 2 == 0 {
                                l.del(e);
                            }
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let mut got = l.entries().expect("list links consistent");
        got.sort_unstable();
        let want: Vec<u32> = (0..T * PER).filter(|e| e % 2 == 1).collect();
        assert_eq!(got, want);
    }
}
