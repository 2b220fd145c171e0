//! Threads contending for the latches of a few hot pages: each thread
//! writes its own 8-byte slot of a random one of 4 pages (`write_at`: the
//! page's latch, waiting for readers' pins to drain), and one operation in
//! four pins the page instead (`page()`) and reads the slot back while it
//! holds the pin. With more threads than CPUs, latch holders and pin
//! holders are preempted and the others sleep in the wait buckets
//! (protocol 5.10): this is the blocking waits' benchmark. Prints the
//! operations per second at each thread count (median of the runs) and
//! checks every slot's last value at the end of each run.
//!
//! ```sh
//! cargo run --release -p pagecache --example latch_waits [SECONDS] [RUNS] [THREADS,...]
//! ```

use pagecache::{Config, OpenOptions, PageCache};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PS: u64 = 4096;
const HOT: u64 = 4;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let threads: Vec<u64> = args
        .next()
        .map(|a| a.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![2, 32]);
    let dir = std::env::temp_dir().join(format!("pagecache-latch-waits-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for &t in &threads {
        let mut rates = Vec::new();
        for _ in 0..runs {
            rates.push(one_run(&dir, t, Duration::from_secs_f64(secs))?);
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "{t:>3} threads: {:>6.2} M ops/s (median of {runs}; runs {})",
            rates[rates.len() / 2] / 1e6,
            rates
                .iter()
                .map(|r| format!("{:.2}", r / 1e6))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    std::fs::remove_dir_all(&dir)
}

fn one_run(dir: &std::path::Path, threads: u64, dur: Duration) -> std::io::Result<f64> {
    let cache = PageCache::new(Config {
        capacity: 1 << 20,
        ..Config::default()
    })?;
    let file = cache.open_with(
        dir.join("hot.bin"),
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true),
    )?;
    file.write_at(&vec![0u8; (HOT * PS) as usize], 0)?;
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let results: Vec<(u64, u64, Vec<u64>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (file, stop) = (&file, &stop);
                s.spawn(move || {
                    let mut last = vec![0u64; HOT as usize];
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    let mut ops = 0u64;
                    let mut reads = 0u64;
                    let slot = t * 8;
                    while !stop.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let p = x % HOT;
                        if x >> 62 == 0 {
                            let g = file.page(p).expect("page");
                            let v = u64::from_le_bytes(
                                g[slot as usize..slot as usize + 8].try_into().unwrap(),
                            );
                            assert_eq!(v, last[p as usize], "thread {t} page {p}");
                            reads += 1;
                        } else {
                            ops += 1;
                            file.write_at(&ops.to_le_bytes(), p * PS + slot)
                                .expect("write");
                            last[p as usize] = ops;
                        }
                    }
                    (ops, reads, last)
                })
            })
            .collect();
        std::thread::sleep(dur);
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let wall = t0.elapsed();
    let mut total = 0;
    for (t, (ops, reads, last)) in results.iter().enumerate() {
        total += ops + reads;
        for (p, &v) in last.iter().enumerate() {
            let mut b = [0u8; 8];
            file.read_at(&mut b, p as u64 * PS + t as u64 * 8)?;
            assert_eq!(u64::from_le_bytes(b), v, "thread {t} page {p} at the end");
        }
    }
    Ok(total as f64 / wall.as_secs_f64())
}
