//! A dropped cache leaves no thread, no ring and no descriptor behind, on
//! either engine, even with reads in flight when it drops. One test in this
//! binary: it counts the process's threads and descriptors.
mod common;
use common::*;
use pagecache::{Config, IoEngine, PageCache};

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

/// The names of the process's threads (for the failure message).
fn names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .collect()
}

#[test]
fn a_dropped_cache_leaves_no_threads_and_no_descriptors() {
    let d = TempDir::new("leaks");
    let p = d.path("f");
    make_file(&p, 1024 * PS as u64);
    for round in 0..3 {
        for e in [IoEngine::Uring, IoEngine::Threads] {
            let (tasks, fds) = (count("/proc/self/task"), count("/proc/self/fd"));
            {
                let c = PageCache::new(Config {
                    capacity: 512 * PS,
                    io_engine: e,
                    io_threads: 8,
                    ..Config::default()
                })
                .unwrap();
                let f = c.open(&p).unwrap();
                let g = c.open(&p).unwrap();
                // Batched reads and readahead, so every engine thread runs.
                let mut buf = vec![0u8; 64 * PS];
                f.read_exact_at(&mut buf, 0).unwrap();
                assert!(count("/proc/self/task") > tasks, "{e:?}: engine threads");
                // Reads still in flight when everything drops.
                g.prefetch(64 * PS as u64, 256 * PS as u64).unwrap();
                drop(f);
                drop(g);
            }
            // Our threads are joined before the drop returns, but a joined
            // thread is still listed until the kernel reaps it (the join
            // returns at its exit's tid clear, before its task is
            // released). The kernel's io_uring workers of the threads that
            // submitted (`iou-wrk-*`) exit on their own once the ring is
            // closed (within ~50 ms here). So the count is waited for (a
            // thread that was not joined stays and fails the test).
            let t0 = std::time::Instant::now();
            while count("/proc/self/task") != tasks && t0.elapsed().as_secs() < 5 {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert_eq!(
                count("/proc/self/task"),
                tasks,
                "{e:?} round {round}: threads left: {:?}",
                names()
            );
            assert_eq!(
                count("/proc/self/fd"),
                fds,
                "{e:?} round {round}: descriptors left"
            );
        }
    }
}
