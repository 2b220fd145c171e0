//! A sequential writer's latency through a 256 MiB cache: 1 MiB
//! `write_at`s of a new file (2 GiB by default, 8x the cache), then
//! `sync`. Prints the rate, the latency percentiles of the writes, the
//! most frames in use at once with the process's resident memory (a long
//! stream drops behind: `Config::drop_behind_writes`), and each write
//! slower than 3 ms with what happened during it (the dirty count
//! before and after, evictions, pages written back, writes issued): where
//! a writer's p99 comes from (dirty throttling, reclaim, first-touch page
//! faults of the frame arena).
//!
//! ```sh
//! cargo run --release -p pagecache --example seq_write_latency [MiB] [DIR] [populate]
//! ```
//!
//! `populate` sets `Config::populate` (the frame arena faulted in at the
//! cache's creation, whose time is printed).

use pagecache::{Config, OpenOptions, PageCache};
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mib: u64 = match args.next() {
        Some(s) => s.parse().map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("MiB {s:?}: {e}"))
        })?,
        None => 2048,
    };
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let populate = args.next().as_deref() == Some("populate");
    let total = mib << 20;
    let p = dir.join(format!("pagecache-seq-write-{}", std::process::id()));
    let tc = Instant::now();
    let c = PageCache::new(Config {
        capacity: 256 << 20,
        populate,
        ..Config::default()
    })?;
    println!(
        "cache created in {:.2?} (populate: {populate})",
        tc.elapsed()
    );
    let f = c.open_with(&p, OpenOptions::new().read(true).write(true).create(true))?;
    let b = vec![0x77u8; 1 << 20];
    let mut lats = Vec::new();
    let mut slow = Vec::new();
    let t0 = Instant::now();
    let mut pos = 0;
    let mut least_free = usize::MAX;
    while pos < total {
        least_free = least_free.min(c.free_frames());
        let (d0, s0) = (c.dirty_pages(), c.stats());
        let t = Instant::now();
        f.write_at(&b, pos)?;
        let e = t.elapsed();
        lats.push(e);
        if e > Duration::from_millis(3) {
            let s1 = c.stats();
            slow.push(format!(
                "  MiB {:5} {:>9.2?}  dirty {} -> {}  evictions {}  written back {}  writes {}",
                pos >> 20,
                e,
                d0,
                c.dirty_pages(),
                s1.evictions - s0.evictions,
                s1.writebacks - s0.writebacks,
                s1.writes - s0.writes
            ));
        }
        pos += 1 << 20;
    }
    f.sync()?;
    let tt = t0.elapsed();
    let st = c.stats();
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("?").to_string())
        })
        .unwrap_or_default();
    drop(f);
    let _ = std::fs::remove_file(&p);
    lats.sort();
    let pct = |q: f64| lats[((lats.len() as f64 * q) as usize).min(lats.len() - 1)];
    println!(
        "{mib} MiB + sync in {tt:.2?}: {:.0} MB/s; write p50 {:.2?} p90 {:.2?} p99 {:.2?} max {:.2?}; {} writes over 3 ms",
        total as f64 / tt.as_secs_f64() / 1e6,
        pct(0.5),
        pct(0.9),
        pct(0.99),
        lats[lats.len() - 1],
        slow.len()
    );
    println!(
        "frames: at most {} of {} in use; evictions {}; written back {}; resident {rss} kB",
        c.frames() - least_free.min(c.frames()),
        c.frames(),
        st.evictions,
        st.writebacks
    );
    for s in slow.iter().take(30) {
        println!("{s}");
    }
    Ok(())
}
