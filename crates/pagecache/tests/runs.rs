//! Runs (`File::run`, protocol 5.7): one leaf pin over consecutive cached
//! pages, against writers, eviction and truncate, with page contents
//! checked. The oversubscribed mix is in `tests/stress.rs`; the loom
//! models in `tests/loom.rs`.

mod common;
use common::*;
use pagecache::PageCache;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

fn page_ok(pg: &[u8], index: u64) -> bool {
    let base = index * PS as u64;
    pg.iter()
        .enumerate()
        .all(|(k, &b)| b == pattern(base + k as u64))
}

#[test]
fn a_run_holds_cached_pages_with_one_pin_and_ends_where_it_must() {
    let d = TempDir::new("runs-basic");
    let p = d.path("f");
    let len = 100 * PS as u64 + 123; // 101 pages, the last partial
    make_file(&p, len);
    let cache = cache(256);
    let f = cache.open(&p).unwrap();

    // Cold: read as one batch, one pin per page.
    let run = f.run(0, 16).unwrap();
    assert_eq!((run.start(), run.len()), (0, 16));
    assert!(!run.one_pin(), "pages it had to read are pinned one by one");
    assert!(run.iter().enumerate().all(|(k, pg)| page_ok(pg, k as u64)));
    drop(run);

    // Cached: one leaf pin.
    let run = f.run(0, 16).unwrap();
    assert!(run.one_pin());
    assert_eq!(run.len(), 16);
    assert!(run.iter().enumerate().all(|(k, pg)| page_ok(pg, k as u64)));
    // Two runs over the same pages at once, and a PageRef too.
    let again = f.run(4, 8).unwrap();
    assert!(again.one_pin() && again.len() == 8);
    let pr = f.page(5).unwrap();
    assert_eq!(&pr[..], again.page(1));
    drop((run, again, pr));

    // Ends at the first page not cached (16 is not).
    let run = f.run(10, 20).unwrap();
    assert!(run.one_pin());
    assert_eq!(run.len(), 6);
    drop(run);
    // From a missing page: reads up to max (capped at RUN_MAX), one pin
    // each.
    let run = f.run(16, 20).unwrap();
    assert!(!run.one_pin());
    assert_eq!(run.len(), 16);
    assert!(run
        .iter()
        .enumerate()
        .all(|(k, pg)| page_ok(pg, 16 + k as u64)));
    drop(run);

    // Ends at the leaf's end (64 pages), and at end of file.
    for i in 32..101 {
        drop(f.page(i).unwrap());
    }
    let run = f.run(60, 16).unwrap();
    assert_eq!(run.len(), 4, "a run stays within one leaf");
    drop(run);
    let run = f.run(40, 16).unwrap();
    assert_eq!(run.len(), 16, "runs need not be aligned within the leaf");
    assert!(run.one_pin());
    drop(run);
    let run = f.run(96, 64).unwrap();
    assert!(run.one_pin());
    assert_eq!(run.len(), 5);
    let last = run.page(4);
    assert!(last[..123]
        .iter()
        .enumerate()
        .all(|(k, &b)| b == pattern(100 * PS as u64 + k as u64)));
    assert!(last[123..].iter().all(|&b| b == 0), "past EOF reads zero");
    drop(run);
    assert!(f.run(101, 16).unwrap().is_empty());
    assert!(f.run(u64::MAX, 16).unwrap().is_empty());
    assert!(f.run(0, 0).unwrap().is_empty());
    assert_eq!(f.run(0, 1000).unwrap().len(), pagecache::File::RUN_MAX);
    cache.validate();
}

/// A writer of a page a run holds waits for the run, and so do
/// `page_mut` and a truncate that zeroes the page's tail.
#[test]
fn writers_wait_for_the_run_and_see_nothing_torn() {
    let d = TempDir::new("runs-write");
    let p = d.path("f");
    make_file(&p, 32 * PS as u64);
    let cache = cache(64);
    let f = cache
        .open_with(&p, pagecache::OpenOptions::new().read(true).write(true))
        .unwrap();
    for i in 0..32 {
        drop(f.page(i).unwrap());
    }
    let run = f.run(0, 32).unwrap();
    assert!(run.one_pin());
    let wrote = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            f.write_at(&[0xAB; 64], 3 * PS as u64 + 100).unwrap();
            let mut m = f.page_mut(7).unwrap();
            m[0] = 0xCD;
            drop(m);
            f.set_len(20 * PS as u64 + 5).unwrap(); // zeroes page 20's tail
            wrote.store(true, SeqCst);
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!wrote.load(SeqCst), "a writer went past the run");
        assert!(!writer.is_finished());
        for (k, pg) in run.iter().enumerate() {
            assert!(page_ok(pg, k as u64), "page {k} changed under the run");
        }
        drop(run);
        writer.join().unwrap();
    });
    let mut b = [0u8; 64];
    f.read_at(&mut b, 3 * PS as u64 + 100).unwrap();
    assert_eq!(b, [0xAB; 64]);
    assert_eq!(f.page(7).unwrap()[0], 0xCD);
    assert_eq!(f.len(), 20 * PS as u64 + 5);
    // Other pages of the leaf were never blocked: the write of a page the
    // run does not hold goes through while it lives.
    let run = f.run(0, 4).unwrap();
    f.write_at(&[1; 8], 10 * PS as u64).unwrap();
    drop(run);
    cache.validate();
}

