//! `btree`: an index on the cache against vmcache (Leis et al., SIGMOD
//! 2023), on vmcache's own RNDREAD workload: 8-byte big-endian keys,
//! 120-byte values whose first 8 bytes repeat the key, loaded in key order
//! by the run's threads (each its own range), then random point lookups,
//! each checked. Beside it, on our designs only: a 50/50 lookup/update mix
//! with Zipf keys (YCSB's generator, theta 0.99, ranks scrambled), and
//! ordered scans of 100 entries from random keys.
//!
//! Designs: the tree of `pagecache-btree` with optimistic lock coupling
//! (views, validation, upgrades: no shared write on a lookup), the same
//! tree with pin coupling (the "before": two atomic read-modify-writes of
//! each visited page's state word), and vmcache itself when `--vmcache
//! PATH` names its binary (built unchanged from viktorleis/vmcache; run as
//! a process on a file of its own, its per-second lookup counts parsed, its
//! load timed from its start to its first report line).
//!
//! Two data sizes: in memory (the pool larger than the data) and out of
//! memory (data about 4x the pool, the kernel's cache dropped first; both
//! systems use direct I/O). vmcache's pool is whole gigabytes (`PHYSGB`),
//! so the full run's out-of-memory case is 28 M tuples (4 GB) in 1 GB.
//! Update mix out of memory: pages written back per page evicted, from the
//! cache's own counters.
//!
//! Out of memory, each lookup window is followed by a second of random
//! 4 KiB `O_DIRECT` reads of a file of real data on the same disk at the
//! same thread count: the device's rate then. On a disk shared with other
//! work, whose speed drifts over minutes by more than the designs differ,
//! lookups per device read compare the designs where lookups per second
//! cannot (each run against the device as it was, then the median).

use crate::runner::{median, progress, Opts, Series, Table};
use pagecache::{Config, OpenOptions, PageCache};
use pagecache_btree::{BTree, Coupling};
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One data size.
#[derive(Debug, Clone, Copy)]
struct Case {
    name: &'static str,
    tuples: u64,
    /// Our pool in bytes.
    pool: usize,
    /// vmcache's `PHYSGB`.
    physgb: u64,
}

#[derive(Debug, Clone, Copy)]
struct Size {
    cases: [Case; 2],
    secs: f64,
    runs: usize,
}

fn size(o: &Opts) -> Size {
    let (mem, oom, secs, runs) = if o.tiny {
        ((4_000, 64 << 20), (8_000, 300 << 10), 0.1, 1)
    } else if o.quick {
        ((200_000, 256 << 20), (400_000, 16 << 20), 0.5, 1)
    } else {
        (
            (7_000_000, 4 << 30),
            (28_000_000, 1 << 30),
            3.0,
            o.runs.clamp(1, 3),
        )
    };
    Size {
        cases: [
            Case {
                name: "in memory",
                tuples: mem.0,
                pool: mem.1,
                physgb: (mem.1 >> 30).max(1) as u64,
            },
            Case {
                name: "out of memory",
                tuples: oom.0,
                pool: oom.1,
                physgb: (oom.1 >> 30).max(1) as u64,
            },
        ],
        secs,
        runs,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Design {
    Optimistic,
    Pin,
    Vmcache,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::Optimistic => "optimistic coupling",
            Design::Pin => "pin coupling (before)",
            Design::Vmcache => "vmcache",
        }
    }
}

/// What one run of one design measured.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    load: f64,
    lookups: f64,
    mix: f64,
    scan: f64,
    /// Pages written back per page evicted during the mix (out of memory).
    wb_per_evict: f64,
    /// Pages written back per second during the mix.
    written: f64,
    /// Optimistic restarts per lookup (`BTree::restarts`): views that
    /// failed validation, out of memory views of frames evicted and
    /// reused before their validation.
    restarts: f64,
    /// Out of memory: the device's random 4 KiB read rate on the data,
    /// right after the lookups ([`device_rate`]).
    device: f64,
}

