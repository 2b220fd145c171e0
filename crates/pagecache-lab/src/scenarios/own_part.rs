//! `own-part` (seed 000, Piggin 2005): a file preloaded in the cache; T
//! threads each read-touch every page of their own part of it, R rounds.
//!
//! Designs, sharing everything but the lookup's serialization:
//! * `mutex-tree`: every lookup (walk + pin) under one per-file mutex, as
//!   the tree lock was a spinlock;
//! * `rwlock-tree`: under one per-file reader-writer lock taken shared, as
//!   2.6.12's `read_lock(&mapping->tree_lock)` around `find_get_page`;
//! * `lockless`: the cache's own lookup (protocol 5.1), no lock.
//!
//! The kernel beside them: read faults of an `mmap` of the same file (mapped
//! afresh each round, so every page faults) and `pread` of one byte a page.
//! Columns as the seed's: design, tasks, user s, sys s, elapsed s, %CPU,
//! pages/s.

use crate::runner::{measure, median_run, repeat, Opts, Sample, Series, Table};
use pagecache::lockstat::{self, LockCounters};
use pagecache::{Config, PageCache};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, RwLock};
use std::time::Instant;

const PS: usize = 4096;

fn sizes(o: &Opts) -> (u64, usize) {
    if o.tiny {
        (256, 2) // pages, rounds
    } else if o.quick {
        (32 << 10, 20) // 128 MiB
    } else {
        (256 << 10, 5) // 1 GiB
    }
}

/// Which design a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// Lookups under one per-file mutex.
    MutexTree,
    /// Lookups under one per-file rwlock, shared.
    RwlockTree,
    /// The cache's lock-free lookup.
    Lockless,
    /// Kernel: mmap read faults.
    KernelMmap,
    /// Kernel: pread of one byte per page.
    KernelPread,
}

impl Design {
    fn name(self) -> &'static str {
        match self {
            Design::MutexTree => "mutex-tree",
            Design::RwlockTree => "rwlock-tree",
            Design::Lockless => "lockless",
            Design::KernelMmap => "kernel mmap faults",
            Design::KernelPread => "kernel pread",
        }
    }
}

/// Runs `body` under a lock taken through `try_get` (uncontended) or `get`
/// (timed as a contended wait), counting the acquisition, wait and hold in
/// `prof` when profiling.
fn locked<G, R>(
    prof: Option<&LockCounters>,
    try_get: impl FnOnce() -> Option<G>,
    get: impl FnOnce() -> G,
    body: impl FnOnce() -> R,
) -> R {
    let Some(p) = prof else {
        let _g = get();
        return body();
    };
    let g = match try_get() {
        Some(g) => {
            p.acquired(None);
            g
        }
        None => {
            let t = Instant::now();
            let g = get();
            p.acquired(Some(t));
            g
        }
    };
    let since = Instant::now();
    let r = body();
    drop(g);
    p.released(since);
    r
}

