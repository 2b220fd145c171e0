//! The asynchronous I/O path on both engines: batched misses, readahead,
//! prefetch, read errors and short reads through the engine, truncate
//! racing readahead and prefetch, stress with content checks.
mod common;
use common::*;
use pagecache::{os_error, Config, Faults, FaultyBackend, IoEngine, PageCache, PosixBackend};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const ENGINES: [IoEngine; 2] = [IoEngine::Uring, IoEngine::Threads];

/// Tests of this file run in parallel (threads of one process), except
/// the one that counts page reads of a sequential pass: the others' I/O
/// threads move its reader between CPUs, which spreads its read-ahead pages
/// over the replacement shards (see its docs). Each test holds this lock
/// shared; that one holds it alone.
static ALONE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    ALONE.read().unwrap_or_else(|e| e.into_inner())
}

fn config(engine: IoEngine, frames: usize) -> Config {
    Config {
        capacity: frames * PS,
        io_engine: engine,
        ..Config::default()
    }
}

fn faulty_cache(engine: IoEngine, frames: usize, readahead: bool) -> (PageCache, Arc<Faults>) {
    let faults = Faults::new();
    let c = PageCache::with_backend(
        Config {
            readahead_max: if readahead { 1 << 20 } else { 0 },
            ..config(engine, frames)
        },
        FaultyBackend::new(PosixBackend, faults.clone()),
    )
    .unwrap();
    (c, faults)
}

fn check(buf: &[u8], at: u64) {
    for (i, &b) in buf.iter().enumerate() {
        assert_eq!(b, pattern(at + i as u64), "byte at {}", at + i as u64);
    }
}

#[test]
fn the_engine_asked_for_is_the_engine_used() {
    let _shared = shared();
    for e in ENGINES {
        let c = PageCache::new(config(e, 64)).unwrap();
        assert_eq!(c.io_engine(), e);
    }
    let auto = PageCache::new(config(IoEngine::Auto, 64)).unwrap();
    assert_ne!(auto.io_engine(), IoEngine::Auto, "Auto resolves to one");
}

/// A read spanning 32 missing pages is one run: one read I/O, 32 pages.
#[test]
fn a_read_of_many_missing_pages_is_one_io() {
    let _shared = shared();
    let d = TempDir::new("batch");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    for e in ENGINES {
        let (c, faults) = faulty_cache(e, 256, false);
        let f = c.open(&p).unwrap();
        let mut buf = vec![0u8; 32 * PS];
        f.read_exact_at(&mut buf, 8 * PS as u64).unwrap();
        check(&buf, 8 * PS as u64);
        let s = c.stats();
        assert_eq!(s.misses, 32, "{e:?}");
        assert_eq!(s.reads, 32, "{e:?}: pages read");
        assert_eq!(s.async_reads, 1, "{e:?}: one run");
        assert_eq!(faults.reads(), 1, "{e:?}: one I/O for the run");
        // Again: all hits, no I/O.
        f.read_exact_at(&mut buf, 8 * PS as u64).unwrap();
        assert_eq!(faults.reads(), 1);
        c.validate();
    }
}

/// Pages cached in the middle of a request split it into runs around them.
#[test]
fn cached_pages_split_a_batch_into_runs() {
    let _shared = shared();
    let d = TempDir::new("runs");
    let p = d.path("f");
    make_file(&p, 16 * PS as u64);
    for e in ENGINES {
        let (c, faults) = faulty_cache(e, 256, false);
        let f = c.open(&p).unwrap();
        let mut one = [0u8; 1];
        f.read_at(&mut one, 5 * PS as u64).unwrap(); // page 5 cached
        let mut buf = vec![0u8; 10 * PS];
        f.read_exact_at(&mut buf, 0).unwrap(); // 0-4, [5], 6-9
        check(&buf, 0);
        assert_eq!(c.stats().reads, 10, "{e:?}");
        assert_eq!(faults.reads(), 3, "{e:?}: page 5, then two runs");
        c.validate();
    }
}

