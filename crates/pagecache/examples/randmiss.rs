//! One thread's random 4 KiB misses, side by side with `O_DIRECT` `pread`
//! of the same pattern: a file larger than the cache, the kernel's cache
//! dropped first (as root). Where a miss's time goes beyond the device's.
//!
//! ```sh
//! cargo run --release -p pagecache --example randmiss -- FILE [SECONDS] [CACHE_MIB]
//! ```
use pagecache::{Config, PageCache};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

fn drop_caches() {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("FILE");
    let secs: f64 = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(3.0);
    let mib: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(256);
    let pages = std::fs::metadata(path)?.len() / 4096;
    let run = |name: &str, read: &mut dyn FnMut(u64)| {
        drop_caches();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut n = 0u64;
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            for _ in 0..100 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                read(x % pages);
                n += 1;
            }
        }
        let t = t0.elapsed().as_secs_f64();
        eprintln!(
            "{name}: {:.1} k/s, {:.1} us each",
            n as f64 / t / 1e3,
            t / n as f64 * 1e6
        );
    };
    let only = std::env::var("ONLY").unwrap_or_default();
    if only.is_empty() || only == "pread" {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)?;
        let mut buf = vec![0u8; 8192];
        let off = buf.as_ptr().align_offset(4096);
        let b = &mut buf[off..off + 4096];
        run("O_DIRECT pread", &mut |p| {
            f.read_exact_at(b, p * 4096).unwrap();
        });
    }
    if only.is_empty() || only == "cache" {
        let cache = PageCache::new(Config {
            capacity: mib << 20,
            ..Config::default()
        })?;
        let file = cache.open(path)?;
        let mut b = vec![0u8; 4096];
        run("pagecache read_at", &mut |p| {
            file.read_at(&mut b, p * 4096).unwrap();
        });
        eprintln!("{}", cache.stats());
    }
    Ok(())
}
