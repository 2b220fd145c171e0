//! The asynchronous calls (`page_async`, `page_mut_async`, `read_at_async`,
//! `write_at_async`, `optimistic_async`, `sync_async`): the same bytes and
//! errors as the blocking calls, many futures in flight from one thread,
//! and nothing left pinned or latched afterwards.
#![cfg(not(loom))]

mod common;
use common::*;
use pagecache::block_on;
use std::io::ErrorKind;
use std::sync::Arc;

/// Every page of a file can be latched: nothing is pinned or latched.
fn assert_nothing_held(f: &pagecache::File) {
    let pages = f.len().div_ceil(PS as u64);
    for i in 0..pages {
        assert!(
            f.try_latch(i).unwrap().is_some(),
            "page {i} still pinned or latched"
        );
    }
}

#[test]
fn hit_is_ready_on_the_first_poll() {
    let d = TempDir::new("async-hit");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    drop(f.page(1).unwrap());
    let waker = &noop_waker();
    let mut cx = std::task::Context::from_waker(waker);
    let mut fut = std::pin::pin!(f.page_async(1));
    match fut.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(Ok(p)) => assert_eq!(p[0], pattern(PS as u64)),
        other => panic!("a hit must be ready on the first poll: {other:?}"),
    }
    // A miss is not (it starts a read) and is ready later.
    let mut miss = Box::pin(f.page_async(3));
    let first = miss.as_mut().poll(&mut cx);
    assert!(first.is_pending(), "a miss returned at once: {first:?}");
    drop(miss);
    c.validate();
    assert_nothing_held(&f);
}

use std::future::Future;

