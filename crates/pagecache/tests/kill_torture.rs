//! The kill torture of a cache shared by processes (protocols 5.14-5.15):
//! worker processes do every kind of operation on one shared file (reads,
//! pins, runs, futures, writes, latches, upgrades, syncs, with eviction
//! and write-back at work) and on anonymous regions of the same cache, and
//! one of them is SIGKILLed at a random moment every few milliseconds and
//! started again. It checks that
//!
//! * no survivor hangs: each worker beats a heartbeat, and one that has
//!   not for 3 s (ten times the recovery's 250 ms) fails the test;
//! * no page is ever seen torn: every page is written whole, every word of
//!   it the same (its index, the writer, a sequence number), and every
//!   read checks that (a torn page a dead latch holder left is dropped,
//!   never served, 5.14 L4);
//! * and, with every worker gone and recovered, every page can be read
//!   and written (no pin of a frame or run pin of a slot is left: one a
//!   worker took and died before counting is found and dropped by its
//!   recovery, 5.15 P6-P7), a `sync` writes the file (reporting any page
//!   whose unwritten changes died with their writer, once), the disk holds
//!   whole pages only, no process counts or holds a pin, and every frame
//!   is back (`validate`).
//!
//! Short by default (8 s of kills); `PC_TORTURE_SECS=N` for longer. The
//! workers are this binary again (its ignored `child` entry).
#![cfg(not(loom))]

mod common;
use common::TempDir;
use pagecache::{Config, PageCache, PolicyKind};
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

const PS: usize = 4096;
/// Pages of the file: more than the cache's frames, so pages are evicted
/// and read again.
const PAGES: u64 = 96;
const FRAMES: usize = 64;
const WORKERS: usize = 4;
/// A worker that has not beaten its heartbeat for this long has hung.
const HUNG: Duration = Duration::from_secs(3);

fn shared(dir: &Path) -> PageCache {
    common::shared_in(
        "torture",
        dir,
        Config {
            capacity: FRAMES * PS,
            policy: PolicyKind::Clock,
            readahead_max: 0,
            ..Config::default()
        },
    )
}

/// Page `page` as written by `who` (its `seq`-th write): every word the
/// same.
fn page_bytes(page: u64, who: u64, seq: u64) -> Vec<u8> {
    let w = page << 40 | who << 32 | (seq & 0xffff_ffff);
    (0..PS / 8).flat_map(|_| w.to_ne_bytes()).collect()
}