/// A sequential reader in 4 KiB steps has its pages read ahead: far fewer
/// I/Os than pages, windows growing, every byte right, and the file 8x the
/// cache.
#[test]
fn a_sequential_reader_is_read_ahead() {
    let _shared = shared();
    let d = TempDir::new("ra");
    let p = d.path("f");
    let pages = 8192u64;
    make_file(&p, pages * PS as u64 + 100); // a partial last page
    for e in ENGINES {
        // Windows up to 32 pages (a 32nd of the cache).
        let (c, faults) = faulty_cache(e, 1024, true);
        let f = c.open(&p).unwrap();
        let mut buf = vec![0u8; PS];
        let mut pos = 0;
        loop {
            let n = f.read_at(&mut buf, pos).unwrap();
            if n == 0 {
                break;
            }
            check(&buf[..n], pos);
            pos += n as u64;
        }
        assert_eq!(pos, pages * PS as u64 + 100);
        let s = c.stats();
        assert!(s.readahead_pages > pages / 2, "{e:?}: {s}");
        assert!(
            faults.reads() < pages / 4,
            "{e:?}: {} I/Os for {pages} pages",
            faults.reads()
        );
        c.validate();
    }
}

/// Random reads turn readahead off: one page read per miss.
#[test]
fn random_reads_read_no_more_than_asked() {
    let _shared = shared();
    let d = TempDir::new("ra-random");
    let p = d.path("f");
    make_file(&p, 1024 * PS as u64);
    for e in ENGINES {
        let (c, faults) = faulty_cache(e, 2048, true);
        let f = c.open(&p).unwrap();
        let mut buf = [0u8; 64];
        let mut x = 12345u64;
        let mut asked = std::collections::BTreeSet::new();
        for _ in 0..200 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = 1 + (x >> 33) % 1023; // never page 0 (a sequential start)
            asked.insert(page);
            f.read_exact_at(&mut buf, page * PS as u64).unwrap();
            check(&buf, page * PS as u64);
        }
        let s = c.stats();
        // A random hit may land right after an earlier miss and look
        // sequential; such windows are small. Nearly one read per page.
        assert!(
            s.reads <= asked.len() as u64 + 64,
            "{e:?}: {} pages read for {} asked ({s})",
            s.reads,
            asked.len()
        );
        assert!(faults.reads() <= asked.len() as u64 + 16);
        c.validate();
    }
}

#[test]
fn prefetch_reads_ahead_without_waiting_and_reads_then_hit() {
    let _shared = shared();
    let d = TempDir::new("prefetch");
    let p = d.path("f");
    make_file(&p, 100 * PS as u64);
    for e in ENGINES {
        let (c, faults) = faulty_cache(e, 256, false);
        let f = c.open(&p).unwrap();
        f.prefetch(10 * PS as u64, 40 * PS as u64).unwrap();
        let mut buf = vec![0u8; 40 * PS];
        f.read_exact_at(&mut buf, 10 * PS as u64).unwrap(); // waits on latches
        check(&buf, 10 * PS as u64);
        let s = c.stats();
        assert_eq!(s.prefetch_pages, 40, "{e:?}");
        assert_eq!(s.reads, 40, "{e:?}: nothing read twice");
        assert!(
            faults.reads() <= 2,
            "{e:?}: 128 KiB reads: {}",
            faults.reads()
        );
        // Cached pages and pages past end of file: nothing to do.
        f.prefetch(10 * PS as u64, 40 * PS as u64).unwrap();
        f.prefetch(100 * PS as u64, 1 << 30).unwrap();
        f.prefetch(u64::MAX - 10, 100).unwrap();
        f.prefetch(0, 0).unwrap();
        assert_eq!(c.stats().prefetch_pages, 40);
        c.validate();
    }
}

/// A failed run: the read reports the OS error with the pages, nothing of
/// it stays cached, and the next read succeeds with the right bytes.
#[test]
fn a_failed_batched_read_reports_eio_and_the_next_read_succeeds() {
    let _shared = shared();
    let d = TempDir::new("batch-eio");
    let p = d.path("f");
    make_file(&p, 32 * PS as u64);
    for e in ENGINES {
        let (c, faults) = faulty_cache(e, 256, false);
        let f = c.open(&p).unwrap();
        faults.fail_nth_read(1, libc::EIO);
        let mut buf = vec![0u8; 16 * PS];
        let err = f.read_exact_at(&mut buf, 0).unwrap_err();
        assert_eq!(os_error(&err), Some(libc::EIO), "{e:?}: {err}");
        assert!(err.to_string().contains("pages 0..16"), "{err}");
        assert_eq!(c.stats().read_errors, 16);
        c.validate(); // nothing latched or half-read left
        f.read_exact_at(&mut buf, 0).unwrap();
        check(&buf, 0);
    }
}

