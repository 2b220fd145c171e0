//! `out-of-memory`: data larger than memory ("Are You Sure You Want to Use
//! MMAP in Your DBMS?", CIDR 2022; vmcache, LeanStore). A file 8x the
//! memory budget, read and written cold, by pagecache (direct I/O, the
//! asynchronous engine, readahead, prefetch, background write-back) and by
//! the kernel's designs: buffered `pread`, `mmap` with `MADV_RANDOM`, and
//! `O_DIRECT` `pread` (the device's own rate).
//!
//! The kernel's designs run with the lab process in a memory cgroup limited
//! to the budget plus 64 MiB (v1 or v2, whichever the machine has; created
//! and removed here), so the kernel's cache gets the memory pagecache has;
//! pagecache runs bounded by its own capacity (its frames are the budget;
//! in the cgroup, its own bookkeeping on top of a full budget left too
//! little slack and the kernel killed the lab once).
//! Before each configuration the file is written back and dropped from the
//! kernel's cache (`POSIX_FADV_DONTNEED`, and `drop_caches` when root).
//! Columns in fio's style: rate, p50 and p99 latency of one operation, and
//! how much of the file the kernel's cache held at the end (`mincore`).

use crate::runner::{measure, median, Opts, Series, Table};
use pagecache::{Config, OpenOptions, PageCache, StreamReads};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PS: usize = 4096;

/// Sizes and durations.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Size {
    pub(crate) budget: usize,
    pub(crate) file: u64,
    pub(crate) secs: f64,
    pub(crate) runs: usize,
}

pub(crate) fn size(o: &Opts) -> Size {
    if o.tiny {
        Size {
            budget: 4 << 20,
            file: 32 << 20,
            secs: 0.05,
            runs: 1,
        }
    } else if o.quick {
        Size {
            budget: 32 << 20,
            file: 256 << 20,
            secs: 0.5,
            runs: 1,
        }
    } else {
        Size {
            budget: 256 << 20,
            file: 2 << 30,
            secs: 3.0,
            runs: o.runs.clamp(1, 3),
        }
    }
}

/// A memory cgroup the lab process enters for a measurement.
#[derive(Debug)]
pub(crate) struct Cgroup {
    dir: PathBuf,
    /// Where the process was (its `cgroup.procs`), to go back.
    home: PathBuf,
    pub(crate) version: u8,
}

impl Cgroup {
    /// Creates `pagecache-lab-<pid>` limited to `limit` bytes, v1 or v2.
    pub(crate) fn create(limit: usize) -> Result<Cgroup, String> {
        let v1 = Path::new("/sys/fs/cgroup/memory");
        if v1.join("memory.limit_in_bytes").exists() {
            return Self::make(v1, "memory", 1, "memory.limit_in_bytes", limit);
        }
        let v2 = Path::new("/sys/fs/cgroup");
        if v2.join("cgroup.controllers").exists() {
            let _ = write(&v2.join("cgroup.subtree_control"), "+memory");
            return Self::make(v2, "", 2, "memory.max", limit);
        }
        Err("no memory cgroup hierarchy mounted".into())
    }

