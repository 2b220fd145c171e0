//! Tests of `sync`.

use super::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// An exclusive holder of a sharded lock never overlaps a shared holder
/// of any shard, shared holders on every shard overlap each other, and a
/// shared acquisition nested in another by the same thread never waits
/// for an exclusive holder that is acquiring the shards (it would
/// deadlock if the inner acquisition could pick another shard).
/// Oversubscribed: 12 readers and 3 exclusive holders on 2 CPUs.
#[test]
fn sharded_lock_excludes_across_shards_and_nests_without_deadlock() {
    let lock = ShardedRwLock::with_classes(4, LockClass::SizeLock, LockClass::SizeLock);
    let shared = AtomicUsize::new(0);
    let exclusive = AtomicUsize::new(0);
    let most_shared = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let writes = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..12 {
            s.spawn(|| {
                let mut n = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    let _g = lock.read_recursive();
                    let now = shared.fetch_add(1, Ordering::SeqCst) + 1;
                    most_shared.fetch_max(now, Ordering::Relaxed);
                    assert_eq!(
                        exclusive.load(Ordering::SeqCst),
                        0,
                        "shared beside exclusive"
                    );
                    if n % 8 == 0 {
                        // Nested, as write_at -> reclaim -> write-back.
                        std::thread::yield_now();
                        let _h = lock.read_recursive();
                        assert_eq!(exclusive.load(Ordering::SeqCst), 0);
                    }
                    shared.fetch_sub(1, Ordering::SeqCst);
                    n = n.wrapping_add(1);
                }
            });
        }
        for _ in 0..3 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _g = lock.write();
                    assert_eq!(exclusive.fetch_add(1, Ordering::SeqCst), 0, "two exclusive");
                    assert_eq!(shared.load(Ordering::SeqCst), 0, "exclusive beside shared");
                    std::thread::yield_now();
                    assert_eq!(shared.load(Ordering::SeqCst), 0, "exclusive beside shared");
                    exclusive.fetch_sub(1, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
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
}

/// While a shared holder of one shard keeps it, an exclusive
/// acquisition waits without holding any other shard: a shared
/// acquisition of another shard goes through at once (with shards taken
/// in order and held while waiting, it would wait for the exclusive
/// holder, which waits for the first shared holder).
#[test]
fn a_waiting_exclusive_acquisition_holds_no_shard() {
    let lock = &ShardedRwLock::with_classes(4, LockClass::SizeLock, LockClass::SizeLock);
    let first = lock.read_shard(3);
    let got = &AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(move || {
            let _w = lock.write();
            got.store(true, Ordering::SeqCst);
        });
        // Let the exclusive acquisition reach its wait for shard 3.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(
            !got.load(Ordering::SeqCst),
            "exclusive beside a shared holder"
        );
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            for i in 0..3 {
                drop(lock.read_shard(i));
            }
            tx.send(()).unwrap();
        });
        let other_shards = rx.recv_timeout(std::time::Duration::from_secs(10));
        drop(first);
        assert!(
            other_shards.is_ok(),
            "a shared acquisition of another shard waited for the exclusive one"
        );
    });
    assert!(got.load(Ordering::SeqCst));
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
