//! Optimistic access (protocol 5.8), `try_pin`/`try_latch`, `page_new` and
//! the clean release of an unchanged `PageMut`.

mod common;
use common::*;
use pagecache::{File, OpenOptions, PageCache};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;

fn open(c: &PageCache, d: &TempDir, name: &str, pages: u64) -> File {
    let p = d.path(name);
    make_file(&p, pages * PS as u64);
    c.open_with(&p, OpenOptions::new().read(true).write(true))
        .unwrap()
}

fn create(c: &PageCache, d: &TempDir, name: &str) -> File {
    c.open_with(
        d.path(name),
        OpenOptions::new().read(true).write(true).create(true),
    )
    .unwrap()
}

#[test]
fn a_view_reads_the_page_and_validates_until_a_writer_changes_it() {
    let d = TempDir::new("opt-basic");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 4);
    // A miss reads the page in first.
    let o = f.optimistic(2).unwrap();
    assert_eq!(c.stats().reads, 1);
    let mut want = [0u8; 8];
    for (i, b) in want.iter_mut().enumerate() {
        *b = pattern(2 * PS as u64 + 16 + i as u64);
    }
    assert_eq!(o.load_u64(16), u64::from_ne_bytes(want));
    assert_eq!(o.load_u8(PS - 1), pattern(3 * PS as u64 - 1));
    assert_eq!(
        o.load_u32(1),
        u32::from_ne_bytes(std::array::from_fn(|i| pattern(
            2 * PS as u64 + 1 + i as u64
        )))
    );
    let mut buf = vec![0u8; PS];
    o.copy_to(0, &mut buf);
    assert!(buf
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(2 * PS as u64 + i as u64)));
    assert!(o.validate());
    // A hit: no read.
    let o2 = f.optimistic(2).unwrap();
    assert!(o2.validate());
    assert_eq!(c.stats().reads, 1);
    // A write of another page does not disturb it.
    f.write_at(&[1; 10], 0).unwrap();
    assert!(o.validate());
    // A write of this page does.
    f.write_at(&[1; 10], 2 * PS as u64 + 100).unwrap();
    assert!(!o.validate());
    assert!(!o2.validate());
    assert_eq!(
        o.upgrade().unwrap_err().kind(),
        ErrorKind::Interrupted,
        "an upgrade of a changed view must fail"
    );
    // A fresh view sees the write.
    let o = f.optimistic(2).unwrap();
    assert_eq!(o.load_u8(100), 1);
    assert!(o.validate());
}

#[test]
fn an_upgrade_of_an_unchanged_view_latches_the_page() {
    let d = TempDir::new("opt-upgrade");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 2);
    let o = f.optimistic(1).unwrap();
    let old = o.load_u8(0);
    let mut m = o.upgrade().unwrap();
    assert_eq!(m[0], old);
    m[0] = old.wrapping_add(1);
    drop(m);
    assert_eq!(f.dirty_pages(), 1);
    let mut b = [0u8; 1];
    f.read_at(&mut b, PS as u64).unwrap();
    assert_eq!(b[0], old.wrapping_add(1));
    f.sync().unwrap();
    assert_eq!(std::fs::read(d.path("f")).unwrap()[PS], old.wrapping_add(1));
}

#[test]
fn a_view_of_an_evicted_or_truncated_page_fails_validation_and_stays_readable() {
    let d = TempDir::new("opt-evict");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 64);
    let o = f.optimistic(0).unwrap();
    assert!(o.validate());
    // Read every other page: page 0's frame is evicted and reused.
    let mut buf = vec![0u8; PS];
    for i in 1..64 {
        f.read_at(&mut buf, i * PS as u64).unwrap();
    }
    assert!(c.stats().evictions > 0);
    let _ = o.load_u64(8); // reads the frame's new bytes: harmless
    assert!(!o.validate(), "a view of an evicted page validated");
    assert_eq!(o.upgrade().unwrap_err().kind(), ErrorKind::Interrupted);

    let o = f.optimistic(63).unwrap();
    assert!(o.validate());
    f.set_len(10 * PS as u64).unwrap();
    assert!(!o.validate(), "a view of a truncated page validated");
    assert_eq!(
        f.optimistic(10).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
    c.validate();
}

#[test]
fn a_load_outside_a_changed_page_just_fails_validation() {
    let d = TempDir::new("opt-oob");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 1);
    let o = f.optimistic(0).unwrap();
    assert_eq!(o.load_u64(PS - 4), 0, "out of bounds reads 0");
    let mut b = [9u8; 16];
    o.copy_to(usize::MAX - 3, &mut b);
    assert_eq!(b, [0; 16]);
    f.write_at(&[1], 0).unwrap();
    assert!(!o.validate());
    assert_eq!(o.upgrade().unwrap_err().kind(), ErrorKind::Interrupted);
}

