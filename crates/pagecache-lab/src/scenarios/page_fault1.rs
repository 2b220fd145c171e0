//! `page-fault1` (seed 004, Jordan 2018, will-it-scale page_fault1): each
//! task maps an anonymous region, write-touches every page and frees it, in
//! a loop. The seed's four kernels become four builds of the cache:
//!
//! | seed kernel | pagecache configuration |
//! |---|---|
//! | baseline | strict LRU under one global lock + one global free-list lock |
//! | lru | seed 004's two-mode rwlock over the SMP list + global free list |
//! | zone (Aaron Lu's) | strict LRU + per-CPU free lists |
//! | lru+zone | SMP list + per-CPU free lists |
//!
//! In the list builds every fault adds its page to the LRU list and every
//! free deletes it, as the kernel's LRU does for anonymous pages. The
//! default cache (S3-FIFO, which never lists unevictable anonymous pages,
//! and per-CPU free lists) and the kernel's own page_fault1 (threads
//! mmap/write/munmap) run beside them. Columns as the seed's thread mode:
//! `design ntask speedup pgf/s stdev`, speedup against the baseline at the
//! same task count.

use crate::runner::{mean, repeat, stddev, Opts, Sample, Series, Table};
use pagecache::{Config, PageCache, PolicyKind, PoolKind};
use std::io;

/// Region bytes per task and regions per task per run.
fn sizes(o: &Opts) -> (usize, usize) {
    if o.tiny {
        (1 << 20, 2)
    } else if o.quick {
        (32 << 20, 4)
    } else {
        (128 << 20, 8)
    }
}

/// The designs, in table order: name, and the cache build (`None` = the
/// kernel).
pub const DESIGNS: [(&str, Option<(PolicyKind, PoolKind)>); 6] = [
    ("baseline", Some((PolicyKind::StrictLru, PoolKind::Global))),
    ("lru", Some((PolicyKind::SmpLru, PoolKind::Global))),
    ("zone", Some((PolicyKind::StrictLru, PoolKind::PerCpu))),
    ("lru+zone", Some((PolicyKind::SmpLru, PoolKind::PerCpu))),
    (
        "pagecache default",
        Some((PolicyKind::S3Fifo, PoolKind::PerCpu)),
    ),
    ("kernel page_fault1", None),
];

/// A cache of the given build big enough for `tasks` regions.
pub fn cache(
    policy: PolicyKind,
    pool: PoolKind,
    region: usize,
    tasks: usize,
) -> io::Result<PageCache> {
    PageCache::new(Config {
        capacity: tasks * (region + (1 << 20)) + (16 << 20),
        policy,
        pool,
        ..Config::default()
    })
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let (region, loops) = sizes(o);
    let mut t = Table::new(
        format!(
            "page-fault1: tasks map {} MiB anonymous, touch every page, free; {loops} loops per run",
            region >> 20
        ),
        &["design", "ntask", "speedup", "pgf/s", "stdev"],
    );
    for &n in &o.threads {
        let mut base = 0.0;
        for (name, build) in DESIGNS {
            // One cache per design and task count, so that its arena is
            // faulted in by the warm-up run, not inside the measured ones.
            let c = match build {
                Some((policy, pool)) => Some(cache(policy, pool, region, n)?),
                None => None,
            };
            let samples = repeat(o, &format!("page-fault1 {name}, {n} tasks"), || match &c {
                Some(c) => crate::scenarios::anon_fault::touch(c, region, loops, n),
                None => crate::scenarios::anon_fault::kernel(region * n, loops, n),
            })?;
            let rates: Vec<f64> = samples.iter().map(Sample::rate).collect();
            let m = mean(&rates);
            if name == "baseline" {
                base = m;
            }
            let speedup = if name == "baseline" {
                String::new()
            } else {
                format!("{:+.1}%", 100.0 * (m / base - 1.0))
            };
            t.row(vec![
                name.to_string(),
                n.to_string(),
                speedup,
                format!("{m:.0}"),
                format!("{:.0}", stddev(&rates)),
            ]);
            t.series.push(Series::new(name, n, rates, "faults/s"));
        }
    }
    Ok(vec![t])
}
