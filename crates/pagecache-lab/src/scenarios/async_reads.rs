//! `async`: misses that never block a thread (DESIGN section 4,
//! "Asynchronous misses"; protocol 5.9). Random 4 KiB page reads of a file
//! 8x the budget, cold, by one thread keeping many reads in flight, each
//! configuration followed at once by the device's own rate at the same
//! depth (`O_DIRECT` reads through io_uring from one thread, resubmitted
//! as each completes: what an engine of its own would get), the ratio
//! taken against that pairing:
//!
//! - pagecache's `page_async` on tokio: one thread (`current_thread`) with
//!   32 and 64 tasks, and two worker threads with 64 tasks;
//! - pagecache's blocking `page()` at 1 and 32 threads;
//! - `tokio::fs`-style reads: buffered `pread` on tokio's blocking pool,
//!   64 tasks on one thread (what a tokio service does today);
//! - the kernel's buffered `pread` with 32 threads.
//!
//! And a second table: lookups in a B+tree four times its pool, cold, by
//! `get_async` on tokio (one thread, two) against the blocking `get` at 1
//! and 32 threads.
//!
//! The kernel's designs run in a memory cgroup of the budget plus 64 MiB,
//! pagecache within its capacity (as `out-of-memory`). The CPU column is
//! the process's CPU time (user + system, every thread: the I/O engine's
//! reaper, tokio's pool) per read, over the measured window only (caches
//! are created, their arenas faulted in, before it).

use super::out_of_memory::{
    drop_cache, fmt_lat, make_file, size, timed, Aligned, Cgroup, Hist, Rng, Size,
};
use crate::runner::{median, progress, Opts, Series, Table};
use pagecache::{Config, PageCache};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Design {
    /// O_DIRECT reads through io_uring, `depth` in flight.
    Device,
    /// `page_async` on a tokio runtime: 0 workers = `current_thread`.
    Async { workers: usize },
    /// Blocking `page()` on `depth` threads.
    Blocking,
    /// Buffered `pread` on tokio's blocking pool (`tokio::fs`'s way).
    TokioFs,
    /// Buffered `pread` on `depth` threads.
    Kernel,
}

impl Design {
    fn name(self) -> String {
        match self {
            Design::Device => "device: O_DIRECT, io_uring, 1 thread".into(),
            Design::Async { workers: 0 } => "pagecache page_async, tokio 1 thread".into(),
            Design::Async { workers } => {
                format!("pagecache page_async, tokio {workers} threads")
            }
            Design::Blocking => "pagecache page(), blocking threads".into(),
            Design::TokioFs => "buffered pread on tokio's blocking pool (tokio::fs)".into(),
            Design::Kernel => "kernel buffered pread, threads".into(),
        }
    }
    fn in_cgroup(self) -> bool {
        matches!(self, Design::TokioFs | Design::Kernel)
    }
}

/// One measured configuration.
struct Measured {
    rate: f64,
    lat: Hist,
    /// CPU seconds of the process per read.
    cpu_per_read: f64,
}

/// The process's CPU time so far (every thread, user + system).
fn cpu_now() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 * 1e-6;
    t(r.ru_utime) + t(r.ru_stime)
}

/// The device's rate (reads per second) and CPU time per read (seconds)
/// at `depth` random 4 KiB `O_DIRECT` reads in flight through one
/// io_uring, for `secs`: `pagecache device`, the reference the C and
/// Python asynchronous benchmarks (`scripts/bench-async.sh`) measure
/// beside their own runs.
pub fn device_rate(data: &Path, depth: usize, secs: f64) -> io::Result<(f64, f64)> {
    let pages = std::fs::metadata(data)?.len() / PS as u64;
    let (cpu0, t0) = (cpu_now(), Instant::now());
    let (reads, _) = device(data, pages, depth, secs)?;
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_now() - cpu0);
    Ok((reads as f64 / wall, cpu / reads.max(1) as f64))
}

