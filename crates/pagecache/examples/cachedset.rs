//! `read_at` of 4 KiB at random pages of a cached set, side by side with a
//! bare `memcpy` of the same number of pages from one buffer: the issue's
//! setup (a large file through a small budget, the set the cache holds),
//! rather than the micro-benchmark's (a file the cache holds whole). The
//! set is the file's first pages, or with `SCATTER=1` pages spread over the
//! whole file (a sparser index). Every copy is checked once before timing.
//! Two more sides, for where the difference goes: an optimistic view
//! through a frame hint (`File::optimistic_hinted`: the same copy and
//! validation without the index walk), and the kernel's `pread` of the same
//! pages from its own cache (read once through a buffered descriptor first).
//!
//! ```sh
//! SCATTER=1 cargo run --release -p pagecache --example cachedset -- FILE [CACHE_MIB] [SECONDS] [ROUNDS]
//! ```
use pagecache::{Config, PageCache};
use std::hint::black_box;
use std::time::{Duration, Instant};

const PS: usize = 4096;

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("FILE");
    let mib: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(256);
    let secs: f64 = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(2.0);
    let rounds: usize = args.get(4).map(|s| s.parse().unwrap()).unwrap_or(3);
    let scatter = std::env::var_os("SCATTER").is_some();
    let file_pages = std::fs::metadata(path)?.len() / PS as u64;
    let cache = PageCache::new(Config {
        capacity: mib << 20,
        // No background work: the set is read-only.
        readahead_max: 0,
        ..Config::default()
    })?;
    let f = cache.open(path)?;
    // 90% of the frames: the set stays cached (no eviction while timing).
    let n = (cache.frames() * 9 / 10).min(file_pages as usize);
    let set: Vec<u64> = if scatter {
        let stride = file_pages / n as u64;
        (0..n as u64).map(|i| i * stride).collect()
    } else {
        (0..n as u64).collect()
    };
    // The same bytes in one buffer, for the memcpy side.
    let mut mem = vec![0u8; n * PS];
    for (i, &p) in set.iter().enumerate() {
        f.read_exact_at(&mut mem[i * PS..(i + 1) * PS], p * PS as u64)?;
    }
    let evictions = cache.stats().evictions;
    let mut b = vec![0u8; PS];
    for (i, &p) in set.iter().enumerate() {
        f.read_exact_at(&mut b, p * PS as u64)?;
        assert_eq!(b, mem[i * PS..(i + 1) * PS], "page {p}");
    }
    assert_eq!(
        cache.stats().evictions,
        evictions,
        "the set must stay cached"
    );
    eprintln!(
        "{n} pages ({} MiB) of a {} MiB file, {}, cache {mib} MiB",
        (n * PS) >> 20,
        (file_pages * PS as u64) >> 20,
        if scatter {
            "spread over the file"
        } else {
            "its first pages"
        }
    );
    // The frame that holds each page (the hinted side skips the index).
    let hints: Vec<u32> = set
        .iter()
        .map(|&p| f.optimistic(p).map(|v| v.frame_hint()))
        .collect::<std::io::Result<_>>()?;
    // The kernel's cache holds the same set (buffered reads fill it).
    let kf = std::fs::File::open(path)?;
    for &p in &set {
        std::os::unix::fs::FileExt::read_exact_at(&kf, &mut b, p * PS as u64)?;
    }
    let time = |read: &mut dyn FnMut(usize)| {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut ops = 0u64;
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            for _ in 0..1000 {
                read((rng(&mut x) % n as u64) as usize);
            }
            ops += 1000;
        }
        t0.elapsed().as_secs_f64() * 1e9 / ops as f64
    };
    for _ in 0..rounds {
        let cached = time(&mut |i| {
            f.read_exact_at(&mut b, set[i] * PS as u64).unwrap();
            black_box(&b);
        });
        let copy = time(&mut |i| {
            b.copy_from_slice(&mem[i * PS..(i + 1) * PS]);
            black_box(&b);
        });
        let mut stale = 0u64;
        let hinted = time(&mut |i| {
            let done = match f.optimistic_hinted(set[i], hints[i]) {
                Some(v) => {
                    v.copy_to(0, &mut b);
                    v.validate()
                }
                None => false,
            };
            if !done {
                stale += 1;
                f.read_exact_at(&mut b, set[i] * PS as u64).unwrap();
            }
            black_box(&b);
        });
        let kernel = time(&mut |i| {
            std::os::unix::fs::FileExt::read_exact_at(&kf, &mut b, set[i] * PS as u64).unwrap();
            black_box(&b);
        });
        eprintln!(
            "read_at {cached:.1} ns, memcpy {copy:.1} ns: {:.2}x; hinted view {hinted:.1} ns: {:.2}x ({stale} stale); kernel pread {kernel:.1} ns: {:.2}x",
            copy / cached,
            copy / hinted,
            copy / kernel
        );
    }
    Ok(())
}
