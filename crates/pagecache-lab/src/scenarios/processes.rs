//! `processes`: N processes read every page of one file, as the workers of
//! a pre-forked server or a `multiprocessing` pool do: through one cache
//! shared by the processes (`PageCache::shared`), through a private cache
//! each, and through the kernel's page cache (`pread` of each page, and
//! `mmap` with a read of each page). Cold: before each run the file is
//! dropped from the kernel's cache (`drop_caches` when root) and a fresh
//! shared cache is made.
//!
//! Each process reads the file in 4 KiB pages from its own starting point
//! (process k of N starts k/N into the file and wraps around), so that
//! they do not march in step: a page one of them read is there for the
//! others later, in a cache they share; then each reads it all again, warm.
//! Columns: the processes' combined rate, cold and warm (N file sizes over
//! the time the last one took for its pass), the memory they held at the
//! end (PSS summed over the processes, all still alive, plus what the
//! kernel's page cache grew by; and the PSS alone), the device's reads
//! during the run (the file's block device's sector count), and the rate
//! against one process of the same design.
//!
//! Three more tables are seeds with processes instead of threads, each
//! process counting in one wall-clock window: `same-page` (will-it-scale's
//! `pread2`: 64 bytes of the file's first page again and again),
//! `own-part` (seed 000: the 4 KiB pages of its own part of the cached
//! file in turn, the part read once before the window) and `page-fault1`
//! (seed 004, will-it-scale's `page_fault1`: a region of anonymous memory
//! mapped, every page of it written once, the region freed, again and
//! again: the cache's anonymous regions, `PageCache::anon`, of the cache
//! the processes share or of one cache each, against the kernel's
//! `mmap`, touch, `munmap`; one region warmed before the window).
//!
//! The processes are this binary again (`pagecache __reader`), told when
//! to start and when to report through their standard input.

use crate::runner::{median, progress, Opts, Series, Table};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

const PS: usize = 4096;

/// `page-fault1`'s designs: the kernel's is anonymous memory, not a file.
const FAULT_DESIGNS: &[(&str, &str)] = &[
    ("shared", "pagecache shared by the processes"),
    ("private", "pagecache, one per process"),
    ("mmap", "kernel anonymous mmap"),
];

/// The designs, by the name the readers take.
const DESIGNS: &[(&str, &str)] = &[
    ("shared", "pagecache shared by the processes"),
    ("private", "pagecache, one per process"),
    ("pread", "kernel pread"),
    ("mmap", "kernel mmap"),
];

fn file_bytes(o: &Opts) -> u64 {
    if o.tiny {
        8 << 20
    } else if o.quick {
        128 << 20
    } else {
        1 << 30
    }
}

/// The lab's binary: `PAGECACHE_LAB_BIN`, else this executable if it is
/// the lab's, else the `pagecache` beside the directory it is in (a test
/// binary in `target/*/deps/`).
fn lab_binary() -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("PAGECACHE_LAB_BIN") {
        return Ok(PathBuf::from(p));
    }
    let me = std::env::current_exe()?;
    if me.file_name().is_some_and(|n| n == "pagecache") {
        return Ok(me);
    }
    let beside = me
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("pagecache"))
        .filter(|p| p.exists());
    beside.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "the lab's binary (build it, or set PAGECACHE_LAB_BIN)",
        )
    })
}

/// Sectors read by the block device `dev` holds (`None`: not a block
/// device's file system, or no statistics).
fn sectors_read(dev: u64) -> Option<u64> {
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let s = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    s.split_whitespace().nth(2)?.parse().ok()
}

/// The kernel's cache of files, in KiB: `Cached` of `/proc/meminfo` less
/// `Shmem` (shared memory, a shared cache's segment among it, which the
/// processes' PSS counts already).
fn cached_kib() -> u64 {
    let m = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    kib(&m, "Cached:").saturating_sub(kib(&m, "Shmem:"))
}

