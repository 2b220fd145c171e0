//! Where a future's time goes, idle and under load: random 4 KiB
//! `page_async` misses of a 2 GiB file through a 256 MiB cache on tokio
//! (one thread, or two workers) or blocking `page()` threads, each run
//! followed by the device at the same depth (`O_DIRECT` through io_uring,
//! one thread), with N processes spinning on the CPUs throughout; per
//! thread of the process (by name), the CPU time and the time runnable but
//! waiting for a CPU (`/proc/self/task/*/schedstat`) per read.
//!
//! ```text
//! cargo run --release -p pagecache-lab --example async_load -- BUSY ROUNDS SECS CONFIGS
//! # CONFIGS: comma-separated t1-DEPTH (tokio, one thread), t2-DEPTH (two
//! # workers), b-DEPTH (blocking threads); e.g. 8 2 3 t1-32,t1-64
//! ```
//! Root, for `drop_caches`; the data file is made once in /tmp/pcload.
use pagecache::{Config, PageCache};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PS: u64 = 4096;

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let busy: usize = args.get(1).map_or(0, |v| v.parse().unwrap());
    let rounds: usize = args.get(2).map_or(3, |v| v.parse().unwrap());
    let secs: f64 = args.get(3).map_or(3.0, |v| v.parse().unwrap());
    let which: String = args
        .get(4)
        .cloned()
        .unwrap_or("t1-32,t1-64,t2-64,b32".into());
    let data = std::path::Path::new("/tmp/pcload/data.bin");
    if !data.exists() {
        std::fs::create_dir_all("/tmp/pcload").unwrap();
        let f = std::fs::File::create(data).unwrap();
        use std::io::Write;
        let mut w = std::io::BufWriter::new(f);
        let chunk = vec![7u8; 1 << 20];
        for _ in 0..2048 {
            w.write_all(&chunk).unwrap();
        }
    }
    let pages = std::fs::metadata(data).unwrap().len() / PS;
    let _busy = pagecache_lab::runner::Busy::start(busy).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    for round in 0..rounds {
        for cfg in which.split(',') {
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            let (kind, depth) = cfg.split_once('-').unwrap_or((cfg, "32"));
            let depth: usize = depth.parse().unwrap();
            let c = PageCache::new(Config {
                capacity: 256 << 20,
                populate: true,
                ..Config::default()
            })
            .unwrap();
            let f = Arc::new(c.open(data).unwrap());
            let n = Arc::new(AtomicU64::new(0));
            let snap = || {
                let mut m = std::collections::BTreeMap::<String, (f64, f64, f64)>::new();
                for e in std::fs::read_dir("/proc/self/task").unwrap() {
                    let e = e.unwrap();
                    let comm = std::fs::read_to_string(e.path().join("comm"))
                        .unwrap_or_default()
                        .trim()
                        .to_string();
                    let ss =
                        std::fs::read_to_string(e.path().join("schedstat")).unwrap_or_default();
                    let v: Vec<f64> = ss
                        .split_whitespace()
                        .map(|x| x.parse().unwrap_or(0.0))
                        .collect();
                    if v.len() == 3 {
                        let x = m.entry(comm).or_default();
                        x.0 += v[0];
                        x.1 += v[1];
                        x.2 += v[2];
                    }
                }
                m
            };
            let s0 = snap();
            let t0 = Instant::now();
            let deadline = t0 + Duration::from_secs_f64(secs);
            match kind {
                "t1" | "t2" => {
                    let rt = if kind == "t1" {
                        tokio::runtime::Builder::new_current_thread()
                            .build()
                            .unwrap()
                    } else {
                        tokio::runtime::Builder::new_multi_thread()
                            .worker_threads(2)
                            .build()
                            .unwrap()
                    };
                    rt.block_on(async {
                        let mut hs = Vec::new();
                        for t in 0..depth {
                            let (f, n) = (f.clone(), n.clone());
                            hs.push(tokio::spawn(async move {
                                let mut x = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                                while Instant::now() < deadline {
                                    let p = f.page_async(rng(&mut x) % pages).await.unwrap();
                                    std::hint::black_box(p[0]);
                                    n.fetch_add(1, Ordering::Relaxed);
                                }
                            }));
                        }
                        for h in hs {
                            h.await.unwrap();
                        }
                    });
                }
                _ => {
                    std::thread::scope(|s| {
                        for t in 0..depth {
                            let (f, n) = (f.clone(), n.clone());
                            s.spawn(move || {
                                let mut x = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                                while Instant::now() < deadline {
                                    let p = f.page(rng(&mut x) % pages).unwrap();
                                    std::hint::black_box(p[0]);
                                    n.fetch_add(1, Ordering::Relaxed);
                                }
                            });
                        }
                    });
                }
            }
            let rate = n.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
            let total = n.load(Ordering::Relaxed) as f64;
            let s1 = snap();
            for (k, v) in &s1 {
                let z = s0.get(k).copied().unwrap_or_default();
                if v.0 - z.0 > 1e6 {
                    println!("   {k}: cpu {:.1} us/read, runqueue wait {:.1} us/read, {:.2} switches/read", (v.0 - z.0) / total / 1e3, (v.1 - z.1) / total / 1e3, (v.2 - z.2) / total);
                }
            }
            drop(f);
            drop(c);
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            let (dev, _) =
                pagecache_lab::scenarios::async_reads::device_rate(data, depth, secs).unwrap();
            println!(
                "round {round} busy {busy} {cfg:8} {:7.1} k/s  device {:7.1} k/s  ratio {:.2}",
                rate / 1e3,
                dev / 1e3,
                rate / dev
            );
        }
    }
}
