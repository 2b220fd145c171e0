//! Many reads in flight from one thread: tasks on a tokio `current_thread`
//! runtime read random pages of a file larger than the cache with
//! `page_async`, and the thread never blocks on a miss.
//!
//! ```sh
//! cargo run --release -p pagecache --example async_reads            # 256 MiB file, 32 MiB cache, 64 tasks
//! cargo run --release -p pagecache --example async_reads -- FILE 32 3 256 # a file of yours, 32 tasks, 3 s, 256 MiB
//! ```
use pagecache::{Config, PageCache};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let tmp = std::env::temp_dir().join(format!("pagecache-async-example-{}", std::process::id()));
    let own = args.is_empty();
    let path = match args.first() {
        Some(p) => p.into(),
        None => {
            // A file of 256 MiB, every page starting with its own number.
            let mut data = vec![0u8; 256 << 20];
            for (i, page) in data.chunks_mut(4096).enumerate() {
                page[..8].copy_from_slice(&(i as u64).to_le_bytes());
            }
            // Written back before it is read: direct reads of pages the
            // kernel still holds dirty would wait for their write-back.
            let mut f = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut f, &data)?;
            f.sync_all()?;
            tmp.clone()
        }
    };
    let tasks: usize = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(64);
    let secs: f64 = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(3.0);
    let mib: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(32);

    let cache = PageCache::new(Config {
        capacity: mib << 20,
        populate: true,
        ..Config::default()
    })?;
    let file = Arc::new(cache.open(&path)?);
    let pages = file.len() / 4096;
    let reads = Arc::new(AtomicU64::new(0));
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let t0 = Instant::now();
    rt.block_on(async {
        let deadline = t0 + Duration::from_secs_f64(secs);
        let mut handles = Vec::new();
        for t in 0..tasks as u64 {
            let (file, reads) = (file.clone(), reads.clone());
            handles.push(tokio::spawn(async move {
                let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                while Instant::now() < deadline {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = x % pages;
                    let page = file.page_async(i).await?;
                    if own {
                        let got = u64::from_le_bytes(page[..8].try_into().unwrap());
                        assert_eq!(got, i, "page {i} holds page {got}'s bytes");
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<(), std::io::Error>(())
            }));
        }
        for h in handles {
            h.await.expect("task")?;
        }
        Ok::<(), std::io::Error>(())
    })?;
    let n = reads.load(Ordering::Relaxed);
    let s = cache.stats();
    println!(
        "{tasks} tasks on one thread: {:.1} k reads/s ({} reads, {} misses)",
        n as f64 / t0.elapsed().as_secs_f64() / 1e3,
        n,
        s.misses
    );
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}
