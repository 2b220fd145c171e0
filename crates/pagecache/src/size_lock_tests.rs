//! Tests of the size lock (`size_lock.rs`).

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Oversubscribed, 12 shared holders and 3 exclusive ones on 2 CPUs: an
/// exclusive holder from page 100 never overlaps a shared holder that
/// reaches page 100, holders below it do overlap it, shared holders
/// overlap each other, and a shared acquisition nested in another by the
/// same thread never deadlocks with an exclusive one under way.
#[test]
fn exclusion_covers_the_pages_from_the_cut_only() {
    let lock = SizeLock::with_shards(4);
    let high = AtomicUsize::new(0);
    let exclusive = AtomicUsize::new(0);
    let low_beside_exclusive = AtomicUsize::new(0);
    let most_shared = AtomicUsize::new(0);
    let shared = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let writes = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..12u64 {
            let (lock, high, exclusive, low_beside_exclusive, most_shared, shared, stop) = (
                &lock,
                &high,
                &exclusive,
                &low_beside_exclusive,
                &most_shared,
                &shared,
                &stop,
            );
            s.spawn(move || {
                let mut n = 0u32;
                // Half reach the cut (page 100 and on), half stay below.
                let last = if t % 2 == 0 { 100 + t } else { t };
                while !stop.load(Ordering::Relaxed) {
                    let _g = lock.read(last);
                    let now = shared.fetch_add(1, Ordering::SeqCst) + 1;
                    most_shared.fetch_max(now, Ordering::Relaxed);
                    if last >= 100 {
                        high.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(
                            exclusive.load(Ordering::SeqCst),
                            0,
                            "shared beside exclusive"
                        );
                    } else if exclusive.load(Ordering::SeqCst) != 0 {
                        low_beside_exclusive.fetch_add(1, Ordering::Relaxed);
                    }
                    if n % 8 == 0 {
                        // Nested, as write_at -> reclaim -> write-back, of
                        // a page past the cut.
                        std::thread::yield_now();
                        let _h = lock.read(ALL_PAGES);
                        if last >= 100 {
                            assert_eq!(exclusive.load(Ordering::SeqCst), 0);
                        }
                    }
                    if last >= 100 {
                        high.fetch_sub(1, Ordering::SeqCst);
                    }
                    shared.fetch_sub(1, Ordering::SeqCst);
                    n = n.wrapping_add(1);
                }
            });
        }
        for _ in 0..3 {
            let (lock, high, exclusive, stop, writes) = (&lock, &high, &exclusive, &stop, &writes);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _g = lock.write(|| 100);
                    assert_eq!(exclusive.fetch_add(1, Ordering::SeqCst), 0, "two exclusive");
                    assert_eq!(high.load(Ordering::SeqCst), 0, "exclusive beside shared");
                    std::thread::yield_now();
                    assert_eq!(high.load(Ordering::SeqCst), 0, "exclusive beside shared");
                    exclusive.fetch_sub(1, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
    });
    assert!(
        writes.load(Ordering::Relaxed) > 0,
        "no exclusive acquisition happened"
    );
    assert!(
        most_shared.load(Ordering::Relaxed) > 1,
        "shared holders never overlapped"
    );
    assert!(
        low_beside_exclusive.load(Ordering::Relaxed) > 0,
        "no holder below the cut ever ran beside an exclusive holder"
    );
}

/// Runs `f` on a thread; whether it finished within `wait`.
fn finishes_within(wait: Duration, f: impl FnOnce() + Send + 'static) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(wait).is_ok()
}

