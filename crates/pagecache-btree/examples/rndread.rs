//! vmcache's RNDREAD shape on the tree: load N tuples (8-byte big-endian
//! keys, 120-byte values) in key order, then random point lookups.
//!
//! ```sh
//! THREADS=T [SYNC=1] cargo run --release -p pagecache-btree --example rndread -- N SECONDS [pin]
//! ```
use pagecache::{Config, OpenOptions, PageCache};
use pagecache_btree::{BTree, Coupling};
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args
        .get(1)
        .map(|s| s.parse::<f64>().unwrap() as u64)
        .unwrap_or(1_000_000);
    let secs: f64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(3.0);
    let coupling = if args.get(3).map(String::as_str) == Some("pin") {
        Coupling::Pin
    } else {
        Coupling::Optimistic
    };
    let dir = std::env::temp_dir().join(format!("rndread-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // NO_FLUSHER: no background write-back; POPULATE: the pool faulted in
    // at creation (Config::populate), not during the load.
    let quiet = std::env::var("NO_FLUSHER").is_ok();
    let populate = std::env::var("POPULATE").is_ok();
    let cache = PageCache::new(Config {
        // CAPACITY_MIB: the pool (default 4 GiB).
        capacity: std::env::var("CAPACITY_MIB")
            .ok()
            .and_then(|s| s.parse::<usize>().ok())
            .map_or(4 << 30, |m| m << 20),
        populate,
        dirty_background_percent: if quiet { 100 } else { 10 },
        dirty_limit_percent: if quiet { 100 } else { 30 },
        ..Config::default()
    })?;
    let file = cache.open_with(
        dir.join("tree"),
        OpenOptions::new().read(true).write(true).create(true),
    )?;
    let tree = BTree::open_with(file, coupling)?;
    // THREADS: threads for the load (each its range, in key order, as the
    // lab's) and for the lookups (default 1).
    let threads: u64 = std::env::var("THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let tree = &tree;
                s.spawn(move || -> std::io::Result<()> {
                    let mut v = [0u8; 120];
                    for i in n * t / threads..n * (t + 1) / threads {
                        let k = i.to_be_bytes();
                        v[..8].copy_from_slice(&k);
                        tree.insert(&k, &v)?;
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| h.join().unwrap())
    })?;
    let load = t0.elapsed().as_secs_f64();
    eprintln!(
        "load: {:.0} tuples/s ({:.2} s), {:.3} GB",
        n as f64 / load,
        load,
        tree.file().len() as f64 / 1e9
    );
    // SYNC: write the load's dirty pages back before the lookups, so that
    // they do not share the device with its write-back.
    if std::env::var("SYNC").is_ok() {
        let t = Instant::now();
        tree.file().sync()?;
        eprintln!("sync after the load: {:.2} s", t.elapsed().as_secs_f64());
    }
    let reads0 = cache.stats().reads;
    let writebacks0 = cache.stats().writebacks;
    let restarts0 = tree.restarts();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let done: u64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let tree = &tree;
                s.spawn(move || -> std::io::Result<u64> {
                    let mut x: u64 =
                        0x9E37_79B9_7F4A_7C15 ^ (t + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
                    let mut out = Vec::new();
                    let mut done = 0u64;
                    while Instant::now() < end {
                        for _ in 0..1000 {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            let k = (x % n).to_be_bytes();
                            assert!(tree.get_into(&k, &mut out)?);
                            assert_eq!(&out[..8], &k);
                            done += 1;
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .sum::<std::io::Result<u64>>()
    })?;
    eprintln!("lookups: {:.0}/s", done as f64 / t0.elapsed().as_secs_f64());
    eprintln!(
        "{:.3} reads, {:.3} pages written back and {:.4} restarts per lookup; {}",
        (cache.stats().reads - reads0) as f64 / done.max(1) as f64,
        (cache.stats().writebacks - writebacks0) as f64 / done.max(1) as f64,
        (tree.restarts() - restarts0) as f64 / done.max(1) as f64,
        cache.stats()
    );
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
