//! Loom models of the lock-free protocol cores, run by `scripts/loom.sh`:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release -p pagecache --test loom
//! ```
//!
//! The models drive the real `FrameDesc` state-word code (built against
//! loom's atomics through `crate::sync`), with the index slot and the page
//! bytes modelled by loom atomics.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use pagecache::internals::state::{FrameDesc, PinFail, PinKind, Released, State};

/// A frame holding page `index` of file 1 with only the cache's reference.
fn cached(index: u64) -> FrameDesc {
    let d = FrameDesc::new();
    d.assign(1, index, State::cached(1));
    d
}

#[derive(Debug, PartialEq)]
enum Lookup {
    Hit,
    Miss,
}

/// Protocol 5.1 against a slot holding `frame + 1` (frames 0 and 1 here).
fn lookup(slot: &AtomicU64, frames: &[FrameDesc; 2], index: u64) -> (Lookup, Option<usize>) {
    for _ in 0..3 {
        // 1.
        let e = slot.load(Ordering::Acquire);
        if e == 0 {
            return (Lookup::Miss, None);
        }
        let f = (e - 1) as usize;
        let d = &frames[f];
        // 2.
        match d.try_pin(PinKind::User) {
            Ok(s) => {
                // 3.
                let (owner, idx) = d.identity();
                if !s.is_removed() && owner == 1 && idx == index {
                    return (Lookup::Hit, Some(f));
                }
                assert_eq!(d.release(), Released::Alive, "stray pin never frees here");
            }
            Err(PinFail::Free) | Err(PinFail::Latched) => thread::yield_now(),
            Err(PinFail::Overflow) => unreachable!(),
        }
    }
    (Lookup::Miss, None) // gave up: would take the locked path
}

/// 5.1 (speculative pin) against 5.2 (freeze, clear slot, recycle the frame
/// for another page at once).
#[test]
fn lookup_vs_removal_and_recycling() {
    loom::model(|| {
        let frames = Arc::new([cached(0), FrameDesc::new()]);
        let slot = Arc::new(AtomicU64::new(1)); // page 0 -> frame 0
        let (f2, s2) = (frames.clone(), slot.clone());
        let remover = thread::spawn(move || {
            let d = &f2[0];
            // The evictor pins first, then freezes {cache + own} to zero.
            if d.try_pin(PinKind::Evict).is_err() {
                return false;
            }
            if d.freeze(2).is_err() {
                let _ = d.release();
                return false;
            }
            // C: clear the slot, reset identity, reuse for page 5 (ABA).
            s2.store(0, Ordering::Release);
            d.reset();
            d.assign(1, 5, State::cached(1));
            true
        });
        let (res, pinned) = lookup(&slot, &frames, 0);
        let evicted = remover.join().unwrap();
        let d = &frames[0];
        match res {
            Lookup::Hit => {
                // A pin on page 0 means the freeze could not have succeeded.
                assert!(!evicted, "evicted a page a reader had pinned");
                assert_eq!(d.identity(), (1, 0));
                assert_eq!(d.snapshot().refs(), 2);
                assert_eq!(pinned, Some(0));
                assert_eq!(d.release(), Released::Alive);
            }
            Lookup::Miss => {}
        }
        // Every stray reference was dropped: only the owner's remains.
        assert_eq!(d.snapshot().refs(), 1);
        let expect = if evicted { (1, 5) } else { (1, 0) };
        assert_eq!(d.identity(), expect);
    });
}

/// Two words standing for the page's bytes.
struct Page {
    d: FrameDesc,
    w: [AtomicU64; 2],
}

/// 5.4 (optimistic read), a pinned read, and 5.5 (write under the latch).
#[test]
fn optimistic_and_pinned_reads_vs_write() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let p = Arc::new(Page {
            d: cached(0),
            w: [AtomicU64::new(0), AtomicU64::new(0)],
        });
        let pw = p.clone();
        let writer = thread::spawn(move || {
            let d = &pw.d;
            d.try_pin(PinKind::User).unwrap_or_else(|_| unreachable!());
            assert!(d.try_latch(), "the only writer");
            d.wait_drained();
            d.begin_change();
            pw.w[0].store(7, Ordering::Relaxed);
            pw.w[1].store(7, Ordering::Relaxed);
            d.end_change();
            let _ = d.unlatch_dirty();
            let _ = d.release();
        });
        let pp = p.clone();
        let pinned = thread::spawn(move || {
            for _ in 0..2 {
                match pp.d.try_pin(PinKind::User) {
                    Ok(_) => {
                        // Pins are latches: no write can be in progress.
                        let a = pp.w[0].load(Ordering::Relaxed);
                        let b = pp.w[1].load(Ordering::Relaxed);
                        assert_eq!(a, b, "pinned reader saw a torn page");
                        let _ = pp.d.release();
                        return;
                    }
                    Err(_) => pp.d.wait_unlatched(),
                }
            }
        });
        // Optimistic reader, on this thread.
        for _ in 0..2 {
            let Some(v) = p.d.read_begin() else {
                thread::yield_now();
                continue;
            };
            if !p.d.snapshot().is_uptodate() {
                break;
            }
            let a = p.w[0].load(Ordering::Relaxed);
            let b = p.w[1].load(Ordering::Relaxed);
            if p.d.read_validate(v) {
                assert_eq!(a, b, "validated snapshot is torn");
                assert!(a == 0 || a == 7);
                break;
            }
        }
        writer.join().unwrap();
        pinned.join().unwrap();
        let s = p.d.snapshot();
        assert_eq!(s.refs(), 1);
        assert!(s.is_dirty());
        assert_eq!(p.w[0].load(Ordering::Relaxed), 7);
    });
}

