//! One sequential pass over a file larger than the cache, 1 MiB `read_at`s,
//! side by side with the kernel's buffered `read()`: the cache with direct
//! reads, and with `Config::buffered_streams` (buffered reads of readahead
//! windows, the kernel's copy dropped behind). The kernel's cache is
//! dropped before each case (as root); how much of the file it holds is
//! sampled every 256 MiB (`mincore` on a mapping of the file).
//!
//! ```sh
//! cargo run --release -p pagecache --example scan -- FILE [CACHE_MIB] [ROUNDS]
//! ```
use pagecache::{Config, PageCache};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::time::Instant;

/// Pages of `path` in the kernel's cache.
fn kernel_cached(path: &str) -> std::io::Result<u64> {
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0);
    }
    // SAFETY: a fresh read-only shared mapping of the whole file, never
    // dereferenced, unmapped below.
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
        return Err(std::io::Error::last_os_error());
    }
    let mut v = vec![0u8; len.div_ceil(4096)];
    // SAFETY: a query on the mapping just made into a byte per page.
    let r = unsafe { libc::mincore(p, len, v.as_mut_ptr()) };
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(p, len) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(v.iter().filter(|&&b| b & 1 != 0).count() as u64)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("FILE").as_str();
    let mib: usize = args.get(2).map(|s| s.parse().unwrap()).unwrap_or(256);
    let rounds: usize = args.get(3).map(|s| s.parse().unwrap()).unwrap_or(2);
    let len = std::fs::metadata(path)?.len();
    let pages = len.div_ceil(4096);
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..rounds {
        for case in [
            "kernel read()",
            "pagecache, direct",
            "pagecache, buffered_streams",
        ] {
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            let mut most = 0;
            let t0;
            let mut sum = 0u64;
            if case == "kernel read()" {
                let f = std::fs::File::open(path)?;
                t0 = Instant::now();
                let mut off = 0;
                while off < len {
                    let n = f.read_at(&mut buf, off)?;
                    sum = sum.wrapping_add(buf[..n].iter().step_by(4096).map(|&b| b as u64).sum());
                    off += n as u64;
                    if off % (256 << 20) == 0 {
                        most = most.max(kernel_cached(path)?);
                    }
                }
            } else {
                let cache = PageCache::new(Config {
                    capacity: mib << 20,
                    buffered_streams: case.ends_with("streams"),
                    readahead_max: std::env::var("READAHEAD_MIB")
                        .ok()
                        .and_then(|s| s.parse::<usize>().ok())
                        .map_or(Config::default().readahead_max, |m| m << 20),
                    ..Config::default()
                })?;
                let f = cache.open(path)?;
                t0 = Instant::now();
                let mut off = 0;
                while off < len {
                    let n = f.read_at(&mut buf, off)?;
                    sum = sum.wrapping_add(buf[..n].iter().step_by(4096).map(|&b| b as u64).sum());
                    off += n as u64;
                    if off % (256 << 20) == 0 {
                        most = most.max(kernel_cached(path)?);
                    }
                }
            }
            let secs = t0.elapsed().as_secs_f64();
            let end = kernel_cached(path)?;
            eprintln!(
                "{case:28} {:.2} GB/s; kernel cache: at most {:.1}% of the file, {:.1}% at the end (checksum {sum})",
                len as f64 / secs / 1e9,
                most as f64 * 100.0 / pages as f64,
                end as f64 * 100.0 / pages as f64,
            );
        }
    }
    Ok(())
}
