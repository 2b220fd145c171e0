//! No poll of the crate's futures blocks its thread, and a read a future
//! queued goes out whatever its executor does next:
//!
//! - a write (`write_at_async`, `page_mut_async`) of a page whose read
//!   completed for another future of the same thread, not yet polled, must
//!   not wait for that future's pin by blocking the thread that alone can
//!   poll it (it deadlocked a `current_thread` runtime);
//! - a miss polled once and then kept (its executor busy elsewhere) still
//!   has its read submitted, so a blocking reader of the page is not held
//!   up until the future is polled or dropped;
//! - a writer of a page that a `PageRun` of the same thread holds, and a
//!   writer past the dirty limit, wait as futures too.
//!
//! Each test runs its runtime on a thread of its own and fails if it has
//! not finished within a generous bound (a deadlock otherwise hangs the
//! suite); in debug builds a blocking wait inside a poll panics at once
//! (`pagecache` refuses it, naming the wait).
#![cfg(not(loom))]

mod common;
use common::*;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Runs `f` on a thread of its own; panics if it does not return within
/// `limit` (the thread is left behind: it is stuck) or if it panicked.
fn finishes_within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let v = f();
        let _ = tx.send(());
        v
    });
    match rx.recv_timeout(limit) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(_) => unreachable!(),
            Err(e) => std::panic::resume_unwind(e),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: not finished after {limit:?} (a poll blocked its thread?)")
        }
    }
}

/// Task X awaits a miss of page 1; task Y, on the same thread, lets X's
/// read complete without X being polled (its pin handed over to X's
/// future), then writes the whole page with `write_at_async`. The write
/// must wait for X as a future, not by blocking the only thread that can
/// poll X.
#[test]
fn write_at_async_does_not_wait_for_a_pin_handed_to_a_future_of_its_thread() {
    for mode in ["write_at_async", "page_mut_async", "partial write_at_async"] {
        finishes_within(mode, Duration::from_secs(20), move || {
            let d = TempDir::new("async-nb-handoff");
            let p = d.path("f");
            make_file(&p, 8 * PS as u64);
            let c = cache_without_flusher(16);
            let f = Arc::new(c.open_with(&p, &rw()).unwrap());
            current_thread().block_on(async {
                let fx = f.clone();
                let x = tokio::task::spawn(async move {
                    let page = fx.page_async(1).await.unwrap();
                    page[0]
                });
                let fy = f.clone();
                let y = tokio::task::spawn(async move {
                    tokio::task::yield_now().await;
                    tokio::task::yield_now().await;
                    // Work that does not yield: X's read completes and its
                    // pin waits in X's future.
                    std::thread::sleep(Duration::from_millis(300));
                    match mode {
                        "write_at_async" => fy.write_at_async(&[9u8; PS], PS as u64).await.unwrap(),
                        "page_mut_async" => fy.page_mut_async(1).await.unwrap()[..].fill(9),
                        _ => fy.write_at_async(&[9u8; 100], PS as u64 + 7).await.unwrap(),
                    }
                });
                let b = x.await.unwrap();
                y.await.unwrap();
                // X read the page before the write or after it, never torn.
                assert!(b == pattern(PS as u64) || b == 9, "{mode}: X read {b}");
            });
            let page = f.page(1).unwrap();
            let off = if mode.starts_with("partial") { 7 } else { 0 };
            assert_eq!(page[off], 9, "{mode}: the write is in the page");
            drop(page);
            c.validate();
        });
    }
}