    /// `pagecache-lab-<pid>` under `root` (the hierarchy with
    /// `controller`), its `knob` set to `limit`.
    fn make(
        root: &Path,
        controller: &str,
        version: u8,
        knob: &str,
        limit: usize,
    ) -> Result<Cgroup, String> {
        let home = own_cgroup(controller)
            .map(|p| root.join(p.trim_start_matches('/')).join("cgroup.procs"))
            .unwrap_or_else(|| root.join("cgroup.procs"));
        let dir = root.join(format!("pagecache-lab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let cg = Cgroup { dir, home, version };
        write(&cg.dir.join(knob), &limit.to_string())?;
        Ok(cg)
    }

    pub(crate) fn enter(&self) -> Result<(), String> {
        write(
            &self.dir.join("cgroup.procs"),
            &std::process::id().to_string(),
        )
    }

    pub(crate) fn leave(&self) {
        let _ = write(&self.home, &std::process::id().to_string());
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.leave();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The process's cgroup path in the hierarchy with `controller` (v1), or
/// the unified one (`""`), from `/proc/self/cgroup`.
fn own_cgroup(controller: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    s.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        hit.then(|| path.to_string())
    })
}

fn write(path: &Path, v: &str) -> Result<(), String> {
    std::fs::write(path, v).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `path` back and drops it from the kernel's cache; with root,
/// drops every clean cache too. Returns whether `drop_caches` worked.
pub(crate) fn drop_cache(path: &Path) -> bool {
    if let Ok(f) = File::open(path) {
        let _ = f.sync_all();
        // SAFETY: advice on our own descriptor.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// A page-aligned buffer for `O_DIRECT`.
pub(crate) struct Aligned {
    ptr: *mut u8,
    len: usize,
}

impl Aligned {
    pub(crate) fn new(len: usize) -> Aligned {
        let layout = std::alloc::Layout::from_size_align(len, PS).expect("layout");
        // SAFETY: a non-zero size with a valid alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "out of memory");
        Aligned { ptr, len }
    }
    pub(crate) fn ptr(&mut self) -> *mut u8 {
        self.ptr
    }
    pub(crate) fn buf(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes allocated above, owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe {
            std::alloc::dealloc(
                self.ptr,
                std::alloc::Layout::from_size_align(self.len, PS).expect("layout"),
            )
        };
    }
}

/// A read-only shared mapping of a whole file.
struct Map {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a read-only mapping; threads only read through it.
unsafe impl Sync for Map {}

impl Map {
    fn new(f: &File, len: usize, advice: libc::c_int) -> io::Result<Map> {
        // SAFETY: mapping our own descriptor, checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: advice on the mapping made above.
        unsafe { libc::madvise(p, len, advice) };
        Ok(Map {
            ptr: p as *const u8,
            len,
        })
    }
    fn copy(&self, off: usize, dst: &mut [u8]) {
        assert!(off + dst.len() <= self.len);
        // SAFETY: inside the mapping (checked); the file is not truncated
        // while mapped (the lab owns it).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// A tiny per-thread random generator (xorshift*).
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn page(&mut self, pages: u64) -> u64 {
        self.next() % pages
    }
}

/// One measured configuration.
#[derive(Debug, Default)]
struct Result_ {
    /// Operations per second (or bytes per second for `bytes` workloads).
    rate: f64,
    p50: Duration,
    p99: Duration,
    /// Pages of the file in the kernel's cache at the end.
    kernel_pages: usize,
}

/// Latencies in a log-linear histogram (16 buckets per power of two, so
/// within 6%): constant memory however many operations a run does.
#[derive(Debug, Clone)]
pub(crate) struct Hist(Vec<u64>);

impl Hist {
    const SUB: u32 = 16;
    pub(crate) fn new() -> Hist {
        Hist(vec![0; (64 * Self::SUB) as usize])
    }
    fn bucket(ns: u64) -> usize {
        if ns < Self::SUB as u64 {
            return ns as usize;
        }
        let top = 63 - ns.leading_zeros(); // >= 4
        let sub = (ns >> (top - 4)) & (Self::SUB as u64 - 1);
        ((top - 3) * Self::SUB) as usize + sub as usize
    }
    /// The smallest value in bucket `b`.
    fn low(b: usize) -> u64 {
        let (top, sub) = (b as u32 / Self::SUB, b as u64 % Self::SUB as u64);
        if top == 0 {
            return sub;
        }
        (Self::SUB as u64 + sub) << (top - 1)
    }
    pub(crate) fn record(&mut self, d: Duration) {
        self.0[Self::bucket(d.as_nanos().min(u64::MAX as u128) as u64)] += 1;
    }
    pub(crate) fn merge(&mut self, o: &Hist) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a += b;
        }
    }
    pub(crate) fn percentile(&self, q: f64) -> Duration {
        let n: u64 = self.0.iter().sum();
        if n == 0 {
            return Duration::ZERO;
        }
        let want = ((n - 1) as f64 * q).round() as u64;
        let mut seen = 0;
        for (b, &c) in self.0.iter().enumerate() {
            seen += c;
            if seen > want {
                return Duration::from_nanos(Self::low(b));
            }
        }
        Duration::ZERO
    }
}

/// Runs `op` on `threads` threads until `secs` pass; each call is one
/// operation of `unit` bytes (0: count operations) and is timed.
pub(crate) fn timed<F>(threads: usize, secs: f64, op: F) -> io::Result<(f64, Hist)>
where
    F: Fn(usize, &mut Rng) -> io::Result<u64> + Sync,
{
    let lat = std::sync::Mutex::new(Hist::new());
    let s = measure(threads, |t| {
        let mut rng =
            Rng(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0x1234_5678_9ABC_DEF1));
        let deadline = Instant::now() + Duration::from_secs_f64(secs);
        let mut mine = Hist::new();
        let mut done = 0;
        while Instant::now() < deadline {
            let t0 = Instant::now();
            done += op(t, &mut rng)?;
            mine.record(t0.elapsed());
        }
        lat.lock().unwrap().merge(&mine);
        Ok(done)
    })?;
    Ok((s.rate(), lat.into_inner().unwrap()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Design {
    Pagecache,
    /// Streams read buffered, the kernel's copy not kept; the file is
    /// larger than the cache, so its stream reads past the frames
    /// (`StreamReads::Buffered`; scans only).
    PagecacheBuffered,
    /// Streams read direct, as every other read (`StreamReads::Direct`,
    /// the default before `Measure`; scans only).
    PagecacheDirect,
    Buffered,
    Mmap,
    Direct,
}

impl Design {
    fn name(self, work: Work) -> &'static str {
        match (self, work) {
            (Design::Pagecache, Work::Prefetch) => "pagecache prefetch x32",
            (Design::Pagecache, Work::SeqScan) => "pagecache (streams measured)",
            (Design::Pagecache, _) => "pagecache",
            (Design::PagecacheBuffered, _) => "pagecache, streams buffered",
            (Design::PagecacheDirect, _) => "pagecache, streams direct",
            (Design::Buffered, Work::SeqScan) => "kernel read()",
            (Design::Buffered, Work::SeqWrite) => "kernel write() + fdatasync",
            (Design::Buffered, Work::Mix) => "kernel buffered pread/pwrite",
            (Design::Buffered, _) => "kernel buffered pread",
            (Design::Mmap, Work::SeqScan) => "kernel mmap",
            (Design::Mmap, _) => "kernel mmap MADV_RANDOM",
            (Design::Direct, Work::SeqScan) => "kernel O_DIRECT read (device)",
            (Design::Direct, _) => "kernel O_DIRECT pread (device)",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// Random 4 KiB reads.
    Random,
    /// One thread: prefetch 32 random pages, then read them.
    Prefetch,
    /// One pass over the file in 1 MiB reads.
    SeqScan,
    /// Write the file in 1 MiB writes, then sync.
    SeqWrite,
    /// Random 4 KiB reads (70%) and writes (30%).
    Mix,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Random => "random 4 KiB reads",
            Work::Prefetch => "random 4 KiB reads, prefetched in batches of 32",
            Work::SeqScan => "sequential scan, 1 MiB reads",
            Work::SeqWrite => "sequential write, 1 MiB writes, + sync",
            Work::Mix => "random 4 KiB 70% reads / 30% writes",
        }
    }
    /// Throughput in bytes (MB/s) rather than operations.
    fn bytes(self) -> bool {
        matches!(self, Work::SeqScan | Work::SeqWrite)
    }
}

/// Fills `path` with `len` non-zero bytes (not sparse).
pub(crate) fn make_file(path: &Path, len: u64) -> io::Result<()> {
    let mut f = File::create(path)?;
    let chunk: Vec<u8> = (0..1usize << 20).map(|i| (i % 251 + 1) as u8).collect();
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

fn cache(sz: &Size) -> io::Result<PageCache> {
    cache_with(sz, Config::default().stream_reads)
}

fn cache_with(sz: &Size, stream_reads: StreamReads) -> io::Result<PageCache> {
    PageCache::new(Config {
        capacity: sz.budget,
        stream_reads,
        ..Config::default()
    })
}

/// One sequential pass over `total` bytes: `step(pos)` moves the chunk at
/// `pos` and returns its length (0: end of file, the pass ends early);
/// `finish` (a sync) runs before the clock stops. Returns bytes per second
/// over the bytes moved, and each step's latency.
pub(crate) fn sequential(
    total: u64,
    mut step: impl FnMut(u64) -> io::Result<usize>,
    finish: impl FnOnce() -> io::Result<()>,
) -> io::Result<(f64, Hist)> {
    let mut lat = Hist::new();
    let t0 = Instant::now();
    let mut pos = 0u64;
    while pos < total {
        let t = Instant::now();
        let n = step(pos)?;
        if n == 0 {
            break;
        }
        lat.record(t.elapsed());
        pos += n as u64;
    }
    finish()?;
    Ok((pos as f64 / t0.elapsed().as_secs_f64(), lat))
}

/// One configuration, measured once. The file is cold on entry.
fn run_one(
    design: Design,
    work: Work,
    threads: usize,
    sz: &Size,
    data: &Path,
    out: &Path,
) -> io::Result<Result_> {
    let pages = sz.file / PS as u64;
    const MB: usize = 1 << 20;
    let (rate, lat, touched) = match (design, work) {
        (Design::Pagecache, Work::Random | Work::Mix) => {
            let c = cache(sz)?;
            let f = c.open(data)?;
            let wbuf = vec![0x5au8; PS];
            let (r, l) = timed(threads, sz.secs, |_, rng| {
                let mut b = [0u8; PS];
                let at = rng.page(pages) * PS as u64;
                if work == Work::Mix && rng.next() % 10 < 3 {
                    f.write_at(&wbuf, at)?;
                } else {
                    f.read_exact_at(&mut b, at)?;
                }
                Ok(1)
            })?;
            f.sync()?;
            (r, l, data)
        }
        (Design::Pagecache, Work::Prefetch) => {
            let c = cache(sz)?;
            let f = c.open(data)?;
            let (r, l) = timed(1, sz.secs, |_, rng| {
                let batch: Vec<u64> = (0..32).map(|_| rng.page(pages) * PS as u64).collect();
                for &at in &batch {
                    f.prefetch(at, PS as u64)?;
                }
                let mut b = [0u8; PS];
                for &at in &batch {
                    f.read_exact_at(&mut b, at)?;
                }
                Ok(32)
            })?;
            (r, l, data)
        }
        (
            Design::Pagecache | Design::PagecacheBuffered | Design::PagecacheDirect,
            Work::SeqScan,
        ) => {
            let c = cache_with(
                sz,
                match design {
                    Design::PagecacheBuffered => StreamReads::Buffered,
                    Design::PagecacheDirect => StreamReads::Direct,
                    _ => Config::default().stream_reads,
                },
            )?;
            let f = c.open(data)?;
            let mut b = vec![0u8; MB];
            let (r, l) = sequential(sz.file, |pos| f.read_at(&mut b, pos), || Ok(()))?;
            for ch in c.stream_choices() {
                eprintln!("  streams measured: {ch}");
            }
            (r, l, data)
        }
        (Design::Pagecache, Work::SeqWrite) => {
            let _ = std::fs::remove_file(out);
            let c = cache(sz)?;
            let f = c.open_with(out, OpenOptions::new().read(true).write(true).create(true))?;
            let b = vec![0x77u8; MB];
            let (r, l) = sequential(sz.file, |pos| f.write_at(&b, pos).map(|()| MB), || f.sync())?;
            (r, l, out)
        }
        (Design::Buffered | Design::Direct, Work::Random | Work::Mix) => {
            let mut o = std::fs::OpenOptions::new();
            o.read(true).write(work == Work::Mix);
            if design == Design::Direct {
                o.custom_flags(libc::O_DIRECT);
            }
            let f = o.open(data)?;
            let (r, l) = timed(threads, sz.secs, |_, rng| {
                let mut a = Aligned::new(PS);
                let at = rng.page(pages) * PS as u64;
                if work == Work::Mix && rng.next() % 10 < 3 {
                    a.buf().fill(0x5a);
                    f.write_all_at(a.buf(), at)?;
                } else {
                    f.read_exact_at(a.buf(), at)?;
                }
                Ok(1)
            })?;
            f.sync_data()?;
            (r, l, data)
        }
        (Design::Mmap, Work::Random) => {
            let f = File::open(data)?;
            let m = Map::new(&f, sz.file as usize, libc::MADV_RANDOM)?;
            let (r, l) = timed(threads, sz.secs, |_, rng| {
                let mut b = [0u8; PS];
                m.copy(rng.page(pages) as usize * PS, &mut b);
                std::hint::black_box(&b);
                Ok(1)
            })?;
            (r, l, data)
        }
        (Design::Mmap, Work::SeqScan) => {
            let f = File::open(data)?;
            let m = Map::new(&f, sz.file as usize, libc::MADV_SEQUENTIAL)?;
            let mut b = vec![0u8; MB];
            let (r, l) = sequential(
                sz.file,
                |pos| {
                    let n = MB.min((sz.file - pos) as usize);
                    m.copy(pos as usize, &mut b[..n]);
                    std::hint::black_box(&b);
                    Ok(n)
                },
                || Ok(()),
            )?;
            (r, l, data)
        }
        (Design::Buffered | Design::Direct, Work::SeqScan) => {
            let mut o = std::fs::OpenOptions::new();
            o.read(true);
            if design == Design::Direct {
                o.custom_flags(libc::O_DIRECT);
            }
            let mut f = o.open(data)?;
            let mut a = Aligned::new(MB);
            let (r, l) = sequential(sz.file, |_| f.read(a.buf()), || Ok(()))?;
            (r, l, data)
        }
        (Design::Buffered, Work::SeqWrite) => {
            let f = File::create(out)?;
            let b = vec![0x77u8; MB];
            let (r, l) = sequential(
                sz.file,
                |_| (&f).write_all(&b).map(|()| MB),
                || f.sync_data(),
            )?;
            (r, l, out)
        }
        (d, w) => {
            return Err(io::Error::other(format!(
                "no {d:?} design for {w:?} (a lab bug)"
            )))
        }
    };
    let kernel_pages = pagecache::internals::kernel_cached_pages(touched)?;
    Ok(Result_ {
        rate,
        p50: lat.percentile(0.5),
        p99: lat.percentile(0.99),
        kernel_pages,
    })
}

pub(crate) fn fmt_lat(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} us")
    }
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let sz = size(o);
    let dir = crate::TempDir::new("out-of-memory")?;
    let data = dir.0.join("data.bin");
    let out = dir.0.join("written.bin");
    make_file(&data, sz.file)?;
    let limit = sz.budget + (64 << 20);
    // Never in tests: the whole test process would be limited.
    let cgroup = if o.tiny {
        Err("not in test runs".to_string())
    } else {
        Cgroup::create(limit)
    };
    let root = drop_cache(&data);
    if o.case.as_deref() == Some("write") {
        let t = super::seq_write::run(o, &sz, &data, &out, &cgroup)?;
        drop(cgroup);
        return Ok(vec![t]);
    }
    let mut t = Table::new(
        format!(
            "out-of-memory: file {} MiB, {} x the budget of {} MiB; {}; {}",
            sz.file >> 20,
            sz.file / sz.budget as u64,
            sz.budget >> 20,
            match &cgroup {
                Ok(c) => format!(
                    "the kernel's designs in a memory cgroup v{} of {} MiB (budget + 64 MiB), pagecache in its budget",
                    c.version,
                    limit >> 20
                ),
                Err(e) => format!("no memory cgroup ({e}): the kernel's cache is not limited"),
            },
            if root {
                "kernel caches dropped before each configuration"
            } else {
                "not root: the file is dropped from the kernel's cache with POSIX_FADV_DONTNEED only"
            }
        ),
        &[
            "workload",
            "design",
            "threads",
            "rate",
            "p50",
            "p99",
            "kernel cache",
            "vs device",
        ],
    );
    let mut plan: Vec<(Work, Design, usize)> = Vec::new();
    for &threads in &o.threads {
        for d in [
            Design::Pagecache,
            Design::Buffered,
            Design::Mmap,
            Design::Direct,
        ] {
            plan.push((Work::Random, d, threads));
        }
    }
    plan.push((Work::Prefetch, Design::Pagecache, 1));
    for d in [
        Design::Pagecache,
        Design::PagecacheBuffered,
        Design::PagecacheDirect,
        Design::Buffered,
        Design::Mmap,
        Design::Direct,
    ] {
        plan.push((Work::SeqScan, d, 1));
    }
    for d in [Design::Pagecache, Design::Buffered] {
        plan.push((Work::SeqWrite, d, 1));
    }
    let mix_threads = if o.tiny { 2 } else { 8 };
    for d in [Design::Pagecache, Design::Buffered] {
        plan.push((Work::Mix, d, mix_threads));
    }
    // The device's rate per (workload, threads), for the last column.
    let mut device: Vec<((Work, usize), f64)> = Vec::new();
    // Direct first within each group, so the ratio is known when printed.
    plan.sort_by_key(|&(w, d, th)| (w as u8, th, d != Design::Direct));
    for (i, &(work, design, threads)) in plan.iter().enumerate() {
        crate::runner::progress("out-of-memory", i, plan.len());
        let mut rates = Vec::new();
        let mut last = Result_::default();
        for _ in 0..sz.runs {
            drop_cache(&data);
            let _ = std::fs::remove_file(&out);
            // The kernel's designs in the cgroup; pagecache is bounded by
            // its own capacity (and keeps nothing in the kernel's cache:
            // the column says so).
            let confined = cgroup.as_ref().ok().filter(|_| {
                !matches!(
                    design,
                    Design::Pagecache | Design::PagecacheBuffered | Design::PagecacheDirect
                )
            });
            if let Some(c) = confined {
                c.enter().map_err(io::Error::other)?;
            }
            let r = run_one(design, work, threads, &sz, &data, &out);
            if let Some(c) = confined {
                c.leave();
            }
            let r = r?;
            rates.push(r.rate);
            last = r;
        }
        let m = median(&mut rates.clone());
        if design == Design::Direct {
            device.push(((work, threads), m));
        }
        let unit = if work.bytes() { "MB/s" } else { "k ops/s" };
        let scale = if work.bytes() { 1e6 } else { 1e3 };
        let vs = device
            .iter()
            .find(|(k, _)| {
                *k == (work, threads)
                    || (work == Work::Prefetch && k.0 == Work::Random && k.1 == 32)
            })
            .map(|(_, r)| format!("{:.2}x", m / r))
            .unwrap_or_else(|| "-".into());
        t.row(vec![
            work.name().to_string(),
            design.name(work).to_string(),
            threads.to_string(),
            format!("{:.1} {unit}", m / scale),
            fmt_lat(last.p50),
            fmt_lat(last.p99),
            format!(
                "{:.1} MiB",
                (last.kernel_pages * PS) as f64 / (1 << 20) as f64
            ),
            vs,
        ]);
        if work == Work::Random {
            t.series.push(Series::new(
                design.name(work),
                threads,
                rates.iter().map(|r| r / 1e3).collect(),
                "k reads/s",
            ));
        }
    }
    crate::runner::progress("out-of-memory", plan.len(), plan.len());
    drop(cgroup);
    Ok(vec![t])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles_are_within_a_bucket() {
        let mut h = Hist::new();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        for (q, want) in [(0.5, 500e3), (0.99, 990e3), (0.0, 1e3), (1.0, 1000e3)] {
            let got = h.percentile(q).as_nanos() as f64;
            assert!(
                (got - want).abs() / want < 0.07,
                "p{}: {got} ns, want {want}",
                q * 100.0
            );
        }
        for ns in [0u64, 1, 15, 16, 17, 1000, 123_456_789] {
            let b = Hist::bucket(ns);
            assert!(Hist::low(b) <= ns, "{ns}");
            assert!(Hist::low(b + 1) > ns, "{ns}");
        }
        assert_eq!(Hist::new().percentile(0.5), Duration::ZERO);
    }
}
