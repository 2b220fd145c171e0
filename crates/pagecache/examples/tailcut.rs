//! Writers of a file whose tail is being cut: 6 threads each rewrite their
//! own 16 pages of one file through a 24-frame cache (so nearly every
//! write evicts a dirty page and reads its own), the last thread also cuts
//! its tail with `set_len` every 8th operation and grows it back, and a
//! thread calls `sync` about every millisecond; 40,000 operations per
//! thread. Prints the wall time, the writers' rate, `set_len`'s latency,
//! and checks the file's bytes at the end.
//!
//! `set_len` excludes only what touches the pages it cuts: the five other
//! writers never wait for it (and it never waits for them).
//!
//! ```sh
//! cargo run --release -p pagecache --example tailcut [OPS_PER_THREAD] [RUNS] [DIR]
//! ```
//!
//! DIR defaults to the temporary directory; on a disk the run is bound by
//! the device's write latency (each eviction writes a dirty page), on
//! tmpfs (`/dev/shm`) by the CPU and the locks.

use pagecache::{Config, PageCache};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const PS: usize = 4096;
const THREADS: u64 = 6;
const PAGES: u64 = 16;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let ops: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(40_000);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(3);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("pagecache-tailcut-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut walls = Vec::new();
    for run in 0..runs {
        let r = one_run(&dir, ops)?;
        println!(
            "run {run}: {:.2} s; other writers {:.0} ops/s, write p50 {:.1} us p99 {:.1} us p99.9 {:.2} ms; set_len {} calls, median {:.1} us, max {:.1} ms; syncs {}",
            r.wall.as_secs_f64(),
            r.other_ops as f64 / r.others_done.as_secs_f64(),
            pct(&r.other_lat, 0.5) * 1e6,
            pct(&r.other_lat, 0.99) * 1e6,
            pct(&r.other_lat, 0.999) * 1e3,
            r.set_lens.len(),
            r.set_lens[r.set_lens.len() / 2].as_secs_f64() * 1e6,
            r.set_lens.last().unwrap().as_secs_f64() * 1e3,
            r.syncs,
        );
        walls.push(r.wall);
    }
    walls.sort_unstable();
    println!(
        "median of {runs}: {:.2} s",
        walls[walls.len() / 2].as_secs_f64()
    );
    std::fs::remove_dir_all(&dir)
}

/// The `q` quantile of sorted `v`, in seconds.
fn pct(v: &[Duration], q: f64) -> f64 {
    v[((v.len() - 1) as f64 * q) as usize].as_secs_f64()
}

struct Run {
    wall: Duration,
    /// Latencies of the other writers' writes, sorted.
    other_lat: Vec<Duration>,
    others_done: Duration,
    other_ops: u64,
    set_lens: Vec<Duration>,
    syncs: u64,
}

/// The byte thread `t` writes in its `n`th write.
fn byte(t: u64, n: u64) -> u8 {
    (t * 31 + n) as u8 | 1
}

fn one_run(dir: &std::path::Path, ops: u64) -> std::io::Result<Run> {
    let p = dir.join("f");
    let full = THREADS * PAGES * PS as u64;
    std::fs::write(&p, vec![0u8; full as usize])?;
    let c = PageCache::new(Config {
        capacity: 24 * PS,
        ..Config::default()
    })?;
    let f = c.open(&p)?;
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mut set_lens = Vec::new();
    let mut other_lat = Vec::new();
    let mut syncs = 0;
    let mut others_done = Duration::ZERO;
    // The last byte each thread wrote to each of its pages.
    let mut last = vec![[0u8; PAGES as usize]; THREADS as usize];
    std::thread::scope(|s| -> std::io::Result<()> {
        let syncer = s.spawn(|| -> std::io::Result<u64> {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                f.sync()?;
                n += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(n)
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let f = &f;
                s.spawn(move || -> std::io::Result<(Vec<Duration>, Vec<Duration>, [u8; PAGES as usize])> {
                    let mut mine = [0u8; PAGES as usize];
                    let mut lat = Vec::with_capacity(ops as usize);
                    let mut cuts = Vec::new();
                    let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                    let base = t * PAGES;
                    let mut buf = vec![0u8; PS];
                    for n in 0..ops {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = x % PAGES;
                        if t == THREADS - 1 && n % 8 == 7 {
                            // Cut 1-4 pages and a half off the tail, then
                            // grow back to the full length (zeros).
                            let keep = PAGES - 1 - x % 4;
                            let at = Instant::now();
                            f.set_len((base + keep) * PS as u64 + PS as u64 / 2)?;
                            f.set_len(full)?;
                            cuts.push(at.elapsed());
                            for (j, m) in mine.iter_mut().enumerate() {
                                if j as u64 > keep {
                                    *m = 0;
                                }
                            }
                            // The half page kept holds the old byte in its
                            // first half only: rewrite it whole.
                            let b = mine[keep as usize];
                            buf.fill(b);
                            f.write_at(&buf, (base + keep) * PS as u64)?;
                            continue;
                        }
                        let b = byte(t, n);
                        buf.fill(b);
                        let at = Instant::now();
                        f.write_at(&buf, (base + i) * PS as u64)?;
                        lat.push(at.elapsed());
                        mine[i as usize] = b;
                    }
                    Ok((cuts, lat, mine))
                })
            })
            .collect();
        for (t, w) in writers.into_iter().enumerate() {
            let (cuts, lat, mine) = w.join().unwrap()?;
            if (t as u64) < THREADS - 1 {
                other_lat.extend(lat);
            }
            if t as u64 == THREADS - 2 {
                others_done = t0.elapsed();
            }
            set_lens.extend(cuts);
            last[t] = mine;
        }
        stop.store(true, Ordering::Relaxed);
        syncs = syncer.join().unwrap()?;
        Ok(())
    })?;
    let wall = t0.elapsed();
    f.sync()?;
    drop(f);
    drop(c);
    let disk = std::fs::read(&p)?;
    assert_eq!(disk.len() as u64, full, "file length");
    for t in 0..THREADS {
        for i in 0..PAGES {
            let at = ((t * PAGES + i) * PS as u64) as usize;
            let want = last[t as usize][i as usize];
            assert!(
                disk[at..at + PS].iter().all(|&b| b == want),
                "thread {t} page {i}: want {want:#x}, disk has {:#x}",
                disk[at]
            );
        }
    }
    set_lens.sort_unstable();
    other_lat.sort_unstable();
    Ok(Run {
        wall,
        other_lat,
        others_done,
        other_ops: (THREADS - 1) * ops,
        set_lens,
        syncs,
    })
}
