//! The Rust side of the boundary benchmark (scripts/bench-boundary.sh):
//! a 64 B `read_at` of a cached page and a page pin + release, next to the
//! kernel's `pread` of the same bytes (from its page cache), one thread;
//! random pages of a 64 MiB file, and one page over and over ("hot");
//! an optimistic view + validation (by the index walk, and through the
//! frame hint an index keeps), and a latch + clean release of a cached
//! page, for DESIGN's C ABI rows.
//! Prints `rust <op> <ns per op>` lines, the median of `RUNS` runs.
//!
//! `cargo run --release --example boundary -- FILE`

use pagecache::{Config, PageCache};
use std::os::unix::fs::FileExt;
use std::time::Instant;

const OPS: u64 = 1_000_000;
const RUNS: usize = 5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn time(mut op: impl FnMut(u64)) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        let mut x: u64 = 1;
        let t = Instant::now();
        for _ in 0..OPS {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            op(x >> 33);
        }
        runs.push(t.elapsed().as_nanos() as f64 / OPS as f64);
    }
    median(runs)
}

fn main() -> std::io::Result<()> {
    let path = std::env::args().nth(1).expect("usage: boundary FILE");
    let cache = PageCache::new(Config {
        capacity: 128 << 20,
        ..Config::default()
    })?;
    let file = cache.open_with(&path, pagecache::OpenOptions::new().read(true).write(true))?;
    let pages = file.len() / 4096;
    let mut buf = [0u8; 64];
    for p in 0..pages {
        file.read_at(&mut buf, p * 4096)?; // warm: every page cached
    }
    let kernel = std::fs::File::open(&path)?;
    let read = time(|x| {
        let at = (x % pages) * 4096 + (x % 4032);
        file.read_at(&mut buf, at).unwrap();
    });
    let pin = time(|x| {
        let p = file.page(x % pages).unwrap();
        std::hint::black_box(p[7]);
    });
    let pread = time(|x| {
        let at = (x % pages) * 4096 + (x % 4032);
        kernel.read_at(&mut buf, at).unwrap();
    });
    // One page over and over: what is left is the call itself.
    let hot_read = time(|x| {
        file.read_at(&mut buf, x % 4032).unwrap();
    });
    let hot_pin = time(|_| {
        let p = file.page(0).unwrap();
        std::hint::black_box(p[7]);
    });
    let hot_pread = time(|x| {
        kernel.read_at(&mut buf, x % 4032).unwrap();
    });
    let hints: Vec<u32> = (0..pages)
        .map(|p| file.optimistic(p).unwrap().frame_hint())
        .collect();
    let opt = time(|x| {
        let v = file.optimistic(x % pages).unwrap();
        std::hint::black_box(v.validate());
    });
    let opt_hinted = time(|x| {
        let p = x % pages;
        let v = file.optimistic_hinted(p, hints[p as usize]).unwrap();
        std::hint::black_box(v.validate());
    });
    let latch = time(|x| {
        // Read only: the drop releases it clean.
        let m = file.try_latch(x % pages).unwrap().unwrap();
        std::hint::black_box(m[7]);
    });
    let hot_latch = time(|_| {
        let m = file.try_latch(0).unwrap().unwrap();
        std::hint::black_box(m[7]);
    });
    println!("rust optimistic_validate {opt:.1}");
    println!("rust optimistic_hinted_validate {opt_hinted:.1}");
    println!("rust latch_release_clean {latch:.1}");
    println!("rust hot_latch_release_clean {hot_latch:.1}");
    println!("rust read_at_64 {read:.1}");
    println!("rust hot_read_at_64 {hot_read:.1}");
    println!("rust hot_pin_release {hot_pin:.1}");
    println!("rust hot_pread_64 {hot_pread:.1}");
    println!("rust pin_release {pin:.1}");
    println!("rust pread_64 {pread:.1}");
    Ok(())
}
