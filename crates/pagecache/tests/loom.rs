//! Loom models, run by `scripts/loom.sh`:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release -p pagecache --test loom
//! ```
//!
//! The whole crate builds under loom (`crate::sync` swaps in loom's atomics,
//! locks and yields), so these models drive the code users run: the public
//! API (`PageCache`, `File`, `AnonRegion`) over real files, and through it
//! the real index, lookup (5.1), eviction (5.2), miss (5.3), optimistic read
//! and write (5.4/5.5), truncate (5.6), runs (5.7), dirty tags and
//! anonymous first touch. The queue, allocator and list models drive those structures'
//! real code directly. No protocol code is copied here.
//!
//! Frame bytes are not modelled as atomics (see `crate::sync`); every copy
//! of them passes a loom scheduling point halfway, so a read that a writer
//! tears is an interleaving loom explores.
#![cfg(loom)]

use loom::sync::atomic::Ordering;
use loom::sync::Arc;
use loom::thread;
use pagecache::{AnonRegion, Config, File, OpenOptions, PageCache, PolicyKind, PoolKind};
use std::io::ErrorKind;
use std::path::PathBuf;

const PS: usize = 4096;

/// A file of `pages` pages, page `i` filled with byte `i + 1`, in a fresh
/// directory (one per model execution), removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(pages: usize) -> TempFile {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("pagecache-loom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("f{n}"));
        let data: Vec<u8> = (0..pages).flat_map(|i| vec![i as u8 + 1; PS]).collect();
        std::fs::write(&p, data).unwrap();
        TempFile(p)
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.0).unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The smallest cache (4 frames) with the policy and pool that add the
/// fewest modelled operations (CLOCK's one hand, one global free list).
fn cache() -> PageCache {
    PageCache::new(Config {
        capacity: 4 * PS,
        policy: PolicyKind::Clock,
        pool: PoolKind::Global,
        ..Config::default()
    })
    .unwrap()
}

fn open(c: &PageCache, t: &TempFile) -> File {
    c.open_with(&t.0, OpenOptions::new().read(true).write(true))
        .unwrap()
}

/// A file of `pages` pages opened through a fresh [`cache`], with page
/// `cached` read into it (and its bytes checked).
fn cached_file(pages: usize, cached: u64) -> (TempFile, PageCache, File) {
    let t = TempFile::new(pages);
    let c = cache();
    let f = open(&c, &t);
    assert_eq!(f.page(cached).unwrap()[0], cached as u8 + 1);
    (t, c, f)
}

/// A full [`cache`]: pages 0 and 1 of a three-page file cached (bytes
/// checked) and two anonymous pages, which cannot be evicted, so a miss of
/// page 2 must evict a file page.
fn full_cache() -> (TempFile, PageCache, File, AnonRegion) {
    let t = TempFile::new(3);
    let c = cache();
    let f = open(&c, &t);
    let anon = c.anon(2 * PS as u64).unwrap();
    anon.page_mut(0).unwrap()[0] = 9;
    anon.page_mut(1).unwrap()[0] = 9;
    assert_eq!(f.page(0).unwrap()[0], 1);
    assert_eq!(f.page(1).unwrap()[0], 2);
    (t, c, f, anon)
}

/// Runs `f` under loom with at most `preemptions` preemptions per
/// execution, and prints how many executions it explored.
fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let preemptions = std::env::var("MODEL_PREEMPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(preemptions);
    let runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    // Waits are yields under loom (a parked thread retries when scheduled
    // again), so one execution can take many branches.
    b.max_branches = std::env::var("LOOM_MAX_BRANCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    b.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    println!(
        "explored {} executions",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// 5.1 lookup vs 5.2 eviction and immediate reuse of the frame: the cache
/// is full (two file pages plus two anonymous pages, which cannot be
/// evicted), one thread pins page 0 while another misses page 2, which
/// evicts the file pages and recycles a frame for page 2. Every pin sees
/// its own page's bytes (the identity re-check rejects a recycled frame),
/// and no frame is lost or counted twice.
#[test]
fn lookup_vs_eviction_and_reuse() {
    // One preemption: two explore about 800 000 executions (3.5 min), one
    // about 9 000 and still catches a missing identity re-check.
    model(1, || {
        let (_t, c, f, anon) = full_cache();
        let f2 = f.clone();
        let reader = thread::spawn(move || {
            let p = f2.page(0).unwrap();
            assert!(p.iter().all(|&b| b == 1), "pinned a recycled frame");
        });
        let p = f.page(2).unwrap();
        assert!(p.iter().all(|&b| b == 3));
        drop(p);
        reader.join().unwrap();
        assert!(c.stats().evictions >= 1, "the model must evict");
        drop(anon);
        c.validate();
    });
}

/// 5.3: two concurrent misses on one page cause exactly one read; both get
/// the page's bytes.
#[test]
fn concurrent_misses_read_once() {
    model(3, || {
        let t = TempFile::new(1);
        let c = cache();
        let f = open(&c, &t);
        let f2 = f.clone();
        let other = thread::spawn(move || f2.page(0).unwrap()[PS - 1]);
        assert_eq!(f.page(0).unwrap()[0], 1);
        assert_eq!(other.join().unwrap(), 1);
        assert_eq!(c.stats().reads, 1, "one read for two misses");
        c.validate();
    });
}

/// 5.4 vs 5.5: an optimistic 64-byte `read_at` races a 64-byte
/// `write_at` of the same cached page. The copy, which loom may interrupt
/// halfway, is never torn: it is discarded when the version moved.
#[test]
fn optimistic_read_vs_write() {
    model(3, || {
        let (_t, c, f) = cached_file(1, 0);
        let fw = f.clone();
        let writer = thread::spawn(move || fw.write_at(&[7u8; 64], 0).unwrap());
        let mut buf = [0u8; 64];
        assert_eq!(f.read_at(&mut buf, 0).unwrap(), 64);
        assert!(buf == [1; 64] || buf == [7; 64], "optimistic torn read");
        writer.join().unwrap();
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, [7; 64]);
        assert!(c.stats().optimistic_reads >= 1);
        c.validate();
    });
}

/// 5.8 view vs write: a thread takes an optimistic view of a cached page
/// and copies 64 bytes (loom may interrupt the copy halfway) while another
/// writes them. A validated copy is never torn; a view taken before the
/// write never validates after it.
#[test]
fn optimistic_view_vs_write() {
    model(3, || {
        let (_t, c, f) = cached_file(1, 0);
        let fw = f.clone();
        let writer = thread::spawn(move || fw.write_at(&[7u8; 64], 0).unwrap());
        let o = f.optimistic(0).unwrap();
        let mut buf = [0u8; 64];
        o.copy_to(0, &mut buf);
        if o.validate() {
            assert!(buf == [1; 64] || buf == [7; 64], "validated a torn copy");
        }
        writer.join().unwrap();
        if o.validate() {
            assert_eq!(buf, [7; 64], "validated a view taken before the write");
        }
        c.validate();
    });
}

/// 5.8 view vs eviction and reuse of the frame: the cache is full (two
/// file pages, two anonymous ones), a reader takes a view of page 0 and
/// loads it while another thread misses page 2, which may evict page 0 and
/// refill its frame with page 2's bytes. A view that validates read page
/// 0's bytes; reading the recycled frame is harmless.
#[test]
fn optimistic_view_vs_eviction_and_reuse() {
    model(1, || {
        let (_t, c, f, anon) = full_cache();
        let f2 = f.clone();
        let reader = thread::spawn(move || {
            let o = f2.optimistic(0).unwrap();
            let a = o.load_u64(0);
            let b = o.load_u64(PS - 8);
            if o.validate() {
                assert_eq!((a, b), (0x0101_0101_0101_0101, 0x0101_0101_0101_0101));
            }
        });
        let p = f.page(2).unwrap();
        assert!(p.iter().all(|&b| b == 3));
        drop(p);
        reader.join().unwrap();
        drop(anon);
        c.validate();
    });
}

/// 5.8 view vs truncate: `set_len` cuts page 1 (and the file grows again,
/// reading zeros) while a reader holds a view of it. A validated view read
/// page 1's old bytes while it was still the page; a view taken before the
/// cut never validates after it.
#[test]
fn optimistic_view_vs_truncate() {
    model(2, || {
        let (_t, c, f) = cached_file(2, 1);
        let f2 = f.clone();
        let cut = thread::spawn(move || {
            f2.set_len(PS as u64).unwrap();
            f2.set_len(2 * PS as u64).unwrap();
        });
        match f.optimistic(1) {
            Ok(o) => {
                let v = o.load_u64(64);
                if o.validate() {
                    assert!(v == 0x0202_0202_0202_0202 || v == 0, "stale or torn");
                }
                cut.join().unwrap();
                if v != 0 {
                    assert!(!o.validate(), "a view of a truncated page validated");
                }
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
                cut.join().unwrap();
            }
        }
        assert!(f.page(1).unwrap().iter().all(|&b| b == 0), "stale bytes");
        c.validate();
    });
}

/// 5.8 view vs truncate of a pinned page (R1'): a view of page 1 is
/// taken while page 1 is pinned; another thread cuts the file below the
/// page, says so through a flag, and grows the file back by writing page 1
/// anew. A pin keeps the removed page in its frame with its identity and
/// version, so only O6's `REMOVED` check can fail the view. The reader
/// loads through the view, reads the flag and validates: a validation
/// after seeing the flag (the cut happened-before it) must fail; one that
/// passes read the old page. With `pinned_by_cutter` the cutter pins the
/// page (the reader holds none) and drops the pin after the flag, so the
/// frame is freed (reset) and may be reused by the regrowth while a
/// reader that saw the flag validates: O6's state load must come before
/// its version load (the other order validates such a view when the reset
/// lands between the two loads).
fn view_of_a_pinned_page_vs_truncate_and_regrowth(pinned_by_cutter: bool) {
    model(2, move || {
        let (_t, c, f) = cached_file(2, 1);
        let pin = (!pinned_by_cutter).then(|| f.page(1).unwrap());
        let o = f.optimistic(1).unwrap();
        let cut_flag = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (f2, flag) = (f.clone(), cut_flag.clone());
        let cut = thread::spawn(move || {
            let held = pinned_by_cutter.then(|| f2.page(1).unwrap());
            f2.set_len(PS as u64).unwrap();
            flag.store(true, Ordering::Release);
            drop(held);
            f2.write_at(&[9u8; 64], PS as u64).unwrap();
        });
        let v = o.load_u64(0);
        let after_cut = cut_flag.load(Ordering::Acquire);
        let ok = o.validate();
        if after_cut {
            assert!(!ok, "a view validated after its page was cut off");
        }
        if ok {
            assert_eq!(
                v, 0x0202_0202_0202_0202,
                "a validated view read other bytes"
            );
        }
        cut.join().unwrap();
        assert!(!o.validate(), "a view of a removed page validated");
        if let Some(p) = pin {
            assert_eq!(p[0], 2, "the pin kept the removed page's bytes");
        }
        assert_eq!(f.page(1).unwrap()[0], 9);
        c.validate();
    });
}

#[test]
fn optimistic_view_of_a_pinned_page_vs_truncate_and_regrowth() {
    view_of_a_pinned_page_vs_truncate_and_regrowth(false);
}

#[test]
fn optimistic_view_of_a_page_whose_pin_goes_vs_truncate_and_reuse() {
    view_of_a_pinned_page_vs_truncate_and_regrowth(true);
}

/// 5.8 two upgrades racing: two threads each take a view of page 0, read
/// its first byte, upgrade and increment it. An upgrade succeeds only on an
/// unchanged page (it sees the byte its view read), so no increment is
/// lost: the final byte is the initial one plus the successful upgrades,
/// and with both views taken before either upgrade, one of them fails.
#[test]
fn optimistic_upgrades_race() {
    upgrades_race(false);
}

/// The same race with `upgrade_or_wait` (U0): an upgrade refused by the
/// other's latch waits for its release (under loom a park is a yield, so
/// the model checks that the wait ends once the latch is released, and
/// that no increment is lost; the futex wake-up itself is parking_lot's).
#[test]
fn optimistic_upgrades_race_and_wait() {
    upgrades_race(true);
}

/// U0 against a blocking latch: a view taken before `page_mut`'s latch,
/// whose upgrade meets that latch, waits it out and then fails (the page
/// changed), or latches the page before the writer; either way no
/// increment is lost and the wait ends.
#[test]
fn optimistic_upgrade_waits_out_a_latch() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let o = f.optimistic(0).unwrap();
        let v = o.load_u8(0);
        let f2 = f.clone();
        let writer = thread::spawn(move || {
            let mut m = f2.page_mut(0).unwrap();
            m[0] += 1;
        });
        let won = match o.upgrade_or_wait() {
            Ok(mut m) => {
                assert_eq!(m[0], v, "upgraded a changed page");
                m[0] = v + 1;
                1
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Interrupted);
                0
            }
        };
        writer.join().unwrap();
        assert_eq!(f.page(0).unwrap()[0], 2 + won, "an increment was lost");
        c.validate();
    });
}

