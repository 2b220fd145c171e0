//! Seed 004's design, a baseline for the lab. The list is a
//! [`SmpList`](super::smp_list::SmpList) behind a two-mode rwlock: adds
//! (insertion, put-back) and deletes (frame freed) take it *shared* and
//! synchronise among themselves on the list's per-node links; isolation for
//! eviction takes it *exclusive* and pops the tail. Hits write only the
//! accessed bit (second chance at the tail), like the kernel's
//! `mark_page_accessed` without activation. Anonymous pages are listed too,
//! as the kernel's LRU does.
//!
//! The SMP list forbids two deleters of one node and adding a node that is
//! linked; [`Members`] (in `smp_list`, where loom models it) enforces both
//! with a per-frame state.

use super::smp_list::{Members, ISOLATED, OFF};
use super::{examine, ReplacementPolicy, Verdict};
use crate::frame::{FrameNo, FrameTable};
use crate::sync::{AtomicUsize, LockClass, Ordering, RwLock};

/// Seed 004's two-mode rwlock over an SMP-safe list (see the module docs).
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

    /// Frame `f` left the cache (freed or evicted): delete its node if
    /// listed (shared mode).
    fn removed(&self, _frames: &FrameTable, f: FrameNo) {
        let _shared = self.mode.read();
        if self.members.unlink(f) {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn listed(&self) -> Option<Result<Vec<FrameNo>, String>> {
        let _excl = self.mode.write();
        Some(self.members.list().entries())
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
    fn smp_lru_second_chance_and_put_back() {
        let t = table(8);
        let p = SmpLru::new(8);
        for f in 0..4 {
            p.inserted(&t, f);
        }
        assert_eq!(p.listed().unwrap().unwrap(), vec![3, 2, 1, 0]);
        t.desc(0).mark_accessed(t.desc(0).snapshot());
        let mut out = Vec::new();
        p.candidates(&t, &mut out, 2, false);
        assert_eq!(out, vec![1, 2], "0 had its second chance");
        assert_eq!(p.listed().unwrap().unwrap(), vec![0, 3]);
        p.not_evicted(&t, 1);
        p.removed(&t, 2); // evicted: off for good
        p.not_evicted(&t, 2);
        p.removed(&t, 3);
        assert_eq!(p.listed().unwrap().unwrap(), vec![1, 0]);
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
                            p.removed(&t, f);
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
        let mut got = p.listed().unwrap().expect("links consistent");
        got.sort_unstable();
        let want: Vec<u32> = (0..n as u32).filter(|f| f % 3 == 0).collect();
        assert_eq!(got, want);
        assert_eq!(p.pass_len(&t), want.len());
    }
}