/// The number after `name` on its line of a `/proc` file in KiB (0 if
/// absent).
fn kib(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What one run measured.
struct Ran {
    /// The last reader's seconds for its pass, cold and warm.
    secs: [f64; 2],
    /// `same-page`: the readers' reads together.
    ops: u64,
    /// Memory in MiB.
    mib: f64,
    /// The processes' PSS alone (without the kernel's cache of files), MiB.
    pss: f64,
    /// Device MiB read (`None`: no block device statistics).
    read: Option<f64>,
}

/// One run: `n` readers of `design` (with `window`, the workload of the
/// `same-page` or `own-part` table, for that many milliseconds).
fn one_run(
    bin: &Path,
    design: &str,
    n: usize,
    (path, segdir, name): (&Path, &Path, &str),
    window: Option<(&str, u64)>,
) -> io::Result<Ran> {
    let len = std::fs::metadata(path)?.len();
    super::out_of_memory::drop_cache(path);
    let _ = pagecache::PageCache::remove_shared(name, Some(segdir));
    let dev = std::fs::metadata(path)?.dev();
    let (cached0, sectors0) = (cached_kib(), sectors_read(dev));
    let mut kids: Vec<(Child, BufReader<std::process::ChildStdout>)> = Vec::new();
    for k in 0..n {
        let mut c = Command::new(bin)
            .args([
                "__reader",
                design,
                &path.to_string_lossy(),
                &segdir.to_string_lossy(),
                name,
                &(2 * len).to_string(),
                &(k as u64 * (len / PS as u64) / n as u64).to_string(),
            ])
            .args(window.map(|(w, _)| match w {
                "own-part" => format!("own-part:{}", len / PS as u64 / n as u64),
                // Regions of a 64th of the file: 8 processes' fit in the
                // shared cache (twice the file) many times over.
                "page-fault1" => format!("page-fault1:{}", (len / 64 / PS as u64).max(1)),
                w => w.to_string(),
            }))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let out = BufReader::new(c.stdout.take().expect("piped"));
        kids.push((c, out));
    }
    let line = |r: &mut BufReader<std::process::ChildStdout>| -> io::Result<String> {
        let mut s = String::new();
        r.read_line(&mut s)?;
        if s.is_empty() {
            return Err(io::Error::other(format!("a {design} reader ended early")));
        }
        Ok(s.trim().to_string())
    };
    let tell = |kids: &mut Vec<(Child, BufReader<std::process::ChildStdout>)>, what: &str| {
        for (c, _) in kids.iter_mut() {
            let _ = writeln!(c.stdin.as_mut().expect("piped"), "{what}");
        }
    };
    for (_, out) in kids.iter_mut() {
        let l = line(out)?;
        if l != "ready" {
            return Err(io::Error::other(format!("{design} reader: {l}")));
        }
    }
    match window {
        // One window for all, a little ahead so every reader is waiting.
        Some((_, ms)) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let from = now + 50_000_000;
            tell(
                &mut kids,
                &format!("go {from} {}", from + ms as u128 * 1_000_000),
            );
        }
        None => tell(&mut kids, "go"),
    }
    // The last reader's time, cold (the first pass) and warm (the second);
    // or, `same-page`, every reader's reads.
    let (mut secs, mut ops) = ([0.0f64; 2], 0u64);
    for (_, out) in kids.iter_mut() {
        let l = line(out)?;
        let v: Vec<f64> = l
            .strip_prefix("done ")
            .map(|v| v.split(' ').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_default();
        match v[..] {
            [cold, warm] if window.is_none() => secs = [secs[0].max(cold), secs[1].max(warm)],
            [n] if window.is_some() => ops += n as u64,
            _ => return Err(io::Error::other(format!("{design} reader: {l}"))),
        }
    }
    // Every reader alive: PSS divides what they share among all of them.
    tell(&mut kids, "measure");
    let mut pss_kib = 0u64;
    for (_, out) in kids.iter_mut() {
        let l = line(out)?;
        pss_kib += l
            .strip_prefix("pss ")
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| io::Error::other(format!("{design} reader: {l}")))?;
    }
    let grown = cached_kib().saturating_sub(cached0);
    let read = sectors0
        .zip(sectors_read(dev))
        .map(|(a, b)| b.saturating_sub(a) as f64 * 512.0 / (1 << 20) as f64);
    tell(&mut kids, "exit");
    for (mut c, _) in kids {
        let st = c.wait()?;
        if !st.success() {
            return Err(io::Error::other(format!("a {design} reader failed: {st}")));
        }
    }
    let _ = pagecache::PageCache::remove_shared(name, Some(segdir));
    Ok(Ran {
        secs,
        ops,
        mib: (pss_kib + grown) as f64 / 1024.0,
        pss: pss_kib as f64 / 1024.0,
        read,
    })
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let bin = lab_binary()?;
    let dir = crate::TempDir::new("processes")?;
    let path = dir.0.join("data.bin");
    let len = file_bytes(o);
    {
        let f = std::fs::File::create(&path)?;
        let chunk: Vec<u8> = (0..1 << 20).map(|i| (i * 31 + 7) as u8).collect();
        for off in (0..len).step_by(chunk.len()) {
            f.write_all_at(&chunk, off)?;
        }
        f.sync_all()?;
    }
    let name = format!("lab{}", std::process::id());
    // Shared memory (the default directory): a segment in the scratch
    // directory would be a file of its disk, written back as it is used.
    let segdir = PathBuf::from(pagecache::internals::segment::DEFAULT_DIR);
    let mut t = Table::new(
        format!(
            "processes: N processes read every page of one {} MiB file, cold (a shared cache of twice the file)",
            len >> 20
        ),
        &[
            "design",
            "processes",
            "GiB/s cold",
            "GiB/s warm",
            "memory MiB",
            "PSS MiB",
            "device MiB read",
            "vs 1 process",
        ],
    );
    let runs = o.runs.max(1);
    for &(design, label) in DESIGNS {
        let mut base = None;
        for &n in o.threads.iter().filter(|&&n| n <= 8) {
            let mut rates = Vec::new();
            let mut warm = Vec::new();
            let mut mem = Vec::new();
            let mut pss = Vec::new();
            let mut dev = Vec::new();
            for k in 0..runs {
                progress(&format!("processes {design}, {n}"), k, runs);
                let r = one_run(&bin, design, n, (&path, &segdir, &name), None)?;
                let gib = n as f64 * len as f64 / (1u64 << 30) as f64;
                rates.push(gib / r.secs[0]);
                warm.push(gib / r.secs[1]);
                mem.push(r.mib);
                pss.push(r.pss);
                if let Some(r) = r.read {
                    dev.push(r);
                }
            }
            t.series
                .push(Series::new(label, n, rates.clone(), "GiB/s (cold pass)"));
            let m = median(&mut rates);
            let b = *base.get_or_insert(m);
            t.row(vec![
                label.to_string(),
                n.to_string(),
                format!("{m:.2}"),
                format!("{:.2}", median(&mut warm)),
                format!("{:.0}", median(&mut mem)),
                format!("{:.0}", median(&mut pss)),
                if dev.is_empty() {
                    "-".into()
                } else {
                    format!("{:.0}", median(&mut dev))
                },
                format!("{:.2}x", m / b),
            ]);
        }
    }
    let ms = if o.tiny {
        50
    } else if o.quick {
        300
    } else {
        1000
    };
    let files = (path.as_path(), segdir.as_path(), name.as_str());
    // `same-page` (will-it-scale's pread2) with processes: 64 bytes of one
    // page, again and again.
    let sp = window_table(
        o,
        &bin,
        files,
        ("same-page", ms),
        format!("same-page with processes: N processes read 64 B of one page for {ms} ms"),
        "M reads/s",
    )?;
    // `own-part` (seed 000) with processes: each reads the 4 KiB pages of
    // its own part of the cached file in turn.
    let op = window_table(
        o,
        &bin,
        files,
        ("own-part", ms),
        format!(
            "own-part with processes: N processes read 4 KiB pages of their own part of the cached file for {ms} ms"
        ),
        "M pages/s",
    )?;
    // `page-fault1` (seed 004) with processes: each maps a region of
    // anonymous memory, writes every page once and frees it, again and
    // again.
    let pf = window_table_of(
        o,
        &bin,
        files,
        ("page-fault1", ms),
        FAULT_DESIGNS,
        format!(
            "page-fault1 with processes: N processes map {} KiB of anonymous memory, write every page, free it, for {ms} ms",
            len / 64 / 1024
        ),
        "M faults/s",
    )?;
    Ok(vec![t, sp, op, pf])
}

