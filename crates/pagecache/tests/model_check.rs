//! A randomized model check of the public API, in the spirit of `fsx`: a
//! stream of random operations runs against the cache and against an
//! in-memory model of the file, with a tiny capacity so eviction and
//! write-back happen all the time, and with faults injected (read and write
//! errors, ENOSPC, short reads, failing truncates) where the model knows
//! exactly what must survive. After every sync and close the bytes on disk
//! are compared with the model.
//!
//! CI runs a bounded number of operations. A longer run, and a replay:
//!
//! ```sh
//! MODEL_CHECK_OPS=1000000 cargo test --release -p pagecache --test model_check -- --nocapture
//! MODEL_CHECK_SEED=12345 MODEL_CHECK_OPS=50000 cargo test --release -p pagecache --test model_check one_handle -- --nocapture
//! MODEL_CHECK_SEEDS=40 MODEL_CHECK_OPS=20000 cargo test --release -p pagecache --test model_check one_handle
//! ```
//!
//! Each seed also draws the cache's `Config` (the flusher's thresholds
//! from 1% to off, the I/O engine, stable pages; `harness::config_for`).
//! Among the operations: optimistic views (pinned or not) held across a
//! cut of their page, the file grown back over it, eviction and frame
//! reuse, then validated, re-found through their frame hint and upgraded;
//! with a write-back hook (`write_back_hook_deferrals_and_held_views`),
//! deferrals from eviction, the flusher and sync, and syncs during
//! another thread's evictions; every handle discarded (or closed with failing
//! writes, then the file forgotten) while write-backs may be in flight,
//! then the file reused; a run held while its holder cuts the file below
//! it, writes the new pages at its indices and syncs.
//!
//! A failure prints the seed, the operation count and the last operations.
mod common;
#[path = "model/harness.rs"]
mod harness;
use common::{make_file, TempDir, PS};
use harness::{open, Choose, Harness, Log, Rng};
use pagecache::{Config, PageCache};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Operations per configuration in CI (debug build), unless overridden.
const CI_OPS: u64 = 20_000;

fn ops_budget() -> u64 {
    std::env::var("MODEL_CHECK_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CI_OPS)
}

/// `MODEL_CHECK_SEED=S` replays seed S; `MODEL_CHECK_SEEDS=N` runs seeds
/// 1..=N (each with its own random `Config`, printed on failure).
fn seeds(default: &[u64]) -> Vec<u64> {
    let var = |k| std::env::var(k).ok().and_then(|v| v.parse().ok());
    match (var("MODEL_CHECK_SEED"), var("MODEL_CHECK_SEEDS")) {
        (Some(s), _) => vec![s],
        (None, Some(n)) => (1..=n).collect(),
        (None, None) => default.to_vec(),
    }
}

fn run(what: &str, default_seeds: &[u64], frames: usize, nhandles: usize) {
    run_with(what, default_seeds, frames, nhandles, false)
}

fn run_with(what: &str, default_seeds: &[u64], frames: usize, nhandles: usize, hooked: bool) {
    let d = TempDir::new("model");
    for seed in seeds(default_seeds) {
        let mut rng = Rng::new(seed);
        let mut h = Harness::with_hook(&d.0, what, seed, frames, nhandles, hooked);
        let evidence = Evidence {
            recent: h.log.recent(),
            probe: h.probe.clone(),
        };
        let dog = Watchdog::new(format!("{what}: seed {seed}{}", h.log.config), evidence);
        for _ in 0..ops_budget() {
            h.step(&mut rng);
            dog.progress(h.log.ops);
        }
        println!("{what}: seed {seed}: {} operations checked", h.log.ops);
        h.finish();
    }
}

/// Ends the process with the seed and configuration if a stream makes no
/// progress for two minutes (a deadlock would otherwise hang CI with no
/// word of which seed found it). Before it aborts it prints the last
/// operations, the frames the cache holds (`describe_held`) and, where
/// `gdb` is installed, every thread's stack.
struct Watchdog {
    ops: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
}

/// What a stuck stream's watchdog prints besides its seed.
struct Evidence {
    recent: Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    probe: Arc<std::sync::Mutex<pagecache::HeldProbe>>,
}

impl Watchdog {
    fn new(what: String, evidence: Evidence) -> Watchdog {
        let ops = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (o, s) = (ops.clone(), stop.clone());
        std::thread::spawn(move || {
            let (mut last, mut since) = (0, std::time::Instant::now());
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let now = o.load(Ordering::Relaxed);
                if now != last {
                    (last, since) = (now, std::time::Instant::now());
                } else if since.elapsed() > std::time::Duration::from_secs(120) {
                    stuck(&what, now, &evidence);
                }
            }
        });
        Watchdog { ops, stop }
    }

    fn progress(&self, ops: u64) {
        self.ops.store(ops, Ordering::Relaxed);
    }
}