/// Per-CPU frame caches: refill, drain and steal between two shards and the
/// global pool never hand one frame to two owners and never lose one.
#[test]
fn percpu_refill_and_drain() {
    use loom::sync::atomic::AtomicBool;
    use pagecache::internals::alloc::{FrameAllocator, PerCpuPool};
    const N: usize = 4;
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        // 4 frames, 2 shards: batch 1, high 2. Shard 1 takes two frames and
        // frees them (they stay cached on shard 1); shard 0 wants three, so
        // once the global pool is dry it must steal from shard 1, and its
        // frees past two drain back to the global pool. While the other
        // thread holds frames, running out (None) is legitimate.
        let p = Arc::new(PerCpuPool::with_shards(N, 2));
        assert_eq!(p.batch(), 1);
        let owned: Arc<Vec<AtomicBool>> =
            Arc::new((0..N).map(|_| AtomicBool::new(false)).collect());
        let take = |p: &PerCpuPool, o: &[AtomicBool], shard: usize| {
            let f = p.alloc_on(shard)?;
            assert!(
                !o[f as usize].swap(true, Ordering::SeqCst),
                "frame {f} handed out twice"
            );
            Some(f)
        };
        let give = |p: &PerCpuPool, o: &[AtomicBool], shard: usize, f: u32| {
            assert!(
                o[f as usize].swap(false, Ordering::SeqCst),
                "frame {f} freed while free"
            );
            p.free_on(shard, f);
        };
        let (p2, o2) = (p.clone(), owned.clone());
        let t = thread::spawn(move || {
            let a = take(&p2, &o2, 1);
            let b = take(&p2, &o2, 1);
            for f in [a, b].into_iter().flatten() {
                give(&p2, &o2, 1, f);
            }
        });
        let mine: Vec<u32> = (0..3).filter_map(|_| take(&p, &owned, 0)).collect();
        for f in mine {
            give(&p, &owned, 0, f);
        }
        t.join().unwrap();
        assert_eq!(p.free_count(), N, "no frame lost");
        p.validate(N);
        // Everything is free now: all four must be allocatable from shard 0.
        let all: Vec<u32> = (0..N).filter_map(|_| take(&p, &owned, 0)).collect();
        assert_eq!(all.len(), N, "a frame is stranded");
    });
}

/// S3-FIFO batch submission (per-CPU pending batches drained into a shard
/// under its lock) against a reclaimer draining and evicting: every
/// submitted page ends up exactly once either evicted or still queued.
#[test]
fn replacement_batch_submission_and_draining() {
    use pagecache::internals::s3fifo::{Entry, Queues, Verdict, BATCH};
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let q = Arc::new(Queues::new(1, 64));
        let n = BATCH as u32 + 1; // one full batch plus one pending
        let q2 = q.clone();
        let inserter = thread::spawn(move || {
            for f in 0..n {
                q2.submit(
                    0,
                    Entry {
                        frame: f,
                        key: f as u64,
                    },
                    |_| true,
                );
            }
        });
        let mut evicted = Vec::new();
        q.evict(0, &mut evicted, 4, 64, |_| Verdict::Cold);
        inserter.join().unwrap();
        q.evict(0, &mut evicted, n as usize, 64, |_| Verdict::Cold);
        let mut seen: Vec<u32> = evicted.iter().map(|e| e.frame).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "every page once");
        assert!(q.is_empty());
    });
}