/// Panics unless `b` (bytes of page `page` from byte `off`, 8-aligned) is
/// whole: every word the same, and of this page, or every word zero (a
/// page cut off by a `set_len` and grown again, never written since).
fn check(what: &str, page: u64, off: usize, b: &[u8]) {
    assert!(off % 8 == 0 && b.len() % 8 == 0);
    if b.is_empty() {
        return;
    }
    let first = u64::from_ne_bytes(b[..8].try_into().unwrap());
    assert!(
        first == 0 || first >> 40 == page,
        "{what}: page {page} holds another page's bytes"
    );
    for (k, w) in b.chunks_exact(8).enumerate() {
        let w = u64::from_ne_bytes(w.try_into().unwrap());
        assert_eq!(w, first, "{what}: page {page} torn at byte {}", off + 8 * k);
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
#[ignore = "run by the torture in other processes"]
fn child() {
    // A panic ends the worker at once, with SIGABRT, which the torture
    // tells from its own SIGKILL: unwinding could block on what a dead
    // process left held, and the kill would then hide the panic.
    // Killed with the torture: a torture that dies (its watchdog, a
    // harness's timeout) leaves no worker running.
    // SAFETY: a flag of this process; no memory is touched.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
    if std::os::unix::process::parent_id() == 1 {
        return;
    }
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
    let dir = PathBuf::from(std::env::var("PC_TORTURE_DIR").unwrap());
    let who: u64 = std::env::var("PC_TORTURE_WHO").unwrap().parse().unwrap();
    let c = shared(&dir);
    let f = c
        .open_with(
            dir.join("f"),
            pagecache::OpenOptions::new().read(true).write(true),
        )
        .unwrap();
    let beat = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("heartbeats"))
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut rng = Rng(who * 7919 + std::process::id() as u64);
    let mut seq = 0u64;
    let mut beats = 0u64;
    let mut buf = vec![0u8; PS];
    loop {
        let i = rng.next() % PAGES;
        // Another worker's cut may have made the file shorter for a
        // moment (op 8): a read past its end is short, a pin past it
        // fails with `UnexpectedEof`.
        let eof = |e: &std::io::Error| e.kind() == std::io::ErrorKind::UnexpectedEof;
        match rng.next() % 11 {
            0 => {
                let n = f.read_at(&mut buf, i * PS as u64).unwrap();
                check("read_at", i, 0, &buf[..n / 8 * 8]);
            }
            1 => match f.page(i) {
                Ok(p) => check("page", i, 0, &p),
                Err(e) => assert!(eof(&e), "page: {e}"),
            },
            2 => {
                seq += 1;
                f.write_at(&page_bytes(i, who, seq), i * PS as u64).unwrap();
            }
            3 => {
                seq += 1;
                match f.page_mut(i) {
                    Ok(mut m) => m.copy_from_slice(&page_bytes(i, who, seq)),
                    Err(e) => assert!(eof(&e), "page_mut: {e}"),
                }
            }
            4 => {
                if let Ok(v) = f.optimistic(i) {
                    if let Ok(mut m) = v.upgrade() {
                        seq += 1;
                        m.copy_from_slice(&page_bytes(i, who, seq));
                    }
                }
            }
            5 => match f.run(i, 4) {
                Ok(run) => {
                    for k in 0..run.len() {
                        check("run", i + k as u64, 0, run.page(k));
                    }
                }
                Err(e) => assert!(eof(&e), "run: {e}"),
            },
            6 => match rt.block_on(f.page_async(i)) {
                Ok(p) => check("page_async", i, 0, &p),
                Err(e) => assert!(eof(&e), "page_async: {e}"),
            },
            7 => {
                if let Err(e) = f.sync() {
                    // What a dead latch holder's page lost is reported to
                    // one sync: any process's.
                    assert!(e.to_string().contains("lost"), "sync: {e}");
                }
            }
            // The file cut at a random page and grown back (the
            // pages past the cut read as zeros until written again).
            8 if rng.next() % 2 == 0 => {
                let cut = PAGES / 2 + rng.next() % (PAGES / 2);
                f.set_len(cut * PS as u64).unwrap();
                f.set_len(PAGES * PS as u64).unwrap();
            }
            // An anonymous region of the cache's budget: its pages
            // faulted in, written, read back and freed; a region left by
            // a killed worker is freed by its recovery.
            9 => {
                let r = c.anon(2 * PS as u64).unwrap();
                seq += 1;
                r.page_mut(1)
                    .unwrap()
                    .copy_from_slice(&page_bytes(i, who, seq));
                assert!(
                    *r.page(1).unwrap() == page_bytes(i, who, seq)[..],
                    "anonymous page: not what this worker wrote"
                );
                assert!(
                    r.page(0).unwrap().iter().all(|&b| b == 0),
                    "anonymous page not zero"
                );
            }
            _ => {
                let off = (rng.next() % (PS as u64 / 8 - 8)) as usize * 8;
                let mut b = [0u8; 64];
                let n = f.read_at(&mut b, i * PS as u64 + off as u64).unwrap();
                check("read_at 64 B", i, off, &b[..n / 8 * 8]);
            }
        }
        beats += 1;
        if beats % 8 == 0 {
            beat.write_all_at(&beats.to_ne_bytes(), who * 8).unwrap();
        }
    }
}

struct Worker {
    child: Child,
    started: Instant,
    beat: u64,
    beat_at: Instant,
}

fn spawn(dir: &Path, who: usize) -> Worker {
    // As `common::spawn_child`, its test harness's lines (hundreds of
    // workers) left out: a worker's panic still shows on stderr.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("PC_TORTURE_DIR", dir)
        .env("PC_TORTURE_WHO", who.to_string())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn a worker");
    Worker {
        child,
        started: Instant::now(),
        beat: 0,
        beat_at: Instant::now(),
    }
}

/// Kills `w` and checks that it was still running (not failed on its own).
fn kill(w: &mut Worker, who: usize) {
    let _ = w.child.kill();
    let st = w.child.wait().unwrap();
    assert_eq!(
        st.signal(),
        Some(libc::SIGKILL),
        "worker {who} ended on its own: {st:?} (its output above)"
    );
}

#[test]
fn processes_killed_at_random_moments_leave_no_hang_no_torn_page_and_no_pin() {
    let secs: u64 = std::env::var("PC_TORTURE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let td = TempDir::new("kill-torture");
    let path = td.path("f");
    let data: Vec<u8> = (0..PAGES).flat_map(|i| page_bytes(i, 0, 0)).collect();
    std::fs::write(&path, &data).unwrap();
    std::fs::write(td.path("heartbeats"), vec![0u8; 8 * WORKERS]).unwrap();
    let beats = std::fs::File::open(td.path("heartbeats")).unwrap();
    let beat_of = |who: usize| {
        let mut b = [0u8; 8];
        beats.read_exact_at(&mut b, who as u64 * 8).unwrap();
        u64::from_ne_bytes(b)
    };
    // This process stays attached throughout (the segment lives on).
    let c = shared(&td.0);
    let mut workers: Vec<Worker> = (0..WORKERS).map(|k| spawn(&td.0, k)).collect();
    let mut rng = Rng(std::process::id() as u64);
    let t0 = Instant::now();
    let mut kills = 0;
    while t0.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(5 + rng.next() % 25));
        // Survivors never hang.
        let mut hung = None;
        for (k, w) in workers.iter_mut().enumerate() {
            if let Some(st) = w.child.try_wait().unwrap() {
                panic!("worker {k} ended on its own: {st:?} (its output above)");
            }
            let b = beat_of(k);
            if b != w.beat {
                w.beat = b;
                w.beat_at = Instant::now();
            } else if w.started.elapsed() > HUNG && w.beat_at.elapsed() > HUNG {
                hung = Some((k, w.beat_at.elapsed()));
            }
        }
        if let Some((k, t)) = hung {
            for w in &mut workers {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
            panic!("worker {k} made no progress for {t:?} after {kills} kills");
        }
        let k = (rng.next() % WORKERS as u64) as usize;
        kill(&mut workers[k], k);
        // Its heartbeat word starts again from 0.
        beats_reset(&td.path("heartbeats"), k);
        workers[k] = spawn(&td.0, k);
        kills += 1;
    }
    for (k, w) in workers.iter_mut().enumerate() {
        kill(w, k);
    }
    eprintln!("{kills} kills in {secs} s");
    // Every dead process recovered (the watchers' rounds): then every page
    // is whole, readable and writable.
    let f = c.open(&path).unwrap();
    let seg =
        pagecache::internals::segment::Segment::inspect(c.shared_path().unwrap(), None).unwrap();
    // (A slot is freed once its recovery gave back everything, 5.14 D5.)
    common::wait_until("every dead worker recovered", || {
        seg.processes().iter().filter(|&&(_, live)| !live).count() == 0 && seg.recovering() == 0
    });
    drop(seg);
    let (tx, rx) = std::sync::mpsc::channel();
    let at = std::sync::atomic::AtomicU64::new(u64::MAX - 1);
    std::thread::scope(|s| {
        s.spawn(|| {
            // A worker killed between its cut and its growth left the file
            // short (and one killed inside its `set_len` left the cut to
            // finish: this one does, 5.6).
            f.set_len(PAGES * PS as u64).unwrap();
            for i in 0..PAGES {
                at.store(i * 2, std::sync::atomic::Ordering::Relaxed);
                check("after", i, 0, &f.page(i).unwrap());
                at.store(i * 2 + 1, std::sync::atomic::Ordering::Relaxed);
                f.write_at(&page_bytes(i, 9, 1), i * PS as u64).unwrap();
            }
            at.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = f.sync() {
                assert!(e.to_string().contains("lost"), "sync: {e}");
                f.sync().unwrap();
            }
            tx.send(()).unwrap();
        });
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let at = at.load(std::sync::atomic::Ordering::Relaxed);
            // Printed past the harness's capture (the abort loses it).
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "{}", c.describe_held());
            let _ = writeln!(
                std::io::stderr().lock(),
                "free frames: {}; cached:\n{}",
                c.free_frames(),
                c.describe_cached()
            );
            common::print_stacks();
            let _ = writeln!(
                std::io::stderr().lock(),
                "the checks after the torture hung (a page still held): {}",
                match at {
                    u64::MAX => "at the sync".to_string(),
                    a if a == u64::MAX - 1 => "at the set_len".to_string(),
                    a if a % 2 == 0 => format!("reading page {}", a / 2),
                    a => format!("writing page {}", a / 2),
                }
            );
            std::process::abort();
        }
    });
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(disk.len(), PAGES as usize * PS);
    for i in 0..PAGES {
        check("on disk", i, 0, &disk[i as usize * PS..][..PS]);
    }
    c.validate();
}

fn beats_reset(path: &Path, who: usize) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .write_all_at(&0u64.to_ne_bytes(), who as u64 * 8)
        .unwrap();
}
