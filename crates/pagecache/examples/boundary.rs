//! The Rust side of the boundary benchmark (scripts/bench-boundary.sh):
//! a 64 B `read_at` of a cached page and a page pin + release, next to the
//! kernel's `pread` of the same bytes (from its page cache), one thread;
//! random pages of a 64 MiB file, and one page over and over ("hot").
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
    let file = cache.open(&path)?;
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
    println!("rust read_at_64 {read:.1}");
    println!("rust hot_read_at_64 {hot_read:.1}");
    println!("rust hot_pin_release {hot_pin:.1}");
    println!("rust hot_pread_64 {hot_pread:.1}");
    println!("rust pin_release {pin:.1}");
    println!("rust pread_64 {pread:.1}");
    Ok(())
}
