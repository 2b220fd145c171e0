//! `Config::populate`: the frame arena is resident from the cache's
//! creation, and only then. One test in this file (the resident set is the
//! process's: tests of one file run on parallel threads).
mod common;
use common::*;
use pagecache::{Config, PageCache};

/// This process's resident set in bytes (`/proc/self/statm`).
fn resident() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

#[test]
fn a_populated_cache_is_resident_from_its_creation() {
    let capacity = 64 << 20;
    let before = resident();
    let lazy = PageCache::new(Config {
        capacity,
        ..Config::default()
    })
    .unwrap();
    let lazy_grew = resident().saturating_sub(before);
    assert!(
        lazy_grew < capacity as u64 / 2,
        "a default cache faulted {lazy_grew} bytes in at creation"
    );
    drop(lazy);
    let before = resident();
    let c = PageCache::new(Config {
        capacity,
        populate: true,
        ..Config::default()
    })
    .unwrap();
    let grew = resident().saturating_sub(before);
    assert!(
        grew >= capacity as u64,
        "a populated cache of {capacity} bytes made only {grew} resident"
    );
    // And it is an ordinary cache: bytes written are read back and reach
    // the disk.
    let d = TempDir::new("populate");
    let p = d.path("f");
    make_file(&p, 0);
    let f = c.open(&p).unwrap();
    let data: Vec<u8> = (0..40 * PS as u64).map(pattern).collect();
    f.write_at(&data, 0).unwrap();
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), data);
    c.validate();
}
