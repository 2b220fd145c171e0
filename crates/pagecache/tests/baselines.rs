//! The baseline designs built into the library  keep every
//! byte right and every frame accounted for: strict LRU under one lock,
//! seed 004's SMP list, the global page mutex and the hashed page locks,
//! each with the global free-list pool, under memory pressure and
//! oversubscription, mixing file reads, writes, pins and anonymous pages.
mod common;
use common::*;
use pagecache::{Config, PageCache, PageLockKind, PolicyKind, PoolKind};

fn baseline_cache(
    frames: usize,
    policy: PolicyKind,
    locks: PageLockKind,
    pool: PoolKind,
) -> PageCache {
    PageCache::new(Config {
        capacity: frames * PS,
        policy,
        page_locks: locks,
        pool,
        // Replacement order is checked page by page: no readahead.
        readahead_max: 0,
        ..Config::default()
    })
    .unwrap()
}

/// 12 threads on 2 cores over a file 4x the cache: every read checks the
/// bytes against the model (pattern, or the thread's own writes to its
/// own pages); a quarter of the threads also fault and free anonymous
/// pages and check they read zero or what they wrote.
fn hammer(policy: PolicyKind, locks: PageLockKind, pool: PoolKind) {
    let d = TempDir::new("baseline");
    let p = d.path("f");
    let pages = 256u64;
    make_file(&p, pages * PS as u64);
    let c = baseline_cache(64, policy, locks, pool);
    let f = c.open(&p).unwrap();
    const T: u64 = 12;
    std::thread::scope(|s| {
        for t in 0..T {
            let (f, c) = (&f, &c);
            s.spawn(move || {
                let mut x = 0x9E37_79B9 ^ (t + 1);
                let mut buf = vec![0u8; PS];
                let mut small = [0u8; 64];
                let anon = (t % 4 == 0).then(|| c.anon(8 * PS as u64).unwrap());
                for round in 0..1500u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Pages p with p % T == t are this thread's to write.
                    let page = x % pages;
                    let mine = page % T == t;
                    match round % 5 {
                        0 if mine => {
                            f.write_at(&[t as u8 + 1; 64], page * PS as u64).unwrap();
                        }
                        1 => {
                            let pin = f.page(page).unwrap();
                            check(&pin[64..], page * PS as u64 + 64);
                        }
                        2 => {
                            f.read_exact_at(&mut small, page * PS as u64 + 128).unwrap();
                            check(&small, page * PS as u64 + 128);
                        }
                        _ => {
                            f.read_exact_at(&mut buf, page * PS as u64).unwrap();
                            check(&buf[64..], page * PS as u64 + 64);
                            let head = buf[0];
                            assert!(
                                head == pattern(page * PS as u64) || head == (page % T) as u8 + 1,
                                "page {page}: first byte {head} is neither the pattern nor its writer's"
                            );
                        }
                    }
                    if let Some(a) = &anon {
                        let i = x % 8;
                        match c_round(round) {
                            0 => a.page_mut(i).unwrap()[..8].copy_from_slice(&(i + 1).to_le_bytes()),
                            1 => a.free(i..i + 1),
                            _ => {
                                let g = a.page(i).unwrap();
                                let v = u64::from_le_bytes(g[..8].try_into().unwrap());
                                assert!(v == 0 || v == i + 1, "anonymous page {i} holds {v}");
                                assert!(g[8..].iter().all(|&b| b == 0));
                            }
                        }
                    }
                }
            });
        }
    });
    f.sync().unwrap();
    let s = c.stats();
    assert!(s.evictions > 100, "memory pressure: {s}");
    c.validate();
}

fn c_round(r: u64) -> u64 {
    r % 3
}

fn check(got: &[u8], at: u64) {
    for (k, &b) in got.iter().enumerate() {
        assert_eq!(b, pattern(at + k as u64), "byte at {}", at + k as u64);
    }
}

#[test]
fn strict_lru_global_pool() {
    hammer(PolicyKind::StrictLru, PageLockKind::Bits, PoolKind::Global);
}

#[test]
fn smp_lru_per_cpu_pool() {
    hammer(PolicyKind::SmpLru, PageLockKind::Bits, PoolKind::PerCpu);
}

#[test]
fn smp_lru_global_pool() {
    hammer(PolicyKind::SmpLru, PageLockKind::Bits, PoolKind::Global);
}

#[test]
fn global_page_mutex() {
    hammer(PolicyKind::S3Fifo, PageLockKind::Global, PoolKind::PerCpu);
}

#[test]
fn hashed_page_locks_with_strict_lru() {
    hammer(
        PolicyKind::StrictLru,
        PageLockKind::Hashed(64),
        PoolKind::Global,
    );
}

/// Strict LRU evicts the least recently *hit* page: a page re-read between
/// insertions survives a sweep that evicts everything else.
#[test]
fn strict_lru_keeps_the_recently_hit_page() {
    let d = TempDir::new("lru-order");
    let p = d.path("f");
    make_file(&p, 200 * PS as u64);
    let c = baseline_cache(
        32,
        PolicyKind::StrictLru,
        PageLockKind::Bits,
        PoolKind::Global,
    );
    let f = c.open(&p).unwrap();
    let mut b = [0u8; 64];
    for page in 0..200u64 {
        f.read_exact_at(&mut b, page * PS as u64).unwrap();
        // Optimistic hit on page 0 after every miss: always most recent.
        f.read_exact_at(&mut b, 0).unwrap();
    }
    let before = c.stats().misses;
    f.read_exact_at(&mut b, 0).unwrap();
    assert_eq!(c.stats().misses, before, "page 0 stayed cached");
    f.read_exact_at(&mut b, PS as u64).unwrap();
    assert_eq!(c.stats().misses, before + 1, "page 1 was evicted long ago");
    c.validate();
}

#[test]
fn bad_page_lock_count_is_a_clear_error() {
    let e = PageCache::new(Config {
        page_locks: PageLockKind::Hashed(3),
        ..Config::default()
    })
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("Hashed(3)"), "{e}");
}

/// With lock profiling on, the baselines' locks show up under their own
/// classes.
#[test]
fn baseline_locks_are_profiled() {
    if !pagecache::lockstat::ENABLED {
        return;
    }
    let d = TempDir::new("lru-prof");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    for (policy, locks, class) in [
        (
            PolicyKind::StrictLru,
            PageLockKind::Bits,
            "LRU list (global lock)",
        ),
        (
            PolicyKind::SmpLru,
            PageLockKind::Bits,
            "LRU rwlock (shared: smp_list)",
        ),
        (
            PolicyKind::S3Fifo,
            PageLockKind::Global,
            "page mutex (global)",
        ),
        (
            PolicyKind::S3Fifo,
            PageLockKind::Hashed(16),
            "page locks (hashed)",
        ),
    ] {
        let c = baseline_cache(16, policy, locks, PoolKind::PerCpu);
        let before = c
            .lock_profile()
            .iter()
            .find(|x| x.name == class)
            .unwrap()
            .count;
        let f = c.open(&p).unwrap();
        let mut buf = vec![0u8; PS];
        for i in 0..64 {
            f.read_exact_at(&mut buf, i * PS as u64).unwrap();
        }
        let after = c
            .lock_profile()
            .iter()
            .find(|x| x.name == class)
            .unwrap()
            .count;
        assert!(after >= before + 64, "{class}: {before} -> {after}");
    }
}