/// The device: `depth` random `O_DIRECT` reads in flight through one
/// io_uring, resubmitted as each completes, for `secs`.
fn device(data: &Path, pages: u64, depth: usize, secs: f64) -> io::Result<(u64, Hist)> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(data)?;
    let fd = io_uring::types::Fd(f.as_raw_fd());
    let mut ring = io_uring::IoUring::new((depth as u32).next_power_of_two())?;
    let mut bufs: Vec<Aligned> = (0..depth).map(|_| Aligned::new(PS)).collect();
    let mut started = vec![Instant::now(); depth];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut hist = Hist::new();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let push = |ring: &mut io_uring::IoUring, k: usize, buf: *mut u8, rng: &mut Rng| {
        let off = rng.page(pages) * PS as u64;
        let e = io_uring::opcode::Read::new(fd, buf, PS as u32)
            .offset(off)
            .build()
            .user_data(k as u64);
        // SAFETY: `buf` is one of `bufs`, which outlive every read: all
        // are reaped below before `bufs` drops.
        unsafe { ring.submission().push(&e) }.map_err(|_| io::Error::other("ring full"))
    };
    for (k, b) in bufs.iter_mut().enumerate() {
        started[k] = Instant::now();
        push(&mut ring, k, b.ptr(), &mut rng)?;
    }
    let mut inflight = depth;
    let mut done = 0u64;
    let mut err = None;
    while inflight > 0 {
        ring.submit_and_wait(1)?;
        let cqes: Vec<(usize, i32)> = ring
            .completion()
            .map(|c| (c.user_data() as usize, c.result()))
            .collect();
        for (k, res) in cqes {
            inflight -= 1;
            if res != PS as i32 && err.is_none() {
                err = Some(if res < 0 {
                    io::Error::from_raw_os_error(-res)
                } else {
                    io::Error::other(format!("short read of {res} bytes"))
                });
            }
            hist.record(started[k].elapsed());
            done += 1;
            if err.is_none() && Instant::now() < deadline {
                started[k] = Instant::now();
                let p = bufs[k].ptr();
                push(&mut ring, k, p, &mut rng)?;
                inflight += 1;
            }
        }
    }
    match err {
        Some(e) => Err(e),
        None => Ok((done, hist)),
    }
}

/// A tokio runtime of `workers` threads (0: `current_thread`) whose
/// blocking pool holds `blocking` threads.
fn runtime(workers: usize, blocking: usize) -> io::Result<tokio::runtime::Runtime> {
    if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .max_blocking_threads(blocking)
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .max_blocking_threads(blocking)
            .build()
    }
}

/// `tasks` tasks on `rt`, each reading random pages with `read` until
/// `secs` pass.
fn on_tokio<F, Fut>(
    rt: &tokio::runtime::Runtime,
    tasks: usize,
    secs: f64,
    read: F,
) -> io::Result<(u64, Hist)>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = io::Result<()>> + Send,
{
    let read = Arc::new(read);
    let lat = Arc::new(Mutex::new(Hist::new()));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    rt.block_on(async {
        let mut handles = Vec::new();
        for t in 0..tasks {
            let (read, lat) = (read.clone(), lat.clone());
            handles.push(tokio::spawn(async move {
                let mut rng =
                    Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0x1234_5678_9ABC_DEF1));
                let mut mine = Hist::new();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    read(rng.next()).await?;
                    mine.record(t0.elapsed());
                    n += 1;
                }
                lat.lock().unwrap().merge(&mine);
                Ok::<u64, io::Error>(n)
            }));
        }
        let mut total = 0;
        for h in handles {
            total += h.await.map_err(io::Error::other)??;
        }
        let lat = lat.lock().unwrap().clone();
        Ok((total, lat))
    })
}

/// A cache of the budget, its arena faulted in at creation (so that the
/// measured window holds reads, not the arena's first touches).
fn cache(sz: &Size) -> io::Result<PageCache> {
    PageCache::new(Config {
        capacity: sz.budget,
        populate: true,
        ..Config::default()
    })
}

