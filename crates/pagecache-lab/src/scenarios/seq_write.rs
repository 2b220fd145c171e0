//! `out-of-memory --case write`: the sequential writer alone, the designs
//! taking turns. A new file 8x the budget written in 1 MiB writes, then
//! synced, by:
//! - the device: `O_DIRECT` writes from one aligned buffer, `fdatasync`
//!   at the end (what the disk does with the same stream);
//! - pagecache as configured by default (its frame arena faulted in as
//!   the writer first uses it, with the arena's helper ahead of it);
//! - pagecache with [`Config::populate`]: the arena faulted in when the
//!   cache is created, outside the timed pass (a buffer pool allocated up
//!   front), to show what the first touch of its memory costs the writer;
//! - the kernel: `write()` + `fdatasync`, in the memory cgroup of the
//!   budget + 64 MiB as every kernel design of `out-of-memory`.
//!
//! Each round runs the four in turn (the default `--runs` 3, at most 5),
//! so the machine's drift (this VM's disk varies run to run) falls on all
//! of them; rates are the medians, latencies those of the last round.

use super::out_of_memory::{drop_cache, fmt_lat, sequential, Aligned, Cgroup, Size};
use crate::runner::{median, Opts, Series, Table};
use pagecache::{Config, OpenOptions, PageCache};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const MB: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    Device,
    Pagecache,
    Populated,
    Kernel,
}

impl Writer {
    const ALL: [Writer; 4] = [
        Writer::Device,
        Writer::Pagecache,
        Writer::Populated,
        Writer::Kernel,
    ];

    fn name(self) -> &'static str {
        match self {
            Writer::Device => "kernel O_DIRECT write + fdatasync (device)",
            Writer::Pagecache => "pagecache",
            Writer::Populated => "pagecache, arena populated at creation (untimed)",
            Writer::Kernel => "kernel write() + fdatasync",
        }
    }
}

/// One pass of `w` writing `out` (removed first): rate in bytes per
/// second, p50 and p99 of a write, and the cache's creation time (0 but
/// for pagecache).
fn pass(w: Writer, sz: &Size, out: &Path) -> io::Result<(f64, Duration, Duration, Duration)> {
    let _ = std::fs::remove_file(out);
    let mut created = Duration::ZERO;
    let (rate, lat) = match w {
        Writer::Device => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(out)?;
            let mut a = Aligned::new(MB);
            a.buf().fill(0x77);
            sequential(
                sz.file,
                |pos| {
                    std::os::unix::fs::FileExt::write_all_at(&f, a.buf(), pos)?;
                    Ok(MB)
                },
                || f.sync_data(),
            )?
        }
        Writer::Pagecache | Writer::Populated => {
            let t = Instant::now();
            let c = PageCache::new(Config {
                capacity: sz.budget,
                populate: w == Writer::Populated,
                ..Config::default()
            })?;
            created = t.elapsed();
            let f = c.open_with(out, OpenOptions::new().read(true).write(true).create(true))?;
            let b = vec![0x77u8; MB];
            sequential(sz.file, |pos| f.write_at(&b, pos).map(|()| MB), || f.sync())?
        }
        Writer::Kernel => {
            let f = File::create(out)?;
            let b = vec![0x77u8; MB];
            sequential(
                sz.file,
                |_| (&f).write_all(&b).map(|()| MB),
                || f.sync_data(),
            )?
        }
    };
    Ok((rate, lat.percentile(0.5), lat.percentile(0.99), created))
}

/// The table (see the module docs). `data` is any file on the same
/// filesystem, for `drop_cache`; `out` the file written.
pub(crate) fn run(
    o: &Opts,
    sz: &Size,
    data: &Path,
    out: &Path,
    cgroup: &Result<Cgroup, String>,
) -> io::Result<Table> {
    let rounds = if o.tiny { 1 } else { o.runs.clamp(1, 5) };
    let mut t = Table::new(
        format!(
            "sequential write of a new {} MiB file in 1 MiB writes, then sync; budget {} MiB; {}; \
             the designs in turn, {rounds} rounds, medians",
            sz.file >> 20,
            sz.budget >> 20,
            match cgroup {
                Ok(c) => format!(
                    "the kernel's write() in a memory cgroup v{} of {} MiB",
                    c.version,
                    (sz.budget + (64 << 20)) >> 20
                ),
                Err(e) => format!("no memory cgroup ({e}): the kernel's cache is not limited"),
            }
        ),
        &[
            "design",
            "rate",
            "p50",
            "p99",
            "cache created in",
            "vs device",
            "vs kernel",
        ],
    );
    let n = Writer::ALL.len();
    let mut rates = vec![Vec::new(); n];
    let mut last = vec![(Duration::ZERO, Duration::ZERO, Duration::ZERO); n];
    for r in 0..rounds {
        for (i, &w) in Writer::ALL.iter().enumerate() {
            crate::runner::progress("out-of-memory (write)", r * n + i, rounds * n);
            drop_cache(data);
            let confined = cgroup.as_ref().ok().filter(|_| w == Writer::Kernel);
            if let Some(c) = confined {
                c.enter().map_err(io::Error::other)?;
            }
            let res = pass(w, sz, out);
            if let Some(c) = confined {
                c.leave();
            }
            let (rate, p50, p99, created) = res?;
            rates[i].push(rate);
            last[i] = (p50, p99, created);
        }
    }
    crate::runner::progress("out-of-memory (write)", rounds * n, rounds * n);
    let _ = std::fs::remove_file(out);
    let med: Vec<f64> = rates.iter().map(|r| median(&mut r.clone())).collect();
    let of = |w: Writer| med[Writer::ALL.iter().position(|&x| x == w).unwrap_or(0)];
    let (device, kernel) = (of(Writer::Device), of(Writer::Kernel));
    for (i, &w) in Writer::ALL.iter().enumerate() {
        let (p50, p99, created) = last[i];
        t.row(vec![
            w.name().to_string(),
            format!("{:.1} MB/s", med[i] / 1e6),
            fmt_lat(p50),
            fmt_lat(p99),
            if created.is_zero() {
                "-".into()
            } else {
                format!("{:.0} ms", created.as_secs_f64() * 1e3)
            },
            format!("{:.2}x", med[i] / device),
            format!("{:.2}x", med[i] / kernel),
        ]);
        t.series.push(Series::new(
            w.name(),
            1,
            rates[i].iter().map(|r| r / 1e6).collect(),
            "MB/s",
        ));
    }
    Ok(t)
}
