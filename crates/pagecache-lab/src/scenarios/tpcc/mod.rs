//! TPC-C on the lab's B-tree against vmcache's own TPC-C (Leis et al.,
//! SIGMOD 2023), part of the `btree` scenario (and alone as `tpcc`).
//!
//! Ours: vmcache's TPC-C ported (`workload.rs`, `schema.rs`), one tree of
//! `pagecache-btree` (optimistic coupling) per relation, all in one cache
//! with the default configuration. vmcache: its binary (`--vmcache PATH`,
//! built unchanged) running its TPC-C (`DATASIZE` warehouses) on a file of
//! its own, its per-second counts parsed; with `--vmcache-pc PATH`, vmcache's
//! own B-tree and TPC-C built over this library's C ABI
//! (`benches/vmcache-pc/`), run and parsed as vmcache is (its "written per
//! evicted" takes pages read as pages evicted, as vmcache's does). All
//! load the warehouses with the run's threads, then run the mix for the
//! same time with every thread picking a random home warehouse.
//!
//! Two cases, as vmcache's paper: in memory (2 warehouses in 4 GiB) and
//! out of memory (10 warehouses in 1 GiB, the kernel's cache of the files
//! dropped first). Per run: transactions per second (both sides: the
//! median of the run's per-second counts, the first second dropped);
//! pages written back per transaction and per page evicted (ours: the
//! cache's counters; vmcache: its written and read megabytes, each page
//! it reads out of memory taking a frame another page left); the CPU
//! share of our
//! background threads: write-back (the flusher, the I/O engine's workers:
//! the process's CPU time less the workers' own and the arena helper's),
//! and apart the arena's helper, which takes first touches of frames off
//! the workers (vmcache's workers take them themselves). After each of
//! our runs, every district's orders are counted against its next order
//! id: a lost or duplicated order fails the run.

pub mod schema;
pub mod workload;

use crate::runner::{median, progress, Opts, Series, Table};
use pagecache::{Config, OpenOptions, PageCache};
use pagecache_btree::{BTree, Coupling};
use std::io::{self, BufRead};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use workload::{Db, Worker};

/// One data size.
#[derive(Debug, Clone, Copy)]
struct Case {
    name: &'static str,
    warehouses: i32,
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
    items: i32,
    customers: i32,
}

