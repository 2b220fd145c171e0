//! List-based baselines the lab compares against the default S3-FIFO
//! (DESIGN.md 3, issue 3 item 5). Neither is used unless asked for with
//! `Config::policy`.
//!
//! * [`StrictLru`]: one list under one global mutex, every page added at
//!   insertion, moved to the front on **every** hit (pinned or optimistic),
//!   deleted when its frame is freed, evicted from the tail. The "before"
//!   design of seeds 003/004: each hit writes the lock word and up to four
//!   list links that every other CPU also writes.
//! * [`SmpLru`]: seed 004's design. The list is a [`SmpList`](super::smp_list::SmpList) behind a
//!   two-mode rwlock: adds (insertion, put-back) and deletes (frame freed)
//!   take it *shared* and synchronise among themselves on the list's
//!   per-node links; isolation for eviction takes it *exclusive* and pops
//!   the tail. Hits write only the `REFERENCED` bit (second chance at the
//!   tail), like the kernel's `mark_page_accessed` without activation.
//!
//! Both list anonymous pages too (added at first touch, deleted at free),
//! as the kernel's LRU does, so the lab's page-fault scenario pays the list
//! on every fault and free; unevictable pages met at the tail are rotated
//! to the head.
//!
//! The SMP list forbids two deleters of one node and adding a node that is
//! linked; [`Members`] (in `smp_list`, where loom models it) enforces both
//! with a per-frame state.

use super::smp_list::{Members, ISOLATED, OFF, ON};
use super::{examine, ReplacementPolicy, Verdict};
use crate::frame::{FrameNo, FrameTable};
use crate::sync::{LockClass, Mutex, RwLock};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Plain doubly-linked list of frame numbers with a membership state per
/// frame; node `n` is the head sentinel. Used under [`StrictLru`]'s mutex.
#[derive(Debug)]
struct List {
    next: Vec<u32>,
    prev: Vec<u32>,
    state: Vec<u8>,
    head: u32,
}

impl List {
    fn new(n: usize) -> List {
        let head = n as u32;
        List {
            next: vec![head; n + 1],
            prev: vec![head; n + 1],
            state: vec![OFF; n],
            head,
        }
    }

    fn push_front(&mut self, e: u32) {
        let (h, first) = (self.head, self.next[self.head as usize]);
        self.next[e as usize] = first;
        self.prev[e as usize] = h;
        self.prev[first as usize] = e;
        self.next[h as usize] = e;
    }

    fn unlink(&mut self, e: u32) {
        let (n, p) = (self.next[e as usize], self.prev[e as usize]);
        self.next[p as usize] = n;
        self.prev[n as usize] = p;
    }

    fn tail(&self) -> Option<u32> {
        let t = self.prev[self.head as usize];
        (t != self.head).then_some(t)
    }
}

/// Strict LRU under one global lock (see the module docs).
#[derive(Debug)]
pub struct StrictLru {
    list: Mutex<List>,
    /// Entries on the list (a lock-free mirror for `pass_len`).
    len: AtomicUsize,
}

impl StrictLru {
    /// A policy for `frames` frames.
    pub fn new(frames: usize) -> StrictLru {
        StrictLru {
            list: Mutex::with_class(List::new(frames), LockClass::LruGlobal),
            len: AtomicUsize::new(0),
        }
    }

    /// Every hit: move to the front.
    pub fn hit(&self, f: FrameNo) {
        let mut l = self.list.lock();
        if l.state[f as usize] == ON && l.next[l.head as usize] != f {
            l.unlink(f);
            l.push_front(f);
        }
    }

