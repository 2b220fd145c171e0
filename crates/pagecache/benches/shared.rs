//! A cache shared by processes against a private one, side by side in one
//! run (`docs/benchmarks.md`, "A cache shared by processes"): the hit
//! path (`page()` and 64-byte `read_at` of random cached pages) from one
//! thread, and `page()` of pages chained as in a tree's descent (each
//! page's number depends on a byte of the page before, so that one
//! lookup's misses cannot overlap the next one's); 64-byte `read_at` hits
//! from two processes on one shared cache against one process (and
//! against two threads of one process);
//! 64-byte `write_at` of random cached pages, shared against private, and
//! from two threads of one process against one (a shared cache's size
//! locks count a process's holds on one shard per file: its threads share
//! it).
//! Every row runs `--runs` times, the variants interleaved; medians with
//! the min-max spread.
//!
//! ```sh
//! cargo bench -p pagecache --bench shared                  # 1 GiB file, 5 runs
//! cargo bench -p pagecache --bench shared -- --quick       # 64 MiB, 3 runs
//! cargo bench -p pagecache --bench shared -- --dir /mnt/h  # the segment in another tmpfs
//! cargo bench -p pagecache --bench shared -- --pad 50      # 50 dependent adds between two page()s
//! ```
//!
//! The shared cache is made in `/dev/shm` (or `--dir`) under a name of this
//! process's and removed at the end. The second process is this binary
//! again (`--child`), started for each two-process run; both start and
//! stop at the same wall-clock instants and each reports its operations.

use pagecache::{Config, PageCache, PolicyKind, SharedOptions};
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod common;
use common::Rng;

const PS: usize = 4096;

struct Opts {
    base: common::Base,
    dir: Option<PathBuf>,
    /// Dependent adds between two lookups of the (unchained) `page()` rows:
    /// work a caller does with each page.
    pad: u64,
}

impl std::ops::Deref for Opts {
    type Target = common::Base;
    fn deref(&self) -> &common::Base {
        &self.base
    }
}

fn parse(args: &[String]) -> Opts {
    let (mut base, mut dir, mut pad) = (common::Base::default(), None, 0);
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--dir" => {
                i += 1;
                dir = Some(PathBuf::from(&args[i]));
            }
            "--pad" => {
                i += 1;
                pad = args[i].parse().expect("--pad N: a number of adds");
            }
            _ if base.take(args, &mut i, 200) => {}
            other => panic!("unknown argument {other}"),
        }
        i += 1;
    }
    Opts { base, dir, pad }
}

fn config(bytes: u64) -> Config {
    Config {
        capacity: bytes as usize + (64 << 20),
        policy: PolicyKind::Clock,
        // The write rows' pages stay dirty and cached: no write-back
        // while they run (the file is written once, at the end).
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        dirty_expire: Duration::MAX,
        ..Config::default()
    }
}

fn shared(name: &str, o: &Opts) -> PageCache {
    PageCache::shared_with(
        name,
        config(o.file_bytes),
        &SharedOptions {
            dir: o.dir.clone(),
            group: None,
        },
    )
    .expect("the shared cache")
}

/// Operations per second of `op` from this thread for `dur`.
fn rate1(dur: Duration, mut op: impl FnMut(&mut Rng)) -> f64 {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < dur {
        for _ in 0..64 {
            op(&mut r);
        }
        n += 64;
    }
    n as f64 / t0.elapsed().as_secs_f64()
}

/// `k` dependent adds: a caller's work between two lookups, which the
/// compiler cannot fold away.
#[inline(always)]
fn pad(k: u64) {
    let mut x = 0u64;
    for _ in 0..k {
        // SAFETY: one register add; no memory, no flags read.
        unsafe { std::arch::asm!("add {0}, 1", inout(reg) x, options(nomem, nostack)) };
    }
    black_box(x);
}

/// 64-byte reads of random offsets of `file` from this thread between the
/// wall-clock instants `start` and `end` (ns since the epoch): operations.
fn reads_between(file: &pagecache::File, bytes: u64, seed: u64, start: u128, end: u128) -> u64 {
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    };
    while now() < start {
        std::hint::spin_loop();
    }
    let mut r = Rng(seed);
    let mut b = [0u8; 64];
    let mut n = 0u64;
    while now() < end {
        for _ in 0..64 {
            let off = (r.next() % (bytes - 64)) & !7;
            file.read_at(&mut b, off).unwrap();
            black_box(&b);
        }
        n += 64;
    }
    n
}