/// One configuration: `threads` threads each touch their `pages / threads`
/// pages, `rounds` times. `Sample::ops` counts pages touched.
/// `file` must stay open across runs (closing the last handle drops the
/// file's cached pages). With `prof`, the tree lock of the locked designs
/// is profiled (acquisitions, contention, wait and hold times).
pub fn run_one(
    file: &pagecache::File,
    std_file: &std::fs::File,
    design: Design,
    pages: u64,
    rounds: usize,
    threads: usize,
    prof: Option<&LockCounters>,
) -> io::Result<Sample> {
    let mutex = Mutex::new(());
    let rwlock = RwLock::new(());
    let part = pages / threads as u64;
    measure(threads, |t| {
        let (lo, hi) = (t as u64 * part, (t as u64 + 1) * part);
        let mut sum = 0u64;
        for _ in 0..rounds {
            match design {
                Design::MutexTree | Design::RwlockTree | Design::Lockless => {
                    for i in lo..hi {
                        let b = match design {
                            Design::MutexTree => locked(
                                prof,
                                || mutex.try_lock().ok(),
                                || mutex.lock().unwrap_or_else(|e| e.into_inner()),
                                || file.page(i).map(|p| p[0]),
                            )?,
                            Design::RwlockTree => locked(
                                prof,
                                || rwlock.try_read().ok(),
                                || rwlock.read().unwrap_or_else(|e| e.into_inner()),
                                || file.page(i).map(|p| p[0]),
                            )?,
                            _ => file.page(i)?[0],
                        };
                        sum += b as u64;
                    }
                }
                Design::KernelMmap => {
                    let len = ((hi - lo) as usize) * PS;
                    // SAFETY: a shared read-only mapping of our part of the
                    // file, read inside its bounds and unmapped after.
                    unsafe {
                        let p = libc::mmap(
                            std::ptr::null_mut(),
                            len,
                            libc::PROT_READ,
                            libc::MAP_SHARED,
                            std_file.as_raw_fd(),
                            (lo as usize * PS) as libc::off_t,
                        );
                        if p == libc::MAP_FAILED {
                            return Err(io::Error::last_os_error());
                        }
                        let c = p as *const u8;
                        for k in 0..(hi - lo) as usize {
                            sum += std::ptr::read_volatile(c.add(k * PS)) as u64;
                        }
                        libc::munmap(p, len);
                    }
                }
                Design::KernelPread => {
                    let mut b = [0u8; 1];
                    for i in lo..hi {
                        std_file.read_at(&mut b, i * PS as u64)?;
                        sum += b[0] as u64;
                    }
                }
            }
        }
        // Every page's first byte is 1: the sum proves every page was read.
        if sum != rounds as u64 * (hi - lo) {
            return Err(io::Error::other(format!(
                "thread {t}: read {sum}, expected {}",
                rounds as u64 * (hi - lo)
            )));
        }
        Ok(sum)
    })
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let (pages, rounds) = sizes(o);
    let dir = crate::TempDir::new("own-part")?;
    let path = dir.0.join("file.bin");
    {
        let mut page = vec![0u8; PS];
        page[0] = 1;
        let f = std::fs::File::create(&path)?;
        for i in 0..pages {
            f.write_at(&page, i * PS as u64)?;
        }
    }
    let cache = PageCache::new(Config {
        capacity: pages as usize * PS + (16 << 20),
        ..Config::default()
    })?;
    // Preload: the file is cached before any measurement (as the seed's
    // 32 GB file was preloaded in the page cache), in ours and the kernel's.
    // The handle stays open for the whole scenario.
    let file = cache.open(&path)?;
    let std_file = std::fs::File::open(&path)?;
    {
        let mut b = [0u8; 1];
        for i in 0..pages {
            file.read_at(&mut b, i * PS as u64)?;
        }
        std::fs::read(&path)?;
    }
    let misses_before = cache.stats().misses;
    let mut t = Table::new(
        format!(
            "own-part: {} MiB file preloaded, each task touches every page of its part, {rounds} rounds",
            (pages * PS as u64) >> 20
        ),
        &["design", "tasks", "user s", "sys s", "elapsed s", "%CPU", "pages/s"],
    );
    for design in [
        Design::MutexTree,
        Design::RwlockTree,
        Design::Lockless,
        Design::KernelMmap,
        Design::KernelPread,
    ] {
        for &threads in &o.threads {
            let label = format!("own-part {}, {threads} tasks", design.name());
            let samples = repeat(o, &label, || {
                run_one(&file, &std_file, design, pages, rounds, threads, None)
            })?;
            let s = median_run(&samples);
            t.series.push(Series::new(
                design.name(),
                threads,
                samples.iter().map(Sample::rate).collect(),
                "pages/s",
            ));
            t.row(vec![
                design.name().to_string(),
                threads.to_string(),
                format!("{:.3}", s.user),
                format!("{:.3}", s.sys),
                format!("{:.3}", s.wall),
                format!("{:.0}%", s.cpu_pct()),
                format!("{:.0}", s.rate()),
            ]);
        }
    }
    // The lock profile of the slowest pagecache design at the most tasks
    // (the seed printed its kernel profile at 64 processes): one extra,
    // profiled run, kept out of the samples above.
    let most = *o.threads.iter().max().unwrap_or(&1);
    let median_at_most = |d: Design| {
        let sr = t
            .series
            .iter()
            .find(|s| s.design == d.name() && s.threads == most)?;
        Some((d, crate::ministat::Summary::of(&sr.samples).median))
    };
    let slowest = [Design::MutexTree, Design::RwlockTree, Design::Lockless]
        .into_iter()
        .filter_map(median_at_most)
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((Design::MutexTree, 0.0));
    let counters = LockCounters::new();
    run_one(
        &file,
        &std_file,
        slowest.0,
        pages,
        rounds,
        most,
        Some(&counters),
    )?;
    let mut lp = Table::new(
        format!(
            "own-part: lock profile of the slowest design ({}, {most} tasks; one extra profiled run; times in microseconds)",
            slowest.0.name()
        ),
        &["profile"],
    );
    let text = if slowest.0 == Design::Lockless {
        "no lock: every lookup is lock-free\n".to_string()
    } else {
        lockstat::format(&[counters.profile(match slowest.0 {
            Design::MutexTree => "per-file tree lock (mutex)",
            _ => "per-file tree lock (rwlock, shared)",
        })])
    };
    for line in text.lines() {
        lp.row(vec![line.to_string()]);
    }
    // Every measured lookup was a hit: the file stayed cached throughout.
    let misses = cache.stats().misses - misses_before;
    if misses != 0 {
        return Err(io::Error::other(format!(
            "own-part: {misses} misses during measurement (the file must stay cached)"
        )));
    }
    Ok(vec![t, lp])
}