/// Eviction skips pages a run holds (and puts them back exactly as they
/// were); everything else is evicted around them. CLOCK, so that the
/// hand reaches the run's pages (S3-FIFO would keep them in its main
/// queue, never looking at them).
#[test]
fn eviction_passes_over_pages_a_run_holds() {
    let d = TempDir::new("runs-evict");
    let p = d.path("f");
    make_file(&p, 256 * PS as u64);
    let cache = PageCache::new(pagecache::Config {
        capacity: 32 * PS,
        policy: pagecache::PolicyKind::Clock,
        ..pagecache::Config::default()
    })
    .unwrap();
    let f = cache.open(&p).unwrap();
    for i in 0..8 {
        drop(f.page(i).unwrap());
    }
    let run = f.run(0, 8).unwrap();
    assert!(run.one_pin() && run.len() == 8);
    let before = cache.stats().evictions;
    let mut buf = vec![0u8; PS];
    for round in 0..3 {
        for i in 8..256 {
            f.read_at(&mut buf, i * PS as u64).unwrap();
            assert!(page_ok(&buf, i), "round {round} page {i}");
        }
    }
    assert!(cache.stats().evictions - before > 500, "must evict");
    for (k, pg) in run.iter().enumerate() {
        assert!(page_ok(pg, k as u64), "page {k} reused under the run");
    }
    drop(run);
    // They stayed cached: another run holds them with one pin again.
    let run = f.run(0, 8).unwrap();
    assert!(run.one_pin() && run.len() == 8);
    drop(run);
    cache.validate();
}

/// A truncate removes pages a run holds without waiting for it: the run
/// keeps reading the old bytes, the frames come back when it is dropped,
/// the emptied leaf is freed then, and regrowth reads zeros.
#[test]
fn truncate_under_a_run_frees_its_frames_when_the_run_ends() {
    let d = TempDir::new("runs-trunc");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let cache: PageCache = cache(96);
    let f = cache
        .open_with(&p, pagecache::OpenOptions::new().read(true).write(true))
        .unwrap();
    for i in 0..64 {
        drop(f.page(i).unwrap());
    }
    let run = f.run(8, 16).unwrap();
    assert!(run.one_pin() && run.len() == 16);
    let free_before = cache.free_frames();
    f.set_len(0).unwrap();
    assert!(f.run(0, 16).unwrap().is_empty());
    // 48 frames came back at once; the run's 16 wait for it.
    assert_eq!(cache.free_frames(), free_before + 48);
    for (k, pg) in run.iter().enumerate() {
        assert!(
            page_ok(pg, 8 + k as u64),
            "page {} lost under the run",
            8 + k
        );
    }
    drop(run);
    assert_eq!(cache.free_frames(), free_before + 64);
    f.set_len(64 * PS as u64).unwrap();
    let run = f.run(8, 16).unwrap();
    assert!(
        run.iter().all(|pg| pg.iter().all(|&b| b == 0)),
        "stale bytes"
    );
    drop(run);
    cache.validate();
}