/// Prints what is known of a stuck stream, then aborts. Straight to the
/// descriptor: the test harness captures `eprintln!`, and the abort would
/// lose it. The locks are taken with `try_lock`: the stuck thread may hold
/// one.
fn stuck(what: &str, now: u64, evidence: &Evidence) -> ! {
    use std::io::Write;
    let mut out = format!(
        "model check {what}: no progress for 120 s after operation {now} (a deadlock?); replay with MODEL_CHECK_SEED\n  the last operations:\n"
    );
    match evidence.recent.try_lock() {
        Ok(ops) => ops.iter().for_each(|o| out += &format!("    {o}\n")),
        Err(_) => out += "    (the log is locked)\n",
    }
    let held = match evidence.probe.try_lock() {
        Ok(p) => p
            .describe()
            .unwrap_or_else(|| "(the cache is gone)\n".into()),
        Err(_) => "(the probe is locked)\n".into(),
    };
    out += &format!("  frames held:\n{held}");
    let _ = std::io::stderr().write_all(out.as_bytes());
    common::print_stacks();
    std::process::abort();
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[test]
fn one_handle() {
    run("one_handle", &[1, 2], 8, 1);
}

#[test]
fn two_handles_on_one_file() {
    run("two_handles", &[3], 12, 2);
}

/// The stream with a write-back hook it steers (write all, defer some,
/// defer all; a sleep before an eviction's deferral), views held across
/// truncate, regrowth, eviction and frame reuse (as in every stream), and
/// syncs while another thread's misses make eviction write pages back.
/// Every sync that returns `Ok` is checked against the disk, and every
/// write against the throttle's bound. Its seeds draw thresholds as low as
/// 1% (every write throttled, with a flusher the hook may leave nothing to
/// write).
#[test]
fn write_back_hook_deferrals_and_held_views() {
    run_with("hooked", &[4, 5], 12, 2, true);
}

/// Several threads, each on its own region of one file (with its own
/// model), a thread syncing, many more threads than cores, 16 frames for
/// 64 pages. At the end the disk must equal every region's model.
#[test]
fn threads_on_disjoint_regions_with_a_syncer() {
    const THREADS: usize = 8;
    const REGION: usize = 8 * PS;
    let d = TempDir::new("model");
    for seed in seeds(&[7]) {
        let p = d.path(&format!("mt-{seed}"));
        make_file(&p, (THREADS * REGION) as u64);
        let initial = std::fs::read(&p).unwrap();
        let cache = PageCache::new(Config {
            capacity: 16 * PS,
            ..Config::default()
        })
        .unwrap();
        let f = open(&cache, &p);
        let stop = Arc::new(AtomicBool::new(false));
        let syncer = {
            let (f, stop) = (f.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    f.sync().unwrap();
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            })
        };
        let ops = (ops_budget() / 4).max(100);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let f = f.clone();
                let mut model = initial[t * REGION..(t + 1) * REGION].to_vec();
                std::thread::spawn(move || {
                    let mut rng = Rng::new(seed * 1000 + t as u64);
                    let mut log = Log::new(&format!("threads, region {t}"), seed);
                    let base = (t * REGION) as u64;
                    for _ in 0..ops {
                        let off = rng.below(REGION as u64);
                        let n = (1 + rng.below(2 * PS as u64) as usize).min(REGION - off as usize);
                        match rng.below(4) {
                            0 => {
                                let data = rng.bytes(n);
                                log.op(format!("write_at({}, {n})", base + off));
                                f.write_at(&data, base + off).unwrap();
                                model[off as usize..off as usize + n].copy_from_slice(&data);
                            }
                            1 => {
                                log.op(format!("read_at({}, {n})", base + off));
                                let mut buf = vec![0u8; n];
                                f.read_at(&mut buf, base + off).unwrap();
                                if buf[..] != model[off as usize..off as usize + n] {
                                    log.fail(format!("read_at({}, {n}) wrong", base + off));
                                }
                            }
                            2 => {
                                let i = off / PS as u64;
                                log.op(format!("page({})", base / PS as u64 + i));
                                let pg = f.page(base / PS as u64 + i).unwrap();
                                let m = &model[i as usize * PS..(i as usize + 1) * PS];
                                if pg[..] != m[..] {
                                    log.fail(format!("page {} wrong", base / PS as u64 + i));
                                }
                            }
                            _ => {
                                let i = off / PS as u64;
                                let o = (off % PS as u64) as usize;
                                let b = rng.next() as u8;
                                log.op(format!("page_mut({})[{o}] = {b}", base / PS as u64 + i));
                                f.page_mut(base / PS as u64 + i).unwrap()[o] = b;
                                model[i as usize * PS + o] = b;
                            }
                        }
                    }
                    model
                })
            })
            .collect();
        let mut want = Vec::new();
        for w in workers {
            want.extend(w.join().unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        syncer.join().unwrap();
        f.sync().unwrap();
        assert!(
            std::fs::read(&p).unwrap() == want,
            "threads: disk differs from the models (seed {seed})"
        );
        drop(f);
        cache.validate();
        println!("threads: seed {seed}: {THREADS} x {ops} operations checked");
    }
}