/// A failed prefetch read drops its pages; reading them later reads again.
#[test]
fn a_failed_prefetch_surfaces_only_when_the_page_is_read() {
    let _shared = shared();
    let d = TempDir::new("prefetch-eio");
    let p = d.path("f");
    make_file(&p, 32 * PS as u64);
    for e in ENGINES {
        let (c, faults) = faulty_cache(e, 256, false);
        let f = c.open(&p).unwrap();
        faults.fail_nth_read(1, libc::EIO);
        f.prefetch(0, 8 * PS as u64).unwrap(); // fails in the background
        c.validate(); // waits for it
        assert_eq!(c.stats().read_errors, 8, "{e:?}");
        // A persistent error reaches the reader...
        faults.fail_nth_read(1, libc::EIO);
        let mut buf = vec![0u8; PS];
        assert_eq!(
            os_error(&f.read_exact_at(&mut buf, 0).unwrap_err()),
            Some(libc::EIO)
        );
        // ...a transient one is gone.
        f.read_exact_at(&mut buf, 0).unwrap();
        check(&buf, 0);
    }
}

/// Short reads from the backend and the partial last page through runs.
#[test]
fn short_reads_and_the_end_of_file_through_runs() {
    let _shared = shared();
    let d = TempDir::new("short");
    let p = d.path("f");
    let len = 20 * PS as u64 + 123;
    make_file(&p, len);
    for e in ENGINES {
        for short in [0u64, 1000] {
            let (c, faults) = faulty_cache(e, 256, true);
            faults.short_reads(short);
            let f = c.open(&p).unwrap();
            let mut buf = vec![0xAAu8; 30 * PS];
            assert_eq!(f.read_at(&mut buf, 0).unwrap(), len as usize);
            check(&buf[..len as usize], 0);
            // The frame past the end is zero.
            let pg = f.page(20).unwrap();
            assert!(pg[123..].iter().all(|&b| b == 0), "{e:?} short {short}");
            drop(pg);
            c.validate();
        }
    }
}

/// Truncate racing readahead and prefetch: after a shrink and a regrow,
/// the regrown range reads as zeros, never as bytes the truncate cut.
#[test]
fn truncate_racing_readahead_and_prefetch_never_brings_back_cut_bytes() {
    let _shared = shared();
    let d = TempDir::new("trunc-ra");
    let p = d.path("f");
    let pages = 64u64;
    for e in ENGINES {
        make_file(&p, pages * PS as u64);
        let c = PageCache::new(config(e, 128)).unwrap();
        let f = c.open(&p).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..3 {
                let (f, stop) = (&f, &stop);
                s.spawn(move || {
                    let mut buf = vec![0u8; 2 * PS];
                    while !stop.load(Ordering::Relaxed) {
                        if t == 0 {
                            f.prefetch(0, pages * PS as u64).unwrap();
                        }
                        // Sequential passes (readahead) that may run into
                        // the cut: bytes are the pattern or zero.
                        let mut pos = 0;
                        while let Ok(n) = f.read_at(&mut buf, pos) {
                            if n == 0 {
                                break;
                            }
                            for (i, &b) in buf[..n].iter().enumerate() {
                                let at = pos + i as u64;
                                assert!(b == pattern(at) || b == 0, "byte {at}");
                            }
                            pos += n as u64;
                        }
                    }
                });
            }
            for round in 0..60u64 {
                let keep = 1 + round % (pages / 2);
                f.set_len(keep * PS as u64 + 17).unwrap();
                f.set_len(pages * PS as u64).unwrap();
                let mut buf = vec![0u8; PS];
                for page in keep + 1..pages {
                    f.read_exact_at(&mut buf, page * PS as u64).unwrap();
                    assert!(
                        buf.iter().all(|&b| b == 0),
                        "{e:?} round {round}: page {page} came back after a truncate to {keep} pages"
                    );
                }
                f.read_exact_at(&mut buf, keep * PS as u64).unwrap();
                assert!(buf[..17]
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == pattern(keep * PS as u64 + i as u64)));
                assert!(buf[17..].iter().all(|&b| b == 0));
                // Restore the content for the next round.
                let data: Vec<u8> = (keep * PS as u64..pages * PS as u64).map(pattern).collect();
                f.write_at(&data, keep * PS as u64).unwrap();
            }
            stop.store(true, Ordering::Relaxed);
        });
        c.validate();
    }
}

