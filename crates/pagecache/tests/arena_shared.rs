//! `PAGECACHE_ARENA=shared`: the frames, their descriptors and the index
//! nodes in shared memory (shmem, as a cache shared by processes maps
//! them), for the A/B in `docs/benchmarks.md` ("Shared memory"). One test
//! in its own binary: it sets the process's environment.

mod common;
use common::*;
use pagecache::OpenOptions;
use std::io::ErrorKind;

#[test]
fn the_tables_in_shared_memory_hold_pages_as_private_ones_and_a_bad_value_is_refused() {
    // SAFETY: this binary's only test, so no other thread reads or writes
    // the environment meanwhile (the cache reads it only when created).
    unsafe { std::env::set_var("PAGECACHE_ARENA", "shared") };
    let d = TempDir::new("arena-shared");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let c = cache(16);
    let f = c
        .open_with(&p, OpenOptions::new().read(true).write(true))
        .unwrap();
    // Four times the cache: misses, evictions, write-back, re-reads.
    for i in 0..64u64 {
        f.write_at(&[i as u8; 8], i * PS as u64 + 100).unwrap();
    }
    f.sync().unwrap();
    for i in 0..64u64 {
        let pg = f.page(i).unwrap();
        assert_eq!(pg[100..108], [i as u8; 8], "page {i}");
        assert_eq!(pg[0], pattern(i * PS as u64), "page {i}");
    }
    // The arena really is shared memory: its frames count as RssShmem.
    let kb = |file: &str, key: &str| {
        std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let rss_shmem = kb("/proc/self/status", "RssShmem:").unwrap();
    assert!(
        rss_shmem >= 16 * PS as u64 / 1024,
        "RssShmem {rss_shmem} kB: the frames are not in shared memory ({:?} kB system-wide)",
        kb("/proc/meminfo", "Shmem:")
    );
    c.validate();
    drop(f);
    drop(c);

    // SAFETY: as above; the cache above is gone.
    unsafe { std::env::set_var("PAGECACHE_ARENA", "bogus") };
    let e = pagecache::PageCache::new(pagecache::Config {
        capacity: 16 * PS,
        ..pagecache::Config::default()
    })
    .expect_err("a bad PAGECACHE_ARENA was accepted");
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("PAGECACHE_ARENA"), "{e}");
    // SAFETY: as above.
    unsafe { std::env::remove_var("PAGECACHE_ARENA") };
}