/// A table of `workload` run for `ms` milliseconds by every design and
/// process count: the readers' operations per second, in millions.
fn window_table(
    o: &Opts,
    bin: &Path,
    files: (&Path, &Path, &str),
    workload: (&str, u64),
    title: String,
    unit: &str,
) -> io::Result<Table> {
    window_table_of(o, bin, files, workload, DESIGNS, title, unit)
}

/// `window_table` over the given designs.
fn window_table_of(
    o: &Opts,
    bin: &Path,
    files: (&Path, &Path, &str),
    (workload, ms): (&str, u64),
    designs: &[(&str, &str)],
    title: String,
    unit: &str,
) -> io::Result<Table> {
    let mut t = Table::new(title, &["design", "processes", unit, "vs 1 process"]);
    for &(design, label) in designs {
        let mut base = None;
        for &n in o.threads.iter().filter(|&&n| n <= 8) {
            let mut rates = Vec::new();
            for k in 0..o.runs.max(1) {
                progress(&format!("{workload} {design}, {n}"), k, o.runs.max(1));
                let r = one_run(bin, design, n, files, Some((workload, ms)))?;
                rates.push(r.ops as f64 / (ms as f64 / 1e3) / 1e6);
            }
            t.series.push(Series::new(label, n, rates.clone(), unit));
            let m = median(&mut rates);
            let b = *base.get_or_insert(m);
            t.row(vec![
                label.to_string(),
                n.to_string(),
                format!("{m:.2}"),
                format!("{:.2}x", m / b),
            ]);
        }
    }
    Ok(t)
}