#[test]
#[should_panic(expected = "outside the page")]
fn a_load_outside_an_unchanged_page_is_a_layout_bug() {
    let d = TempDir::new("opt-oob-panic");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 1);
    let o = f.optimistic(0).unwrap();
    let _ = o.load_u16(PS - 1);
    o.validate();
}

#[test]
fn of_two_upgrades_of_one_version_exactly_one_wins() {
    let d = TempDir::new("opt-race");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 1);
    for _ in 0..200 {
        let o = f.optimistic(0).unwrap();
        let o2 = o.clone();
        let b = Barrier::new(2);
        let won = std::thread::scope(|s| {
            let t = s.spawn(|| {
                b.wait();
                match o2.upgrade() {
                    Ok(mut m) => {
                        m[0] = m[0].wrapping_add(1);
                        1
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::Interrupted);
                        0
                    }
                }
            });
            b.wait();
            let mine = match o.upgrade() {
                Ok(mut m) => {
                    m[0] = m[0].wrapping_add(1);
                    1
                }
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::Interrupted);
                    0
                }
            };
            mine + t.join().unwrap()
        });
        assert_eq!(won, 1, "two upgrades of one version both won, or neither");
    }
    let mut b = [0u8; 1];
    f.read_at(&mut b, 0).unwrap();
    assert_eq!(b[0], pattern(0).wrapping_add(200));
}

#[test]
fn upgrade_or_wait_waits_for_another_holders_latch_and_upgrade_does_not() {
    let d = TempDir::new("opt-wait");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 2);
    for wait in [false, true] {
        let o = f.optimistic(1).unwrap();
        let (released, tried) = (AtomicBool::new(false), AtomicBool::new(false));
        let latched = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut m = f.page_mut(1).unwrap();
                latched.wait();
                // `upgrade` returns while the latch is held: the holder
                // waits for it (10 s at most: a wrong wait fails the
                // test instead of hanging it); `upgrade_or_wait` is
                // released after a while.
                let t = std::time::Instant::now();
                while (wait || !tried.load(Ordering::SeqCst))
                    && t.elapsed()
                        < std::time::Duration::from_millis(if wait { 50 } else { 10_000 })
                {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                m[0] = m[0].wrapping_add(1);
                released.store(true, Ordering::SeqCst);
            });
            latched.wait();
            let r = if wait {
                o.upgrade_or_wait()
            } else {
                o.upgrade()
            };
            assert_eq!(r.err().map(|e| e.kind()), Some(ErrorKind::Interrupted));
            // Returned only once the latch was released (U0), or at once.
            assert_eq!(released.load(Ordering::SeqCst), wait);
            tried.store(true, Ordering::SeqCst);
        });
        // A view of an unlatched, unchanged page upgrades either way.
        let o = f.optimistic(1).unwrap();
        let m = if wait {
            o.upgrade_or_wait()
        } else {
            o.upgrade()
        };
        drop(m.unwrap());
    }
    let mut b = [0u8; 1];
    f.read_at(&mut b, PS as u64).unwrap();
    assert_eq!(b[0], pattern(PS as u64).wrapping_add(2));
    c.validate();
}