/// 64-byte writes at random offsets of `file` from `threads` threads for
/// `dur`: operations per second.
fn writes(file: &pagecache::File, bytes: u64, threads: u64, dur: Duration) -> f64 {
    let t0 = Instant::now();
    let n: u64 = std::thread::scope(|sc| {
        let h: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ t);
                    let b = [t as u8; 64];
                    let mut n = 0u64;
                    while t0.elapsed() < dur {
                        for _ in 0..64 {
                            let off = (r.next() % (bytes - 64)) & !7;
                            file.write_at(&b, off).unwrap();
                        }
                        n += 64;
                    }
                    n
                })
            })
            .collect();
        h.into_iter().map(|h| h.join().unwrap()).sum()
    });
    n as f64 / t0.elapsed().as_secs_f64()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn show(title: &str, unit: &str, names: &[&str], samples: &mut [Vec<f64>]) {
    println!("\n## {title}\n");
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let (lo, hi) = (
            s.iter().cloned().fold(f64::MAX, f64::min),
            s.iter().cloned().fold(0.0, f64::max),
        );
        let m = median(s);
        println!("{name:>48}  {m:>10.1} {unit}  ({lo:.1} - {hi:.1})");
    }
}

/// Ratio per run of `a` over `b`, then the median, with the range.
fn ratio(what: &str, a: &[f64], b: &[f64], target: &str) {
    let mut r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
    let lo = r.iter().cloned().fold(f64::MAX, f64::min);
    let hi = r.iter().cloned().fold(0.0, f64::max);
    println!(
        "{what:>48}  {:>10.2}x  ({lo:.2} - {hi:.2}) {target}",
        median(&mut r)
    );
}