/// While an exclusive acquisition from page 10 waits for a holder of page
/// 20, a shared acquisition below page 10 goes through at once (and is not
/// waited for), and one that reaches page 10 holds back only briefly (it
/// may be what the holder of page 20 waits for). Once the exclusive side
/// holds, pages below 10 are still free and page 10 waits for its release.
#[test]
fn a_waiting_or_holding_exclusive_acquisition_keeps_out_only_its_pages() {
    let lock: &'static SizeLock = Box::leak(Box::new(SizeLock::with_shards(4)));
    let first = lock.read(20);
    let got = &*Box::leak(Box::new(AtomicBool::new(false)));
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let exclusive = std::thread::spawn(move || {
        let g = lock.write(|| 10);
        got.store(true, Ordering::SeqCst);
        let _ = release_rx.recv();
        drop(g);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !got.load(Ordering::SeqCst),
        "exclusive beside a holder of page 20"
    );
    assert!(
        finishes_within(Duration::from_secs(10), move || drop(lock.read(9))),
        "a holder below the cut waited for a waiting exclusive acquisition"
    );
    let t = Instant::now();
    assert!(
        finishes_within(Duration::from_secs(10), move || drop(lock.read(10))),
        "a holder of the cut page waited past the hold-back"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(!got.load(Ordering::SeqCst));
    drop(first);
    let t = Instant::now();
    while !got.load(Ordering::SeqCst) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "exclusive never acquired"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // Held: below the cut goes through, the cut page waits for the release.
    assert!(
        finishes_within(Duration::from_secs(10), move || drop(lock.read(9))),
        "a holder below the cut waited for an exclusive holder"
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(lock.read(10));
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(100)).is_err(),
        "a holder of the cut page beside an exclusive holder"
    );
    release_tx.send(()).unwrap();
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a holder of the cut page not let in after the release");
    exclusive.join().unwrap();
}

/// Holders below the cut that share one shard and keep overlapping (eight
/// threads on 2 CPUs, each inside nearly all the time) keep its count
/// from reaching zero, and its highest page stays where a holder past the
/// cut left it; the exclusive acquisition still gets through (past the
/// hold-back, every arrival holds back and the shard drains).
#[test]
fn overlapping_holders_of_one_shard_do_not_starve_the_exclusive_side() {
    let lock = SizeLock::with_shards(1);
    let stop = AtomicBool::new(false);
    let started = AtomicUsize::new(0);
    let mut took = Duration::ZERO;
    std::thread::scope(|s| {
        // The shard's highest page goes to 1000 and stays there while the
        // low holders overlap.
        let high = lock.read(1000);
        for _ in 0..8 {
            let (lock, stop, started) = (&lock, &stop, &started);
            s.spawn(move || {
                started.fetch_add(1, Ordering::SeqCst);
                while !stop.load(Ordering::Relaxed) {
                    let _g = lock.read(1);
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(200) {
                        std::hint::spin_loop();
                    }
                }
            });
        }
        while started.load(Ordering::SeqCst) < 8 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        drop(high);
        let t = Instant::now();
        drop(lock.write(|| 10));
        took = t.elapsed();
        stop.store(true, Ordering::Relaxed);
    });
    // 5-8 ms here; without the fallback 0.6-3.8 s (the shard drained only
    // by chance).
    assert!(took < Duration::from_secs(1), "exclusive waited {took:?}");
}

/// Threads started one after another take different shards.
#[test]
fn threads_started_together_take_different_shards() {
    let shards: Vec<usize> = (0..4)
        .map(|_| std::thread::spawn(thread_shard).join().unwrap())
        .collect();
    let mut distinct = shards.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{shards:?}");
}

/// A shared cache's lock (shards by process, in a block beside it): holds
/// of the process in slot 3 that died are on its shards only, `held_by`
/// finds them, an exclusive acquisition from a page they reach waits for
/// them, and `release_dead` gives them back (zeroes that process's shards,
/// leaves the others'), after which it goes through.
#[cfg(not(loom))]
#[test]
fn a_dead_processs_shards_are_given_back_and_no_other() {
    #[repr(C)]
    struct Placed {
        lock: SizeLock,
        procs: ProcShards,
    }
    let mut p: Box<std::mem::MaybeUninit<Placed>> = Box::new_zeroed();
    let base = p.as_mut_ptr();
    // SAFETY: in the same allocation, zeroed, used by this lock only.
    let lock = unsafe {
        let at = std::ptr::addr_of_mut!((*base).lock);
        let procs = std::ptr::addr_of!((*base).procs) as isize - at as isize;
        at.write(SizeLock::per_process(procs));
        &*at
    };
    let (slot, tag) = (3, 7u32);
    // Two holds of pages up to 50 by the dead process (on two of its
    // shards), one of another process (slot 5) of pages up to 10.
    let shards = lock.procs().unwrap();
    let word = |hi: u64, n: u64| (hi << COUNT_BITS) | n;
    shards[slot * PROC_SHARDS].store(word(50, 1), Ordering::Relaxed);
    shards[slot * PROC_SHARDS + 2].store(word(40, 1), Ordering::Relaxed);
    shards[5 * PROC_SHARDS + 1].store(word(10, 1), Ordering::Relaxed);
    assert!(lock.held_by(slot, tag));
    assert!(!lock.held_by(4, 8));
    assert!(lock.reached(20), "the dead process's holds reach page 20");
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let _x = lock.write(|| 20);
            tx.send(()).unwrap();
        });
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "the exclusive side waits for the dead holds"
        );
        lock.release_dead(slot, tag);
        rx.recv_timeout(Duration::from_secs(10))
            .expect("it goes through once they are given back");
    });
    assert!(!lock.held_by(slot, tag));
    assert_eq!(
        shards[5 * PROC_SHARDS + 1].load(Ordering::Relaxed),
        word(10, 1),
        "another process's hold stays"
    );
}
