//! Writes a file through the cache from several threads, syncs it, reads it
//! back and checks every byte, then times 64-byte random `read_at` hits next
//! to the kernel's `pread` of the same bytes. Prints the cache's stats.
//!
//! `cargo run --release --example quickstart`

use pagecache::{Config, OpenOptions, PageCache};
use std::os::unix::fs::FileExt;
use std::time::Instant;

const FILE_SIZE: u64 = 32 << 20;
const THREADS: u64 = 4;
const READS: u64 = 2_000_000;

fn byte_at(pos: u64) -> u8 {
    (pos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

fn main() -> std::io::Result<()> {
    let dir = std::env::temp_dir().join(format!("pagecache-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("data.bin");
    let cache = PageCache::new(Config {
        capacity: 64 << 20,
        ..Config::default()
    })?;
    let file = cache.open_with(
        &path,
        OpenOptions::new().read(true).write(true).create(true),
    )?;

    // 1. Several threads each write their part, 64 KiB at a time.
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let file = file.clone();
            s.spawn(move || {
                let part = FILE_SIZE / THREADS;
                let mut buf = vec![0u8; 64 << 10];
                let mut pos = t * part;
                while pos < (t + 1) * part {
                    for (i, b) in buf.iter_mut().enumerate() {
                        *b = byte_at(pos + i as u64);
                    }
                    file.write_at(&buf, pos).expect("write_at");
                    pos += buf.len() as u64;
                }
            });
        }
    });
    file.sync()?;
    println!(
        "wrote {} MiB from {THREADS} threads and synced in {:.1} ms",
        FILE_SIZE >> 20,
        t0.elapsed().as_secs_f64() * 1e3
    );

    // 2. The bytes on disk are right (read with std::fs, not the cache).
    let disk = std::fs::read(&path)?;
    assert_eq!(disk.len() as u64, FILE_SIZE);
    assert!(disk
        .iter()
        .enumerate()
        .all(|(i, &b)| b == byte_at(i as u64)));
    println!("verified {} MiB on disk", FILE_SIZE >> 20);

    // 3. 64-byte random reads: cache hits vs the kernel's pread.
    let std_file = std::fs::File::open(&path)?;
    let mut buf = [0u8; 64];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % (FILE_SIZE - 64)) & !63
    };
    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..READS {
        let off = next();
        file.read_at(&mut buf, off)?;
        sum += buf[0] as u64;
    }
    let cache_ns = t.elapsed().as_nanos() as f64 / READS as f64;
    let t = Instant::now();
    for _ in 0..READS {
        let off = next();
        std_file.read_at(&mut buf, off)?;
        sum += buf[0] as u64;
    }
    let pread_ns = t.elapsed().as_nanos() as f64 / READS as f64;
    println!(
        "64 B random read: pagecache {cache_ns:.1} ns, kernel pread {pread_ns:.1} ns ({:.1}x) [checksum {sum}]",
        pread_ns / cache_ns
    );
    println!("stats: {}", cache.stats());

    file.close()?;
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
