//! `same-page` (will-it-scale `pread2`): threads read 64 bytes of the same
//! 4 KiB page; the optimistic read (no reference, nothing shared written)
//! against a pinned read (one refcount RMW pair per read) and the kernel's
//! `pread` of the same bytes.

use crate::runner::{measure, median, repeat, stddev, Opts, Series, Table};
use pagecache::{Config, PageCache};
use std::io;
use std::os::unix::fs::FileExt;

fn ops(o: &Opts) -> u64 {
    if o.tiny {
        20_000
    } else if o.quick {
        300_000
    } else {
        3_000_000
    }
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let dir = crate::TempDir::new("same-page")?;
    let path = dir.0.join("page.bin");
    std::fs::write(&path, vec![7u8; 4096])?;
    let cache = PageCache::new(Config {
        capacity: 16 << 20,
        ..Config::default()
    })?;
    let file = cache.open(&path)?;
    let std_file = std::fs::File::open(&path)?;
    let n = ops(o);
    let mut t = Table::new(
        "same-page: 64 B reads of one page (pread2 shape)",
        &[
            "design",
            "threads",
            "Mops/s",
            "stdev",
            "per thread",
            "vs 1 thread",
        ],
    );
    for (name, which) in [
        ("optimistic read_at", 0),
        ("pinned page() + copy", 1),
        ("kernel pread", 2),
    ] {
        let mut base = None;
        for &threads in &o.threads {
            let mut rates = repeat(o, &format!("same-page {name}, {threads} threads"), || {
                let s = measure(threads, |_| {
                    let mut b = [0u8; 64];
                    for _ in 0..n {
                        match which {
                            0 => {
                                file.read_at(&mut b, 128)?;
                            }
                            1 => {
                                let p = file.page(0)?;
                                b.copy_from_slice(&p[128..192]);
                            }
                            _ => {
                                std_file.read_at(&mut b, 128)?;
                            }
                        }
                        if b[0] != 7 {
                            return Err(io::Error::other("wrong byte read"));
                        }
                    }
                    Ok(n)
                })?;
                Ok(s.rate() / 1e6)
            })?;
            t.series
                .push(Series::new(name, threads, rates.clone(), "M reads/s"));
            let sd = stddev(&rates);
            let m = median(&mut rates);
            let b = *base.get_or_insert(m);
            t.row(vec![
                name.to_string(),
                threads.to_string(),
                format!("{m:.2}"),
                format!("{sd:.2}"),
                format!("{:.2}", m / threads as f64),
                format!("{:.2}x", m / b),
            ]);
        }
    }
    Ok(vec![t])
}