/// How long [`device_rate`] reads.
const PROBE_SECS: f64 = 1.0;

/// The device's rate of random 4 KiB `O_DIRECT` reads of `probe` (a file
/// of real data, [`probe_file`]) on `threads` threads for `secs`.
/// Measured right after each out-of-memory lookup window: a disk shared
/// with other work drifts over minutes by more than the designs differ,
/// so each design's lookups are also given per read the device did at
/// that time. (Not of each design's own file: vmcache's keeps its
/// resident pages as holes, which read without the device.)
fn device_rate(probe: &Path, threads: usize, secs: f64) -> io::Result<f64> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(probe)?;
    let pages = (f.metadata()?.len() / PAGE).max(1);
    timed(threads, secs, |_, rng| {
        let mut a = crate::scenarios::out_of_memory::Aligned::new(PAGE as usize);
        f.read_exact_at(a.buf(), (rng.next() % pages) * PAGE)?;
        Ok(1)
    })
}

/// [`device_rate`]'s file in `dir`: `bytes` of data, on disk.
fn probe_file(dir: &Path, bytes: u64) -> io::Result<PathBuf> {
    use std::io::Write;
    let path = dir.join("device-probe");
    let mut f = std::fs::File::create(&path)?;
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i * 7 + 1) as u8).collect();
    for _ in 0..bytes.div_ceil(1 << 20) {
        f.write_all(&chunk)?;
    }
    f.sync_all()?;
    Ok(path)
}

/// The page of [`device_rate`]'s reads.
const PAGE: u64 = 4096;

const VALUE: usize = 120;

thread_local! {
    /// Each thread's lookup buffer (vmcache copies into a stack array: no
    /// allocation per lookup on either side).
    static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(VALUE));
}