#[test]
fn try_pin_and_try_latch_refuse_instead_of_waiting() {
    let d = TempDir::new("opt-try");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 4);
    // A miss is read.
    assert_eq!(f.try_pin(0).unwrap().unwrap()[0], pattern(0));
    {
        let m = f.page_mut(1).unwrap();
        // Held by this very thread: a blocking pin would deadlock.
        assert!(f.try_pin(1).unwrap().is_none());
        assert!(f.try_latch(1).unwrap().is_none());
        drop(m);
    }
    {
        let p = f.page(1).unwrap();
        assert!(f.try_pin(1).unwrap().is_some(), "pins share");
        assert!(f.try_latch(1).unwrap().is_none(), "a pin must drain first");
        drop(p);
    }
    {
        let mut all = vec![0u8; 4 * PS];
        f.read_at(&mut all, 0).unwrap(); // cached: one run over all four
        let run = f.run(0, 4).unwrap();
        assert!(run.one_pin() && run.len() == 4);
        assert!(f.try_latch(2).unwrap().is_none(), "a run holds page 2");
        drop(run);
    }
    let mut m = f.try_latch(2).unwrap().expect("idle page");
    m[0] = 5;
    drop(m);
    let g = open(&c, &d, "g", 2);
    let reads = c.stats().reads;
    let mut m = g.try_latch(1).unwrap().expect("a miss, read and latched");
    assert_eq!(c.stats().reads, reads + 1);
    assert_eq!(m[1], pattern(PS as u64 + 1));
    m[0] = 6;
    drop(m);
    let mut b = [0u8; 1];
    f.read_at(&mut b, 2 * PS as u64).unwrap();
    assert_eq!(b[0], 5);
    g.read_at(&mut b, PS as u64).unwrap();
    assert_eq!(b[0], 6);
    assert_eq!(f.try_pin(4).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    assert_eq!(f.try_latch(4).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    c.validate();
}

#[test]
fn a_latch_released_unchanged_leaves_the_page_clean() {
    let d = TempDir::new("opt-clean");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 4);
    let m = f.page_mut(0).unwrap(); // a miss, read under the latch
    assert_eq!(m[0], pattern(0));
    drop(m);
    assert_eq!(f.dirty_pages(), 0, "an unchanged page_mut dirtied the page");
    let m = f.optimistic(1).unwrap().upgrade().unwrap();
    assert!(!m.is_dirtied());
    drop(m);
    assert_eq!(f.dirty_pages(), 0, "an unchanged upgrade dirtied the page");
    f.page_mut(2).unwrap()[0] = 1;
    assert_eq!(f.dirty_pages(), 1);
    // A dirty page stays dirty through a clean release.
    drop(f.page_mut(2).unwrap());
    assert_eq!(f.dirty_pages(), 1);
    let mut m = f.page_mut(3).unwrap();
    m.mark_dirty();
    drop(m);
    assert_eq!(f.dirty_pages(), 2);
    assert_eq!(c.stats().writebacks, 0);
    f.sync().unwrap();
    c.validate();
}