fn upgrades_race(wait: bool) {
    model(2, move || {
        let (_t, c, f) = cached_file(1, 0);
        let bump = move |f: &File| -> u8 {
            let o = f.optimistic(0).unwrap();
            let v = o.load_u8(0);
            let r = if wait {
                o.upgrade_or_wait()
            } else {
                o.upgrade()
            };
            match r {
                Ok(mut m) => {
                    assert_eq!(m[0], v, "upgraded a changed page");
                    m[0] = v + 1;
                    1
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Interrupted);
                    0
                }
            }
        };
        let f2 = f.clone();
        let other = thread::spawn(move || bump(&f2));
        let mine = bump(&f);
        let wins = mine + other.join().unwrap();
        assert!(wins >= 1, "both upgrades failed with no writer");
        assert_eq!(f.page(0).unwrap()[0], 1 + wins, "an increment was lost");
        c.validate();
    });
}

/// `try_latch` of a cached page (W1 in one CAS, the clean release's
/// unlatch and unpin in one RMW) against a reader's pin, another
/// `try_latch`, and an optimistic view: two latches never overlap, a pin
/// never sees the page change, a view validated after a clean release
/// (nothing changed) or a dirty one (the byte went 1 -> 2) read what its
/// version promised, and no reference is left behind.
#[test]
fn try_latch_vs_pin_latch_and_view() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let latch = |f: &File, write: bool| -> bool {
            match f.try_latch(0).unwrap() {
                Some(mut m) => {
                    let b = m[0];
                    if write {
                        m[0] = b + 1;
                    }
                    true
                }
                None => false,
            }
        };
        let (fw, fr) = (f.clone(), f.clone());
        let writer = thread::spawn(move || latch(&fw, true));
        let reader = thread::spawn(move || {
            let o = fr.optimistic(0).unwrap();
            let v = o.load_u8(0);
            if o.validate() {
                assert!(v == 1 || v == 2, "validated a torn byte {v}");
            }
            if let Some(p) = fr.try_pin(0).unwrap() {
                let b = p[0];
                thread::yield_now();
                assert_eq!(p[0], b, "pinned page changed");
            }
        });
        let clean = latch(&f, false);
        let wrote = writer.join().unwrap();
        reader.join().unwrap();
        let now = f.page(0).unwrap()[0];
        assert_eq!(now, 1 + wrote as u8, "a latched write lost or doubled");
        let _ = clean;
        assert!(f.try_latch(0).unwrap().is_some(), "a latch or pin leaked");
        c.validate();
    });
}

/// 5.5 vs a pin: pins are latches, so a pinned page never changes under
/// its reader, and the writer waits for the pin to drain.
#[test]
fn pinned_read_vs_write() {
    model(3, || {
        let (_t, c, f) = cached_file(1, 0);
        let fw = f.clone();
        let writer = thread::spawn(move || fw.write_at(&[7u8; 64], 0).unwrap());
        {
            let p = f.page(0).unwrap();
            let first = p[0];
            assert!(first == 1 || first == 7);
            // Hold the pin while the writer runs as far as it can (a loom
            // yield runs the other threads until they block).
            thread::yield_now();
            assert!(p[..64].iter().all(|&b| b == first), "pinned page changed");
        }
        writer.join().unwrap();
        c.validate();
    });
}