/// Oversubscribed: 16 threads on a 128-frame cache over a file 16x its
/// size, mixing batched reads, readahead, prefetch, gang lookups and
/// writes to disjoint pages; every byte checked.
#[test]
fn stress_tiny_cache_many_threads_content_checked() {
    let _shared = shared();
    let d = TempDir::new("io-stress");
    let p = d.path("f");
    let pages = 2048u64;
    make_file(&p, pages * PS as u64);
    for e in ENGINES {
        let c = PageCache::new(config(e, 128)).unwrap();
        let f = c.open(&p).unwrap();
        let threads = 16u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let f = &f;
                s.spawn(move || {
                    let mut x = t * 7919 + 1;
                    let mut buf = vec![0u8; 4 * PS];
                    let mut refs = Vec::new();
                    for i in 0..150u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let page = (x >> 33) % (pages - 6);
                        match i % 5 {
                            0 => f.prefetch(page * PS as u64, 8 * PS as u64).unwrap(),
                            1 => {
                                f.pages(page, &mut refs, 2).unwrap();
                                for (k, r) in refs.iter().enumerate() {
                                    let at = (page + k as u64) * PS as u64;
                                    if (page + k as u64) % threads != t {
                                        assert_eq!(r[7], pattern(at + 7));
                                    }
                                }
                                refs.clear();
                            }
                            2 => {
                                // My own pages: write the pattern back.
                                let mine = (page / threads) * threads + t;
                                if mine < pages {
                                    let at = mine * PS as u64;
                                    let data: Vec<u8> = (at..at + PS as u64).map(pattern).collect();
                                    f.write_at(&data, at).unwrap();
                                }
                            }
                            _ => {
                                let off = page * PS as u64 + (x % 4096);
                                let n = f.read_at(&mut buf, off).unwrap();
                                check(&buf[..n], off);
                            }
                        }
                    }
                });
            }
        });
        c.validate();
        f.sync().unwrap();
        let disk = std::fs::read(&p).unwrap();
        check(&disk, 0);
    }
}

/// A slow device (every I/O takes 20 ms) under 32 threads on a small cache:
/// sequential readers (readahead), random readers, prefetchers and writers
/// (background write-back) keep many runs in flight for longer than any
/// spin-wait lasts. Nobody may get `OutOfMemory` for it: frames held by
/// reads or writes in flight come back by themselves, so reclaim waits.
#[test]
fn a_slow_device_makes_reclaim_wait_not_fail() {
    let _shared = shared();
    let d = TempDir::new("io-slow");
    let p = d.path("f");
    let pages = 4096u64;
    make_file(&p, pages * PS as u64);
    for e in ENGINES {
        let faults = Faults::new();
        faults.delay_io(std::time::Duration::from_millis(50));
        let c = PageCache::with_backend(
            Config {
                readahead_max: 256 * PS,
                ..config(e, 256)
            },
            FaultyBackend::new(PosixBackend, faults.clone()),
        )
        .unwrap();
        let f = c.open(&p).unwrap();
        let threads = 32u64;
        std::thread::scope(|s| {
            for t in 0..threads {
                let f = &f;
                s.spawn(move || {
                    let mut x = t * 7919 + 1;
                    let mut buf = vec![0u8; 16 * PS];
                    let mut seq = (t * 512) % pages;
                    for _ in 0..12u64 {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let page = (x >> 33) % (pages - 40);
                        match t % 4 {
                            0 => {
                                // Sequential: 16 pages at a time.
                                let off = seq * PS as u64;
                                let n = f.read_at(&mut buf, off).unwrap();
                                check(&buf[..n], off);
                                seq = (seq + 16) % pages;
                            }
                            1 => f.prefetch(page * PS as u64, 32 * PS as u64).unwrap(),
                            2 => {
                                let mine = (page / threads) * threads + t;
                                let at = mine * PS as u64;
                                let data: Vec<u8> = (at..at + PS as u64).map(pattern).collect();
                                f.write_at(&data, at).unwrap();
                            }
                            _ => {
                                let off = page * PS as u64 + (x % 4096);
                                let n = f.read_at(&mut buf[..PS], off).unwrap();
                                check(&buf[..n], off);
                            }
                        }
                    }
                });
            }
        });
        c.validate();
        faults.delay_io(std::time::Duration::ZERO);
        f.sync().unwrap();
        let disk = std::fs::read(&p).unwrap();
        check(&disk, 0);
    }
}

