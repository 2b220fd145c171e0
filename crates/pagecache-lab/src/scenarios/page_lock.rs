//! `page-lock` (seed 003, FreeBSD 2010): a CDN-like workload — threads serve
//! random whole files from a directory of many small cached files — with the
//! per-page state changes (here: the pin taken to serve a page and its
//! release) serialized by
//! * one global page mutex (the "vm page queue mutex", before),
//! * a hashed array of page locks (`pa_lock[hash(page) % N]`, cache-line
//!   padded, Macy/Roberson's patch),
//! * nothing but the page's own state word (per-page bits, this cache).
//!
//! Each design is sampled N times; the output is ministat's comparison (95%
//! confidence, Student's t, pooled s) of each pair, and a lock-profile table
//! (`max wait_max total wait_total count avg wait_avg cnt_lock name`) from
//! one extra profiled run per locked design, kept out of the samples so
//! profiling does not tax only the "before" designs.

use crate::ministat;
use crate::runner::{measure, repeat, Opts, Series, Table};
use pagecache::lockstat::{self, LockCounters, LockProfile};
use pagecache::{Config, File, PageCache};
use std::io;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

const PS: usize = 4096;

fn sizes(o: &Opts) -> (usize, u64, u64) {
    // files, pages per file, requests per thread per sample
    if o.tiny {
        (16, 2, 200)
    } else if o.quick {
        (512, 4, 20_000)
    } else {
        (4096, 8, 100_000)
    }
}

/// How page pins are serialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// One global mutex.
    GlobalMutex,
    /// `n` hashed, padded mutexes.
    Hashed(usize),
    /// The cache's per-page state word only.
    PageBits,
}

impl Design {
    /// The name in tables.
    pub fn name(self) -> String {
        match self {
            Design::GlobalMutex => "global page mutex".into(),
            Design::Hashed(n) => format!("hashed page locks ({n})"),
            Design::PageBits => "per-page state bits".into(),
        }
    }
}

#[repr(align(64))]
#[derive(Debug, Default)]
struct Padded(Mutex<()>);

/// The page locks of one design (none for per-page bits).
#[derive(Debug)]
pub struct Locks {
    design: Design,
    locks: Vec<Padded>,
    /// Only in the profiled run.
    prof: Option<LockCounters>,
}

impl Locks {
    /// Locks for `design`; with `profile`, acquisitions are counted and timed.
    pub fn new(design: Design, profile: bool) -> Locks {
        let n = match design {
            Design::GlobalMutex => 1,
            Design::Hashed(n) => n.max(1),
            Design::PageBits => 0,
        };
        Locks {
            design,
            locks: (0..n).map(|_| Padded::default()).collect(),
            prof: profile.then(LockCounters::new),
        }
    }

    /// Runs `f` under the lock of page `(file, page)` (or none).
    fn with<T>(&self, file: usize, page: u64, f: impl FnOnce() -> T) -> T {
        if self.locks.is_empty() {
            return f();
        }
        let h = (file as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ page.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        let m = &self.locks[(h % self.locks.len() as u64) as usize].0;
        let Some(p) = &self.prof else {
            let _g = m.lock().unwrap_or_else(|e| e.into_inner());
            return f();
        };
        let g: MutexGuard<'_, ()> = match m.try_lock() {
            Ok(g) => {
                p.acquired(None);
                g
            }
            Err(_) => {
                let t = Instant::now();
                let g = m.lock().unwrap_or_else(|e| e.into_inner());
                p.acquired(Some(t));
                g
            }
        };
        let held = Instant::now();
        let r = f();
        drop(g);
        p.released(held);
        r
    }

    fn profile(&self) -> Option<LockProfile> {
        let name = match self.design {
            Design::GlobalMutex => "global page mutex",
            Design::Hashed(_) => "hashed page lock",
            Design::PageBits => "none",
        };
        Some(self.prof.as_ref()?.profile(name))
    }
}