/// 5.6 truncate vs lookup: `set_len` removes page 1 while another thread
/// pins it. The pin holds page 1's old bytes (and its release frees the
/// orphaned frame), or zeros, or finds the page past the end; growing the
/// file again reads zeros, never the old bytes.
#[test]
fn truncate_vs_lookup() {
    model(2, || {
        let (_t, c, f) = cached_file(2, 1);
        let f2 = f.clone();
        // The old bytes (pinned before the truncate), zeros (a miss after
        // it: the page is past the end now), or past-the-end.
        let reader = thread::spawn(move || match f2.page(1) {
            Ok(p) => assert!(
                p.iter().all(|&b| b == 2) || p.iter().all(|&b| b == 0),
                "torn or stale page"
            ),
            Err(e) => assert_eq!(e.kind(), ErrorKind::UnexpectedEof),
        });
        f.set_len(PS as u64).unwrap();
        reader.join().unwrap();
        c.validate();
        f.set_len(2 * PS as u64).unwrap();
        assert!(f.page(1).unwrap().iter().all(|&b| b == 0), "stale bytes");
        c.validate();
    });
}

/// 5.6 truncate vs writers on both sides of the cut, through the size
/// lock's range exclusion: `set_len` cuts a three-page file to one page and
/// 100 bytes (exclusive from page 1) while one thread writes page 0, which
/// it does not wait for, and another writes page 2, which it excludes.
/// Page 0 keeps its write; the write of page 2 happened wholly before the
/// cut (gone) or wholly after it (the file regrown to it, zeros between).
#[test]
fn truncate_vs_writes_below_and_past_the_cut() {
    model(2, || {
        let t = TempFile::new(3);
        let c = cache();
        let f = open(&c, &t);
        assert_eq!(f.page(0).unwrap()[0], 1);
        assert_eq!(f.page(2).unwrap()[0], 3);
        let (f0, f2) = (f.clone(), f.clone());
        let low = thread::spawn(move || f0.write_at(&[7u8; 8], 0).unwrap());
        let high = thread::spawn(move || f2.write_at(&[8u8; 8], 2 * PS as u64).unwrap());
        f.set_len(PS as u64 + 100).unwrap();
        low.join().unwrap();
        high.join().unwrap();
        c.validate();
        let len = f.len();
        let mut b = vec![0u8; len as usize];
        f.read_at(&mut b, 0).unwrap();
        assert_eq!(&b[..8], &[7u8; 8], "page 0's write lost");
        assert!(b[8..PS].iter().all(|&x| x == 1));
        assert!(b[PS..PS + 100].iter().all(|&x| x == 2));
        if len == 2 * PS as u64 + 8 {
            assert!(
                b[PS + 100..2 * PS].iter().all(|&x| x == 0),
                "stale bytes past the cut"
            );
            assert_eq!(&b[2 * PS..], &[8u8; 8], "page 2's write lost after the cut");
        } else {
            assert_eq!(len, PS as u64 + 100, "length after the cut");
        }
    });
}

/// 5.6 truncate vs a miss of the new last page: `set_len` cuts page 0 to
/// 100 bytes while another thread reads page 0 into the cache. Whatever the
/// order, the bytes past 100 read as zero afterwards (a fill that began
/// with the old length must not leave them behind), also after regrowth.
#[test]
fn truncate_vs_miss_of_the_new_last_page() {
    model(2, || {
        let t = TempFile::new(2);
        let c = cache();
        let f = open(&c, &t);
        let f2 = f.clone();
        let reader = thread::spawn(move || {
            let p = f2.page(0).unwrap();
            assert!(p[..100].iter().all(|&b| b == 1), "page 0's bytes");
        });
        f.set_len(100).unwrap();
        reader.join().unwrap();
        f.set_len(PS as u64).unwrap();
        let p = f.page(0).unwrap();
        assert!(p[..100].iter().all(|&b| b == 1));
        assert!(p[100..].iter().all(|&b| b == 0), "stale bytes past the cut");
        drop(p);
        c.validate();
    });
}

/// An 8-frame cache: runs of up to two pages (a quarter of the cache), so
/// a read or prefetch of two missing pages is one run read by one I/O.
fn batch_cache() -> PageCache {
    PageCache::new(Config {
        capacity: 8 * PS,
        policy: PolicyKind::Clock,
        pool: PoolKind::Global,
        ..Config::default()
    })
    .unwrap()
}

/// 5.3, asynchronous form (batch.rs), against truncate: a `read_at` of two
/// missing pages inserts both latched and reads them with one I/O while
/// the file is cut into page 1. The reader gets the bytes before the cut,
/// and past it (if its length was the old one) the old bytes or zeros,
/// never a mix; after regrowth the bytes past the cut are zero (a run read
/// with the old length must not leave them).
#[test]
fn batched_miss_vs_truncate() {
    model(2, || {
        let t = TempFile::new(2);
        let c = batch_cache();
        let f = open(&c, &t);
        let f2 = f.clone();
        let reader = thread::spawn(move || {
            let mut b = vec![0u8; 2 * PS];
            let n = f2.read_at(&mut b, 0).unwrap();
            assert!(n == 2 * PS || n == PS + 100, "read {n}");
            assert!(b[..PS].iter().all(|&x| x == 1), "page 0's bytes");
            assert!(b[PS..PS + 100].iter().all(|&x| x == 2), "page 1's bytes");
            // The range being cut reads as the old bytes or as zeros while
            // the truncate runs (its ftruncate comes first; truncate.rs, 1).
            let cut = &b[PS + 100..n];
            assert!(
                cut.iter().all(|&x| x == 2) || cut.iter().all(|&x| x == 0),
                "page 1 mixes old bytes and zeros"
            );
        });
        f.set_len(PS as u64 + 100).unwrap();
        reader.join().unwrap();
        c.validate();
        f.set_len(2 * PS as u64).unwrap();
        let p = f.page(1).unwrap();
        assert!(p[..100].iter().all(|&b| b == 2));
        assert!(p[100..].iter().all(|&b| b == 0), "stale bytes past the cut");
    });
}

/// Completion against lookup against truncate: one thread prefetches two
/// missing pages (a run, completed by the I/O engine: under loom on the
/// submitting thread, as the reaper would), another pins page 1 (parks
/// on its latch, or misses and reads it itself), and the file is cut
/// into page 1. The pin sees page 1's bytes, zero past the cut if it came
/// after; nothing stays latched (`validate`); regrowth reads zeros.
#[test]
fn prefetch_completion_vs_lookup_vs_truncate() {
    model(1, || {
        let t = TempFile::new(2);
        let c = batch_cache();
        let f = open(&c, &t);
        let (fa, fb) = (f.clone(), f.clone());
        let prefetcher = thread::spawn(move || fa.prefetch(0, 2 * PS as u64).unwrap());
        let reader = thread::spawn(move || {
            let p = fb.page(1).unwrap();
            assert!(p[..100].iter().all(|&b| b == 2), "page 1's bytes");
            assert!(
                p[100..].iter().all(|&b| b == 2) || p[100..].iter().all(|&b| b == 0),
                "page 1 mixes old bytes and zeros"
            );
        });
        f.set_len(PS as u64 + 100).unwrap();
        prefetcher.join().unwrap();
        reader.join().unwrap();
        c.validate();
        f.set_len(2 * PS as u64).unwrap();
        let p = f.page(1).unwrap();
        assert!(p[100..].iter().all(|&b| b == 0), "stale bytes past the cut");
    });
}

/// Dirty tags, sync against concurrent dirtying: a `write_at` and a `sync`
/// race. In every interleaving a dirty page is tagged in its index
/// (`validate`), and the next sync writes it to disk.
#[test]
fn dirty_tag_sync_vs_write() {
    model(3, || {
        let (t, c, f) = cached_file(1, 0);
        let fw = f.clone();
        let writer = thread::spawn(move || fw.write_at(&[5u8; 8], 0).unwrap());
        f.sync().unwrap();
        writer.join().unwrap();
        c.validate();
        f.sync().unwrap();
        assert_eq!(&t.bytes()[..8], &[5u8; 8], "a dirty page missed by sync");
        assert_eq!(f.dirty_pages(), 0);
    });
}