/// Anonymous first touch (two faulters race to publish their frame with a
/// slot CAS; the loser undoes) against `free` (swap the slot to 0, then the
/// orphan step). Exactly one frame is ever published, the loser's frame is
/// never visible, and every reference is accounted for at the end.
#[test]
fn anon_first_touch_vs_free() {
    use loom::sync::atomic::AtomicU32;
    const REGION: u64 = (1 << 63) | 1;
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let frames = Arc::new([FrameDesc::new(), FrameDesc::new()]);
        let slot = Arc::new(AtomicU32::new(0));
        // A faulter owns frame `f` (allocated: refcount 0, no identity).
        let fault = |frames: &[FrameDesc; 2], slot: &AtomicU32, f: u32| -> bool {
            let d = &frames[f as usize];
            d.assign(REGION, 0, State::ANON_FAULTED); // the region's reference + ours
            if slot
                .compare_exchange(0, f + 1, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return true;
            }
            d.reset(); // never visible: undo
            false
        };
        let (f1, s1) = (frames.clone(), slot.clone());
        let a = thread::spawn(move || fault(&f1, &s1, 0));
        let (f2, s2) = (frames.clone(), slot.clone());
        let freer = thread::spawn(move || {
            let e = s2.swap(0, Ordering::AcqRel);
            if e != 0 {
                // orphan: the region's reference goes; last one frees
                if f2[(e - 1) as usize].orphan() == Released::Last {
                    f2[(e - 1) as usize].reset();
                }
            }
            e
        });
        let won_b = fault(&frames, &slot, 1);
        let won_a = a.join().unwrap();
        let freed = freer.join().unwrap();
        let left = slot.load(Ordering::Acquire);
        // At most one published at a time; a second win needs a free between.
        assert!(
            !(won_a && won_b) || freed != 0,
            "two frames published for one page"
        );
        for (f, won) in [(0u32, won_a), (1u32, won_b)] {
            let d = &frames[f as usize];
            if !won {
                assert_eq!(d.snapshot().refs(), 0, "loser's frame {f} not undone");
                continue;
            }
            let published_now = left == f + 1;
            let was_freed = freed == f + 1;
            assert!(
                published_now ^ was_freed,
                "frame {f}: in the slot or freed, exactly one"
            );
            // Our pin, plus the region's unless the free orphaned it.
            let expect = if was_freed { 1 } else { 2 };
            assert_eq!(d.snapshot().refs(), expect, "frame {f}");
            assert_eq!(d.snapshot().is_removed(), was_freed);
            let last = d.release();
            assert_eq!(
                last == Released::Last,
                was_freed,
                "orphan freed by its last pin"
            );
        }
    });
}

/// Seed 004's SMP list (`reclaim::smp_list`), "shared mode" with no other
/// synchronisation: `ops` run on threads (the first on the model's main
/// thread) against a list built by adding `init` at the head in order; the
/// result must be exactly `want`, head first, with every back link
/// consistent. Two threads per model: three-thread models with these spin
/// waits do not finish in CI time.
fn smp_list_model(n: usize, init: &'static [u32], ops: [(bool, u32); 2], want: &'static [u32]) {
    use pagecache::internals::smp_list::SmpList;
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.max_branches = 100_000;
    b.check(move || {
        let l = Arc::new(SmpList::new(n));
        for &e in init {
            l.add_head(e);
        }
        let run = |l: &SmpList, (add, e): (bool, u32)| if add { l.add_head(e) } else { l.del(e) };
        let l2 = l.clone();
        let t = thread::spawn(move || run(&l2, ops[1]));
        run(&l, ops[0]);
        t.join().unwrap();
        assert_eq!(l.entries(), Ok(want.to_vec()));
    });
}

/// Adjacent deletes in the middle: head 0 1 2, delete 0 and 1.
#[test]
fn smp_list_adjacent_deletes() {
    smp_list_model(3, &[2, 1, 0], [(false, 0), (false, 1)], &[2]);
}

/// Adjacent deletes at the tail (the successor is the head sentinel).
#[test]
fn smp_list_tail_deletes() {
    smp_list_model(2, &[1, 0], [(false, 0), (false, 1)], &[]);
}

/// A head add against the delete of the first entry: both lock the head's
/// next field.
#[test]
fn smp_list_head_add_vs_first_delete() {
    smp_list_model(3, &[1, 0], [(true, 2), (false, 0)], &[2, 1]);
}

/// A head add against the delete of the second entry, whose predecessor
/// is the first entry (not the head).
#[test]
fn smp_list_head_add_vs_second_delete() {
    smp_list_model(3, &[1, 0], [(true, 2), (false, 1)], &[2, 0]);
}

/// Seed 004's list with its membership states (`smp_list::Members`): a
/// reclaimer puts an isolated node back (`link(0, ISOLATED)`) while its
/// frame is freed (`unlink(0)`) and at once reused for a new page
/// (`link(0, OFF)`). In every interleaving node 0 ends on the list exactly
/// once (its links consistent), its state ON, and the calls' results
/// account for it (one net add).
#[test]
fn smp_members_put_back_vs_free_and_reuse() {
    use pagecache::internals::smp_list::{Members, ISOLATED, OFF};
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.max_branches = 100_000;
    b.check(|| {
        let m = Arc::new(Members::new(2));
        // List: head 1 0; then pop 0 off the tail, as a scan would.
        assert!(m.link(0, OFF));
        assert!(m.link(1, OFF));
        assert_eq!(m.list().pop_tail(), Some(0));
        m.isolate(0);
        let m2 = m.clone();
        let put_back = thread::spawn(move || m2.link(0, ISOLATED) as i32);
        let freed = m.unlink(0) as i32;
        let reused = m.link(0, OFF) as i32;
        let back = put_back.join().unwrap();
        assert_eq!(back + reused - freed, 1, "node 0 listed once on balance");
        let mut got = m.list().entries().expect("links consistent");
        got.sort_unstable();
        assert_eq!(got, vec![0, 1]);
    });
}
