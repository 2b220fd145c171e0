//! Cancel-safety of the asynchronous calls (protocol 5.9): thousands of
//! futures dropped at random points (timeouts, `select!` losers, futures
//! polled once and dropped) on a tiny cache, with readers checking every
//! page they get and writers changing whole pages, on one thread and on
//! two. Afterwards every frame is free or cached, nothing is pinned or
//! latched, and the file holds exactly the writes that completed.
#![cfg(not(loom))]

mod common;
use common::*;
use pagecache::OpenOptions;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

// Each task holds at most two frames at a time (a `select!` of two
// reads), so 10 tasks never pin or latch every frame of 24 (the cache
// would rightly answer `OutOfMemory`); the file is four times the cache.
const PAGES: u64 = 96;
const FRAMES: usize = 24;
const TASKS: u64 = 10;
const ROUNDS: u64 = 1000;

/// Page `i` holds its index in its first word and a write counter in
/// every other word.
fn check(page: &[u8], i: u64) -> u64 {
    let w = |k: usize| u64::from_ne_bytes(page[k * 8..k * 8 + 8].try_into().unwrap());
    assert_eq!(w(0), i, "page {i} holds page {}'s bytes", w(0));
    let c = w(1);
    assert!(
        (2..PS / 8).all(|k| w(k) == c),
        "torn page {i}: counter {c} and others"
    );
    c
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn run(rt: tokio::runtime::Runtime) {
    let d = TempDir::new("async-cancel");
    let p = d.path("f");
    let mut init = Vec::with_capacity(PAGES as usize * PS);
    for i in 0..PAGES {
        init.extend_from_slice(&i.to_ne_bytes());
        init.extend(std::iter::repeat_n(0u8, PS - 8));
    }
    std::fs::write(&p, init).unwrap();
    let c = cache_without_flusher(FRAMES);
    let f = Arc::new(
        c.open_with(&p, OpenOptions::new().read(true).write(true))
            .unwrap(),
    );
    // Writes that completed, per page (a writer holds the latch while it
    // bumps the counter, so the page's counter equals this at the end).
    let written: Arc<Vec<AtomicU64>> = Arc::new((0..PAGES).map(|_| AtomicU64::new(0)).collect());
    let cancelled = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (f, written, cancelled) = (f.clone(), written.clone(), cancelled.clone());
            tasks.push(tokio::spawn(async move {
                let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for _ in 0..ROUNDS {
                    let i = xorshift(&mut x) % PAGES;
                    let how = xorshift(&mut x) % 8;
                    let micros = xorshift(&mut x) % 300;
                    match how {
                        // A read under a random timeout.
                        0 | 1 => {
                            let r = tokio::time::timeout(
                                Duration::from_micros(micros),
                                f.page_async(i),
                            )
                            .await;
                            match r {
                                Ok(p) => {
                                    check(&p.unwrap(), i);
                                }
                                Err(_) => {
                                    cancelled.fetch_add(1, SeqCst);
                                }
                            }
                        }
                        // Two reads raced, the loser dropped.
                        2 => {
                            let j = (i + 1) % PAGES;
                            tokio::select! {
                                p = f.page_async(i) => { check(&p.unwrap(), i); }
                                p = f.page_async(j) => { check(&p.unwrap(), j); }
                            }
                            cancelled.fetch_add(1, SeqCst);
                        }
                        // Polled once (a miss starts its read), dropped.
                        3 => {
                            let mut fut = Box::pin(f.page_async(i));
                            let _ = futures_poll_once(fut.as_mut()).await;
                            drop(fut);
                            cancelled.fetch_add(1, SeqCst);
                        }
                        // A writer under a random timeout: a write that
                        // got the latch completes, one that did not
                        // writes nothing.
                        4 | 5 => {
                            let r = tokio::time::timeout(
                                Duration::from_micros(micros),
                                f.page_mut_async(i),
                            )
                            .await;
                            match r {
                                Ok(m) => {
                                    let mut m = m.unwrap();
                                    let c = check(&m, i) + 1;
                                    for k in 1..PS / 8 {
                                        m[k * 8..k * 8 + 8].copy_from_slice(&c.to_ne_bytes());
                                    }
                                    written[i as usize].fetch_add(1, SeqCst);
                                }
                                Err(_) => {
                                    cancelled.fetch_add(1, SeqCst);
                                }
                            }
                        }
                        // A read spanning three pages under a timeout.
                        6 => {
                            let i = i.min(PAGES - 3);
                            let mut buf = vec![0u8; 3 * PS];
                            let r = tokio::time::timeout(
                                Duration::from_micros(micros),
                                f.read_at_async(&mut buf, i * PS as u64),
                            )
                            .await;
                            if let Ok(n) = r {
                                assert_eq!(n.unwrap(), 3 * PS);
                                for k in 0..3 {
                                    check(&buf[k * PS..(k + 1) * PS], i + k as u64);
                                }
                            } else {
                                cancelled.fetch_add(1, SeqCst);
                            }
                        }
                        // A view, kept across a yield.
                        _ => {
                            let v = f.optimistic_async(i).await.unwrap();
                            let w0 = v.load_u64(0);
                            tokio::task::yield_now().await;
                            if v.validate() {
                                assert_eq!(w0, i);
                            }
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert!(
        cancelled.load(SeqCst) > TASKS * ROUNDS / 10,
        "too few futures cancelled ({}) to test anything",
        cancelled.load(SeqCst)
    );
    println!("{} futures cancelled", cancelled.load(SeqCst));
    c.validate();
    // Nothing pinned or latched, and every completed write is there once.
    for i in 0..PAGES {
        let m = f.try_latch(i).unwrap();
        let m = m.unwrap_or_else(|| panic!("page {i} still pinned or latched"));
        assert_eq!(check(&m, i), written[i as usize].load(SeqCst), "page {i}");
    }
    f.sync().unwrap();
    let disk = std::fs::read(&p).unwrap();
    for i in 0..PAGES {
        let page = &disk[i as usize * PS..(i as usize + 1) * PS];
        assert_eq!(
            check(page, i),
            written[i as usize].load(SeqCst),
            "page {i} on disk"
        );
    }
    c.validate();
}

/// Polls a future once with the task's waker and returns whether it was
/// ready (the caller drops it either way).
async fn futures_poll_once<F: std::future::Future + ?Sized>(
    mut fut: std::pin::Pin<&mut F>,
) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_ready())).await
}

#[test]
fn cancelled_futures_on_one_thread() {
    run(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap());
}

#[test]
fn cancelled_futures_on_two_threads() {
    run(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap());
}

/// Oversubscribed: eight runtime threads on the machine's cores.
#[test]
fn cancelled_futures_on_eight_threads() {
    run(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .unwrap());
}