/// Readahead never reads a page twice in one sequential pass: however large
/// `readahead_max` is, the window stays small enough that the pages read
/// ahead (two windows: the one being read and the next, started at the
/// marker) fit in what the replacement policy keeps of new, unreferenced
/// pages (S3-FIFO: the probationary queue of the reader's CPU shard, a
/// tenth of the shard), so none is evicted before the reader gets there.
/// Before the bound, 64 MiB windows through 8192 frames read 91 904 pages
/// for 65 536. The reader is free to move between CPUs: one that migrated
/// spread its pages over the CPU shards, and eviction on its new CPU took
/// its newest pages, read ahead and not read yet (8576 reads for 8192
/// pages in one run of six under a CPU hog). Eviction now starts from the
/// fullest shard when the reclaimer's own is under its share (`s3fifo`'s
/// `first_shard`); until then this test pinned its reader to CPU 0. It
/// runs alone among this file's tests (`ALONE`): their I/O threads, busy
/// in parallel, moved the reader often enough to read 1.06% of the pages
/// twice in a debug run.
#[test]
fn readahead_does_not_read_pages_twice_at_any_window() {
    let _alone = ALONE.write().unwrap_or_else(|e| e.into_inner());
    let d = TempDir::new("io-ra-thrash");
    let p = d.path("f");
    for (frames, ra_mib) in [(256usize, 64usize), (1024, 64), (8192, 64), (8192, 2)] {
        let pages = 8 * frames as u64;
        make_file(&p, pages * PS as u64);
        for e in ENGINES {
            let c = PageCache::new(Config {
                readahead_max: ra_mib << 20,
                ..config(e, frames)
            })
            .unwrap();
            let f = c.open(&p).unwrap();
            let mut buf = vec![0u8; 16 * PS];
            let mut off = 0u64;
            while off < pages * PS as u64 {
                let n = f.read_at(&mut buf, off).unwrap();
                check(&buf[..n], off);
                off += n as u64;
            }
            let s = c.stats();
            assert!(
                s.readahead_pages > 0,
                "{e:?}, {frames} frames, {ra_mib} MiB: readahead ran ({s})"
            );
            assert!(
                s.reads <= pages + pages / 100,
                "{e:?}, {frames} frames, {ra_mib} MiB: {} page reads for {pages} pages ({s})",
                s.reads
            );
        }
    }
}

/// A `write_at` whose first and last pages are partial and not cached must
/// read both: the two reads are in flight at once (the last page's started
/// before the first page's is waited for), so the write waits for one read
/// time, not two in a row. On a device taking 200 ms per I/O, both engines;
/// the bytes are checked on disk after a sync.
#[test]
fn a_partial_write_reads_both_end_pages_at_once() {
    let _shared = shared();
    let d = TempDir::new("io-partial-ends");
    let p = d.path("f");
    let pages = 8u64;
    for e in ENGINES {
        make_file(&p, pages * PS as u64);
        let faults = Faults::new();
        let c = PageCache::with_backend(
            Config {
                readahead_max: 0,
                ..config(e, 64)
            },
            FaultyBackend::new(PosixBackend, faults.clone()),
        )
        .unwrap();
        let f = c.open(&p).unwrap();
        faults.delay_io(std::time::Duration::from_millis(200));
        // Pages 1 (from its middle) to 4 (to its middle).
        let (at, len) = (PS as u64 + 100, 3 * PS + 500);
        f.write_at(&vec![0xEE; len], at).unwrap();
        assert_eq!(faults.reads(), 2, "{e:?}: pages 1 and 4 read, 2 and 3 not");
        assert!(
            faults.max_concurrent() >= 2,
            "{e:?}: the two end pages were read one after the other"
        );
        faults.delay_io(std::time::Duration::ZERO);
        f.sync().unwrap();
        let disk = std::fs::read(&p).unwrap();
        for (i, &b) in disk.iter().enumerate() {
            let i = i as u64;
            let want = if i >= at && i < at + len as u64 {
                0xEE
            } else {
                pattern(i)
            };
            assert_eq!(b, want, "{e:?}: byte {i}");
        }
    }
}