/// The flusher against a latch holder: page 0 is dirty and a writer holds
/// its `PageMut` while the flusher's pass over the file runs. The pass never
/// waits for the latch (a throttled writer may hold it): it writes the page
/// or puts back the dirty tag it took. In every interleaving the page is
/// tagged while dirty (`validate`), and the next sync writes the writer's
/// byte. Without the put-back the writer's unlatch of an already dirty page
/// leaves it untagged: `validate` fails and the sync misses it.
#[test]
fn flusher_pass_vs_latch_holder() {
    model(3, || {
        let (t, c, f) = cached_file(1, 0);
        f.write_at(&[5u8; 8], 0).unwrap();
        let fw = f.clone();
        let writer = thread::spawn(move || {
            let mut m = fw.page_mut(0).unwrap();
            m[0] = 7;
        });
        pagecache::internals::background_pass(&f).unwrap();
        writer.join().unwrap();
        c.validate();
        f.sync().unwrap();
        assert_eq!(
            &t.bytes()[..8],
            &[7, 5, 5, 5, 5, 5, 5, 5],
            "the write was lost"
        );
        assert_eq!(f.dirty_pages(), 0);
    });
}

/// A rewrite during write-back (writers do not wait for a write-back's pin
/// unless pages are stable): the cache is full (page 0, dirty, and three
/// anonymous pages), so one thread's miss of page 1 must evict page 0 and
/// writes it back first, while another rewrites page 0 and syncs. The sync
/// may find the page dirty with eviction's older write still in flight: it
/// waits for that write, then writes the new bytes, so whatever the order
/// the disk ends with the rewrite and the page is not lost or evicted
/// dirty (`validate`). The reader may get `OutOfMemory`: while the writer
/// holds page 0's latch every frame is busy (the documented outcome, not
/// what this model is about). About 507 000 executions, 9 minutes: not in
/// CI; `writeback_pin_vs_rewrite` checks the state-word core there.
#[test]
#[ignore = "9 minutes: scripts/loom.sh --ignored rewrite_during"]
fn rewrite_during_eviction_writeback_then_sync() {
    model(1, || {
        let t = TempFile::new(2);
        let c = cache();
        let f = open(&c, &t);
        let anon = c.anon(3 * PS as u64).unwrap();
        for i in 0..3 {
            anon.page_mut(i).unwrap()[0] = 9;
        }
        f.write_at(&[5u8; 8], 0).unwrap();
        let f2 = f.clone();
        let reader = thread::spawn(move || match f2.page(1) {
            Ok(p) => assert_eq!(p[0], 2),
            Err(e) => assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}"),
        });
        f.write_at(&[6u8; 8], 8).unwrap();
        f.sync().unwrap();
        reader.join().unwrap();
        let disk = t.bytes();
        assert_eq!(
            &disk[..16],
            &[[5u8; 8], [6u8; 8]].concat()[..],
            "rewrite lost"
        );
        assert_eq!(disk[16], 1);
        drop(anon);
        c.validate();
    });
}

/// The write-back pin against a writer, on the real state word: a write-back
/// pins a dirty page, starts write-back, "writes" it and ends it, while a
/// writer pins, latches, drains and dirties it. Without stable pages the
/// writer never waits for the write: the write-back thread holds its write
/// open until the writer is done (a drain that counted the write-back's pin
/// would hang it; a lost wake-up in `start_writeback` is invisible here,
/// where parks are yields: the unit test
/// `starting_writeback_wakes_a_writer_parked_on_its_pin` checks it). With stable
/// pages the writer never unlatches while the write is in flight. Either
/// way the rewrite is never lost: the page ends dirty exactly when the
/// writer's change came after the write-back took the page.
#[test]
fn writeback_pin_vs_rewrite() {
    use loom::sync::atomic::AtomicBool;
    use pagecache::internals::state::{FrameDesc, PinFail, PinKind, Released, State};
    for stable in [false, true] {
        model(3, move || {
            let f = Arc::new(FrameDesc::new());
            f.assign(7, 0, State::cached(1));
            // Dirty, as a write leaves it.
            f.try_pin(PinKind::User).unwrap();
            assert!(f.try_latch());
            f.wait_drained();
            let _ = f.unlatch_dirty();
            assert_eq!(f.release(), Released::Alive);
            let done = Arc::new(AtomicBool::new(false));
            let (w, wdone) = (f.clone(), done.clone());
            let writer = thread::spawn(move || {
                // Nobody else latches: the pin and the claim succeed.
                w.try_pin(PinKind::User).unwrap();
                assert!(w.try_latch());
                w.wait_drained();
                let old = w.unlatch_dirty();
                assert_eq!(w.release(), Released::Alive);
                wdone.store(true, Ordering::Release);
                old
            });
            // The write-back: pin (passing a writer still draining), start.
            loop {
                match f.try_pin(PinKind::Writeback) {
                    Ok(_) => break,
                    Err(PinFail::Latched) => assert!(!f.wait_unlatched_as(7, 0)),
                    Err(e) => panic!("{e:?}"),
                }
            }
            assert!(f.start_writeback(stable), "dirty and not under write-back");
            let s = f.snapshot();
            assert!(s.refs() >= 2 && s.is_under_writeback());
            if !stable {
                // The "I/O" lasts until the writer is done.
                while !done.load(Ordering::Acquire) {
                    thread::yield_now();
                }
            }
            let _ = f.end_writeback(false);
            assert_eq!(f.release(), Released::Alive);
            let old = writer.join().unwrap();
            assert!(
                !(stable && old.is_under_writeback()),
                "wrote a stable page in flight"
            );
            let s = f.snapshot();
            // `old` dirty: the writer finished before write-back took the
            // page (its bytes were written); clean: after (dirty again).
            assert_eq!(s.is_dirty(), !old.is_dirty(), "a rewrite was lost");
            assert!(!s.is_under_writeback() && !s.is_latched() && s.refs() == 1);
        });
    }
}

/// One thread's count of its pins (or run pins) of one frame (or leaf
/// slot) and its intent, as `ledger_window.rs` keeps them (intent stored
/// before the RMW, count after a pin and before a release, intent cleared
/// with Release), for the recount models (5.15 P6, P7).
struct Counts {
    intent: loom::sync::atomic::AtomicBool,
    count: loom::sync::atomic::AtomicI64,
}

impl Counts {
    fn new(n: i64) -> Arc<Counts> {
        Arc::new(Counts {
            intent: loom::sync::atomic::AtomicBool::new(false),
            count: loom::sync::atomic::AtomicI64::new(n),
        })
    }

    /// `Area::look` at one table: `None` inside a window.
    fn look(&self) -> Option<i64> {
        if self.intent.load(Ordering::Acquire) {
            return None;
        }
        let n = self.count.load(Ordering::Relaxed);
        loom::sync::atomic::fence(Ordering::Acquire);
        (!self.intent.load(Ordering::Acquire)).then_some(n)
    }

    /// `Window::open`, `RunWindow::open`.
    fn open(&self) {
        self.intent.store(true, Ordering::Release);
        loom::sync::atomic::fence(Ordering::Release);
    }

    fn add(&self, d: i64) {
        let n = self.count.load(Ordering::Relaxed);
        self.count.store(n + d, Ordering::Relaxed);
    }

    fn close(&self) {
        self.intent.store(false, Ordering::Release);
    }

    /// The recount models' verdict, with threads B and C joined: the
    /// recount dropped the dead pin (`dropped`: `Some(1)`) or nothing
    /// (`None`), never a live one; after one that held, the next finds
    /// nothing (`again`, that one's verdict); and the pins held now
    /// (`held`, beyond the cache's reference) are the live ones B and C
    /// count, and the dead one if it stays.
    fn verdict(
        b: &Counts,
        c: &Counts,
        dropped: Option<u64>,
        again: impl FnOnce() -> bool,
        held: impl FnOnce() -> i64,
    ) {
        assert!(
            matches!(dropped, None | Some(1)),
            "dropped {dropped:?}: the dead pin is one"
        );
        if dropped.is_some() {
            assert!(again(), "a second recount dropped something");
        }
        let live = b.count.load(Ordering::Relaxed) + c.count.load(Ordering::Relaxed);
        let dead = if dropped.is_some() { 0 } else { 1 };
        assert_eq!(held(), live + dead);
    }
}