/// One configuration, cold on entry. Setup (the cache, the runtime) is
/// outside the measured window and its CPU time.
fn run_one(design: Design, depth: usize, sz: &Size, data: &Path) -> io::Result<Measured> {
    let pages = sz.file / PS as u64;
    let start = || (cpu_now(), Instant::now());
    let ((cpu0, t0), (reads, lat)) = match design {
        Design::Device => {
            let s = start();
            (s, device(data, pages, depth, sz.secs)?)
        }
        Design::Async { workers } => {
            let c = cache(sz)?;
            let f = Arc::new(c.open(data)?);
            let rt = runtime(workers, 1)?;
            let s = start();
            let r = on_tokio(&rt, depth, sz.secs, move |x| {
                let f = f.clone();
                async move {
                    let p = f.page_async(x % pages).await?;
                    std::hint::black_box(p[0]);
                    Ok(())
                }
            })?;
            (s, r)
        }
        Design::TokioFs => {
            let f = Arc::new(File::open(data)?);
            let rt = runtime(0, depth)?;
            let s = start();
            let r = on_tokio(&rt, depth, sz.secs, move |x| {
                let f = f.clone();
                async move {
                    tokio::task::spawn_blocking(move || {
                        let mut b = vec![0u8; PS];
                        f.read_exact_at(&mut b, (x % pages) * PS as u64)
                    })
                    .await
                    .map_err(io::Error::other)?
                }
            })?;
            (s, r)
        }
        Design::Blocking => {
            let c = cache(sz)?;
            let f = c.open(data)?;
            let s = start();
            let (rate, lat) = timed(depth, sz.secs, |_, rng| {
                let p = f.page(rng.page(pages))?;
                std::hint::black_box(p[0]);
                Ok(1)
            })?;
            (s, ((rate * s.1.elapsed().as_secs_f64()) as u64, lat))
        }
        Design::Kernel => {
            let f = File::open(data)?;
            let s = start();
            let (rate, lat) = timed(depth, sz.secs, |_, rng| {
                let mut b = [0u8; PS];
                f.read_exact_at(&mut b, rng.page(pages) * PS as u64)?;
                Ok(1)
            })?;
            (s, ((rate * s.1.elapsed().as_secs_f64()) as u64, lat))
        }
    };
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_now() - cpu0;
    Ok(Measured {
        rate: reads as f64 / wall,
        lat,
        cpu_per_read: cpu / reads.max(1) as f64,
    })
}

/// Bytes of a tuple's value; its first 8 repeat the key (checked).
const VALUE: usize = 120;

