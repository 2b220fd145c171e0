//! A cache 8x smaller than the file keeps every byte right.
mod common;
use common::*;

#[test]
fn capacity_eight_times_smaller_than_the_file_keeps_every_byte() {
    let d = TempDir::new("small");
    let p = d.path("f");
    let pages = 128u64;
    make_file(&p, pages * PS as u64);
    let c = cache(16); // 16 frames for 128 pages
    let f = c.open(&p).unwrap();
    // Overwrite every third page with a new pattern, in random-ish order.
    let mut expect: Vec<u8> = (0..pages * PS as u64).map(pattern).collect();
    let mut x = 12345u64;
    for _ in 0..300 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let page = (x >> 33) % pages;
        let off = page * PS as u64 + (x >> 20) % 4000;
        let data = [(x >> 8) as u8; 96];
        f.write_at(&data, off).unwrap();
        expect[off as usize..off as usize + 96].copy_from_slice(&data);
    }
    // Read everything back through the cache, in two orders.
    let mut buf = vec![0u8; PS];
    for page in (0..pages).chain((0..pages).rev()) {
        f.read_exact_at(&mut buf, page * PS as u64).unwrap();
        let e = &expect[(page as usize) * PS..(page as usize + 1) * PS];
        assert!(buf == e, "page {page} differs");
    }
    let s = c.stats();
    assert!(s.evictions > 200, "eviction happened: {s}");
    assert!(s.writebacks > 0);
    f.sync().unwrap();
    assert!(std::fs::read(&p).unwrap() == expect, "disk matches");
    c.validate();
}

#[test]
fn gang_lookups_work_in_a_tiny_cache() {
    let d = TempDir::new("small");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let mut v = Vec::new();
    for start in (0..64).step_by(8) {
        assert_eq!(f.pages(start, &mut v, 8).unwrap(), 8);
        for (k, pg) in v.iter().enumerate() {
            let idx = start + k as u64;
            assert_eq!(pg.index(), idx);
            assert_eq!(pg[7], pattern(idx * PS as u64 + 7));
        }
    }
}