/// 5.15 P6: the recount of a frame a dead process pinned uncounted (its
/// reference among the frame's three: the cache's, one pin counted by
/// thread B, the dead one's), while B takes another pin (a clone, or a
/// new pin) and thread C of B's process releases one (a pin moving from
/// one thread's count to another's, the count ending where it started).
/// Each thread's count and intent are modelled by `Counts`; the frame is
/// the real descriptor. The recount drops the dead pin or nothing, never a live
/// one: without `MARK` cleared by the pin's CAS, loom finds it dropping
/// two (B's count read before its pin, C's after its release).
#[test]
fn recount_vs_a_pin_taken_and_one_released() {
    use pagecache::internals::state::{FrameDesc, Held, PinKind, Released, State};
    for clone in [true, false] {
        model(3, move || {
            let f = Arc::new(FrameDesc::new());
            f.assign(7, 0, State::cached(3));
            let (b, c) = (Counts::new(1), Counts::new(0));
            let (fb, bb) = (f.clone(), b.clone());
            let tb = thread::spawn(move || {
                bb.open();
                if clone {
                    fb.pin_more();
                } else {
                    fb.try_pin(PinKind::User).unwrap();
                }
                bb.add(1);
                bb.close();
            });
            let (fc, cc) = (f.clone(), c.clone());
            let tc = thread::spawn(move || {
                cc.open();
                cc.add(-1);
                assert_eq!(fc.release(), Released::Alive);
                cc.close();
            });
            let dropped = f
                .drop_uncounted(Held::Indexed, || Some(b.look()? + c.look()?))
                .map(|(n, _)| n);
            tb.join().unwrap();
            tc.join().unwrap();
            Counts::verdict(
                &b,
                &c,
                dropped,
                || {
                    f.drop_uncounted(Held::Indexed, || Some(b.look()? + c.look()?))
                        == Some((0, false))
                },
                || f.snapshot().refs() as i64 - 1,
            );
        });
    }
}

/// 5.15 P7: the recount of a leaf slot a dead process pinned with a run
/// uncounted (two pins on the slot: the dead one, one counted by thread
/// B), while B runs over the slot again and thread C of B's process ends
/// a run (one run's pin moving from one thread's count to another's).
/// The counts and windows are modelled as in the frame model above; the
/// leaf's pin word is the real one. The recount drops the dead pin or
/// nothing, never a live one: with `MARK` cleared by neither R1's CAS nor
/// R4's RMW, loom finds it dropping two (B's count read before its run's
/// pin, C's after its unpin: the word back where it was). Either one
/// clearing it is enough (the word comes back to what was marked only
/// through both); both do.
#[test]
fn run_recount_vs_a_run_taken_and_one_ended() {
    use pagecache::internals::nodes::Node;
    model(3, || {
        let leaf = Arc::new(Node::empty());
        assert!(leaf.pin_slots(0, 1) && leaf.pin_slots(0, 1));
        let (b, c) = (Counts::new(1), Counts::new(0));
        let (lb, bb) = (leaf.clone(), b.clone());
        let tb = thread::spawn(move || {
            bb.open();
            assert!(lb.pin_slots(0, 1));
            bb.add(1);
            bb.close();
        });
        let (lc, cc) = (leaf.clone(), c.clone());
        let tc = thread::spawn(move || {
            cc.open();
            cc.add(-1);
            lc.unpin_slots(0, 1);
            cc.close();
        });
        // Slot 0's pins beyond B's and C's counts are dropped (`Some(1)`:
        // one pin of slot 0).
        let recount = || {
            let w0 = leaf.mark_word(0);
            let counted = b.look()? + c.look()?;
            leaf.drop_word_pins(0, w0, |_| counted)
        };
        let dropped = recount();
        tb.join().unwrap();
        tc.join().unwrap();
        Counts::verdict(
            &b,
            &c,
            dropped,
            || recount() == Some(0),
            || leaf.slot_pins(0) as i64,
        );
    });
}

/// 5.7 vs 5.5: a run (one leaf pin, no pin of the frame) holds page 0
/// while another thread writes it. The run's bytes never change while it
/// lives: the writer waits for it (W2-W3), or the run saw the latch and
/// took a pin of its own after the write. Drops either SeqCst fence (R1 or
/// W2) and loom finds the write under the run.
#[test]
fn run_vs_write() {
    model(3, || {
        let (_t, c, f) = cached_file(1, 0);
        let fw = f.clone();
        let writer = thread::spawn(move || fw.write_at(&[7u8; 64], 0).unwrap());
        {
            let run = f.run(0, 1).unwrap();
            assert_eq!(run.len(), 1);
            let first = run.page(0)[0];
            assert!(first == 1 || first == 7);
            // Let the writer run as far as it can while the run lives.
            thread::yield_now();
            assert!(
                run.page(0)[..64].iter().all(|&b| b == first),
                "page changed under a run"
            );
        }
        writer.join().unwrap();
        let mut buf = [0u8; 64];
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, [7; 64]);
        c.validate();
    });
}

/// 5.7 vs 5.2: the cache is full (two file pages, two anonymous pages) and
/// a run holds page 0 while another thread misses page 2, which must evict.
/// The evictor puts page 0 back when it sees the run (E2-E3) and takes page
/// 1: the run's frame is never reused under it.
#[test]
fn run_vs_eviction() {
    model(1, || {
        let (_t, c, f, anon) = full_cache();
        let f2 = f.clone();
        let other = thread::spawn(move || {
            let p = f2.page(2).unwrap();
            assert!(p.iter().all(|&b| b == 3));
        });
        {
            let run = f.run(0, 1).unwrap();
            assert!(run.page(0).iter().all(|&b| b == 1));
            thread::yield_now();
            assert!(
                run.page(0).iter().all(|&b| b == 1),
                "a run's frame was reused"
            );
        }
        other.join().unwrap();
        drop(anon);
        c.validate();
    });
}

/// 5.7 vs 5.6: a run holds pages 0-1 while `set_len(0)` removes both, which
/// also empties their leaf, and a write of page 0 then takes a free frame.
/// The truncate does not wait: the run keeps the old bytes (T3 keeps the
/// frames until the run ends, F2 keeps the leaf), and after it the frames
/// are free, the leaf pruned (`validate`), and the regrown page 1 reads
/// zeros. Drop T2's fence and loom finds a frame reused under the run.
#[test]
fn run_vs_truncate() {
    model(2, || {
        let (_t, c, f) = cached_file(2, 1);
        assert_eq!(f.page(0).unwrap()[0], 1);
        let f2 = f.clone();
        // Then a write that takes a free frame: one the truncate freed too
        // early would be reused under the run.
        let trunc = thread::spawn(move || {
            f2.set_len(0).unwrap();
            f2.write_at(&[9u8; PS], 0).unwrap();
        });
        {
            let run = f.run(0, 2).unwrap();
            let firsts: Vec<u8> = run.iter().map(|p| p[0]).collect();
            for (k, p) in run.iter().enumerate() {
                // The old bytes, zeros read after the file was cut, or
                // page 0 as written after.
                let v = firsts[k];
                assert!(v == k as u8 + 1 || v == 0 || (k == 0 && v == 9), "{v}");
                assert!(p.iter().all(|&b| b == firsts[k]), "torn page");
            }
            thread::yield_now();
            for (k, p) in run.iter().enumerate() {
                assert!(p.iter().all(|&b| b == firsts[k]), "page lost under a run");
            }
        }
        trunc.join().unwrap();
        c.validate();
        f.set_len(2 * PS as u64).unwrap();
        assert!(f.page(0).unwrap().iter().all(|&b| b == 9));
        assert!(f.page(1).unwrap().iter().all(|&b| b == 0), "stale bytes");
        c.validate();
    });
}