/// The B+tree part: vmcache's RNDREAD tuples (8-byte keys, 120-byte
/// values) in a tree four times the pool, then random lookups, cold:
/// blocking `get` at 1 and 32 threads, `get_async` on tokio with `tasks`
/// tasks on one thread and on two.
fn btree(o: &Opts, sz: &Size, dir: &Path, tasks: usize) -> io::Result<Table> {
    use pagecache_btree::BTree;
    let (tuples, pool) = if o.tiny {
        (8_000u64, 300usize << 10)
    } else if o.quick {
        (400_000, 16 << 20)
    } else {
        (2_000_000, 64 << 20)
    };
    let path = dir.join("tree");
    let open = |pool: usize| -> io::Result<(PageCache, BTree)> {
        let c = PageCache::new(Config {
            capacity: pool,
            populate: true,
            ..Config::default()
        })?;
        let f = c.open_with(
            &path,
            pagecache::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true),
        )?;
        let t = BTree::open(f)?;
        Ok((c, t))
    };
    {
        // The load, in key order, in a pool as large as the tree (so that
        // it is not what is measured), then written back.
        let (c, t) = open(pool * 8)?;
        let mut v = [0u8; VALUE];
        for k in 0..tuples {
            v[..8].copy_from_slice(&k.to_be_bytes());
            t.insert(&k.to_be_bytes(), &v)?;
        }
        t.sync()?;
        drop(t);
        drop(c);
    }
    let tree_bytes = std::fs::metadata(&path)?.len();
    let check = |k: u64, v: Option<Vec<u8>>| -> io::Result<()> {
        match v {
            Some(v) if v.len() == VALUE && v[..8] == k.to_be_bytes() => Ok(()),
            _ => Err(io::Error::other(format!(
                "lookup of key {k}: wrong or missing"
            ))),
        }
    };
    let plan: Vec<(Option<usize>, usize)> =
        vec![(None, 1), (None, 32), (Some(0), tasks), (Some(2), tasks)];
    let name = |d: Option<usize>| match d {
        None => "blocking get(), threads".to_string(),
        Some(0) => "get_async, tokio 1 thread".to_string(),
        Some(w) => format!("get_async, tokio {w} threads"),
    };
    let mut results: Vec<Vec<(f64, f64)>> = plan.iter().map(|_| Vec::new()).collect();
    let total = plan.len() * sz.runs;
    for round in 0..sz.runs {
        for (i, &(design, depth)) in plan.iter().enumerate() {
            progress("async: btree", round * plan.len() + i, total);
            drop_cache(&path);
            let (c, t) = open(pool)?;
            let t = Arc::new(t);
            let cpu0 = cpu_now();
            let t0 = Instant::now();
            let n = match design {
                None => {
                    let (rate, _) = timed(depth, sz.secs, |_, rng| {
                        let k = rng.next() % tuples;
                        check(k, t.get(&k.to_be_bytes())?)?;
                        Ok(1)
                    })?;
                    rate * t0.elapsed().as_secs_f64()
                }
                Some(workers) => {
                    let rt = runtime(workers, 1)?;
                    let t = t.clone();
                    on_tokio(&rt, depth, sz.secs, move |x| {
                        let t = t.clone();
                        async move {
                            let k = x % tuples;
                            check(k, t.get_async(&k.to_be_bytes()).await?)
                        }
                    })?
                    .0 as f64
                }
            };
            let (wall, cpu) = (t0.elapsed().as_secs_f64(), cpu_now() - cpu0);
            results[i].push((n / wall, cpu / n.max(1.0)));
            drop(t);
            drop(c);
        }
    }
    let mut t = Table::new(
        format!(
            "async: B+tree lookups out of memory, cold: {tuples} tuples of 8 + {VALUE} bytes, tree {} MiB, pool {} MiB ({} rounds, medians; ratios paired per round)",
            tree_bytes >> 20,
            pool >> 20,
            sz.runs
        ),
        &[
            "design",
            "in flight",
            "lookups/s",
            "CPU per lookup",
            "vs blocking, 1 thread",
            "vs blocking, 32 threads",
        ],
    );
    let ratio = |i: usize, j: usize| {
        let mut r: Vec<f64> = results[i]
            .iter()
            .zip(&results[j])
            .map(|(a, b)| a.0 / b.0)
            .collect();
        format!("{:.2}x", median(&mut r))
    };
    for (i, &(design, depth)) in plan.iter().enumerate() {
        let mut rates: Vec<f64> = results[i].iter().map(|r| r.0).collect();
        let mut cpus: Vec<f64> = results[i].iter().map(|r| r.1).collect();
        t.row(vec![
            name(design),
            depth.to_string(),
            format!("{:.1} k", median(&mut rates) / 1e3),
            format!("{:.1} us", median(&mut cpus) * 1e6),
            ratio(i, 0),
            ratio(i, 1),
        ]);
        t.series.push(Series::new(
            &name(design),
            depth,
            results[i].iter().map(|r| r.0 / 1e3).collect(),
            "k lookups/s",
        ));
    }
    let _ = std::fs::remove_file(&path);
    Ok(t)
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let sz = size(o);
    let dir = crate::TempDir::new("async")?;
    let data = dir.0.join("data.bin");
    make_file(&data, sz.file)?;
    let limit = sz.budget + (64 << 20);
    let cgroup = if o.tiny {
        Err("not in test runs".to_string())
    } else {
        Cgroup::create(limit)
    };
    let root = drop_cache(&data);
    let (d1, d2) = if o.tiny { (8, 16) } else { (32, 64) };
    // Under load (`--busy N`): N spinning processes beside every
    // configuration and its device reference.
    let busy = crate::runner::Busy::start(o.busy)?;
    let load = if o.busy == 0 {
        "idle machine".to_string()
    } else {
        format!("{} busy processes on the CPUs throughout", o.busy)
    };
    let mut t = Table::new(
        format!(
            "async: random 4 KiB page reads, file {} MiB, {} x the budget of {} MiB, cold; {load}; {}; {}",
            sz.file >> 20,
            sz.file / sz.budget as u64,
            sz.budget >> 20,
            match &cgroup {
                Ok(c) => format!(
                    "the kernel's designs in a memory cgroup v{} of {} MiB, pagecache in its budget",
                    c.version,
                    limit >> 20
                ),
                Err(e) => format!("no memory cgroup ({e})"),
            },
            if root {
                "kernel caches dropped before each configuration"
            } else {
                "not root: the file dropped with POSIX_FADV_DONTNEED only"
            }
        ),
        &[
            "design",
            "in flight",
            "rate",
            "p50",
            "p99",
            "CPU per read",
            "vs device (same depth, right after)",
        ],
    );
    let plan: Vec<(Design, usize)> = vec![
        (Design::Async { workers: 0 }, d1),
        (Design::Async { workers: 0 }, d2),
        (Design::Async { workers: 2 }, d2),
        (Design::Blocking, 1),
        (Design::Blocking, d1),
        (Design::TokioFs, d2),
        (Design::Kernel, d1),
    ];
    // Rounds: every configuration once per round, each followed at once by
    // the device at the same depth (O_DIRECT through io_uring, one
    // thread), and its ratio taken against that: this machine's disk
    // moves by half within a minute, more than the designs differ, so
    // only a measurement next to its reference compares. The table gives
    // the medians of the rounds.
    let mut results: Vec<Vec<(Measured, Measured)>> = plan.iter().map(|_| Vec::new()).collect();
    let total = plan.len() * sz.runs;
    for round in 0..sz.runs {
        for (i, &(design, depth)) in plan.iter().enumerate() {
            crate::runner::progress("async", round * plan.len() + i, total);
            drop_cache(&data);
            let confined = cgroup.as_ref().ok().filter(|_| design.in_cgroup());
            if let Some(c) = confined {
                c.enter().map_err(io::Error::other)?;
            }
            let r = run_one(design, depth, &sz, &data);
            if let Some(c) = confined {
                c.leave();
            }
            let r = r?;
            drop_cache(&data);
            let dev = run_one(Design::Device, depth, &sz, &data)?;
            results[i].push((r, dev));
        }
    }
    // The device at each depth, over every pairing.
    let mut depths: Vec<usize> = plan.iter().map(|p| p.1).collect();
    depths.sort_unstable();
    depths.dedup();
    for &depth in &depths {
        let devs: Vec<&Measured> = plan
            .iter()
            .zip(&results)
            .filter(|(p, _)| p.1 == depth)
            .flat_map(|(_, r)| r.iter().map(|(_, d)| d))
            .collect();
        let rates: Vec<f64> = devs.iter().map(|m| m.rate).collect();
        let mut cpus: Vec<f64> = devs.iter().map(|m| m.cpu_per_read).collect();
        let mut lat = Hist::new();
        for d in &devs {
            lat.merge(&d.lat);
        }
        t.row(vec![
            Design::Device.name(),
            depth.to_string(),
            format!("{:.1} k reads/s", median(&mut rates.clone()) / 1e3),
            fmt_lat(lat.percentile(0.5)),
            fmt_lat(lat.percentile(0.99)),
            format!("{:.1} us", median(&mut cpus) * 1e6),
            "1.00x".into(),
        ]);
        t.series.push(Series::new(
            &Design::Device.name(),
            depth,
            rates.iter().map(|r| r / 1e3).collect(),
            "k reads/s",
        ));
    }
    for (i, &(design, depth)) in plan.iter().enumerate() {
        let rates: Vec<f64> = results[i].iter().map(|(m, _)| m.rate).collect();
        let mut ratios: Vec<f64> = results[i].iter().map(|(m, d)| m.rate / d.rate).collect();
        let mut cpus: Vec<f64> = results[i].iter().map(|(m, _)| m.cpu_per_read).collect();
        let mut lat = Hist::new();
        for (r, _) in &results[i] {
            lat.merge(&r.lat);
        }
        t.row(vec![
            design.name(),
            depth.to_string(),
            format!("{:.1} k reads/s", median(&mut rates.clone()) / 1e3),
            fmt_lat(lat.percentile(0.5)),
            fmt_lat(lat.percentile(0.99)),
            format!("{:.1} us", median(&mut cpus) * 1e6),
            format!("{:.2}x", median(&mut ratios)),
        ]);
        t.series.push(Series::new(
            &design.name(),
            depth,
            rates.iter().map(|r| r / 1e3).collect(),
            "k reads/s",
        ));
    }
    crate::runner::progress("async", total, total);
    drop(cgroup);
    let _ = std::fs::remove_file(&data);
    let tree = btree(o, &sz, &dir.0, d2)?;
    drop(busy);
    Ok(vec![t, tree])
}
