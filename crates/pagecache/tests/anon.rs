//! Anonymous regions: zero-filled on first touch, same budget as file pages.
mod common;
use common::*;
use pagecache::{Config, PageCache};
use std::io::ErrorKind;

#[test]
fn first_touch_is_zero_never_stale_bytes_of_a_previous_user() {
    let d = TempDir::new("anon");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64); // nonzero bytes
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let mut buf = vec![0u8; PS];
    for i in 0..64 {
        f.read_exact_at(&mut buf, i * PS as u64).unwrap(); // every frame held file bytes
    }
    let r = c.anon(12 * PS as u64).unwrap();
    for i in 0..12 {
        assert!(
            r.page(i).unwrap().iter().all(|&b| b == 0),
            "page {i} not zero"
        );
    }
    assert_eq!(c.stats().anon_faults, 12);
}

#[test]
fn writes_stick_and_free_returns_frames_and_zeroes() {
    let c = cache(16);
    let r = c.anon(4 * PS as u64 + 1).unwrap();
    assert_eq!(r.pages(), 5);
    assert_eq!(r.len(), 4 * PS as u64 + 1);
    for i in 0..5 {
        r.page_mut(i).unwrap()[7] = i as u8 + 1;
    }
    assert_eq!(r.resident(), 5);
    assert_eq!(c.free_frames(), 11);
    assert_eq!(r.page(3).unwrap()[7], 4);
    r.free(1..3);
    assert_eq!(r.resident(), 3);
    assert_eq!(c.free_frames(), 13);
    assert_eq!(r.page(1).unwrap()[7], 0, "freed page reads zero again");
    assert_eq!(r.page(4).unwrap()[7], 5);
    c.validate();
    drop(r);
    assert_eq!(
        c.free_frames(),
        16,
        "dropping the region returns every frame"
    );
    c.validate();
}

#[test]
fn a_pinned_page_survives_free_until_released() {
    let c = cache(16);
    let r = c.anon(2 * PS as u64).unwrap();
    r.page_mut(0).unwrap()[0] = 9;
    let pin = r.page(0).unwrap();
    r.free(0..1);
    assert_eq!(pin[0], 9);
    let before = c.free_frames();
    drop(pin);
    assert_eq!(c.free_frames(), before + 1);
    assert_eq!(r.page(0).unwrap()[0], 0);
}

#[test]
fn out_of_range_and_oversized_regions_are_errors() {
    let c = cache(16);
    let r = c.anon(PS as u64).unwrap();
    assert_eq!(r.page(1).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    assert_eq!(r.page_mut(1).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    assert_eq!(
        c.anon(17 * PS as u64).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let e = c.anon(0).unwrap();
    assert!(e.is_empty());
}

#[test]
fn anonymous_pages_filling_the_budget_give_out_of_memory_and_the_cache_recovers() {
    let d = TempDir::new("anon");
    let p = d.path("f");
    make_file(&p, 32 * PS as u64);
    // No readahead: exactly one file page cached.
    let c = PageCache::new(Config {
        capacity: 16 * PS,
        readahead_max: 0,
        ..Config::default()
    })
    .unwrap();
    let f = c.open(&p).unwrap();
    let mut b = [0u8; 4];
    f.read_at(&mut b, 0).unwrap(); // one file page cached, evictable
    let r = c.anon(16 * PS as u64).unwrap();
    for i in 0..16 {
        r.page_mut(i).unwrap()[0] = 1; // the 16th evicts the file page
    }
    assert_eq!(c.stats().evictions, 1);
    // Nothing evictable is left: file reads and more anonymous pages fail.
    assert_eq!(
        f.read_at(&mut b, 5 * PS as u64).unwrap_err().kind(),
        ErrorKind::OutOfMemory
    );
    let r2 = c.anon(PS as u64).unwrap();
    assert_eq!(r2.page(0).unwrap_err().kind(), ErrorKind::OutOfMemory);
    // Giving pages back makes the cache usable again.
    r.free(0..8);
    f.read_at(&mut b, 5 * PS as u64).unwrap();
    assert_eq!(b[0], pattern(5 * PS as u64));
    assert_eq!(r2.page(0).unwrap()[0], 0);
    assert_eq!(r.page(9).unwrap()[0], 1);
    drop(r);
    drop(r2);
    c.validate();
}

#[test]
fn racing_first_touches_and_latched_increments_of_one_page() {
    let c = cache(16);
    let r = c.anon(PS as u64).unwrap();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..500 {
                    let mut m = r.page_mut(0).unwrap();
                    let v = u64::from_ne_bytes(m[..8].try_into().unwrap()) + 1;
                    m[..8].copy_from_slice(&v.to_ne_bytes());
                }
            });
        }
    });
    let v = u64::from_ne_bytes(r.page(0).unwrap()[..8].try_into().unwrap());
    assert_eq!(v, 8 * 500, "every latched increment counted once");
    assert_eq!(c.stats().anon_faults, 1, "one first touch despite the race");
}
