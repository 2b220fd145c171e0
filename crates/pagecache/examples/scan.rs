//! One sequential pass over a file larger than the cache, 1 MiB `read_at`s,
//! side by side with the kernel's buffered `read()`: the cache with direct
//! reads, and with `Config::stream_reads` (buffered: a file larger than
//! the cache is read straight into the buffer, past the frames, the
//! kernel's copy dropped behind). The kernel's cache is
//! dropped before each case (as root); how much of the file it holds is
//! sampled every 256 MiB (`mincore` on a mapping of the file).
//!
//! ```sh
//! READAHEAD_MIB=M ONLY=TEXT WARM=1 POPULATE=1 PROGRESS=1 cargo run --release -p pagecache --example scan -- FILE [CACHE_MIB] [ROUNDS]
//! ```
use pagecache::internals::kernel_cached_pages;
use pagecache::{Config, PageCache, StreamReads};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

/// Reads `len` bytes through `read` in 1 MiB requests; returns the
/// seconds, a checksum, and the most pages of `path` the kernel's cache
/// held at a 256 MiB step.
fn pass(
    path: &Path,
    len: u64,
    mut read: impl FnMut(&mut [u8], u64) -> std::io::Result<usize>,
) -> std::io::Result<(f64, u64, usize)> {
    let mut buf = vec![0u8; 1 << 20];
    let (mut most, mut sum, mut off) = (0, 0u64, 0);
    let mut last = 0.0;
    let t0 = Instant::now();
    while off < len {
        let n = read(&mut buf, off)?;
        sum = sum.wrapping_add(buf[..n].iter().step_by(4096).map(|&b| b as u64).sum());
        off += n as u64;
        if off % (256 << 20) == 0 {
            most = most.max(kernel_cached_pages(path)?);
        }
        // PROGRESS=1: the rate of each 16 MiB, to see a scan's start.
        if off % (16 << 20) == 0 && std::env::var_os("PROGRESS").is_some() {
            let t = t0.elapsed().as_secs_f64();
            eprint!("{:.2} ", (16 << 20) as f64 / (t - last) / 1e9);
            last = t;
        }
    }
    Ok((t0.elapsed().as_secs_f64(), sum, most))
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = Path::new(args.get(1).expect("FILE"));
    let mib: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(256);
    let rounds: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(2);
    let readahead_max = std::env::var("READAHEAD_MIB")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map_or(Config::default().readahead_max, |m| m << 20);
    let len = std::fs::metadata(path)?.len();
    let pages = len.div_ceil(4096) as f64;
    for _ in 0..rounds {
        for case in [
            "kernel read()",
            "pagecache, direct",
            "pagecache, stream_reads Buffered",
            "pagecache, stream_reads Measure",
        ] {
            // ONLY=TEXT: the cases whose name contains TEXT (for a profile).
            if std::env::var("ONLY").is_ok_and(|o| !case.contains(o.as_str())) {
                continue;
            }
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            let (secs, sum, most) = if case == "kernel read()" {
                let f = std::fs::File::open(path)?;
                pass(path, len, |b, off| f.read_at(b, off))?
            } else {
                let cache = PageCache::new(Config {
                    capacity: mib << 20,
                    stream_reads: if case.ends_with("Buffered") {
                        StreamReads::Buffered
                    } else if case.ends_with("Measure") {
                        StreamReads::Measure
                    } else {
                        StreamReads::Direct
                    },
                    readahead_max,
                    // POPULATE=1: the arena faulted in at creation (no
                    // fault-ahead helper running during the scan).
                    populate: std::env::var_os("POPULATE").is_some(),
                    ..Config::default()
                })?;
                let f = cache.open(path)?;
                // WARM=1: one untimed pass first, so the arena's first
                // touch is paid before the timed one (a cache that has run).
                if std::env::var_os("WARM").is_some() {
                    pass(path, len, |b, off| f.read_at(b, off))?;
                    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
                }
                let r = pass(path, len, |b, off| f.read_at(b, off))?;
                for c in cache.stream_choices() {
                    eprintln!("  {c}");
                }
                let s = cache.stats();
                eprintln!(
                    "  pages read into frames {}, read ahead {}, streamed past the cache {}",
                    s.reads, s.readahead_pages, s.streamed_pages
                );
                r
            };
            let end = kernel_cached_pages(path)?;
            eprintln!(
                "{case:28} {:.2} GB/s; kernel cache: at most {:.1}% of the file, {:.1}% at the end (checksum {sum})",
                len as f64 / secs / 1e9,
                most as f64 * 100.0 / pages,
                end as f64 * 100.0 / pages,
            );
        }
    }
    Ok(())
}