/// How a reader reads `buf.len()` bytes at an offset.
type ReadAt = Box<dyn FnMut(u64, &mut [u8]) -> io::Result<()>>;

/// One `page-fault1` round: a region mapped, each page written, freed;
/// returns the pages faulted.
type FaultOnce = Box<dyn FnMut() -> io::Result<u64>>;

/// `page-fault1`'s round for a region of `pages` pages: of `cache`'s
/// anonymous memory, else (the kernel) an anonymous `mmap`. Runs it once
/// (the warm-up: the cache's frames faulted in) and returns it.
fn fault_loop(cache: Option<&pagecache::PageCache>, pages: u64) -> io::Result<FaultOnce> {
    use super::anon_fault::{cache_round, kernel_round};
    let len = pages as usize * PS;
    let mut once: FaultOnce = match cache {
        Some(c) => {
            let c = c.clone();
            Box::new(move || cache_round(&c, len))
        }
        None => Box::new(move || kernel_round(len)),
    };
    once()?;
    Ok(once)
}

/// This process's PSS in KiB (`/proc/self/smaps_rollup`) less its share
/// of mapped files' pages (`Pss_File`: the kernel's cache of files, which
/// the scenario counts once for all, as its growth).
fn pss_kib() -> u64 {
    let m = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    kib(&m, "Pss:").saturating_sub(kib(&m, "Pss_File:"))
}