#[test]
fn page_new_grows_the_file_without_a_read_or_a_system_call() {
    let d = TempDir::new("opt-new");
    let c = cache_without_flusher(16);
    let f = create(&c, &d, "f");
    let mut m = f.page_new(0).unwrap();
    assert!(m.iter().all(|&b| b == 0));
    m[..4].copy_from_slice(b"root");
    drop(m);
    assert_eq!(f.len(), PS as u64);
    // Untouched: still dirty (the file grew over it).
    drop(f.page_new(5).unwrap());
    assert_eq!(f.len(), 6 * PS as u64);
    assert_eq!(f.dirty_pages(), 2);
    assert_eq!(c.stats().reads, 0, "page_new read something");
    // The hole between reads zeros (and is cached now).
    assert!(f.page(3).unwrap().iter().all(|&b| b == 0));
    for i in [0, 3, 5] {
        assert_eq!(f.page_new(i).unwrap_err().kind(), ErrorKind::AlreadyExists);
    }
    assert_eq!(
        f.page_new(u64::MAX).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    f.sync().unwrap();
    let disk = std::fs::read(d.path("f")).unwrap();
    assert_eq!(disk.len(), 6 * PS);
    assert_eq!(&disk[..4], b"root");
    assert!(disk[4..].iter().all(|&b| b == 0));
    // Over a frame that held another page (stale bytes must not show).
    let g = open(&c, &d, "g", 64);
    let mut buf = vec![0u8; PS];
    for i in 0..64 {
        g.read_at(&mut buf, i * PS as u64).unwrap();
    }
    let m = f.page_new(6).unwrap();
    assert!(m.iter().all(|&b| b == 0), "a new page showed stale bytes");
    drop(m);
    let ro = c
        .open_with(d.path("f"), OpenOptions::new().read(true))
        .unwrap();
    assert_eq!(
        ro.page_new(9).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(
        ro.optimistic(0).unwrap().upgrade().unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    c.validate();
}

/// A page past the old end that nobody created is new even after another
/// thread created a later page (the allocator of vmcache's B-tree, run
/// over the C ABI, got `AlreadyExists` there and had to latch the page,
/// which read a hole from disk). A page whose bytes may be on disk (the
/// file's length when opened, or written back since) exists.
#[test]
fn page_new_takes_an_untouched_page_below_a_later_new_one() {
    let d = TempDir::new("opt-new-hole");
    let c = cache_without_flusher(16);
    let f = create(&c, &d, "f");
    drop(f.page_new(10).unwrap());
    let mut m = f.page_new(4).expect("page 4: nobody wrote it");
    assert!(m.iter().all(|&b| b == 0));
    m[0] = 4;
    drop(m);
    assert_eq!(f.page_new(4).unwrap_err().kind(), ErrorKind::AlreadyExists);
    assert_eq!(f.len(), 11 * PS as u64);
    assert_eq!(c.stats().reads, 0, "page_new read something");
    // Written back: the file's bytes up to page 10's end may be on disk,
    // so a page there is no longer known to be a hole.
    f.sync().unwrap();
    let e = f.page_new(7).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    assert!(e.to_string().contains("written"), "{e}");
    // Grown by set_len past what is on disk: new pages there.
    f.set_len(20 * PS as u64).unwrap();
    drop(
        f.page_new(15)
            .expect("page 15: a hole past the disk's data"),
    );
    // Cut below what was written, grown again: past the cut nothing is
    // on disk, so the pages there are holes again.
    f.set_len(2 * PS as u64).unwrap();
    f.set_len(20 * PS as u64).unwrap();
    drop(f.page_new(5).expect("page 5: past the cut"));
    f.sync().unwrap();
    let disk = std::fs::read(d.path("f")).unwrap();
    assert_eq!(disk.len(), 20 * PS);
    assert!(
        disk.iter().all(|&b| b == 0),
        "page 4's byte survived the cut"
    );
    // A file with data when opened: its pages exist.
    let g = open(&c, &d, "g", 8);
    assert_eq!(g.page_new(3).unwrap_err().kind(), ErrorKind::AlreadyExists);
    drop(g.page_new(8).unwrap());
    c.validate();
}

#[test]
fn concurrent_page_new_of_one_index_has_one_winner() {
    let d = TempDir::new("opt-new-race");
    let c = cache_without_flusher(64);
    let f = create(&c, &d, "f");
    for i in 0..100u64 {
        let b = Barrier::new(4);
        let wins = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..4u8 {
                let (f, b, wins) = (&f, &b, &wins);
                s.spawn(move || {
                    b.wait();
                    match f.page_new(i) {
                        Ok(mut m) => {
                            assert!(m.iter().all(|&x| x == 0));
                            m[0] = t + 1;
                            wins.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyExists),
                    }
                });
            }
        });
        assert_eq!(wins.load(Ordering::Relaxed), 1);
        assert_ne!(f.page(i).unwrap()[0], 0, "the winner's write was lost");
    }
    c.validate();
}

/// The stress test of protocol 5.8: many more threads than cores, a cache
/// smaller than the file (views of evicted frames; more frames than
/// threads, each of which holds at most one), readers that check
/// every validated view, writers that upgrade. Each page holds 64 copies
/// of one counter (a torn or stale view would show two values); writers
/// increment it through `upgrade`, readers check every validated view.
/// At the end, the sum of the counters equals the successful upgrades.
#[test]
fn oversubscribed_views_and_upgrades_never_validate_a_torn_page() {
    let d = TempDir::new("opt-stress");
    let c = cache(40);
    let f = create(&c, &d, "f");
    const PAGES: u64 = 96;
    for i in 0..PAGES {
        drop(f.page_new(i).unwrap());
    }
    let threads = 24;
    let stop = AtomicBool::new(false);
    let upgrades = AtomicU64::new(0);
    let validated = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (f, stop, upgrades, validated) = (&f, &stop, &upgrades, &validated);
            s.spawn(move || {
                let mut x = t as u64 + 1;
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 3000 {
                    n += 1;
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = x % PAGES;
                    let o = f.optimistic(i).unwrap();
                    let first = o.load_u64(0);
                    let same = (1..64).all(|k| o.load_u64(k * 64) == first);
                    if !o.validate() {
                        continue;
                    }
                    assert!(same, "page {i}: a validated view was torn");
                    validated.fetch_add(1, Ordering::Relaxed);
                    if t % 3 == 0 {
                        match o.upgrade() {
                            Ok(mut m) => {
                                let v = u64::from_ne_bytes(m[..8].try_into().unwrap());
                                assert_eq!(v, first, "page {i}: upgraded a changed page");
                                for k in 0..64 {
                                    m[k * 64..k * 64 + 8].copy_from_slice(&(v + 1).to_ne_bytes());
                                }
                                upgrades.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => assert_eq!(e.kind(), ErrorKind::Interrupted),
                        }
                    }
                }
            });
        }
        std::thread::sleep(std::time::Duration::from_secs(3));
        stop.store(true, Ordering::Relaxed);
    });
    let mut sum = 0;
    for i in 0..PAGES {
        let p = f.page(i).unwrap();
        let v = u64::from_ne_bytes(p[..8].try_into().unwrap());
        for k in 0..64 {
            assert_eq!(
                u64::from_ne_bytes(p[k * 64..k * 64 + 8].try_into().unwrap()),
                v
            );
        }
        sum += v;
    }
    assert_eq!(
        sum,
        upgrades.load(Ordering::Relaxed),
        "an upgrade's write was lost"
    );
    assert!(upgrades.load(Ordering::Relaxed) > 0);
    assert!(validated.load(Ordering::Relaxed) > 0);
    assert!(c.stats().evictions > 0, "the test must evict");
    c.validate();
}

