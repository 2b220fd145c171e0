//! Strict LRU, a baseline for the lab (seeds 003/004's "before"): one list
//! under one global mutex, every page added at insertion, moved to the
//! front on **every** hit (pinned or optimistic), deleted when its frame is
//! freed, evicted from the tail. Each hit writes the lock word and up to
//! four list links that every other CPU also writes. Anonymous pages are
//! listed too (added at first touch, deleted at free), as the kernel's LRU
//! does; unevictable pages met at the tail are rotated to the head.

use super::smp_list::{ISOLATED, OFF, ON};
use super::{examine, ReplacementPolicy, Verdict};
use crate::frame::{FrameNo, FrameTable};
use crate::sync::{AtomicUsize, LockClass, Mutex, Ordering};

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

    /// Every hit: move to the front.
    fn wants_hits(&self) -> bool {
        true
    }

    fn hit(&self, f: FrameNo) {
        let mut l = self.list.lock();
        if l.state[f as usize] == ON && l.next[l.head as usize] != f {
            l.unlink(f);
            l.push_front(f);
        }
    }

    /// Frame `f` left the cache (freed or evicted).
    fn removed(&self, _frames: &FrameTable, f: FrameNo) {
        let mut l = self.list.lock();
        let st = std::mem::replace(&mut l.state[f as usize], OFF);
        if st == ON {
            l.unlink(f);
            // Relaxed: a length hint.
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn listed(&self) -> Option<Result<Vec<FrameNo>, String>> {
        let l = self.list.lock();
        let mut out = Vec::new();
        let mut c = l.next[l.head as usize];
        while c != l.head {
            out.push(c);
            c = l.next[c as usize];
        }
        Some(Ok(out))
    }

    fn anon_inserted(&self, frames: &FrameTable, f: FrameNo) {
        self.inserted(frames, f);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::reclaim::test_table as table;

    #[test]
    fn strict_lru_evicts_least_recently_hit_first() {
        let t = table(8);
        let p = StrictLru::new(8);
        for f in 0..4 {
            p.inserted(&t, f);
        }
        assert_eq!(p.listed().unwrap().unwrap(), vec![3, 2, 1, 0]);
        p.hit(0);
        p.hit(2);
        assert_eq!(p.listed().unwrap().unwrap(), vec![2, 0, 3, 1]);
        let mut out = Vec::new();
        p.candidates(&t, &mut out, 2, false);
        assert_eq!(out, vec![1, 3]);
        // One could not be evicted: back at the front. The other was
        // freed by someone else meanwhile: its put-back is ignored.
        p.not_evicted(&t, 1);
        p.removed(&t, 3);
        p.not_evicted(&t, 3);
        assert_eq!(p.listed().unwrap().unwrap(), vec![1, 2, 0]);
        p.removed(&t, 2);
        assert_eq!(p.listed().unwrap().unwrap(), vec![1, 0]);
        assert_eq!(p.pass_len(&t), 2);
    }
}