/// 64 tasks on one thread read random pages of a file 8x the cache; every
/// page's bytes are checked; the reads went through the misses' path.
#[test]
fn many_tasks_on_one_thread_read_a_file_larger_than_the_cache() {
    let d = TempDir::new("async-many");
    let p = d.path("f");
    const PAGES: u64 = 256;
    make_file(&p, PAGES * PS as u64);
    let c = cache(32);
    let f = Arc::new(c.open(&p).unwrap());
    current_thread().block_on(async {
        let mut tasks = Vec::new();
        for t in 0..64u64 {
            let f = f.clone();
            tasks.push(tokio::task::spawn(async move {
                let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                for _ in 0..40 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = x % PAGES;
                    let page = f.page_async(i).await.unwrap();
                    let base = i * PS as u64;
                    for k in [0usize, 1, 511, PS - 1] {
                        assert_eq!(page[k], pattern(base + k as u64), "page {i} byte {k}");
                    }
                    drop(page);
                    tokio::task::yield_now().await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let s = c.stats();
    assert!(s.misses >= PAGES / 2, "misses {}", s.misses);
    c.validate();
    assert_nothing_held(&f);
}

#[test]
fn read_at_async_matches_the_file() {
    let d = TempDir::new("async-read");
    let p = d.path("f");
    let len = 37 * PS as u64 + 123;
    make_file(&p, len);
    let c = cache(8);
    let f = c.open(&p).unwrap();
    let want = std::fs::read(&p).unwrap();
    current_thread().block_on(async {
        // Whole file in one call (more pages than frames), then odd spans.
        let mut buf = vec![0u8; len as usize + 1000];
        let n = f.read_at_async(&mut buf, 0).await.unwrap();
        assert_eq!(n as u64, len);
        assert_eq!(&buf[..n], &want[..]);
        for (off, n) in [
            (5u64, 10usize),
            (PS as u64 - 3, 9000),
            (len - 50, 200),
            (len, 10),
        ] {
            let mut b = vec![0u8; n];
            let got = f.read_at_async(&mut b, off).await.unwrap();
            let end = (off + n as u64).min(len);
            assert_eq!(got as u64, end.saturating_sub(off));
            assert_eq!(&b[..got], &want[off as usize..end as usize]);
        }
        // Sequential 4 KiB reads: readahead starts windows ahead.
        let mut b = vec![0u8; PS];
        for i in 0..20u64 {
            f.read_at_async(&mut b, i * PS as u64).await.unwrap();
            assert_eq!(&b[..], &want[i as usize * PS..(i as usize + 1) * PS]);
        }
    });
    c.validate();
    assert_nothing_held(&f);
}

#[test]
fn page_mut_async_write_at_async_and_sync_async_reach_the_disk() {
    let d = TempDir::new("async-write");
    let p = d.path("f");
    make_file(&p, 16 * PS as u64);
    let c = cache_without_flusher(8);
    let f = c.open_with(&p, &rw()).unwrap();
    let mut want = std::fs::read(&p).unwrap();
    current_thread().block_on(async {
        for i in [3u64, 12, 3] {
            let mut m = f.page_mut_async(i).await.unwrap();
            m[10] = 0xA5;
            m[PS - 1] = i as u8;
            want[i as usize * PS + 10] = 0xA5;
            want[i as usize * PS + PS - 1] = i as u8;
        }
        // Partial first and last pages, not cached: read first, async.
        let off = 6 * PS as u64 + 100;
        let data = vec![0x5Au8; 2 * PS];
        f.write_at_async(&data, off).await.unwrap();
        want[off as usize..off as usize + data.len()].copy_from_slice(&data);
        // Past the end: grows the file.
        f.write_at_async(b"tail", 16 * PS as u64 + 7).await.unwrap();
        want.resize(16 * PS + 7, 0);
        want.extend_from_slice(b"tail");
        f.sync_async().await.unwrap();
    });
    assert_eq!(std::fs::read(&p).unwrap(), want);
    c.validate();
    assert_nothing_held(&f);
}

#[test]
fn optimistic_async_views_the_page() {
    let d = TempDir::new("async-opt");
    let p = d.path("f");
    make_file(&p, 8 * PS as u64);
    let c = cache(4);
    let f = c.open(&p).unwrap();
    block_on(async {
        for i in [0u64, 7, 3, 7] {
            let v = f.optimistic_async(i).await.unwrap();
            let b = v.load_u8(9);
            assert!(v.validate());
            assert_eq!(b, pattern(i * PS as u64 + 9));
        }
    });
    assert_eq!(
        block_on(f.optimistic_async(8)).err().map(|e| e.kind()),
        Some(ErrorKind::UnexpectedEof)
    );
}

/// A failed read reaches the awaiting caller as it reaches a blocking one
/// (same kind, same message), and the page is read again next time.
#[test]
fn read_errors_reach_the_future() {
    let d = TempDir::new("async-err");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let (c, faults) = faulty(8);
    let f = c.open(&p).unwrap();
    faults.fail_nth_read(1, libc::EIO);
    let blocking = f.page(2).unwrap_err();
    faults.fail_nth_read(1, libc::EIO);
    let asynchronous = block_on(f.page_async(2)).unwrap_err();
    assert_eq!(blocking.kind(), asynchronous.kind());
    assert_eq!(blocking.to_string(), asynchronous.to_string());
    assert_eq!(pagecache::os_error(&asynchronous), Some(libc::EIO));
    faults.clear();
    assert_eq!(
        block_on(f.page_async(2)).unwrap()[0],
        pattern(2 * PS as u64)
    );
    c.validate();
    assert_nothing_held(&f);
}

/// Futures waiting for a writer's latch, and writers waiting for readers'
/// pins, on a multi-thread runtime: every page read is whole (one
/// counter in every word), counters only grow.
#[test]
fn readers_and_writers_of_the_same_pages() {
    let d = TempDir::new("async-rw");
    let p = d.path("f");
    std::fs::write(&p, vec![0u8; 4 * PS]).unwrap();
    let c = cache_without_flusher(8);
    let f = Arc::new(c.open_with(&p, &rw()).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..4u64 {
            let f = f.clone();
            tasks.push(tokio::spawn(async move {
                for k in 0..200u64 {
                    let i = (w + k) % 4;
                    let mut m = f.page_mut_async(i).await.unwrap();
                    let c = u64::from_ne_bytes(m[..8].try_into().unwrap()) + 1;
                    for word in m.chunks_mut(8) {
                        word.copy_from_slice(&c.to_ne_bytes());
                    }
                    drop(m);
                    tokio::task::yield_now().await;
                }
            }));
        }
        for r in 0..8u64 {
            let f = f.clone();
            tasks.push(tokio::spawn(async move {
                let mut last = [0u64; 4];
                for k in 0..400u64 {
                    let i = (r + k) % 4;
                    let p = f.page_async(i).await.unwrap();
                    let w0 = &p[..8];
                    assert!(p.chunks(8).all(|w| w == w0), "torn page {i}");
                    let c = u64::from_ne_bytes(w0.try_into().unwrap());
                    assert!(c >= last[i as usize], "page {i} went back");
                    last[i as usize] = c;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let total: u64 = (0..4)
        .map(|i| u64::from_ne_bytes(f.page(i).unwrap()[..8].try_into().unwrap()))
        .sum();
    assert_eq!(total, 800, "every write counted once");
    c.validate();
    assert_nothing_held(&f);
}