/// `pagecache __reader DESIGN FILE SEGDIR NAME CAPACITY START
/// [same-page | own-part:PAGES | page-fault1:PAGES]`: one reader of the scenario. Prints
/// `ready`, then, with no workload, waits for `go`, reads every page from
/// page START on (wrapping) twice, checks each page's first byte and
/// prints `done COLD WARM` (each pass's seconds); with one, waits for `go
/// FROM TO`, runs it between those wall-clock instants and prints `done
/// OPS`. Then waits for `measure`, prints `pss KIB`, waits for `exit`.
pub fn reader(args: &[String]) -> io::Result<()> {
    let (args, workload) = match args {
        [a @ .., w] if a.len() == 6 => (a, Some(w.as_str())),
        a => (a, None),
    };
    let [design, file, segdir, name, capacity, start] = args else {
        return Err(io::Error::other(
            "__reader DESIGN FILE SEGDIR NAME CAPACITY START [same-page | own-part:PAGES | page-fault1:PAGES]",
        ));
    };
    let parse = |s: &str| -> io::Result<u64> {
        s.parse()
            .map_err(|_| io::Error::other(format!("not a number: {s}")))
    };
    let (capacity, start) = (parse(capacity)? as usize, parse(start)?);
    let path = Path::new(file);
    let len = std::fs::metadata(path)?.len();
    let pages = len / PS as u64;
    let config = pagecache::Config {
        capacity,
        policy: pagecache::PolicyKind::Clock,
        ..pagecache::Config::default()
    };
    let mut buf = vec![0u8; PS];
    let mut read_at: ReadAt;
    // Kept alive until the end (their memory is what PSS measures).
    let mut _keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    // `page-fault1`'s anonymous regions come from it.
    let mut anon_of: Option<pagecache::PageCache> = None;
    match design.as_str() {
        "shared" | "private" => {
            let cache = if design == "shared" {
                pagecache::PageCache::shared_with(
                    name,
                    config,
                    &pagecache::SharedOptions {
                        dir: Some(PathBuf::from(segdir)),
                        group: None,
                    },
                )?
            } else {
                pagecache::PageCache::new(config)?
            };
            let f = cache.open_with(path, pagecache::OpenOptions::new().read(true))?;
            anon_of = Some(cache.clone());
            _keep.push(Box::new(cache));
            read_at = Box::new(move |off, b| f.read_at(b, off).map(|_| ()));
        }
        "pread" => {
            let f = std::fs::File::open(path)?;
            read_at = Box::new(move |off, b| f.read_exact_at(b, off));
        }
        "mmap" => {
            let f = std::fs::File::open(path)?;
            // SAFETY: a read-only shared mapping of a file we opened, unmapped
            // at exit; read only through volatile-free copies below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len as usize,
                    libc::PROT_READ,
                    libc::MAP_SHARED,
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let base = p as usize;
            read_at = Box::new(move |off, b| {
                assert!(off as usize + b.len() <= len as usize);
                // SAFETY: inside the mapping (checked), which lives until
                // the process exits; nothing writes the file meanwhile.
                let src = unsafe {
                    std::slice::from_raw_parts((base + off as usize) as *const u8, b.len())
                };
                b.copy_from_slice(src);
                Ok(())
            });
        }
        d => return Err(io::Error::other(format!("unknown design {d}"))),
    }
    let stdin = io::stdin();
    let mut cmd = String::new();
    let mut expect = |what: &str| -> io::Result<()> {
        cmd.clear();
        stdin.lock().read_line(&mut cmd)?;
        if cmd.trim() != what {
            return Err(io::Error::other(format!("expected {what}, got {cmd:?}")));
        }
        Ok(())
    };
    if let Some(n) = workload.and_then(|w| w.strip_prefix("own-part:")) {
        // The part is cached (or in the kernel's cache) before the window.
        for i in start..(start + parse(n)?).min(pages) {
            read_at(i * PS as u64, &mut buf)?;
        }
    }
    let fault = match workload.and_then(|w| w.strip_prefix("page-fault1:")) {
        Some(n) => Some(fault_loop(anon_of.as_ref(), parse(n)?.max(1))?),
        None => None,
    };
    println!("ready");
    io::stdout().flush()?;
    if let Some(w) = workload {
        // `same-page` (pread2's shape): 64 bytes of the first page again
        // and again; `own-part` (seed 000's shape): the 4 KiB pages of this
        // reader's part in turn (read once before `ready`). Between the two
        // wall-clock instants the parent gave (every reader counts in the
        // same window, however the CPUs are shared); the count read.
        let part = match w.strip_prefix("own-part:") {
            Some(n) => Some(parse(n)?.max(1)),
            None if w == "same-page" || fault.is_some() => None,
            None => return Err(io::Error::other(format!("unknown workload {w}"))),
        };
        let mut go = String::new();
        io::stdin().lock().read_line(&mut go)?;
        let w: Vec<u128> = go
            .strip_prefix("go ")
            .map(|v| {
                v.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let [from, to] = w[..] else {
            return Err(io::Error::other(format!("expected go FROM TO, got {go:?}")));
        };
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        };
        while now() < from {
            std::hint::spin_loop();
        }
        let mut ops = 0u64;
        match (part, fault) {
            (_, Some(mut one)) => {
                // `page-fault1`: whole regions, each mapped, written and
                // freed.
                while now() < to {
                    ops += one()?;
                }
            }
            (None, None) => {
                let mut b = [0u8; 64];
                while now() < to {
                    for _ in 0..64 {
                        read_at(128, &mut b)?;
                    }
                    ops += 64;
                }
                if b[0] != (128 * 31 + 7) as u8 {
                    return Err(io::Error::other("same-page: a wrong byte"));
                }
            }
            (Some(part), None) => {
                let mut k = 0;
                while now() < to {
                    for _ in 0..16 {
                        let i = start + k % part;
                        read_at(i * PS as u64, &mut buf)?;
                        if buf[0] != ((i as usize * PS) % (1 << 20) * 31 + 7) as u8 {
                            return Err(io::Error::other(format!("own-part: page {i}")));
                        }
                        k += 1;
                    }
                    ops += 16;
                }
            }
        }
        println!("done {ops}");
        io::stdout().flush()?;
        expect("measure")?;
        println!("pss {}", pss_kib());
        io::stdout().flush()?;
        return expect("exit");
    }
    expect("go")?;
    let mut secs = [0.0; 2];
    for s in secs.iter_mut() {
        let t0 = Instant::now();
        for k in 0..pages {
            let i = (start + k) % pages;
            read_at(i * PS as u64, &mut buf)?;
            let want = ((i as usize * PS) % (1 << 20) * 31 + 7) as u8;
            if buf[0] != want {
                return Err(io::Error::other(format!(
                    "page {i}: first byte {} where the file has {want}",
                    buf[0]
                )));
            }
        }
        *s = t0.elapsed().as_secs_f64();
    }
    println!("done {} {}", secs[0], secs[1]);
    io::stdout().flush()?;
    expect("measure")?;
    println!("pss {}", pss_kib());
    io::stdout().flush()?;
    expect("exit")?;
    Ok(())
}
