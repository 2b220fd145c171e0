//! Tests of S3-FIFO's queues (`s3fifo.rs`): admission, eviction order, the
//! cold end, pruning.
use super::*;

fn e(f: u32) -> Entry {
    Entry {
        frame: f,
        key: f as u64 * 1000,
    }
}

#[test]
fn a_small_queue_of_busy_pages_does_not_hide_main() {
    let mut s = Shard::new(1000); // small target 100
    for f in 0..20 {
        s.admit(e(f));
    }
    // Promote 0..20 to main (referenced), then 300 new pages in small,
    // all busy (under write-back, say): over the small target, and
    // more than one call examines.
    let mut out = Vec::new();
    s.evict(&mut out, 20, 1000, |_| Verdict::Referenced);
    assert!(out.is_empty());
    for f in 100..400 {
        s.admit(e(f));
    }
    assert!(s.small.len() > s.small_target);
    let busy = |x: &Entry| x.frame >= 100;
    for round in 0..3 {
        let mut out = Vec::new();
        s.evict(&mut out, 4, 128, |x| {
            if busy(x) {
                Verdict::Busy
            } else {
                Verdict::Cold
            }
        });
        assert_eq!(out.len(), 4, "round {round}: main's cold pages not found");
        assert!(out.iter().all(|x| x.frame < 100));
    }
}

#[test]
fn pages_written_for_reclaim_are_evicted_first_unless_used_again() {
    let mut s = Shard::new(1000); // small target 100: small is under it
    for f in 0..50 {
        s.admit(e(f));
    }
    // Pages 40 and 30 were written for reclaim: copies at the cold end.
    s.written(e(40));
    s.written(e(30));
    assert_eq!(s.len(), 52);
    // 40 was used again since: its copy goes, its first entry stays.
    let used = |x: &Entry| x.frame == 40;
    let mut out = Vec::new();
    s.evict_written(&mut out, 1, 1000, |x| {
        if used(x) {
            Verdict::Referenced
        } else {
            Verdict::Cold
        }
    });
    assert_eq!(out, vec![e(30)]);
    assert_eq!(s.written.len(), 0, "40's copy dropped with its verdict");
    assert!(s.small.contains(&e(40)) && s.small.contains(&e(30)));
    // Nothing at the cold end: small's order as before.
    let mut out = Vec::new();
    s.evict(&mut out, 2, 1000, |_| Verdict::Cold);
    assert_eq!(out, vec![e(0), e(1)]);
    // A copy is not taken twice in one call with its first entry.
    s.written(e(2));
    let mut out = Vec::new();
    s.evict_written(&mut out, 2, 1000, |_| Verdict::Cold);
    s.evict(&mut out, 2, 1000, |_| Verdict::Cold);
    assert_eq!(out, vec![e(2), e(3)]);
    // At most WRITTEN_MAX copies: the oldest go.
    for f in 0..(WRITTEN_MAX as u32 + 10) {
        s.written(e(1000 + f));
    }
    assert_eq!(s.written.len(), WRITTEN_MAX);
    assert_eq!(s.written.front(), Some(&e(1010)));
    // Pruning drops stale copies.
    s.prune(|x| x.frame < 1000 || x.frame % 2 == 0);
    assert_eq!(s.written.len(), WRITTEN_MAX / 2);
}

#[test]
fn another_shards_cold_end_comes_before_the_reclaimers_own_queues() {
    let q = Queues::new(2, 200);
    for f in 0..40 {
        q.submit(0, e(f), |_| true); // CPU 0's pages
    }
    // The flusher, on CPU 1, wrote page 7 for CPU 0's reclaimer.
    q.written(1, e(7));
    let mut out = Vec::new();
    q.evict(0, &mut out, 1, 64, |_| Verdict::Cold);
    assert_eq!(out, vec![e(7)]);
    let mut out = Vec::new();
    q.evict(0, &mut out, 1, 64, |_| Verdict::Cold);
    assert_eq!(out, vec![e(0)], "then small's order");
}

#[test]
fn scan_pages_leave_through_small_and_spare_main() {
    let mut s = Shard::new(100); // small target 10
                                 // 10 hot pages, referenced after admission, reach main.
    for f in 0..10 {
        s.admit(e(f));
    }
    for f in 100..120 {
        s.admit(e(f)); // scan pages
    }
    let mut out = Vec::new();
    let hot = |x: &Entry| x.frame < 10;
    // Hot pages are referenced; scan pages never are.
    let mut referenced: std::collections::HashSet<u32> = (0..10).collect();
    s.evict(&mut out, 20, 1000, |x| {
        if referenced.remove(&x.frame) {
            Verdict::Referenced
        } else if hot(x) {
            Verdict::Busy
        } else {
            Verdict::Cold
        }
    });
    assert_eq!(out.len(), 20);
    assert!(
        out.iter().all(|x| x.frame >= 100),
        "only scan pages evicted"
    );
    // Evicted-from-small keys are ghosts: re-admitted straight to main.
    s.admit(e(100));
    assert_eq!(s.main.back(), Some(&e(100)));
}