#[test]
fn a_frame_hint_finds_the_page_until_its_frame_is_reused() {
    let d = TempDir::new("opt-hint");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 64);
    let o = f.optimistic(3).unwrap();
    let hint = o.frame_hint();
    let h = f.optimistic_hinted(3, hint).expect("a good hint");
    assert_eq!(h.frame_hint(), hint);
    assert_eq!(h.load_u8(7), pattern(3 * PS as u64 + 7));
    assert!(h.validate());
    // Wrong page, made-up frame: no view (and no read, no error).
    assert!(f.optimistic_hinted(4, hint).is_none());
    assert!(f.optimistic_hinted(3, u32::MAX).is_none());
    // The frame reused for other pages: the hint is stale.
    let mut buf = vec![0u8; PS];
    for i in 4..64 {
        f.read_at(&mut buf, i * PS as u64).unwrap();
    }
    assert!(
        f.optimistic_hinted(3, hint).is_none(),
        "a stale hint gave a view"
    );
    let reads = c.stats().reads;
    assert!(f.optimistic_hinted(3, hint).is_none());
    assert_eq!(c.stats().reads, reads, "a hint never reads");
}

/// A page that `set_len` cuts off while it is pinned stays in its frame
/// (orphaned) until the pin goes, still with its identity: a view of it
/// must fail validation from the cut on, even once the file has grown
/// back over the page's index and that page exists again with other
/// bytes (the view's frame is not that page's).
#[test]
fn a_view_of_a_pinned_page_that_truncate_removed_fails_after_the_file_regrows() {
    let d = TempDir::new("opt-orphan");
    let c = cache_without_flusher(16);
    let f = create(&c, &d, "f");
    f.write_at(&[1u8; 4 * PS], 0).unwrap();
    let pin = f.page(2).unwrap();
    let o = f.optimistic(2).unwrap();
    let hint = o.frame_hint();
    assert_eq!(o.load_u64(0), u64::from_ne_bytes([1; 8]));
    assert!(o.validate());
    f.set_len(0).unwrap();
    assert!(!o.validate(), "a view of a page truncate removed validated");
    f.write_at(&[2u8; 4 * PS], 0).unwrap();
    // Page 2 exists again (all 2s), in another frame; the view's frame
    // still holds the removed page (the pin keeps it), all 1s.
    assert_eq!(o.load_u64(0), u64::from_ne_bytes([1; 8]));
    assert!(
        !o.validate(),
        "a view of a removed page validated after the file grew back"
    );
    assert!(f.optimistic_hinted(2, hint).is_none());
    assert_eq!(
        o.clone().upgrade().unwrap_err().kind(),
        ErrorKind::Interrupted
    );
    assert_eq!(pin[0], 1, "the pin keeps the removed page's bytes");
    drop(pin);
    assert!(!o.validate());
    let now = f.optimistic(2).unwrap();
    assert_eq!(now.load_u64(0), u64::from_ne_bytes([2; 8]));
    assert!(now.validate());
    c.validate();
}

/// `ARENA_SLACK` readable bytes follow the last frame: a reader that goes
/// past the last frame's end through a torn offset (a C reader of
/// `pc_optimistic::data`) reads zeros, never faults.
#[test]
fn readable_zeros_follow_the_last_frame() {
    let d = TempDir::new("opt-slack");
    let c = cache_without_flusher(16);
    let f = open(&c, &d, "f", 16);
    let last = (0..16)
        .map(|i| f.optimistic(i).unwrap())
        .find(|o| o.frame_hint() == 15)
        .expect("16 pages in 16 frames: one is in the last frame");
    let end = last.as_ptr() as usize + PS;
    // The mapping that holds the slack, from /proc/self/maps: readable.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let covered = maps.lines().any(|l| {
        let (range, rest) = l.split_once(' ').unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        a <= end && end + pagecache::ARENA_SLACK <= b && rest.starts_with('r')
    });
    assert!(
        covered,
        "no readable mapping covers the slack after the last frame"
    );
    let mut sum = 0u64;
    for off in (0..pagecache::ARENA_SLACK).step_by(512) {
        // SAFETY: inside the slack the cache maps after its last frame
        // (checked above), which lives as long as `c`.
        sum += unsafe { std::ptr::read_volatile((end + off) as *const u8) } as u64;
    }
    assert_eq!(sum, 0, "the slack reads as zeros");
}
