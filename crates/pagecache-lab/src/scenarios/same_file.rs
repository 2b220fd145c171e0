//! `same-file` (seed 001, Axboe 2006): T clients stream the same cached
//! file page by page into a sink that never touches the bytes, Jens Axboe's
//! "find_get_page() micro benchmark". Designs: one `page()` lookup per page
//! (pin, sink, release), 16-page gang lookups (`File::pages`, protocol 5.1
//! over one leaf: a pin per page), and 16-page runs (`File::run`, protocol
//! 5.7: one pin of the leaf per run); beside them the kernel's own path
//! from the seed: `splice` from the file into a pipe and from the pipe to
//! `/dev/null`.
//! Columns: design, clients, GiB/s (median of the runs), runs min..max.

use crate::ministat::Summary;
use crate::runner::{measure, repeat, Opts, Series, Table};
use pagecache::{Config, PageCache};
use std::hint::black_box;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

const PS: usize = 4096;

/// File bytes, and passes each client makes over it per run.
fn sizes(o: &Opts) -> (usize, usize) {
    if o.tiny {
        (1 << 20, 1)
    } else if o.quick {
        (64 << 20, 20)
    } else {
        (256 << 20, 40)
    }
}

/// The sink: like `/dev/null`, takes the page and reads none of it.
#[inline]
fn sink(page: &[u8]) {
    black_box(page.as_ptr());
}

/// How a client looks pages up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// One `page()` per page.
    Page,
    /// `File::pages` of this many pages: a pin per page.
    Gang(usize),
    /// `File::run` of this many pages: one leaf pin per run.
    Run(usize),
}

/// `clients` threads stream every page of `file` `passes` times, looking
/// pages up as `how` says. Returns the sample with `ops` = bytes streamed.
pub fn ours(
    file: &pagecache::File,
    pages: u64,
    passes: usize,
    how: Lookup,
    clients: usize,
) -> io::Result<crate::runner::Sample> {
    measure(clients, |_| {
        let mut bytes = 0u64;
        let mut got = Vec::with_capacity(16);
        for _ in 0..passes {
            let mut i = 0;
            while i < pages {
                let n = match how {
                    Lookup::Page => {
                        sink(&file.page(i)?);
                        1
                    }
                    Lookup::Gang(g) => {
                        let n = file.pages(i, &mut got, g)?;
                        for p in got.drain(..) {
                            sink(&p);
                        }
                        n
                    }
                    Lookup::Run(g) => {
                        let run = file.run(i, g)?;
                        for p in run.iter() {
                            sink(p);
                        }
                        run.len()
                    }
                };
                if n == 0 {
                    return Err(io::Error::other(format!(
                        "{how:?} at page {i} found nothing"
                    )));
                }
                i += n as u64;
            }
            bytes += pages * PS as u64;
        }
        Ok(bytes)
    })
}

/// One `splice(2)` of up to `len` bytes from `from` (at `*off` if given)
/// to `to`; the number of bytes moved.
fn splice(from: i32, off: Option<&mut libc::loff_t>, to: i32, len: usize) -> io::Result<usize> {
    let off = off.map_or(std::ptr::null_mut(), |o| o as *mut libc::loff_t);
    // SAFETY: plain system call on descriptors the caller owns; `off` is
    // null or points at a live loff_t; the kernel moves page references,
    // no user memory is read or written.
    let n = unsafe { libc::splice(from, off, to, std::ptr::null_mut(), len, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The kernel: each client splices the file into its pipe, 16 pages at a
/// time, and the pipe to `/dev/null`.
pub fn kernel(
    path: &Path,
    len: usize,
    passes: usize,
    clients: usize,
) -> io::Result<crate::runner::Sample> {
    use std::os::fd::{FromRawFd, OwnedFd};
    measure(clients, |_| {
        let f = std::fs::File::open(path)?;
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null")?;
        let mut fds = [0i32; 2];
        // SAFETY: pipe writes two descriptors into the array we pass.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are fresh and ours; dropping closes them.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut bytes = 0u64;
        for _ in 0..passes {
            let mut off: libc::loff_t = 0;
            while (off as usize) < len {
                let n = splice(f.as_raw_fd(), Some(&mut off), wr.as_raw_fd(), 16 * PS)?;
                if n == 0 {
                    break;
                }
                let mut left = n;
                while left > 0 {
                    match splice(rd.as_raw_fd(), None, null.as_raw_fd(), left)? {
                        0 => return Err(io::Error::other("splice to /dev/null moved nothing")),
                        m => left -= m,
                    }
                }
                bytes += n as u64;
            }
        }
        Ok(bytes)
    })
}

/// Runs the scenario.
pub fn run(o: &Opts) -> io::Result<Vec<Table>> {
    let (len, passes) = sizes(o);
    let dir = crate::TempDir::new("same-file")?;
    let path = dir.path().join("data.bin");
    crate::write_pattern_file(&path, len as u64)?;
    // Warm the kernel's copy too.
    let _ = std::fs::read(&path)?;
    let cache = PageCache::new(Config {
        capacity: len + (16 << 20),
        ..Config::default()
    })?;
    let file = cache.open(&path)?;
    let pages = (len / PS) as u64;
    let mut b = vec![0u8; PS];
    for i in 0..pages {
        file.read_at(&mut b, i * PS as u64)?;
    }
    let mut t = Table::new(
        format!(
            "same-file: clients stream one cached {} MiB file, {passes} passes per run",
            len >> 20
        ),
        &["design", "clients", "GiB/s", "runs min..max"],
    );
    let designs = [
        "pagecache page() per page",
        "pagecache 16-page gang",
        "pagecache 16-page run (leaf pin)",
        "kernel splice to /dev/null",
    ];
    for &n in &o.threads {
        for (k, name) in designs.iter().enumerate() {
            let samples = repeat(o, &format!("same-file {name}, {n} clients"), || match k {
                0 => ours(&file, pages, passes, Lookup::Page, n),
                1 => ours(&file, pages, passes, Lookup::Gang(16), n),
                2 => ours(&file, pages, passes, Lookup::Run(16), n),
                _ => kernel(&path, len, passes, n),
            })?;
            let gib: Vec<f64> = samples
                .iter()
                .map(|s| s.rate() / (1u64 << 30) as f64)
                .collect();
            let sum = Summary::of(&gib);
            t.row(vec![
                name.to_string(),
                n.to_string(),
                format!("{:.2}", sum.median),
                format!("{:.2}..{:.2}", sum.min, sum.max),
            ]);
            t.series.push(Series::new(name, n, gib, "GiB/s"));
        }
    }
    Ok(vec![t])
}
