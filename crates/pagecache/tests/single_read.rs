//! Concurrent misses on one page cause exactly one read.
mod common;
use common::*;
use pagecache::{Config, Faults, FaultyBackend, PageCache, PosixBackend};
use std::sync::Barrier;

#[test]
fn concurrent_misses_on_one_page_read_it_once() {
    let d = TempDir::new("single");
    let p = d.path("f");
    make_file(&p, 16 * PS as u64);
    for round in 0..20u64 {
        let faults = Faults::new();
        let c = PageCache::with_backend(
            Config {
                capacity: 64 * PS,
                // One page read, nothing ahead of it.
                readahead_max: 0,
                ..Config::default()
            },
            FaultyBackend::new(PosixBackend, faults.clone()),
        )
        .unwrap();
        let f = c.open(&p).unwrap();
        let threads = 16;
        let barrier = Barrier::new(threads);
        let page = round % 16;
        std::thread::scope(|s| {
            for t in 0..threads {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    if t % 2 == 0 {
                        let pg = f.page(page).unwrap();
                        assert_eq!(pg[1], pattern(page * PS as u64 + 1));
                    } else {
                        let mut b = [0u8; 3];
                        f.read_at(&mut b, page * PS as u64 + 5).unwrap();
                        assert_eq!(b[0], pattern(page * PS as u64 + 5));
                    }
                });
            }
        });
        assert_eq!(
            faults.reads(),
            1,
            "round {round}: one read for {threads} misses"
        );
        let s = c.stats();
        assert_eq!(s.reads, 1);
        assert_eq!(s.misses, 1);
        assert_eq!(s.hits, threads as u64 - 1);
    }
}