fn value(k: u64, salt: u8) -> [u8; VALUE] {
    let mut v = [salt; VALUE];
    v[..8].copy_from_slice(&k.to_be_bytes());
    v
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// YCSB's Zipfian generator (Gray et al.) over `0..n`, ranks scrambled
/// with a multiplicative hash so that hot keys spread over the tree.
struct Zipf {
    n: u64,
    theta: f64,
    zetan: f64,
    alpha: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Zipf {
        let zeta = |m: u64| (1..=m).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2);
        Zipf {
            n,
            theta,
            zetan,
            alpha: 1.0 / (1.0 - theta),
            eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
        }
    }

    fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        let rank = if uz < 1.0 {
            0
        } else if uz < 1.0 + 0.5f64.powf(self.theta) {
            1
        } else {
            ((self.n as f64) * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
        };
        rank.min(self.n - 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.n
    }
}

/// Runs `op` on `threads` threads for `secs`; operations per second.
fn timed(
    threads: usize,
    secs: f64,
    op: impl Fn(usize, &mut Rng) -> io::Result<u64> + Sync,
) -> io::Result<f64> {
    let s = crate::runner::measure(threads, |t| {
        let mut rng =
            Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
        let end = Instant::now() + Duration::from_secs_f64(secs);
        let mut done = 0;
        while Instant::now() < end {
            for _ in 0..64 {
                done += op(t, &mut rng)?;
            }
        }
        Ok(done)
    })?;
    Ok(s.rate())
}

fn check(found: bool, v: &[u8], k: u64) -> io::Result<u64> {
    if !found || v.len() != VALUE || v[..8] != k.to_be_bytes() {
        return Err(io::Error::other(format!(
            "lookup of key {k}: {}",
            if found { "a wrong value" } else { "not found" }
        )));
    }
    Ok(1)
}

/// One run of our tree with `coupling`.
fn ours(
    dir: &Path,
    case: Case,
    coupling: Coupling,
    threads: usize,
    secs: f64,
    probe: Option<&Path>,
) -> io::Result<Run> {
    let path = dir.join("tree");
    let _ = std::fs::remove_file(&path);
    crate::scenarios::out_of_memory::drop_cache(&path);
    let cache = PageCache::new(Config {
        capacity: case.pool,
        ..Config::default()
    })?;
    let file = cache.open_with(
        &path,
        OpenOptions::new().read(true).write(true).create(true),
    )?;
    let tree = BTree::open_with(file, coupling)?;
    let n = case.tuples;
    // Load: each thread its range, in key order.
    let s = crate::runner::measure(threads, |t| {
        let (lo, hi) = (
            n * t as u64 / threads as u64,
            n * (t as u64 + 1) / threads as u64,
        );
        for k in lo..hi {
            tree.insert(&k.to_be_bytes(), &value(k, 0))?;
        }
        Ok(hi - lo)
    })?;
    let load = s.rate();
    if tree.len() != n {
        return Err(io::Error::other(format!(
            "loaded {} tuples of {n}",
            tree.len()
        )));
    }
    let restarts0 = tree.restarts();
    let lookups = timed(threads, secs, |_, rng| {
        let k = rng.next() % n;
        BUF.with_borrow_mut(|v| {
            let found = tree.get_into(&k.to_be_bytes(), v)?;
            check(found, v, k)
        })
    })?;
    let restarts = (tree.restarts() - restarts0) as f64 / (lookups * secs).max(1.0);
    let device = match probe {
        Some(p) => device_rate(p, threads, PROBE_SECS)?,
        None => f64::NAN,
    };
    let zipf = Zipf::new(n, 0.99);
    let before = cache.stats();
    let mix = timed(threads, secs, |_, rng| {
        let k = zipf.next(rng);
        if rng.next() & 1 == 0 {
            BUF.with_borrow_mut(|v| {
                let found = tree.get_into(&k.to_be_bytes(), v)?;
                check(found, v, k)
            })
        } else {
            tree.insert(&k.to_be_bytes(), &value(k, rng.next() as u8))?;
            Ok(1)
        }
    })?;
    let after = cache.stats();
    let evicted = after.evictions - before.evictions;
    let written = after.writebacks - before.writebacks;
    let scan = timed(threads, secs, |_, rng| {
        let k = rng.next() % n;
        let mut seen = 0u64;
        let mut want = k;
        let mut bad = false;
        tree.scan(&k.to_be_bytes(), |key, _| {
            bad |= key != want.to_be_bytes();
            want += 1;
            seen += 1;
            seen < 100
        })?;
        if bad {
            return Err(io::Error::other(format!(
                "scan from key {k}: keys out of order or missing"
            )));
        }
        Ok(seen)
    })?;
    drop(tree);
    drop(cache);
    let _ = std::fs::remove_file(&path);
    Ok(Run {
        load,
        lookups,
        mix,
        scan,
        wb_per_evict: if evicted > 0 {
            written as f64 / evicted as f64
        } else {
            f64::NAN
        },
        written: written as f64 / secs,
        restarts,
        device,
    })
}

/// One run of vmcache's RNDREAD on its own file: load rate (tuples over the
/// time from its start to its first report line) and the median of its
/// per-second lookup counts.
fn vmcache(
    bin: &Path,
    dir: &Path,
    case: Case,
    threads: usize,
    secs: f64,
    probe: Option<&Path>,
) -> io::Result<Run> {
    let path = dir.join("vmcache.bin");
    let _ = std::fs::remove_file(&path);
    // vmcache opens an existing file (no O_CREAT) and reads page 0 first.
    let virtgb = (case.tuples * 160).div_ceil(1 << 30).max(case.physgb) + 1;
    std::fs::File::create(&path)?.set_len(virtgb << 30)?;
    crate::scenarios::out_of_memory::drop_cache(&path);
    let runfor = (secs.ceil() as u64).max(2) + 1;
    let t0 = Instant::now();
    let mut child = Command::new(bin)
        .env("BLOCK", &path)
        .env("PHYSGB", case.physgb.to_string())
        .env("VIRTGB", virtgb.to_string())
        .env("THREADS", threads.to_string())
        .env("DATASIZE", case.tuples.to_string())
        .env("RNDREAD", "1")
        .env("RUNFOR", runfor.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", bin.display())))?;
    let out = child.stdout.take().expect("piped");
    let mut load = None;
    let mut per_sec = Vec::new();
    for line in io::BufReader::new(out).lines() {
        let line = line?;
        if line.starts_with("ts,") {
            load = Some(case.tuples as f64 / t0.elapsed().as_secs_f64());
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        if f.len() >= 2 {
            if let Ok(tx) = f[1].parse::<f64>() {
                per_sec.push(tx);
            }
        }
    }
    let status = child.wait()?;
    let device = match probe {
        Some(p) if status.success() => device_rate(p, threads, PROBE_SECS)?,
        _ => f64::NAN,
    };
    let _ = std::fs::remove_file(&path);
    if !status.success() || per_sec.is_empty() {
        return Err(io::Error::other(format!(
            "{} failed: {status}",
            bin.display()
        )));
    }
    // The first second may include the end of the load's write-back.
    if per_sec.len() > 2 {
        per_sec.remove(0);
    }
    Ok(Run {
        load: load.unwrap_or(f64::NAN),
        lookups: median(&mut per_sec),
        mix: f64::NAN,
        scan: f64::NAN,
        wb_per_evict: f64::NAN,
        written: f64::NAN,
        restarts: f64::NAN,
        device,
    })
}

fn fmt_rate(x: f64) -> String {
    if x.is_nan() {
        "-".into()
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else {
        format!("{:.1} k", x / 1e3)
    }
}

fn fmt_ratio(a: f64, b: f64) -> String {
    if a.is_nan() || b.is_nan() || b == 0.0 {
        "-".into()
    } else {
        format!("{:.2}x", a / b)
    }
}

pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let sz = size(o);
    let dir = crate::TempDir::new("btree")?;
    let mut designs = vec![Design::Optimistic, Design::Pin];
    if o.vmcache.is_some() {
        designs.push(Design::Vmcache);
    }
    let threads = o.threads.clone();
    // results[case][design][threads] = runs
    let mut res: Vec<Vec<Vec<Vec<Run>>>> =
        vec![vec![vec![Vec::new(); threads.len()]; designs.len()]; 2];
    let total = sz.runs * 2 * designs.len() * threads.len();
    let mut done = 0;
    // Out of memory, the device's rate next to each lookup window.
    let probe = probe_file(&dir.0, sz.cases[1].pool.max(64 << 20) as u64)?;
    // Runs interleaved: every configuration once, then again.
    for _ in 0..sz.runs {
        for (ci, case) in sz.cases.iter().enumerate() {
            for (di, &d) in designs.iter().enumerate() {
                for (ti, &t) in threads.iter().enumerate() {
                    progress(
                        &format!("btree {} {} {t}t", case.name, d.name()),
                        done,
                        total,
                    );
                    let probe = (ci == 1).then_some(probe.as_path());
                    let r = match d {
                        Design::Optimistic => {
                            ours(&dir.0, *case, Coupling::Optimistic, t, sz.secs, probe)?
                        }
                        Design::Pin => ours(&dir.0, *case, Coupling::Pin, t, sz.secs, probe)?,
                        Design::Vmcache => vmcache(
                            o.vmcache.as_deref().expect("checked"),
                            &dir.0,
                            *case,
                            t,
                            sz.secs,
                            probe,
                        )?,
                    };
                    res[ci][di][ti].push(r);
                    done += 1;
                }
            }
        }
    }
    let med = |runs: &[Run], f: fn(&Run) -> f64| crate::runner::median_of(runs, f);
    let vm = designs.iter().position(|&d| d == Design::Vmcache);
    let mut tables = Vec::new();
    for (ci, case) in sz.cases.iter().enumerate() {
        let mut t = Table::new(
            format!(
                "btree, vmcache's RNDREAD, {}: {} tuples of 8 + {VALUE} bytes, pool {} MiB (vmcache's: {} GiB) ({} runs, medians; lookups per second, loads in tuples per second)",
                case.name,
                case.tuples,
                case.pool >> 20,
                case.physgb,
                sz.runs
            ),
            &["Design", "Threads", "Load/s", "Load vs vmcache", "Lookups/s", "Lookups vs vmcache", "vs pin coupling", "Restarts per lookup", "Device reads/s after", "Lookups per device read", "Per device read vs vmcache"],
        );
        for (di, &d) in designs.iter().enumerate() {
            for (ti, &th) in threads.iter().enumerate() {
                let runs = &res[ci][di][ti];
                let (load, look) = (med(runs, |r| r.load), med(runs, |r| r.lookups));
                let (vl, vk) = vm.map_or((f64::NAN, f64::NAN), |v| {
                    (
                        med(&res[ci][v][ti], |r| r.load),
                        med(&res[ci][v][ti], |r| r.lookups),
                    )
                });
                let pin = med(&res[ci][1][ti], |r| r.lookups);
                // Per run, then the median: each run against the device as
                // it was then.
                let per_read = |runs: &[Run]| med(runs, |r| r.lookups / r.device);
                let vpr = vm.map_or(f64::NAN, |v| per_read(&res[ci][v][ti]));
                t.row(vec![
                    d.name().into(),
                    th.to_string(),
                    fmt_rate(load),
                    fmt_ratio(load, vl),
                    fmt_rate(look),
                    fmt_ratio(look, vk),
                    fmt_ratio(look, pin),
                    {
                        let r = med(runs, |r| r.restarts);
                        if r.is_nan() || d != Design::Optimistic {
                            "-".into()
                        } else {
                            format!("{r:.4}")
                        }
                    },
                    fmt_rate(med(runs, |r| r.device)),
                    {
                        let r = per_read(runs);
                        if r.is_nan() {
                            "-".into()
                        } else {
                            format!("{r:.2}")
                        }
                    },
                    fmt_ratio(per_read(runs), vpr),
                ]);
                t.series.push(Series::new(
                    &format!("{} ({})", d.name(), case.name),
                    th,
                    runs.iter().map(|r| r.lookups).collect(),
                    "lookups/s",
                ));
            }
        }
        tables.push(t);
        let mut m = Table::new(
            format!(
                "btree, {}: 50/50 lookup/update mix (Zipf 0.99) and ordered scans of 100 entries; our designs",
                case.name
            ),
            &["Design", "Threads", "Mix ops/s", "Scanned entries/s", "Pages written/s", "Written per evicted"],
        );
        for (di, &d) in designs.iter().enumerate() {
            if d == Design::Vmcache {
                continue;
            }
            for (ti, &th) in threads.iter().enumerate() {
                let runs = &res[ci][di][ti];
                let wb = med(runs, |r| r.wb_per_evict);
                m.row(vec![
                    d.name().into(),
                    th.to_string(),
                    fmt_rate(med(runs, |r| r.mix)),
                    fmt_rate(med(runs, |r| r.scan)),
                    fmt_rate(med(runs, |r| r.written)),
                    if wb.is_nan() {
                        "-".into()
                    } else {
                        format!("{wb:.2}")
                    },
                ]);
            }
        }
        tables.push(m);
    }
    tables.extend(crate::scenarios::tpcc::tables(o, &dir.0)?);
    Ok(tables)
}

/// The lab's own check of a vmcache binary path given on the command line.
pub fn check_vmcache(p: &Path) -> Result<PathBuf, String> {
    if p.is_file() {
        Ok(p.to_path_buf())
    } else {
        Err(format!(
            "--vmcache {}: not a file (build it: g++ -O3 -std=c++20 vmcache.cpp -o vmcache -laio)",
            p.display()
        ))
    }
}