fn size(o: &Opts) -> Size {
    let case = |name, warehouses, pool: usize| Case {
        name,
        warehouses,
        pool,
        physgb: (pool >> 30).max(1) as u64,
    };
    if o.tiny {
        Size {
            cases: [
                case("in memory", 1, 32 << 20),
                case("out of memory", 2, 1 << 20),
            ],
            secs: 0.2,
            runs: 1,
            items: 2000,
            customers: 60,
        }
    } else if o.quick {
        Size {
            cases: [
                case("in memory", 1, 1 << 30),
                case("out of memory", 2, 64 << 20),
            ],
            secs: 2.0,
            runs: 1,
            items: workload::ITEMS,
            customers: workload::CUSTOMERS,
        }
    } else {
        Size {
            cases: [
                case("in memory", 2, 4 << 30),
                case("out of memory", 10, 1 << 30),
            ],
            secs: 10.0,
            runs: o.runs.clamp(1, 3),
            items: workload::ITEMS,
            customers: workload::CUSTOMERS,
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    tx: f64,
    written_per_tx: f64,
    written_per_evicted: f64,
    /// Share of the process's CPU time in background threads other than
    /// the arena's helper: write-back (the flusher, the I/O engine).
    background: f64,
    /// Share in the arena's helper (first touches of frames, which
    /// vmcache's workers take on themselves).
    faults: f64,
    /// Optimistic descents restarted per transaction (a validation that
    /// failed or an upgrade refused: another worker changed the page).
    restarts_per_tx: f64,
}

/// CPU time of the whole process.
fn process_cpu() -> Duration {
    // SAFETY: a valid out-pointer for getrusage.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU ticks (user and system) of the cache's arena helper threads
/// (`pagecache-fault`, which fault the frame arena in ahead of use), from
/// `/proc/self/task`.
fn fault_ticks() -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/proc/self/task") {
        for e in rd.flatten() {
            let Ok(st) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let (Some(a), Some(b)) = (st.find('('), st.rfind(')')) else {
                continue;
            };
            if &st[a + 1..b] != "pagecache-fault" {
                continue;
            }
            let f: Vec<&str> = st[b + 2..].split(' ').collect();
            n += f.get(11).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    n
}

fn ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer and clock id.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The relations in files under `dir`, in one cache.
fn open_db(cache: &PageCache, dir: &Path, case: Case, sz: Size) -> io::Result<Db> {
    let mut trees = Vec::new();
    for t in workload::TABLES {
        let path = dir.join(format!("tpcc-{t}"));
        let _ = std::fs::remove_file(&path);
        crate::scenarios::out_of_memory::drop_cache(&path);
        let f = cache.open_with(
            &path,
            OpenOptions::new().read(true).write(true).create(true),
        )?;
        trees.push(BTree::open_with(f, Coupling::Optimistic)?);
    }
    let mut t = trees.into_iter();
    let mut next = || t.next().expect("eleven trees");
    Ok(Db {
        warehouse: next(),
        district: next(),
        customer: next(),
        customer_wdl: next(),
        history: next(),
        neworder: next(),
        order: next(),
        order_wdc: next(),
        orderline: next(),
        item: next(),
        stock: next(),
        warehouses: case.warehouses,
        items: sz.items,
        customers: sz.customers,
    })
}

/// Every district's orders, counted against its next order id.
fn check_orders(db: &Db) -> io::Result<()> {
    for w in 1..=db.warehouses {
        for d in 1..=db.districts() {
            let prefix = schema::ints(&[w, d]);
            let mut n = 0i64;
            db.order.scan(&prefix, |k, _| {
                n += k.starts_with(&prefix) as i64;
                k.starts_with(&prefix)
            })?;
            let mut buf = Vec::new();
            if !db.district.get_into(&prefix, &mut buf)? {
                return Err(io::Error::other(format!("tpcc: district {w}/{d} missing")));
            }
            use schema::Fields;
            let next = buf.i32_at(schema::district::NEXT_O_ID) as i64;
            if n != next - 1 {
                return Err(io::Error::other(format!(
                    "tpcc: district {w}/{d} has {n} orders, its next order id is {next}"
                )));
            }
        }
    }
    Ok(())
}

impl Db {
    fn districts(&self) -> i32 {
        10
    }
}

/// One run of our TPC-C.
fn ours(dir: &Path, case: Case, sz: Size, threads: usize) -> io::Result<Run> {
    // A buffer pool's configuration, as vmcache's: no dirty limit (TPC-C
    // dirties more than any limit below the pool; past a limit, write-back
    // would rewrite pages that are dirtied again before their eviction).
    let cache = PageCache::new(Config {
        capacity: case.pool,
        dirty_limit_percent: 100,
        ..Config::default()
    })?;
    let db = open_db(&cache, dir, case, sz)?;
    // Load: items and warehouses on one thread, then each thread its
    // warehouses (vmcache's `parallel_for`).
    let mut w0 = Worker::new(0, 1);
    w0.load_items(&db)?;
    w0.load_warehouses(&db)?;
    let loaders = threads.min(case.warehouses as usize).max(1);
    std::thread::scope(|s| -> io::Result<()> {
        let hs: Vec<_> = (0..loaders)
            .map(|t| {
                let db = &db;
                s.spawn(move || -> io::Result<()> {
                    let mut wk = Worker::new(t + 1, 2);
                    let mut w = t as i32 + 1;
                    while w <= db.warehouses {
                        wk.load_warehouse(db, w)?;
                        w += loaders as i32;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in hs {
            h.join().expect("loader panicked")?;
        }
        Ok(())
    })?;
    let before = cache.stats();
    let restarts0 = db.restarts();
    let fault0 = fault_ticks();
    let cpu0 = process_cpu();
    let stop = AtomicBool::new(false);
    let txs = AtomicU64::new(0);
    let worker_cpu = AtomicU64::new(0);
    let mut per_sec = Vec::new();
    let t0 = Instant::now();
    std::thread::scope(|s| -> io::Result<()> {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (db, stop, txs, worker_cpu) = (&db, &stop, &txs, &worker_cpu);
                s.spawn(move || -> io::Result<()> {
                    let c0 = thread_cpu();
                    let mut wk = Worker::new(1000 + t, 3);
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let w = wk.urand(1, db.warehouses);
                        wk.tx(db, w)?;
                        n += 1;
                        // Counted in batches, as vmcache's workers do.
                        if n == 64 {
                            txs.fetch_add(n, Ordering::Relaxed);
                            n = 0;
                        }
                    }
                    txs.fetch_add(n, Ordering::Relaxed);
                    worker_cpu.fetch_add((thread_cpu() - c0).as_nanos() as u64, Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        // Per-second counts, as vmcache reports them (its median, the
        // first second dropped, is what its row shows).
        let mut last = 0;
        let mut tick = t0;
        while t0.elapsed().as_secs_f64() < sz.secs {
            let next = (tick + Duration::from_secs(1)).min(t0 + Duration::from_secs_f64(sz.secs));
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
            let now = txs.load(Ordering::Relaxed);
            let dt = tick.elapsed().as_secs_f64();
            tick = Instant::now();
            if dt >= 0.5 {
                per_sec.push((now - last) as f64 / dt);
            }
            last = now;
        }
        stop.store(true, Ordering::Relaxed);
        for h in hs {
            h.join().expect("worker panicked")?;
        }
        Ok(())
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = (process_cpu() - cpu0).as_secs_f64();
    let after = cache.stats();
    // (A helper of an earlier cache may end meanwhile: never below 0.)
    let fault = fault_ticks().saturating_sub(fault0) as f64 / ticks_per_sec();
    check_orders(&db)?;
    let restarts = (db.restarts() - restarts0) as f64;
    let workers = worker_cpu.load(Ordering::Relaxed) as f64 / 1e9;
    let n = txs.load(Ordering::Relaxed) as f64;
    let written = (after.writebacks - before.writebacks) as f64;
    let evicted = (after.evictions - before.evictions) as f64;
    drop(db);
    drop(cache);
    for t in workload::TABLES {
        let _ = std::fs::remove_file(dir.join(format!("tpcc-{t}")));
    }
    // As vmcache's: the median second, the first dropped (it may hold
    // the end of the load's work).
    if per_sec.len() > 2 {
        per_sec.remove(0);
    }
    Ok(Run {
        tx: if per_sec.is_empty() {
            n / secs
        } else {
            median(&mut per_sec)
        },
        written_per_tx: written / n.max(1.0),
        written_per_evicted: if evicted > 0.0 {
            written / evicted
        } else {
            f64::NAN
        },
        background: if cpu > 0.0 {
            ((cpu - workers - fault) / cpu).max(0.0)
        } else {
            f64::NAN
        },
        faults: if cpu > 0.0 { fault / cpu } else { f64::NAN },
        restarts_per_tx: restarts / n.max(1.0),
    })
}

/// One run of vmcache's TPC-C on its own file: the median of its
/// per-second transaction counts, and its pages written per transaction
/// and per page read.
fn vmcache(bin: &Path, dir: &Path, case: Case, threads: usize, secs: f64) -> io::Result<Run> {
    let path = dir.join("vmcache-tpcc.bin");
    let _ = std::fs::remove_file(&path);
    // Generous: a warehouse is about 0.1 GB and grows as orders come.
    let virtgb = case.physgb + 4 + case.warehouses as u64;
    std::fs::File::create(&path)?.set_len(virtgb << 30)?;
    crate::scenarios::out_of_memory::drop_cache(&path);
    let runfor = (secs.ceil() as u64).max(2) + 1;
    let mut child = Command::new(bin)
        .env("BLOCK", &path)
        .env("PHYSGB", case.physgb.to_string())
        .env("VIRTGB", virtgb.to_string())
        .env("THREADS", threads.to_string())
        .env("DATASIZE", case.warehouses.to_string())
        .env("RUNFOR", runfor.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", bin.display())))?;
    let out = child.stdout.take().expect("piped");
    // (tx, read MB, written MB) per second.
    let mut per_sec = Vec::new();
    for line in io::BufReader::new(out).lines() {
        let line = line?;
        let f: Vec<&str> = line.split(',').collect();
        if f.len() >= 4 {
            if let (Ok(tx), Ok(r), Ok(w)) = (
                f[1].parse::<f64>(),
                f[2].parse::<f64>(),
                f[3].parse::<f64>(),
            ) {
                per_sec.push((tx, r, w));
            }
        }
    }
    let status = child.wait()?;
    let _ = std::fs::remove_file(&path);
    if !status.success() || per_sec.is_empty() {
        return Err(io::Error::other(format!(
            "{} failed: {status}",
            bin.display()
        )));
    }
    // The first second may include the end of the load.
    if per_sec.len() > 2 {
        per_sec.remove(0);
    }
    let mut tx: Vec<f64> = per_sec.iter().map(|p| p.0).collect();
    let (n, r, w) = per_sec
        .iter()
        .fold((0.0, 0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1, a.2 + p.2));
    // Megabytes of 4 KiB pages.
    let (read, written) = (r * 256.0, w * 256.0);
    Ok(Run {
        tx: median(&mut tx),
        written_per_tx: written / f64::max(n, 1.0),
        written_per_evicted: if read > 0.0 { written / read } else { f64::NAN },
        background: f64::NAN,
        faults: f64::NAN,
        restarts_per_tx: f64::NAN,
    })
}

fn fmt_num(x: f64, prec: usize) -> String {
    if x.is_nan() {
        "-".into()
    } else {
        format!("{x:.prec$}")
    }
}

/// The TPC-C tables (in and out of memory) for `o`, working in `dir`.
pub fn tables(o: &Opts, dir: &Path) -> io::Result<Vec<Table>> {
    let sz = size(o);
    let threads = o.threads.clone();
    // The designs: ours, vmcache's B-tree over the C ABI, vmcache.
    let mut designs: Vec<(&str, Option<&Path>)> = vec![("pagecache-btree", None)];
    if let Some(p) = o.vmcache_pc.as_deref() {
        designs.push(("vmcache-btree over pagecache", Some(p)));
    }
    if let Some(p) = o.vmcache.as_deref() {
        designs.push(("vmcache", Some(p)));
    }
    let vm = designs.iter().position(|d| d.0 == "vmcache");
    // res[case][design][threads] = runs
    let mut res: Vec<Vec<Vec<Vec<Run>>>> =
        vec![vec![vec![Vec::new(); threads.len()]; designs.len()]; 2];
    let wanted = |c: &Case| match o.case.as_deref() {
        Some("in") => c.name == "in memory",
        Some("out") => c.name == "out of memory",
        _ => true,
    };
    let ncases = sz.cases.iter().filter(|c| wanted(c)).count();
    let total = sz.runs * ncases * designs.len() * threads.len();
    let mut done = 0;
    for _ in 0..sz.runs {
        for (ci, case) in sz.cases.iter().enumerate() {
            if !wanted(case) {
                continue;
            }
            for (di, &(d, bin)) in designs.iter().enumerate() {
                for (ti, &t) in threads.iter().enumerate() {
                    progress(&format!("tpcc {} {d} {t}t", case.name), done, total);
                    let r = match bin {
                        None => ours(dir, *case, sz, t)?,
                        Some(bin) => vmcache(bin, dir, *case, t, sz.secs)?,
                    };
                    res[ci][di][ti].push(r);
                    done += 1;
                }
            }
        }
    }
    let med = |runs: &[Run], f: fn(&Run) -> f64| crate::runner::median_of(runs, f);
    let mut out = Vec::new();
    for (ci, case) in sz.cases.iter().enumerate() {
        if !wanted(case) {
            continue;
        }
        let mut t = Table::new(
            format!(
                "btree, TPC-C (vmcache's), {}: {} warehouses, pool {} MiB (vmcache's: {} GiB), {} s runs ({} runs, medians)",
                case.name,
                case.warehouses,
                case.pool >> 20,
                case.physgb,
                sz.secs,
                sz.runs
            ),
            &["Design", "Threads", "tx/s", "vs vmcache", "Written per tx", "Written per evicted", "Write-back CPU", "Arena faults CPU", "Restarts per tx"],
        );
        for (di, &(d, _)) in designs.iter().enumerate() {
            for (ti, &th) in threads.iter().enumerate() {
                let runs = &res[ci][di][ti];
                let tx = med(runs, |r| r.tx);
                let vm = vm.map_or(f64::NAN, |v| med(&res[ci][v][ti], |r| r.tx));
                let pct = |x: f64| {
                    if x.is_nan() {
                        "-".to_string()
                    } else {
                        format!("{:.1}%", x * 100.0)
                    }
                };
                t.row(vec![
                    d.into(),
                    th.to_string(),
                    if tx >= 1e3 {
                        format!("{:.1} k", tx / 1e3)
                    } else {
                        fmt_num(tx, 0)
                    },
                    if vm.is_nan() || vm == 0.0 {
                        "-".into()
                    } else {
                        format!("{:.2}x", tx / vm)
                    },
                    fmt_num(med(runs, |r| r.written_per_tx), 2),
                    fmt_num(med(runs, |r| r.written_per_evicted), 2),
                    pct(med(runs, |r| r.background)),
                    pct(med(runs, |r| r.faults)),
                    fmt_num(med(runs, |r| r.restarts_per_tx), 4),
                ]);
                t.series.push(Series::new(
                    &format!("{d} TPC-C ({})", case.name),
                    th,
                    runs.iter().map(|r| r.tx).collect(),
                    "tx/s",
                ));
            }
        }
        out.push(t);
    }
    Ok(out)
}

/// The `tpcc` scenario: the TPC-C tables alone.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let dir = crate::TempDir::new("tpcc")?;
    tables(o, &dir.0)
}
