//! A 70/30 random 4 KiB read/write mix through a 256 MiB cache over a
//! 2 GiB file (8x the cache; created on first use as DIR/pagecache-mix.dat),
//! 8 threads for 5 s, reads' and writes' latencies apart: where the mix's
//! tail comes from. Drops the kernel's caches first when run as root.
//!
//! ```sh
//! cargo run --release -p pagecache --example mix_latency [DIR]
//! ```

use pagecache::{Config, PageCache};
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let dir = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let p = dir.join("pagecache-mix.dat");
    let size: u64 = 2048 << 20;
    if std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0) != size {
        let f = std::fs::File::create(&p)?;
        let chunk = vec![0x11u8; 1 << 20];
        for i in 0..(size >> 20) {
            f.write_all_at(&chunk, i << 20)?;
        }
        f.sync_all()?;
    }
    // Cold: only works as root; harmless otherwise.
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    let c = PageCache::new(Config {
        capacity: 256 << 20,
        ..Config::default()
    })?;
    let f = c.open(&p)?;
    let pages = size / 4096;
    let reads = Mutex::new(Vec::new());
    let writes = Mutex::new(Vec::new());
    let s0 = c.stats();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (f, reads, writes) = (&f, &reads, &writes);
            s.spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1).wrapping_mul(0x1234_5678_9ABC_DEF1);
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let (mut r, mut w) = (Vec::new(), Vec::new());
                let wbuf = [0x5au8; 4096];
                let mut b = [0u8; 4096];
                let deadline = Instant::now() + Duration::from_secs(5);
                while Instant::now() < deadline {
                    let at = (next() % pages) * 4096;
                    let write = next() % 10 < 3;
                    let t = Instant::now();
                    let res = if write {
                        f.write_at(&wbuf, at)
                    } else {
                        f.read_exact_at(&mut b, at)
                    };
                    if let Err(e) = res {
                        eprintln!("{e}");
                        return;
                    }
                    if write {
                        w.push(t.elapsed())
                    } else {
                        r.push(t.elapsed())
                    }
                }
                reads.lock().unwrap().extend(r);
                writes.lock().unwrap().extend(w);
            });
        }
    });
    let el = t0.elapsed();
    let s1 = c.stats();
    let report = |what: &str, v: &mut Vec<Duration>| {
        v.sort();
        if v.is_empty() {
            return;
        }
        let pct = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
        println!(
            "{what}: {} p50 {:.2?} p99 {:.2?} p999 {:.2?}, {} over 1 ms",
            v.len(),
            pct(0.5),
            pct(0.99),
            pct(0.999),
            v.iter().filter(|d| **d > Duration::from_millis(1)).count()
        );
    };
    let (mut r, mut w) = (reads.into_inner().unwrap(), writes.into_inner().unwrap());
    println!("{:.0} ops/s", (r.len() + w.len()) as f64 / el.as_secs_f64());
    report("reads ", &mut r);
    report("writes", &mut w);
    println!(
        "evictions {}, pages written back {} in {} writes, dirty now {}",
        s1.evictions - s0.evictions,
        s1.writebacks - s0.writebacks,
        s1.writes - s0.writes,
        c.dirty_pages()
    );
    Ok(())
}
