//! `anon-fault` (seed 002, Lameter 2004): threads allocate, write-touch and
//! free anonymous memory; with per-CPU free lists ("after") and with one
//! global free-list lock ("before"), beside the kernel's anonymous write
//! faults on the same sizes. Table shape: `Gb Rep Threads User System Wall
//! flt/cpu/s fault/wsec`.

use crate::runner::{measure, median_run, repeat, Opts, Sample, Series, Table};
use pagecache::{Config, PageCache, PoolKind};
use std::io;

const PS: usize = 4096;

/// Total bytes touched per repetition (split over the threads), and reps.
fn sizes(o: &Opts) -> (usize, usize) {
    if o.tiny {
        (4 << 20, 2)
    } else if o.quick {
        (512 << 20, 3)
    } else {
        (1 << 30, 10)
    }
}

/// One configuration of the pagecache designs: `threads` threads each
/// allocate, write-touch and free `total / threads` bytes, `reps` times.
/// `Sample::ops` is the number of faults taken.
pub fn ours(pool: PoolKind, total: usize, reps: usize, threads: usize) -> io::Result<Sample> {
    let cache = PageCache::new(Config {
        capacity: total + threads * (1 << 20) + (16 << 20),
        pool,
        ..Config::default()
    })?;
    touch(&cache, (total / threads).max(PS), reps, threads)
}

/// The fault loop shared with `page-fault1`: `threads` threads each take
/// an anonymous region of `per` bytes from `cache`, write-touch every page
/// and free it, `reps` times. `Sample::ops` counts faults.
pub fn touch(cache: &PageCache, per: usize, reps: usize, threads: usize) -> io::Result<Sample> {
    measure(threads, |_| {
        (0..reps).try_fold(0, |n, _| Ok(n + cache_round(cache, per)?))
    })
}

/// One round of `touch`: a region of `per` bytes taken from `cache`,
/// each page written once, the region freed. Returns the pages faulted.
pub fn cache_round(cache: &PageCache, per: usize) -> io::Result<u64> {
    let r = cache.anon(per as u64)?;
    for i in 0..r.pages() {
        r.page_mut(i)?[0] = 1;
    }
    Ok(r.pages())
}

/// The same with the kernel's anonymous memory (`mmap`, write, `munmap`).
pub fn kernel(total: usize, reps: usize, threads: usize) -> io::Result<Sample> {
    let per = (total / threads).max(PS);
    measure(threads, |_| {
        (0..reps).try_fold(0, |n, _| Ok(n + kernel_round(per)?))
    })
}

/// One round of `kernel`: a private anonymous mapping of `per` bytes,
/// each page written once, unmapped. Returns the pages faulted.
pub fn kernel_round(per: usize) -> io::Result<u64> {
    let mut faults = 0;
    // SAFETY: a fresh private anonymous mapping, written inside its bounds
    // and unmapped before the function returns.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            per,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let c = p as *mut u8;
        let mut off = 0;
        while off < per {
            std::ptr::write_volatile(c.add(off), 1);
            off += PS;
            faults += 1;
        }
        libc::munmap(p, per);
    }
    Ok(faults)
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let (total, reps) = sizes(o);
    let gb = total as f64 / (1u64 << 30) as f64;
    let mut tables = Vec::new();
    for (name, which) in [
        ("pagecache, per-CPU free lists (after)", 0),
        ("pagecache, one global free-list lock (before)", 1),
        ("kernel anonymous write faults", 2),
    ] {
        let mut t = Table::new(
            format!("anon-fault: {name}"),
            &[
                "Gb",
                "Rep",
                "Threads",
                "User",
                "System",
                "Wall",
                "flt/cpu/s",
                "fault/wsec",
            ],
        );
        for &threads in &o.threads {
            let samples = repeat(
                o,
                &format!("anon-fault {name}, {threads} threads"),
                || match which {
                    0 => ours(PoolKind::PerCpu, total, reps, threads),
                    1 => ours(PoolKind::Global, total, reps, threads),
                    _ => kernel(total, reps, threads),
                },
            )?;
            let s = median_run(&samples);
            t.series.push(Series::new(
                name,
                threads,
                samples.iter().map(Sample::rate).collect(),
                "faults/s",
            ));
            t.row(vec![
                format!("{gb:.3}"),
                reps.to_string(),
                threads.to_string(),
                format!("{:.3}s", s.user),
                format!("{:.3}s", s.sys),
                format!("{:.3}s", s.wall),
                format!("{:.3}", s.per_cpu()),
                format!("{:.3}", s.rate()),
            ]);
        }
        tables.push(t);
    }
    Ok(tables)
}
