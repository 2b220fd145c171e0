//! How long a process waits for a page another process held pinned when
//! it was killed, by the size of the shared cache (the recovery looks at
//! every frame's descriptor: docs/benchmarks.md, the killed-process row).
//! For each size, a child process attaches, pins page 0 of a file and
//! reports; this process kills it (SIGKILL) and writes page 0, which waits
//! for the dead pin to be given back; prints the time from the kill to the
//! write's return, three times per size.
//!
//! `cargo run --release -p pagecache --example recovery_scale -- [GIB...]`
//! (default 1 8 16; the segment in `/dev/shm`: a size needs that much
//! shared memory's room, though only the descriptors are touched)

use pagecache::{Config, PageCache, PolicyKind, SharedOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn config(gib: usize) -> Config {
    Config {
        capacity: gib << 30,
        policy: PolicyKind::Clock,
        ..Config::default()
    }
}

fn open(name: &str, gib: usize) -> PageCache {
    PageCache::shared_with(name, config(gib), &SharedOptions::default()).expect("the shared cache")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        // --child NAME GIB FILE: pin page 0, report, wait to be killed.
        let cache = open(&args[2], args[3].parse().expect("GiB"));
        let f = cache.open(&args[4]).expect("the file");
        let _pin = f.page(0).expect("page 0");
        println!("ready");
        std::io::stdout().flush().expect("stdout");
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let sizes: Vec<usize> = if args.len() > 1 {
        args[1..]
            .iter()
            .map(|a| a.parse().expect("a size in GiB"))
            .collect()
    } else {
        vec![1, 8, 16]
    };
    let dir = std::env::temp_dir().join(format!("pagecache-recovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let file: PathBuf = dir.join("data.bin");
    std::fs::write(&file, vec![7u8; 1 << 20]).expect("the file");
    let name = format!("recovery{}", std::process::id());
    for gib in sizes {
        let _ = PageCache::remove_shared(&name, None::<&Path>);
        let t = Instant::now();
        let cache = open(&name, gib);
        let made = t.elapsed();
        let f = cache.open(&file).expect("the file");
        let mut waits = Vec::new();
        for _ in 0..3 {
            let mut child = Command::new(&args[0])
                .args(["--child", &name, &gib.to_string()])
                .arg(&file)
                .stdout(Stdio::piped())
                .spawn()
                .expect("the child");
            let mut line = String::new();
            BufReader::new(child.stdout.as_mut().expect("piped"))
                .read_line(&mut line)
                .expect("the child's report");
            assert_eq!(line.trim(), "ready", "the child pinned its page");
            let t = Instant::now();
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
            f.write_at(&[1u8; 8], 0).expect("the write");
            waits.push(t.elapsed());
        }
        let ms: Vec<String> = waits
            .iter()
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1e3))
            .collect();
        println!(
            "{gib} GiB ({} frames; made in {:.0} ms): write after the kill {} ms",
            (gib << 30) / 4096,
            made.as_secs_f64() * 1e3,
            ms.join(" / ")
        );
        drop(f);
        drop(cache);
        PageCache::remove_shared(&name, None::<&Path>).expect("the segment removed");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