/// Many tasks on two workers mixing reads and writes (`write_at_async`,
/// `page_mut_async`, partial writes) of a few pages of a file larger than
/// the cache, nothing held across an await: every task finishes (no
/// worker blocks on a pin another task of its own thread must take), and
/// every page's bytes stay whole.
#[test]
fn readers_and_async_writers_on_two_workers_all_finish() {
    finishes_within("mixed tasks", Duration::from_secs(60), || {
        let d = TempDir::new("async-nb-mixed");
        let p = d.path("f");
        const PAGES: u64 = 64;
        std::fs::write(&p, vec![0u8; PAGES as usize * PS]).unwrap();
        let c = cache_without_flusher(24);
        let f = Arc::new(c.open_with(&p, &rw()).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..48u64 {
                let f = f.clone();
                tasks.push(tokio::spawn(async move {
                    let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    for _ in 0..60 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Half the operations on 4 hot pages.
                        let i = if x & 1 == 0 {
                            (x >> 8) % 4
                        } else {
                            (x >> 8) % PAGES
                        };
                        let v = (x >> 32) as u8;
                        match (x >> 4) % 5 {
                            0 => f.write_at_async(&[v; PS], i * PS as u64).await.unwrap(),
                            1 => f.page_mut_async(i).await.unwrap()[..].fill(v),
                            2 => {
                                // A whole page through two partial writes
                                // is not atomic; one partial write of the
                                // whole page's bytes but one is.
                                let mut m = f.page_mut_async(i).await.unwrap();
                                let b = m[0];
                                m[..].fill(b);
                            }
                            _ => {
                                let page = f.page_async(i).await.unwrap();
                                let b = page[0];
                                assert!(page.iter().all(|&y| y == b), "page {i} torn");
                            }
                        }
                        if x % 3 == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        c.validate();
    });
}

/// With nothing in flight, a miss polled once and then kept (never polled
/// again, not dropped) still has its read submitted: a blocking reader of
/// the page on another thread gets it (on the io_uring engine the read
/// was only queued; the reaper, idle, never submitted it).
#[test]
fn a_queued_read_goes_out_though_its_future_is_not_polled_again() {
    for engine in [pagecache::IoEngine::Auto, pagecache::IoEngine::Threads] {
        let d = TempDir::new("async-nb-queued");
        let p = d.path("f");
        make_file(&p, 8 * PS as u64);
        let c = pagecache::PageCache::new(pagecache::Config {
            capacity: 16 * PS,
            io_engine: engine,
            ..pagecache::Config::default()
        })
        .unwrap();
        let f = Arc::new(c.open(&p).unwrap());
        // Nothing in flight: let the reaper go idle.
        drop(f.page(0).unwrap());
        std::thread::sleep(Duration::from_millis(50));
        let waker = noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        let mut fut = Box::pin(f.page_async(3));
        assert!(fut.as_mut().poll(&mut cx).is_pending(), "a miss was ready");
        let f2 = f.clone();
        let b = finishes_within("blocking reader", Duration::from_secs(3), move || {
            f2.page(3).unwrap()[0]
        });
        assert_eq!(b, pattern(3 * PS as u64));
        drop(fut);
        c.validate();
    }
}

use std::future::Future;

/// A task holds a `PageRun` over a page across an await; another task of
/// the same thread latches the page (`page_mut_async`): the writer waits
/// as a future for the run to go, not by blocking the thread.
#[test]
fn page_mut_async_waits_for_a_run_of_its_own_thread_as_a_future() {
    finishes_within("run holder", Duration::from_secs(20), || {
        let d = TempDir::new("async-nb-run");
        let p = d.path("f");
        make_file(&p, 8 * PS as u64);
        let c = cache_without_flusher(16);
        let f = Arc::new(c.open_with(&p, &rw()).unwrap());
        for i in 0..8 {
            drop(f.page(i).unwrap());
        }
        current_thread().block_on(async {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let fr = f.clone();
            let reader = tokio::task::spawn(async move {
                let run = fr.run(0, 8).unwrap();
                assert_eq!(run.len(), 8);
                let first = run.iter().next().unwrap()[0];
                // Hold the run across an await until the writer is waiting.
                rx.await.unwrap();
                drop(run);
                first
            });
            let fw = f.clone();
            let writer = tokio::task::spawn(async move {
                tokio::task::yield_now().await;
                let mut fut = Box::pin(fw.page_mut_async(2));
                // First poll: must not block (the run's holder is a task
                // of this thread); then let the holder go on.
                let first = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(fut.as_mut().poll(cx).is_pending())
                })
                .await;
                tx.send(()).unwrap();
                fut.await.unwrap()[0] = 1;
                first
            });
            assert_eq!(reader.await.unwrap(), pattern(0));
            assert!(writer.await.unwrap(), "the latch was ready under a run");
        });
        assert_eq!(f.page(2).unwrap()[0], 1);
        c.validate();
    });
}

/// Past the dirty limit a writer future waits for write-back as a future:
/// with a slow flusher (a hook that takes 20 ms a page) and a limit of a
/// few pages, writes on a `current_thread` runtime are throttled while
/// another task of that thread keeps running.
#[test]
fn the_dirty_throttle_waits_as_a_future() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    finishes_within("throttled writer", Duration::from_secs(60), || {
        let d = TempDir::new("async-nb-throttle");
        let p = d.path("f");
        std::fs::write(&p, vec![0u8; 64 * PS]).unwrap();
        let c = pagecache::PageCache::new(pagecache::Config {
            capacity: 64 * PS,
            dirty_background_percent: 5,
            dirty_limit_percent: 10,
            ..pagecache::Config::default()
        })
        .unwrap();
        let f = Arc::new(c.open_with(&p, &rw()).unwrap());
        f.set_writeback_hook(Some(pagecache::WritebackHook::new(|_| {
            std::thread::sleep(Duration::from_millis(20));
            pagecache::WritebackDecision::Write
        })));
        let ticks = Arc::new(AtomicU64::new(0));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        current_thread().block_on(async {
            let (t, dn) = (ticks.clone(), done.clone());
            let ticker = tokio::task::spawn(async move {
                while !dn.load(Relaxed) {
                    t.fetch_add(1, Relaxed);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
            let t0 = std::time::Instant::now();
            for i in 0..40u64 {
                f.write_at_async(&[i as u8 + 1; PS], i * PS as u64)
                    .await
                    .unwrap();
            }
            let took = t0.elapsed();
            let ticked = ticks.load(Relaxed);
            done.store(true, Relaxed);
            ticker.await.unwrap();
            // Throttled: 40 pages against a limit of 6 with 20 ms a page
            // written took a while, and the other task ran meanwhile.
            assert!(
                took >= Duration::from_millis(100),
                "not throttled: {took:?}"
            );
            assert!(
                ticked >= 20,
                "the thread was blocked: {ticked} ticks in {took:?}"
            );
        });
        for i in 0..40u64 {
            assert_eq!(f.page(i).unwrap()[7], i as u8 + 1);
        }
        c.validate();
    });
}

/// A cache full of dirty pages: `read_at_async` (with readahead) and
/// `page_async` of other pages get frames without writing a dirty victim
/// back on the runtime's thread (the flusher writes them; in debug builds
/// a write-back wait inside the poll would panic), and every byte read and
/// written is right.
#[test]
fn misses_in_a_cache_full_of_dirty_pages_leave_the_write_back_to_the_flusher() {
    finishes_within("dirty cache", Duration::from_secs(60), || {
        let d = TempDir::new("async-nb-dirty");
        let p = d.path("f");
        make_file(&p, 96 * PS as u64);
        let c = cache_without_flusher(16);
        let f = Arc::new(c.open_with(&p, &rw()).unwrap());
        for i in 0..16u64 {
            f.write_at(&[0xd0 | (i as u8 & 0xf); PS], i * PS as u64)
                .unwrap();
        }
        current_thread().block_on(async {
            // Sequential: readahead windows from the second miss on.
            let mut buf = vec![0u8; 8 * PS];
            for k in 0..8u64 {
                let off = (16 + k * 8) * PS as u64;
                let n = f.read_at_async(&mut buf, off).await.unwrap();
                assert_eq!(n, buf.len());
                for (j, &b) in buf.iter().enumerate().step_by(997) {
                    assert_eq!(b, pattern(off + j as u64), "byte {}", off + j as u64);
                }
            }
            let page = f.page_async(95).await.unwrap();
            assert_eq!(page[5], pattern(95 * PS as u64 + 5));
        });
        // The dirty pages reached the disk through the flusher, or are
        // still cached and dirty: either way their bytes are there.
        for i in 0..16u64 {
            assert_eq!(f.page(i).unwrap()[9], 0xd0 | (i as u8 & 0xf));
        }
        f.sync().unwrap();
        let disk = std::fs::read(&p).unwrap();
        assert_eq!(disk[3 * PS + 1], 0xd3);
        c.validate();
    });
}