    /// Frame `f` left the cache (freed or evicted).
    pub fn removed(&self, f: FrameNo) {
        let mut l = self.list.lock();
        let st = std::mem::replace(&mut l.state[f as usize], OFF);
        if st == ON {
            l.unlink(f);
            // Relaxed: a length hint.
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The frames on the list, head first (tests).
    pub fn entries(&self) -> Vec<FrameNo> {
        let l = self.list.lock();
        let mut out = Vec::new();
        let mut c = l.next[l.head as usize];
        while c != l.head {
            out.push(c);
            c = l.next[c as usize];
        }
        out
    }
}

impl ReplacementPolicy for StrictLru {
    fn inserted(&self, _frames: &FrameTable, f: FrameNo) {
        let mut l = self.list.lock();
        debug_assert_eq!(l.state[f as usize], OFF, "frame {f} inserted twice");
        if l.state[f as usize] == OFF {
            l.state[f as usize] = ON;
            l.push_front(f);
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn candidates(
        &self,
        frames: &FrameTable,
        out: &mut Vec<FrameNo>,
        want: usize,
        _urgent: bool,
    ) -> usize {
        let mut l = self.list.lock();
        let budget = self.len.load(Ordering::Relaxed);
        let mut examined = 0;
        while out.len() < want && examined < budget {
            let Some(t) = l.tail() else { break };
            examined += 1;
            l.unlink(t);
            // Strict LRU: recency is the list order, so the reference bit
            // gives no second chance (judged as if urgent).
            if examine(frames, t, true) == Verdict::Cold {
                l.state[t as usize] = ISOLATED;
                self.len.fetch_sub(1, Ordering::Relaxed);
                out.push(t);
            } else {
                l.push_front(t);
            }
        }
        examined
    }

    fn not_evicted(&self, _frames: &FrameTable, f: FrameNo) {
        let mut l = self.list.lock();
        // Only if still isolated: a frame freed meanwhile is OFF (and may
        // already be someone else's page, listed again).
        if l.state[f as usize] == ISOLATED {
            l.state[f as usize] = ON;
            l.push_front(f);
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn pass_len(&self, _frames: &FrameTable) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

/// Seed 004's two-mode lock over an SMP-safe list (see the module docs).
#[derive(Debug)]
pub struct SmpLru {
    /// Shared for add/delete, exclusive for isolation.
    mode: RwLock<()>,
    /// The list and each frame's membership state.
    members: Members,
    /// Entries on the list (a lock-free mirror for `pass_len`).
    len: AtomicUsize,
}

impl SmpLru {
    /// A policy for `frames` frames.
    pub fn new(frames: usize) -> SmpLru {
        SmpLru {
            mode: RwLock::with_classes((), LockClass::LruShared, LockClass::LruExclusive),
            members: Members::new(frames),
            len: AtomicUsize::new(0),
        }
    }

    /// Adds `f` if its state is `from` (shared mode).
    fn link(&self, f: FrameNo, from: u8) {
        let _shared = self.mode.read();
        if self.members.link(f, from) {
            // Relaxed: a length hint.
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Frame `f` left the cache (freed or evicted): delete its node if
    /// listed (shared mode).
    pub fn removed(&self, f: FrameNo) {
        let _shared = self.mode.read();
        if self.members.unlink(f) {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The frames on the list, head first, with the links checked (tests).
    pub fn entries(&self) -> Result<Vec<FrameNo>, String> {
        let _excl = self.mode.write();
        self.members.list().entries()
    }
}

impl ReplacementPolicy for SmpLru {
    fn inserted(&self, _frames: &FrameTable, f: FrameNo) {
        self.link(f, OFF);
    }

    fn candidates(
        &self,
        frames: &FrameTable,
        out: &mut Vec<FrameNo>,
        want: usize,
        urgent: bool,
    ) -> usize {
        let _excl = self.mode.write();
        let list = self.members.list();
        let budget = self.len.load(Ordering::Relaxed);
        let mut examined = 0;
        while out.len() < want && examined < budget {
            let Some(t) = list.pop_tail() else { break };
            examined += 1;
            if examine(frames, t, urgent) == Verdict::Cold {
                self.members.isolate(t);
                self.len.fetch_sub(1, Ordering::Relaxed);
                out.push(t);
            } else {
                list.add_head(t);
            }
        }
        examined
    }

    fn not_evicted(&self, _frames: &FrameTable, f: FrameNo) {
        self.link(f, ISOLATED);
    }

    fn pass_len(&self, _frames: &FrameTable) -> usize {
        self.len.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::state::UPTODATE;

    fn table(n: usize) -> FrameTable {
        let t = FrameTable::new(n, 4096).unwrap();
        for f in 0..n as u32 {
            let d = t.desc(f);
            d.begin_change();
            d.set_identity(1, f as u64);
            d.end_change();
            d.publish_state(1 | UPTODATE);
        }
        t
    }

    #[test]
    fn strict_lru_evicts_least_recently_hit_first() {
        let t = table(8);
        let p = StrictLru::new(8);
        for f in 0..4 {
            p.inserted(&t, f);
        }
        assert_eq!(p.entries(), vec![3, 2, 1, 0]);
        p.hit(0);
        p.hit(2);
        assert_eq!(p.entries(), vec![2, 0, 3, 1]);
        let mut out = Vec::new();
        p.candidates(&t, &mut out, 2, false);
        assert_eq!(out, vec![1, 3]);
        // One could not be evicted: back at the front. The other was
        // freed by someone else meanwhile: its put-back is ignored.
        p.not_evicted(&t, 1);
        p.removed(3);
        p.not_evicted(&t, 3);
        assert_eq!(p.entries(), vec![1, 2, 0]);
        p.removed(2);
        assert_eq!(p.entries(), vec![1, 0]);
        assert_eq!(p.pass_len(&t), 2);
    }

    #[test]
    fn smp_lru_second_chance_and_put_back() {
        let t = table(8);
        let p = SmpLru::new(8);
        for f in 0..4 {
            p.inserted(&t, f);
        }
        assert_eq!(p.entries().unwrap(), vec![3, 2, 1, 0]);
        t.desc(0).mark_referenced();
        let mut out = Vec::new();
        p.candidates(&t, &mut out, 2, false);
        assert_eq!(out, vec![1, 2], "0 had its second chance");
        assert_eq!(p.entries().unwrap(), vec![0, 3]);
        p.not_evicted(&t, 1);
        p.removed(2); // evicted: off for good
        p.not_evicted(&t, 2);
        p.removed(3);
        assert_eq!(p.entries().unwrap(), vec![1, 0]);
        assert_eq!(p.pass_len(&t), 2);
    }

    /// Oversubscribed: threads insert, put back and remove their own frames
    /// concurrently (shared mode) while one thread isolates (exclusive).
    /// Afterwards the list holds exactly the frames whose state is ON.
    #[test]
    fn smp_lru_concurrent_membership_stays_consistent() {
        use std::sync::Arc;
        const T: u32 = 12;
        const PER: u32 = 16;
        let n = (T * PER) as usize;
        let t = Arc::new(table(n));
        let p = Arc::new(SmpLru::new(n));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let evictor = {
            let (t, p, stop) = (t.clone(), p.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut out = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    out.clear();
                    p.candidates(&t, &mut out, 8, true);
                    for &f in &out {
                        p.not_evicted(&t, f); // never actually evicted
                    }
                    std::thread::yield_now();
                }
            })
        };
        let hs: Vec<_> = (0..T)
            .map(|k| {
                let (t, p) = (t.clone(), p.clone());
                std::thread::spawn(move || {
                    for r in 0..400u32 {
                        for f in k * PER..(k + 1) * PER {
                            p.inserted(&t, f);
                        }
                        for f in k * PER..(k + 1) * PER {
                            if r == 399 && f % 3 == 0 {
                                continue;
                            }
                            p.removed(f);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        evictor.join().unwrap();
        let mut got = p.entries().expect("links consistent");
        got.sort_unstable();
        let want: Vec<u32> = (0..n as u32).filter(|f| f % 3 == 0).collect();
        assert_eq!(got, want);
        assert_eq!(p.pass_len(&t), want.len());
    }
}