/// 5.7 vs 5.6 and a new page in the truncated slot: one thread cuts the
/// file to nothing and writes page 0 twice (a miss that puts a new page in
/// the slot, then a hit that latches it: W2), while a run takes page 0.
/// The run holds the old page, the new one, zeros read while the file was
/// being cut, or nothing; whichever it holds does not change under it. Drop R3's `STALE` check and loom finds the
/// second write under a run that took the new page while the slot was
/// stale (the writer went on: W2 read `STALE`).
#[test]
fn run_vs_truncate_and_rewrite() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let f2 = f.clone();
        let t = thread::spawn(move || {
            f2.set_len(0).unwrap();
            f2.write_at(&[9u8; 64], 0).unwrap();
            f2.write_at(&[8u8; 64], 0).unwrap();
        });
        {
            let run = f.run(0, 1).unwrap();
            if !run.is_empty() {
                let first = run.page(0)[0];
                // The old bytes, zeros read from disk after the file was
                // cut (before its length was stored), or a new page.
                assert!(matches!(first, 1 | 0 | 9 | 8), "{first}");
                thread::yield_now();
                assert!(
                    run.page(0)[..64].iter().all(|&b| b == first),
                    "page changed under a run"
                );
            }
        }
        t.join().unwrap();
        let mut buf = [0u8; 64];
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, [8; 64]);
        c.validate();
    });
}

/// The holder of a run over a page that another thread truncates writes
/// the new page at that index, twice, with the run still held: the run
/// keeps the old bytes and the writes do not wait for it (the slot's pins
/// are `STALE`). Without `STALE` the second write waits for its own run:
/// loom reports the endless wait.
#[test]
fn run_holder_rewrites_a_truncated_page() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let run = f.run(0, 1).unwrap();
        assert_eq!(run.len(), 1);
        let f2 = f.clone();
        let t = thread::spawn(move || f2.set_len(0).unwrap());
        t.join().unwrap();
        f.write_at(&[9u8; 64], 0).unwrap();
        f.write_at(&[8u8; 64], 0).unwrap();
        assert!(
            run.page(0).iter().all(|&b| b == 1),
            "the run's old page changed"
        );
        drop(run);
        let mut buf = [0u8; 64];
        f.read_at(&mut buf, 0).unwrap();
        assert_eq!(buf, [8; 64]);
        c.validate();
    });
}

/// `discard` against eviction's write-back of the page it drops: the cache
/// is full (a dirty page 0 of file `f`, page 0 of file `h` pinned, two
/// anonymous pages), one thread misses page 1 of `h`, which must write
/// `f`'s page 0 back to evict it, while the other discards `f`. Whatever
/// the disk holds when `discard` returns, it still holds after the miss:
/// no write of a discarded page lands after the discard. Remove the wait
/// from `discard`, or count eviction's write-back only after its start,
/// and loom finds the write landing later.
///
/// Ignored: it found two false `OutOfMemory` windows (a frame between a
/// discard's last release and the pool; a discard that ended between the
/// look at the frames and the last try), both fixed (`Inner::freeing`, the
/// last try after the look), and then exceeds loom's limits: past 20 000
/// branches, and with `LOOM_MAX_BRANCHES=200000` one thread passes 65 535
/// operations in an execution (loom's version counter overflows), a retry
/// loop not identified yet (not the reclaim or write-back waits, which
/// were instrumented). Run by hand: `scripts/loom.sh --ignored discard_vs`.
#[test]
#[ignore = "exceeds loom's limits; see the doc comment"]
fn discard_vs_eviction_writeback() {
    model(2, || {
        let tf = TempFile::new(1);
        let th = TempFile::new(2);
        let c = cache();
        let anon = c.anon(2 * PS as u64).unwrap();
        anon.page_mut(0).unwrap()[0] = 9;
        anon.page_mut(1).unwrap()[0] = 9;
        let f = open(&c, &tf);
        f.write_at(&[7u8; 64], 0).unwrap(); // dirty
        let h = open(&c, &th);
        let evictor = thread::spawn(move || {
            let pinned = h.page(0).unwrap();
            assert_eq!(pinned[0], 1);
            // Needs a frame: only f's dirty page 0 can be evicted.
            match h.page(1) {
                Ok(p) => assert_eq!(p[0], 2),
                // Discarded first, then nothing is evictable but a
                // frame freed by the discard: it must not fail.
                Err(e) => panic!("miss after discard: {e}"),
            }
            drop(pinned);
        });
        assert!(f.discard());
        let after_discard = tf.bytes();
        evictor.join().unwrap();
        assert_eq!(
            tf.bytes(),
            after_discard,
            "a discarded page was written after discard returned"
        );
        drop(anon);
        c.validate();
    });
}

/// Dirty tags against growth: one thread dirties page 0 while another
/// writes page 64, which grows the tree (a new root above the old one).
/// The tag of page 0 is reachable from the new root in every interleaving
/// (`validate`), so the sync writes both pages.
#[test]
fn dirty_tag_vs_growth() {
    model(2, || {
        let (t, c, f) = cached_file(1, 0);
        let fw = f.clone();
        let writer = thread::spawn(move || fw.write_at(&[5u8; 8], 0).unwrap());
        f.write_at(&[6u8; 8], 64 * PS as u64).unwrap();
        writer.join().unwrap();
        c.validate();
        f.sync().unwrap();
        let disk = t.bytes();
        assert_eq!(&disk[..8], &[5u8; 8], "page 0's tag lost in growth");
        assert_eq!(&disk[64 * PS..64 * PS + 8], &[6u8; 8]);
    });
}

/// Anonymous first touch vs free: two threads touch page 0 of a region
/// (each may allocate, zero and try to publish a frame; one CAS wins, the
/// loser undoes) while a third frees it. Every touch sees zeros or its own
/// write's effects, and every frame is cached, anonymous or free at the end.
#[test]
fn anon_first_touch_vs_free() {
    model(2, || {
        let c = cache();
        let r = Arc::new(c.anon(PS as u64).unwrap());
        let r2 = r.clone();
        let toucher = thread::spawn(move || {
            // Zeros, or the other thread's write (byte 0 only).
            let p = r2.page(0).unwrap();
            assert!(p[0] <= 1 && p[1..].iter().all(|&b| b == 0), "not zero");
        });
        let r3 = r.clone();
        let freer = thread::spawn(move || r3.free(0..1));
        {
            let mut p = r.page_mut(0).unwrap();
            assert!(p.iter().all(|&b| b == 0), "first touch not zero");
            p[0] = 1;
        }
        toucher.join().unwrap();
        freer.join().unwrap();
        assert!(r.resident() <= 1);
        let r: AnonRegion = Arc::try_unwrap(r).unwrap();
        drop(r);
        c.validate();
        assert_eq!(c.free_frames(), 4, "a frame leaked");
    });
}

/// Anonymous first touch, the ABA case: a toucher holds a stale slot entry
/// for frame X while X is freed and taken again by a second toucher of the
/// same page, who then loses the publishing race to a third. The stale
/// toucher may pin X (same identity), so the loser must undo through the
/// release path (not reset X under that pin), and the toucher must re-check
/// the slot (or it writes into a frame that is not the page). Checked: a
/// touch sees the page before the free (7) or after it (zeros, or the
/// stale toucher's 1); a write to the page after the free is never lost;
/// no frame leaks.
#[test]
fn anon_fault_loser_vs_stale_pin() {
    model(2, || {
        let c = cache();
        let r = Arc::new(c.anon(PS as u64).unwrap());
        r.page_mut(0).unwrap()[0] = 7; // X published, holding 7
        let seen = |v: u8| assert!(v == 7 || v <= 1, "saw {v}");
        let r1 = r.clone();
        let stale = thread::spawn(move || {
            let mut p = r1.page_mut(0).unwrap();
            let v = p[0];
            seen(v);
            p[0] = 1;
            v != 7 // wrote to the page after the free
        });
        let r2 = r.clone();
        let refault = thread::spawn(move || {
            r2.free(0..1);
            seen(r2.page(0).unwrap()[0]);
        });
        seen(r.page(0).unwrap()[0]);
        let wrote_after_free = stale.join().unwrap();
        refault.join().unwrap();
        if wrote_after_free {
            assert_eq!(r.page(0).unwrap()[0], 1, "a write after the free was lost");
        }
        drop(Arc::try_unwrap(r).unwrap());
        c.validate();
        assert_eq!(c.free_frames(), 4, "a frame leaked");
    });
}