/// Sixteen readers taking runs over the pages eight writers rewrite, many
/// more threads than cores, in a cache smaller than the file (eviction all
/// along; the pins held at once stay under the capacity): every run sees
/// each page whole, and one value from start to end.
#[test]
fn oversubscribed_runs_and_writers_agree_on_every_byte() {
    const PAGES: u64 = 160;
    let d = TempDir::new("runs-over");
    let p = d.path("f");
    std::fs::write(&p, vec![0u8; PAGES as usize * PS]).unwrap();
    let cache = cache(96); // 16 runs of 4 + 8 writers' latches fit
    let f = cache
        .open_with(&p, pagecache::OpenOptions::new().read(true).write(true))
        .unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for w in 0..8u64 {
            let (f, stop) = (&f, &stop);
            s.spawn(move || {
                let mut v = 0u8;
                while !stop.load(SeqCst) {
                    v = v.wrapping_add(1);
                    let i = (w * 20 + v as u64 % 20) % PAGES;
                    loop {
                        match f.write_at(&vec![v; PS], i * PS as u64) {
                            Ok(_) => break,
                            Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                                std::thread::yield_now()
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            });
        }
        let readers: Vec<_> = (0..16u64)
            .map(|r| {
                let f = &f;
                s.spawn(move || {
                    let mut one_pin = 0;
                    for round in 0..1500u64 {
                        let start = (round * 7 + r * 13) % PAGES;
                        let run = match f.run(start, 4) {
                            Ok(run) => run,
                            Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => continue,
                            Err(e) => panic!("{e}"),
                        };
                        one_pin += run.one_pin() as u64;
                        let firsts: Vec<u8> = run
                            .iter()
                            .map(|pg| {
                                assert!(pg.iter().all(|&b| b == pg[0]), "torn page");
                                pg[0]
                            })
                            .collect();
                        std::thread::yield_now();
                        for (k, pg) in run.iter().enumerate() {
                            assert!(
                                pg.iter().all(|&b| b == firsts[k]),
                                "page {} changed under a run",
                                start + k as u64
                            );
                        }
                    }
                    one_pin
                })
            })
            .collect();
        // Writers stop even if a reader panicked (else the scope hangs).
        let joined: Vec<_> = readers.into_iter().map(|h| h.join()).collect();
        stop.store(true, SeqCst);
        let one_pin: u64 = joined
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .sum();
        assert!(one_pin > 0, "no run ever held cached pages with one pin");
    });
    cache.validate();
}

/// Runs `op` on another thread and waits up to `secs` for it: `Some` of its
/// result, or `None` if it is still blocked (left running).
fn within<T: Send + 'static>(secs: u64, op: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(op());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// A run over pages that `set_len` cut off does not pin the new pages
/// written at those indices later: the run still reads its old pages,
/// and a writer of the new ones (the run's holder itself here) does not
/// wait for it, as with a `PageRef`.
#[test]
fn a_run_over_truncated_pages_does_not_pin_the_new_pages_at_their_indices() {
    let d = TempDir::new("runs-regrow");
    let p = d.path("f");
    make_file(&p, 8 * PS as u64);
    let cache: PageCache = cache(64);
    let f = cache.open(&p).unwrap();
    for i in 0..8 {
        drop(f.page(i).unwrap());
    }
    let run = f.run(0, 5).unwrap();
    assert!(run.one_pin() && run.len() == 5);
    f.set_len(0).unwrap();
    for round in 0..3u8 {
        for i in 0..5u64 {
            let g = f.clone();
            let wrote = within(10, move || {
                g.write_at(&[round + 1; PS], i * PS as u64).unwrap();
                g.write_at(&[round + 2; PS], i * PS as u64).unwrap();
            });
            assert!(
                wrote.is_some(),
                "round {round}: a writer of new page {i} waits for the run over the truncated one"
            );
        }
        for (k, pg) in run.iter().enumerate() {
            assert!(
                page_ok(pg, k as u64),
                "truncated page {k} changed under the run"
            );
        }
        let mut buf = vec![0u8; 5 * PS];
        f.read_exact_at(&mut buf, 0).unwrap();
        assert!(
            buf.iter().all(|&b| b == round + 2),
            "round {round}: new pages"
        );
        // The new pages can be truncated and written again, run still held.
        f.set_len(0).unwrap();
    }
    // A new run sees the new pages (written once more).
    f.write_at(&[7; 5 * PS], 0).unwrap();
    drop(run);
    let run = f.run(0, 5).unwrap();
    assert_eq!(run.len(), 5);
    assert!(run.iter().all(|pg| pg.iter().all(|&b| b == 7)));
    drop(run);
    cache.validate();
}

/// The holder of a run may `sync` while another thread waits for a page of
/// the run (`set_len` zeroing its tail, or `write_at`): the sync does not
/// wait for that waiter, as it does not with a `PageRef` (lock rule 7).
#[test]
fn a_run_holder_can_sync_while_a_writer_waits_for_the_run() {
    for waiter in ["set_len", "write_at"] {
        let d = TempDir::new("runs-sync");
        let p = d.path("f");
        make_file(&p, 4 * PS as u64);
        let cache = PageCache::new(pagecache::Config {
            capacity: 64 * PS,
            // No background write-back: page 2 is dirty when sync runs.
            dirty_background_percent: 100,
            dirty_limit_percent: 100,
            ..pagecache::Config::default()
        })
        .unwrap();
        let f = cache.open(&p).unwrap();
        for i in 0..4 {
            drop(f.page(i).unwrap());
        }
        f.write_at(&[9; 10], 2 * PS as u64).unwrap();
        let run = f.run(0, 3).unwrap();
        assert!(run.one_pin() && run.len() == 3);
        let g = f.clone();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let done2 = done.clone();
        let w = std::thread::spawn(move || {
            match waiter {
                "set_len" => g.set_len(2 * PS as u64 + 100).unwrap(),
                _ => g.write_at(&[3; 10], 2 * PS as u64).unwrap(),
            }
            done2.store(true, SeqCst);
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(!done.load(SeqCst), "{waiter}: did not wait for the run");
        let g = f.clone();
        let synced = within(10, move || g.sync());
        assert!(
            synced.is_some(),
            "{waiter}: the run holder's sync waits for the writer waiting for its run"
        );
        synced.unwrap().unwrap();
        let disk = std::fs::read(&p).unwrap();
        assert_eq!(
            &disk[2 * PS..2 * PS + 10],
            &[9; 10],
            "{waiter}: page 2 synced"
        );
        let pg = run.page(2);
        assert_eq!(&pg[..10], &[9; 10], "{waiter}: the run's page 2 changed");
        assert!(pg[10..]
            .iter()
            .enumerate()
            .all(|(k, &b)| b == pattern(2 * PS as u64 + 10 + k as u64)));
        drop(run);
        w.join().unwrap();
        cache.validate();
    }
}