/// One sample: `threads` threads each serve `requests` random whole files;
/// returns (requests per second, requests served).
pub fn sample(
    files: &[File],
    pages: u64,
    locks: &Locks,
    threads: usize,
    requests: u64,
) -> io::Result<(f64, u64)> {
    let s = measure(threads, |t| {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t as u64 + 1);
        let mut out = vec![0u8; PS];
        for _ in 0..requests {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let fi = (x % files.len() as u64) as usize;
            for p in 0..pages {
                // pin under the page's lock, serve (copy) unlocked, release
                // under the lock again: the state changes FreeBSD's page lock
                // protected (hold count), done by each design its own way.
                let pg = locks.with(fi, p, || files[fi].page(p))?;
                out.copy_from_slice(&pg);
                if out[0] != (fi % 251) as u8 {
                    return Err(io::Error::other(format!("file {fi} page {p}: wrong byte")));
                }
                locks.with(fi, p, || drop(pg));
            }
        }
        Ok(requests)
    })?;
    Ok((s.rate(), s.ops))
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let (nfiles, pages, requests) = sizes(o);
    let threads = *o.threads.iter().max().unwrap_or(&2);
    let dir = crate::TempDir::new("page-lock")?;
    let cache = PageCache::new(Config {
        capacity: nfiles * pages as usize * PS + (16 << 20),
        ..Config::default()
    })?;
    let mut files = Vec::with_capacity(nfiles);
    for i in 0..nfiles {
        let p = dir.0.join(format!("obj{i}"));
        std::fs::write(&p, vec![(i % 251) as u8; pages as usize * PS])?;
        let f = cache.open(&p)?;
        let mut b = [0u8; 1];
        for pg in 0..pages {
            f.read_at(&mut b, pg * PS as u64)?; // cached, as a warm CDN
        }
        files.push(f);
    }
    let designs = [Design::GlobalMutex, Design::Hashed(256), Design::PageBits];
    let runs = o.runs.max(2);
    let mut results: Vec<Vec<f64>> = Vec::new();
    for &d in &designs {
        let locks = Locks::new(d, false);
        let ro = Opts { runs, ..o.clone() };
        let v = repeat(&ro, &format!("page-lock {}", d.name()), || {
            Ok(sample(&files, pages, &locks, threads, requests)?.0)
        })?;
        results.push(v);
    }
    let mut summary = Table::new(
        format!(
            "page-lock: {threads} threads serve random whole files ({nfiles} files x {} KiB, cached); requests/s, {runs} samples",
            pages as usize * PS / 1024
        ),
        &["design", "N", "min", "max", "median", "avg", "stddev"],
    );
    for (d, v) in designs.iter().zip(&results) {
        summary
            .series
            .push(Series::new(&d.name(), threads, v.clone(), "requests/s"));
        let s = ministat::Summary::of(v);
        summary.row(vec![
            d.name(),
            s.n.to_string(),
            format!("{:.0}", s.min),
            format!("{:.0}", s.max),
            format!("{:.0}", s.median),
            format!("{:.0}", s.avg),
            format!("{:.0}", s.stddev),
        ]);
    }
    let mut tables = vec![summary];
    for (a, b) in [(0, 2), (1, 2), (0, 1)] {
        let text = ministat::compare(
            &designs[a].name(),
            &results[a],
            &designs[b].name(),
            &results[b],
        );
        let mut t = Table::new(
            format!(
                "ministat: {} (x) vs {} (+)",
                designs[a].name(),
                designs[b].name()
            ),
            &["ministat -c 95"],
        );
        for line in text.lines() {
            t.row(vec![line.to_string()]);
        }
        tables.push(t);
    }
    // Lock profile: one extra, profiled run of each locked design, plus the
    // cache's own lock classes when built with the `lockstat` feature.
    let mut profs: Vec<LockProfile> = Vec::new();
    for &d in &designs[..2] {
        let locks = Locks::new(d, true);
        sample(&files, pages, &locks, threads, requests)?;
        profs.extend(locks.profile());
    }
    profs.extend(lockstat::snapshot().into_iter().filter(|p| p.count > 0));
    let mut lp = Table::new(
        "lock profile (profiled run of each locked design; times in microseconds; sorted by wait_total)",
        &["debug.lock.prof.stats"],
    );
    for line in lockstat::format(&profs).lines() {
        lp.row(vec![line.to_string()]);
    }
    tables.push(lp);
    Ok(tables)
}