/// The index node arena's free list (protocol 5.12, a tagged stack): two
/// threads popping and pushing at once never hold one id both, lose none,
/// and the tag defeats ABA (thread 0 pops, frees and re-pops while thread 1
/// sits between P2 and P3 on the same top).
#[test]
fn node_free_list() {
    use loom::sync::atomic::AtomicBool;
    use pagecache::internals::nodes::NodeArena;
    const N: u32 = 3;
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let a = Arc::new(NodeArena::new(N).unwrap());
        // Two ids on the free list, one never used.
        let (x, y) = (a.alloc().unwrap(), a.alloc().unwrap());
        a.free_node(x);
        a.free_node(y);
        let held: Arc<Vec<AtomicBool>> =
            Arc::new((0..=N).map(|_| AtomicBool::new(false)).collect());
        let take = |a: &NodeArena, h: &[AtomicBool]| {
            let id = a.alloc().unwrap();
            assert!(
                !h[id as usize].swap(true, Ordering::SeqCst),
                "node {id} handed out twice"
            );
            id
        };
        let give = |a: &NodeArena, h: &[AtomicBool], id: u32| {
            assert!(
                h[id as usize].swap(false, Ordering::SeqCst),
                "node {id} not held"
            );
            a.free_node(id);
        };
        let (a2, h2) = (a.clone(), held.clone());
        let t = thread::spawn(move || {
            let i = take(&a2, &h2);
            give(&a2, &h2, i);
        });
        let i = take(&a, &held);
        let j = take(&a, &held);
        give(&a, &held, i);
        let k = take(&a, &held);
        give(&a, &held, j);
        give(&a, &held, k);
        t.join().unwrap();
        assert_eq!(a.in_use(), 0, "a node lost");
        // All three allocatable now, distinct.
        let all: Vec<u32> = (0..N).map(|_| take(&a, &held)).collect();
        assert_eq!(all.len(), N as usize);
        assert!(a.alloc().is_err(), "more ids than nodes");
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

/// 5.15 P8c: a census of the pool (every stack locked) against a live
/// process taking frames, refilling its shard from the global stack,
/// stealing from another shard and freeing: it finds exactly what a dead
/// process left (a frame it took, a batch it was moving between two
/// stacks), never a frame the live one holds or moves, and afterwards
/// every frame is free once.
#[test]
fn census_vs_a_live_process_in_the_pool() {
    use pagecache::internals::alloc::{FrameAllocator, Hand, PerCpuPool};
    use pagecache::internals::state::{FrameDesc, HOLDER_SHIFT};
    const N: usize = 4;
    let (live, dead) = (1u64 << HOLDER_SHIFT, 2u64 << HOLDER_SHIFT);
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(move || {
        let descs: Arc<Vec<FrameDesc>> = Arc::new((0..N).map(|_| FrameDesc::new()).collect());
        // SAFETY: `descs` outlives the pool (each thread holds both).
        let hand = unsafe { Hand::new(&descs[0], N, live) };
        let p = Arc::new(PerCpuPool::with_shards(N, 2).with_hand(hand));
        // The dead process: a frame taken, a batch (one frame) taken off
        // the global stack and pushed nowhere.
        let x = p.alloc_as(0, dead).unwrap();
        assert_eq!(p.take_batch(), 1);
        let (p2, d2) = (p.clone(), descs.clone());
        let t = thread::spawn(move || {
            // Refills from the global stack, then steals from shard 0.
            let got: Vec<u32> = (0..3).filter_map(|_| p2.alloc_on(1)).collect();
            for &f in &got {
                assert_eq!(d2[f as usize].snapshot().latch_holder(), 1, "held, named");
            }
            for f in got {
                p2.free_on(0, f);
            }
        });
        let found = p.census(|d| d.lost_in_hand(2));
        t.join().unwrap();
        assert_eq!(found.len(), 2, "the dead one's frame and batch: {found:?}");
        assert!(found.contains(&x), "its frame {x}: {found:?}");
        for f in found {
            assert_eq!(
                descs[f as usize].snapshot().latch_holder(),
                1,
                "marked the census taker's (the pool's process)"
            );
            p.free_on(0, f);
        }
        assert_eq!(p.free_count(), N, "no frame lost");
        p.validate(N);
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

/// S3-FIFO's cold end: a flusher on another CPU puts a copy of a page it
/// wrote for reclaim into its own shard while a reclaimer evicts from its
/// shard (reading the other's copy-count hint, relaxed). Whether or not the
/// reclaimer sees the copy, every page is evicted exactly once (a second
/// entry of an evicted frame is judged Gone, as `S3Fifo::live` would) and
/// nothing stays queued but stale copies.
#[test]
fn replacement_cold_end_copy_from_another_shard() {
    use pagecache::internals::s3fifo::{Entry, Queues, Verdict, BATCH};
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let q = Arc::new(Queues::new(2, 64));
        let n = BATCH as u32; // one full batch: admitted to shard 0 at once
        for f in 0..n {
            q.submit(
                0,
                Entry {
                    frame: f,
                    key: f as u64,
                },
                |_| true,
            );
        }
        let q2 = q.clone();
        let flusher = thread::spawn(move || q2.written(1, Entry { frame: 5, key: 5 }));
        let mut evicted: Vec<Entry> = Vec::new();
        let mut gone = std::collections::HashSet::new();
        let judge = |e: &Entry, gone: &std::collections::HashSet<u32>| {
            if gone.contains(&e.frame) {
                Verdict::Gone
            } else {
                Verdict::Cold
            }
        };
        let mut out = Vec::new();
        q.evict(0, &mut out, 1, 64, |e| judge(e, &gone));
        gone.extend(out.iter().map(|e| e.frame));
        evicted.extend(out);
        flusher.join().unwrap();
        let mut out = Vec::new();
        q.evict(0, &mut out, n as usize, 4 * n as usize, |e| judge(e, &gone));
        gone.extend(out.iter().map(|e| e.frame));
        evicted.extend(out);
        let mut seen: Vec<u32> = evicted.iter().map(|e| e.frame).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..n).collect::<Vec<_>>(), "every page once");
        // What is left is stale: a last call finds nothing to evict.
        let mut out = Vec::new();
        q.evict(0, &mut out, n as usize, 4 * n as usize, |e| judge(e, &gone));
        assert!(out.is_empty() && q.is_empty(), "stale entries dropped");
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

/// The flusher's pass handshake (`reclaim/passes.rs`, T1-T5 and F1-F4): a
/// writer throttled past the dirty limit, another kicker (reclaim) and a
/// flusher whose passes never write anything (the hook defers every page,
/// or the disk fails). The writer must leave on the first pass that ends
/// after it began (no progress), whichever kick started that pass: loom's
/// timed waits never time out, so a pass the writer misses leaves it
/// waiting with the flusher idle, a deadlock loom reports. (With the pass
/// count read after the writer's kick, it finds one.)
#[test]
fn throttled_writer_vs_flusher_passes() {
    use pagecache::internals::passes::{Passes, Throttled};
    model(3, || {
        let p = Arc::new(Passes::new());
        let flusher = {
            let p = p.clone();
            thread::spawn(move || {
                // F1-F3 as `cache::flusher` runs them, with passes that
                // write nothing.
                while p.wait_kick() {
                    if !p.end_pass(false) {
                        break;
                    }
                }
            })
        };
        let reclaim = {
            let p = p.clone();
            thread::spawn(move || {
                p.kick(|| None);
            })
        };
        let why = p.throttle(
            || true,
            || {
                p.kick(|| None);
            },
            std::time::Duration::from_secs(2),
        );
        assert_eq!(why, Throttled::NoProgress);
        reclaim.join().unwrap();
        assert!(p.stop().is_none());
        flusher.join().unwrap();
    });
}

/// The size lock's range exclusion (`size_lock.rs`, S1-S5 and X1-X6): a
/// holder of page 5 and one of page 1 against an exclusive holder from
/// page 3. The page-5 holder and the exclusive one touch the same memory
/// in their critical sections, so loom reports any interleaving in which
/// they overlap (without S2's or X4's fence, it finds one); the page-1
/// holder touches memory of its own and is never waited for.
#[test]
fn size_lock_excludes_holders_that_reach_the_cut() {
    use loom::cell::UnsafeCell;
    use pagecache::internals::size_lock::SizeLock;
    model(3, || {
        let lock = Arc::new(SizeLock::with_shards(1));
        let cut = Arc::new(UnsafeCell::new(0u32));
        let high = {
            let (lock, cut) = (lock.clone(), cut.clone());
            thread::spawn(move || {
                let _g = lock.read(5);
                // SAFETY: loom checks that no other access overlaps.
                cut.with_mut(|p| unsafe { *p += 1 });
            })
        };
        let low = {
            let lock = lock.clone();
            thread::spawn(move || {
                let mine = UnsafeCell::new(0u32);
                let _g = lock.read(1);
                // SAFETY: this thread's own cell.
                mine.with_mut(|p| unsafe { *p += 1 });
            })
        };
        {
            let _x = lock.write(|| 3);
            // SAFETY: loom checks that no other access overlaps.
            cut.with_mut(|p| unsafe { *p += 10 });
        }
        high.join().unwrap();
        low.join().unwrap();
        // SAFETY: both threads joined.
        assert_eq!(cut.with(|p| unsafe { *p }), 11);
    });
}

/// Drives `fut` on this model thread, sleeping between polls until its
/// waker runs: a lost wake-up leaves it asleep for good, which loom
/// reports as a deadlock. (Loom's own `block_on` may wake spuriously,
/// which would hide exactly that.)
fn block_on<F: std::future::Future>(fut: F) -> F::Output {
    // A flag under a mutex and a condition variable (loom's wait has no
    // spurious returns; its thread unpark can drop the token of a thread
    // that just yielded).
    #[derive(Default)]
    struct Flag {
        woken: loom::sync::Mutex<bool>,
        cv: loom::sync::Condvar,
    }
    impl std::task::Wake for Flag {
        fn wake(self: std::sync::Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            *self.woken.lock().unwrap() = true;
            self.cv.notify_one();
        }
    }
    let flag = std::sync::Arc::new(Flag::default());
    let waker = std::task::Waker::from(flag.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let std::task::Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        let mut w = flag.woken.lock().unwrap();
        while !*w {
            w = flag.cv.wait(w).unwrap();
        }
        *w = false;
    }
}

/// 5.9 "waker registered vs read completing": a future wants page 0 while
/// a blocking reader misses it (inserts it latched, reads, unlatches). The
/// future meets the latch and registers (A1-A3), or misses first and reads
/// it itself, or hits; in every interleaving it is woken and gets the
/// page's bytes (a lost wake-up is a deadlock loom reports: `block_on`
/// parks until woken). Fails with A3's re-check under the queue's lock
/// removed.
#[test]
fn async_waiter_vs_completion() {
    model(2, || {
        let t = TempFile::new(1);
        let c = cache();
        let f = open(&c, &t);
        let f2 = f.clone();
        let reader = thread::spawn(move || f2.page(0).unwrap()[1]);
        // The reader may run first without spending a preemption: the
        // bound then covers a switch after its insert and one inside A.
        thread::yield_now();
        let p = block_on(f.page_async(0)).unwrap();
        assert!(p.iter().all(|&b| b == 1), "page 0's bytes");
        drop(p);
        assert_eq!(reader.join().unwrap(), 1);
        assert_eq!(c.stats().reads, 1, "one read for two misses");
        c.validate();
    });
}

/// 5.9 against a writer: a future reads page 0 while a `PageMut` holder
/// rewrites it. The future sees the old bytes or the new, whole, and is
/// woken if it waited for the latch.
#[test]
fn async_waiter_vs_writer() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let f2 = f.clone();
        let writer = thread::spawn(move || {
            let mut m = f2.page_mut(0).unwrap();
            m.fill(7);
        });
        let p = block_on(f.page_async(0)).unwrap();
        assert!(
            p.iter().all(|&b| b == 1) || p.iter().all(|&b| b == 7),
            "a torn page"
        );
        drop(p);
        writer.join().unwrap();
        c.validate();
    });
}