#[test]
fn gone_entries_are_dropped_and_busy_ones_kept() {
    let mut s = Shard::new(10);
    for f in 0..4 {
        s.admit(e(f));
    }
    let mut out = Vec::new();
    let n = s.evict(&mut out, 4, 100, |x| match x.frame {
        0 => Verdict::Gone,
        1 => Verdict::Busy,
        _ => Verdict::Cold,
    });
    assert_eq!(out.iter().map(|x| x.frame).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(s.len(), 1, "busy kept, gone dropped");
    assert!(n <= 100);
}

/// The reclaimer's own shard full of busy pages (reads in flight,
/// inserted on this CPU) must not hide the other shards' cold ones: a
/// single sequential reader whose thread moved between CPUs got
/// `OutOfMemory` with 65 408 of 65 536 frames evictable in the other
/// shard, because every call spent its whole examination budget on
/// the first shard's 128 busy entries.
#[test]
fn a_shard_full_of_busy_pages_does_not_hide_the_others() {
    let q = Queues::new(2, 1000);
    for f in 0..200 {
        q.submit(0, e(f), |_| true); // busy, on the reclaimer's CPU
    }
    for f in 1000..1100 {
        q.submit(1, e(f), |_| true); // cold, on the other CPU
    }
    let mut out = Vec::new();
    let want = 16;
    q.evict(0, &mut out, want, 4 * want + 64, |x| {
        if x.frame < 1000 {
            Verdict::Busy
        } else {
            Verdict::Cold
        }
    });
    assert_eq!(out.len(), want, "cold pages of the other shard found");
    assert!(out.iter().all(|x| x.frame >= 1000));
}

/// A sequential reader that moved to CPU 1 a moment ago: CPU 1's
/// shard holds only its newest pages, read ahead and not read yet;
/// CPU 0's holds what it read before. Eviction on CPU 1 takes CPU 0's.
#[test]
fn a_reader_that_moved_evicts_from_the_shard_it_left() {
    let q = Queues::new(2, 1000); // a share of 500 pages each
    for f in 0..600 {
        q.submit(0, e(f), |_| true); // read (cold by now)
    }
    for f in 1000..1032 {
        q.submit(1, e(f), |_| true); // read ahead, not read yet
    }
    let mut out = Vec::new();
    q.evict(1, &mut out, 16, 4 * 16 + 64, |_| Verdict::Cold);
    assert_eq!(out.len(), 16);
    assert!(
        out.iter().all(|x| x.frame < 600),
        "took pages not read yet: {:?}",
        out.iter().map(|x| x.frame).collect::<Vec<_>>()
    );
    // A shard at its share is its CPU's own to evict from.
    let q = Queues::new(2, 1000);
    for f in 0..600 {
        q.submit(0, e(f), |_| true);
    }
    for f in 1000..1512 {
        q.submit(1, e(f), |_| true);
    }
    let mut out = Vec::new();
    q.evict(1, &mut out, 16, 4 * 16 + 64, |_| Verdict::Cold);
    assert!(out.iter().all(|x| x.frame >= 1000));
}

#[test]
fn submission_batches_and_drains_before_eviction() {
    let q = Queues::new(2, 64);
    for f in 0..5 {
        q.submit(0, e(f), |_| true); // fewer than a batch: still pending
    }
    assert_eq!(q.len(), 5);
    let mut out = Vec::new();
    q.evict(1, &mut out, 5, 100, |_| Verdict::Cold);
    assert_eq!(out.len(), 5, "pending batches are drained before giving up");
    assert!(q.is_empty());
}

#[test]
fn a_cache_that_never_evicts_does_not_accumulate_entries() {
    // One shard of 32 pages; frame 3 re-inserted for the same page
    // 10 000 times (rewrite after truncate), and 10 000 stale entries.
    let q = Queues::new(1, 32);
    for i in 0..10_000u32 {
        q.submit(0, e(3), |x| x.frame == 3);
        q.submit(0, e(1000 + i), |x| x.frame == 3);
    }
    let n = q.len();
    assert!(n <= 2 * 32 + BATCH, "{n} entries queued for one live page");
    assert!(q.len_hint() >= q.len() - BATCH, "hint tracks the queues");
    let mut out = Vec::new();
    q.evict(0, &mut out, 100, 1000, |x| {
        if x.frame == 3 {
            Verdict::Cold
        } else {
            Verdict::Gone
        }
    });
    assert_eq!(
        out.iter().filter(|x| x.frame == 3).count(),
        1,
        "one entry per frame"
    );
}