fn child(args: &[String]) {
    // --child NAME PATH BYTES START_NS END_NS [--dir DIR]
    let (name, path) = (&args[0], PathBuf::from(&args[1]));
    let bytes: u64 = args[2].parse().unwrap();
    let o = parse(&args[5..]);
    let mut o = o;
    o.base.file_bytes = bytes;
    let c = shared(name, &o);
    let f = c.open(&path).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let mut it = line.split_whitespace();
    let start: u128 = it.next().unwrap().parse().unwrap();
    let end: u128 = it.next().unwrap().parse().unwrap();
    let n = reads_between(&f, bytes, 0xABCD_EF01_2345_6789, start, end);
    println!("{n}");
    assert_eq!(c.stats().misses, 0, "the child read only cached pages");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let o = parse(&args);
    let dir = std::env::temp_dir().join(format!("pagecache-shared-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data.bin");
    let name = format!("bench{}", std::process::id());
    let data: Vec<u8> = (0..o.file_bytes)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8)
        .collect();
    std::fs::write(&path, &data).unwrap();
    drop(data);
    let npages = o.file_bytes / PS as u64;
    println!(
        "# a shared cache against a private one\n\nfile {} MiB ({npages} pages), {} runs x {} ms per variant, segment in {}",
        o.file_bytes >> 20,
        o.runs,
        o.dur.as_millis(),
        o.dir
            .as_deref()
            .unwrap_or(std::path::Path::new("/dev/shm"))
            .display()
    );

    // The private arena faulted in at creation, in huge pages: left to the
    // fault-ahead helper, its stretches are small on cold memory until a
    // collapse, and the baseline ran at 100-120 or 230-280 ns by that.
    let private = PageCache::new(Config {
        populate: true,
        ..config(o.file_bytes)
    })
    .unwrap();
    let pc = private.open(&path).unwrap();
    let sh = shared(&name, &o);
    let sf = sh.open(&path).unwrap();
    let mut page = vec![0u8; PS];
    for i in 0..npages {
        pc.read_at(&mut page, i * PS as u64).unwrap();
        sf.read_at(&mut page, i * PS as u64).unwrap();
    }
    let rnd_page = |r: &mut Rng| r.next() % npages;
    let rnd_off = |r: &mut Rng| (r.next() % (o.file_bytes - 64)) & !7;

    // 1. The hit path from one thread.
    let names = [
        "private page()",
        "shared page()",
        "private read_at 64 B",
        "shared read_at 64 B",
        "private page(), chained",
        "shared page(), chained",
    ];
    let mut s = vec![Vec::new(); 6];
    for _ in 0..o.runs {
        s[0].push(
            1e9 / rate1(o.dur, |r| {
                black_box(pc.page(rnd_page(r)).unwrap().index());
                pad(o.pad);
            }),
        );
        s[1].push(
            1e9 / rate1(o.dur, |r| {
                black_box(sf.page(rnd_page(r)).unwrap().index());
                pad(o.pad);
            }),
        );
        // The next page's number depends on a byte of this one (which is
        // random: the file's bytes are a hash of their offsets).
        let prev = std::cell::Cell::new(0u64);
        for (k, f) in [(4, &pc), (5, &sf)] {
            s[k].push(
                1e9 / rate1(o.dur, |r| {
                    let p = f.page((r.next() ^ prev.get()) % npages).unwrap();
                    prev.set(p[8] as u64 >> 7);
                }),
            );
        }
        let mut b = [0u8; 64];
        s[2].push(
            1e9 / rate1(o.dur, |r| {
                pc.read_at(&mut b, rnd_off(r)).unwrap();
                black_box(&b);
            }),
        );
        s[3].push(
            1e9 / rate1(o.dur, |r| {
                sf.read_at(&mut b, rnd_off(r)).unwrap();
                black_box(&b);
            }),
        );
    }
    let c = s.clone();
    show(
        "random cached pages, 1 thread, shared vs private cache",
        "ns/op",
        &names,
        &mut s,
    );
    ratio(
        "page(): shared cost / private",
        &c[1],
        &c[0],
        "(target <= 1.15x)",
    );
    ratio("read_at 64 B: shared cost / private", &c[3], &c[2], "");
    ratio("page() chained: shared cost / private", &c[5], &c[4], "");

    // 2. 64 B read_at hits: 1 process, 2 threads of one process, 2
    // processes, all on the shared cache.
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    };
    let mut s = vec![Vec::new(); 3];
    for _ in 0..o.runs {
        // One process, one thread.
        let (a, b) = (now() + 20_000_000, o.dur.as_nanos());
        let n = reads_between(&sf, o.file_bytes, 1, a, a + b);
        s[0].push(n as f64 / o.dur.as_secs_f64() / 1e6);
        // One process, two threads.
        let a = now() + 20_000_000;
        let n: u64 = std::thread::scope(|sc| {
            let h: Vec<_> = (0..2u64)
                .map(|t| {
                    let (sf, bytes) = (&sf, o.file_bytes);
                    sc.spawn(move || reads_between(sf, bytes, t + 1, a, a + b))
                })
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).sum()
        });
        s[1].push(n as f64 / o.dur.as_secs_f64() / 1e6);
        // Two processes, one thread each.
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--child",
            &name,
            path.to_str().unwrap(),
            &o.file_bytes.to_string(),
            "0",
            "0",
        ]);
        if let Some(d) = &o.dir {
            cmd.args(["--dir", d.to_str().unwrap()]);
        }
        let mut ch = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(ch.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let a = now() + 50_000_000;
        writeln!(ch.stdin.as_mut().unwrap(), "{a} {}", a + b).unwrap();
        let mine = reads_between(&sf, o.file_bytes, 1, a, a + b);
        line.clear();
        out.read_line(&mut line).unwrap();
        let theirs: u64 = line.trim().parse().expect("the child's count");
        assert!(ch.wait().unwrap().success());
        s[2].push((mine + theirs) as f64 / o.dur.as_secs_f64() / 1e6);
    }
    let c = s.clone();
    show(
        "read_at 64 B, random cached offsets, on the shared cache",
        "M ops/s",
        &["1 process, 1 thread", "1 process, 2 threads", "2 processes"],
        &mut s,
    );
    ratio("2 processes / 1", &c[2], &c[0], "(target >= 1.8x)");
    ratio("2 threads / 1", &c[1], &c[0], "");

    // 3. 64 B write_at of random cached pages: shared vs private, and
    // two threads of one process vs one.
    let mut s = vec![Vec::new(); 4];
    for _ in 0..o.runs {
        s[0].push(1e9 / writes(&pc, o.file_bytes, 1, o.dur));
        s[1].push(1e9 / writes(&sf, o.file_bytes, 1, o.dur));
        s[2].push(writes(&sf, o.file_bytes, 1, o.dur) / 1e6);
        s[3].push(writes(&sf, o.file_bytes, 2, o.dur) / 1e6);
    }
    let c = s.clone();
    show(
        "write_at 64 B, random cached offsets, 1 thread",
        "ns/op",
        &["private", "shared"],
        &mut s[..2],
    );
    ratio("write_at 64 B: shared cost / private", &c[1], &c[0], "");
    show(
        "write_at 64 B, random cached offsets, on the shared cache",
        "M ops/s",
        &["1 process, 1 thread", "1 process, 2 threads"],
        &mut s[2..],
    );
    ratio("2 threads / 1", &c[3], &c[2], "");

    drop((sf, sh, pc, private));
    PageCache::remove_shared(&name, o.dir.as_deref()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