/// 5.9 with 5.7: a future latches page 0 (`page_mut_async`) while a run
/// on another thread holds it. The run's bytes never change while it
/// lives: the future waits for it as a future (W3: the slot's waiter bit,
/// the fence, the re-check, its waker on the slot's key, which the run's
/// R4 wakes), or the run saw the latch. A lost wake-up is a deadlock loom
/// reports (`block_on` sleeps until woken).
#[test]
fn async_writer_vs_run() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let fr = f.clone();
        let reader = thread::spawn(move || {
            let run = fr.run(0, 1).unwrap();
            if run.len() == 1 {
                let first = run.page(0)[0];
                thread::yield_now();
                assert!(
                    run.page(0).iter().all(|&b| b == first),
                    "page changed under a run"
                );
            }
        });
        {
            let mut m = block_on(f.page_mut_async(0)).unwrap();
            m.fill(7);
        }
        reader.join().unwrap();
        assert!(f.page(0).unwrap().iter().all(|&b| b == 7));
        c.validate();
    });
}

/// 5.9 with the size lock: `write_at_async` extends a file by a page
/// while another thread cuts it back (`set_len`). The write takes the
/// size lock within one poll (`SizeLock::poll_read`; refused, its waker
/// waits on the phase's key, woken by X6): either the cut comes after the
/// write (one page, the write's bytes gone with it) or before (two pages,
/// the second the write's), never a length of two pages with the second
/// page lost.
#[test]
fn async_write_vs_set_len() {
    model(2, || {
        let (_t, c, f) = cached_file(1, 0);
        let fc = f.clone();
        let cutter = thread::spawn(move || fc.set_len(PS as u64).unwrap());
        block_on(f.write_at_async(&[7u8; 64], PS as u64 + 8)).unwrap();
        cutter.join().unwrap();
        let len = f.len();
        assert!(len == PS as u64 || len == PS as u64 + 72, "length {len}");
        if len > PS as u64 {
            let mut buf = [0u8; 64];
            f.read_at(&mut buf, PS as u64 + 8).unwrap();
            assert_eq!(buf, [7; 64], "the write lost under a cut");
        }
        c.validate();
    });
}

/// 5.9 "future dropped vs read completing": a future misses page 0 (its
/// read waits for the model's reaper thread), is polled once and dropped;
/// a second future wants the same page (meets the latch and waits, or
/// misses first and its read is the one in flight); the reaper completes
/// the reads meanwhile. The dropped future's pin is given back whichever
/// comes first (D vs H1), the other future is woken and gets the bytes,
/// and afterwards nothing is pinned or latched and every frame is free or
/// cached. Fails with the dropped-slot check of H1 removed.
#[test]
fn async_drop_vs_completion() {
    use std::future::Future;
    model(2, || {
        let t = TempFile::new(1);
        let c = Arc::new(cache());
        let f = open(&c, &t);
        pagecache::internals::defer_io(&c, true);
        let done = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let (c2, done2) = (c.clone(), done.clone());
        let reaper = thread::spawn(move || {
            while done2.load(Ordering::Acquire) < 2 {
                if pagecache::internals::run_deferred_io(&c2) == 0 {
                    thread::yield_now();
                }
            }
        });
        let (f2, done3) = (f.clone(), done.clone());
        let waiter = thread::spawn(move || {
            let p = block_on(f2.page_async(0)).unwrap();
            assert!(p.iter().all(|&b| b == 1), "page 0's bytes");
            drop(p);
            done3.fetch_add(1, Ordering::Release);
        });
        {
            let mut fut = Box::pin(f.page_async(0));
            struct Noop;
            impl std::task::Wake for Noop {
                fn wake(self: std::sync::Arc<Self>) {}
            }
            let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
            let mut cx = std::task::Context::from_waker(&waker);
            if let std::task::Poll::Ready(p) = fut.as_mut().poll(&mut cx) {
                assert!(p.unwrap().iter().all(|&b| b == 1));
            }
            drop(fut);
        }
        done.fetch_add(1, Ordering::Release);
        waiter.join().unwrap();
        reaper.join().unwrap();
        pagecache::internals::run_deferred_io(&c);
        c.validate();
        let m = f.try_latch(0).unwrap();
        assert!(m.is_some(), "page 0 still pinned or latched");
    });
}
