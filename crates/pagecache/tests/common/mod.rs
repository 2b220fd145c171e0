//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test file uses a subset

use pagecache::{Config, PageCache};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub const PS: usize = 4096;

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "pagecache-test-{}-{tag}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic byte of file content at `pos`.
pub fn pattern(pos: u64) -> u8 {
    (pos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

/// Writes a file of `len` pattern bytes with std::fs.
pub fn make_file(path: &Path, len: u64) {
    let data: Vec<u8> = (0..len).map(pattern).collect();
    std::fs::write(path, data).unwrap();
}

/// A cache of `frames` 4 KiB frames.
pub fn cache(frames: usize) -> PageCache {
    PageCache::new(Config {
        capacity: frames * PS,
        ..Config::default()
    })
    .unwrap()
}

/// A cache of `frames` 4 KiB frames with no background write-back (and no
/// dirty throttling): for tests that assert dirty counts, or what is on
/// disk, before a `sync` (the flusher starts past 10% of the capacity and
/// may write any dirty page at any moment).
pub fn cache_without_flusher(frames: usize) -> PageCache {
    PageCache::new(Config {
        capacity: frames * PS,
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        ..Config::default()
    })
    .unwrap()
}

/// Eviction under failing write-back: an 8-frame cache over the
/// fault-injecting backend, file `f` (8 pages, every one dirty: 16 bytes of
/// 9 at each page's start) and file `g` (64 pages, clean) open in `d`.
pub struct DirtyCache {
    pub cache: PageCache,
    pub faults: std::sync::Arc<pagecache::Faults>,
    pub f: pagecache::File,
    pub g: pagecache::File,
    pub f_path: PathBuf,
}

pub fn dirty_cache(d: &TempDir) -> DirtyCache {
    let f_path = d.path("f");
    let q = d.path("g");
    make_file(&f_path, 8 * PS as u64);
    make_file(&q, 64 * PS as u64);
    let (cache, faults) = faulty(8);
    let f = cache.open(&f_path).unwrap();
    let g = cache.open(&q).unwrap();
    for i in 0..8u64 {
        f.write_at(&[9u8; 16], i * PS as u64).unwrap();
    }
    DirtyCache {
        cache,
        faults,
        f,
        g,
        f_path,
    }
}

/// A cache of `frames` 4 KiB frames over the fault-injecting backend, and
/// the switches of its faults; no background write-back.
pub fn faulty(frames: usize) -> (PageCache, std::sync::Arc<pagecache::Faults>) {
    let faults = pagecache::Faults::new();
    let c = PageCache::with_backend(
        Config {
            capacity: frames * PS,
            // No background write-back: these tests decide when pages are
            // written (eviction, sync) and what fails then.
            dirty_background_percent: 100,
            dirty_limit_percent: 100,
            ..Config::default()
        },
        pagecache::FaultyBackend::new(pagecache::PosixBackend, faults.clone()),
    )
    .unwrap();
    (c, faults)
}

/// A waker that does nothing (`std::task::Waker::noop` is newer than the
/// crate's minimum Rust).
pub fn noop_waker() -> std::task::Waker {
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    std::sync::Arc::new(Noop).into()
}

/// Options to open an existing file for reading and writing.
pub fn rw() -> pagecache::OpenOptions {
    let mut o = pagecache::OpenOptions::new();
    o.read(true).write(true);
    o
}

/// A tokio runtime on the calling thread, with its timers and I/O.
#[cfg(not(loom))]
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `f` every few milliseconds until it holds; fails the test naming
/// `what` after 20 s.
pub fn wait_until(what: &str, f: impl FnMut() -> bool) {
    wait_until_or(what, f, String::new);
}

/// [`wait_until`], printing `report` (what the cache looks like) first
/// when it times out.
pub fn wait_until_or(what: &str, mut f: impl FnMut() -> bool, report: impl FnOnce() -> String) {
    let t0 = Instant::now();
    while !f() {
        if t0.elapsed() >= Duration::from_secs(20) {
            eprintln!("{}", report());
            panic!("timed out waiting: {what}");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// This test binary again as a second process, running its ignored test
/// named `child` with `env` set (the tests that need two processes).
pub fn spawn_child(env: &[(&str, &str)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().expect("spawn the child process")
}

/// Waits for `c` to exit; kills it and fails the test after 20 s.
pub fn reap(mut c: Child) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = c.kill();
            panic!("the child process hung");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every thread's stack of this process, printed to stderr by gdb if it
/// is installed (CI's machine has it): what a test that found itself hung
/// prints before it aborts.
#[allow(dead_code)]
pub fn print_stacks() {
    use std::os::fd::AsFd;
    let _ = Command::new("timeout")
        .args(["60", "gdb", "-batch", "-p", &std::process::id().to_string()])
        .args(["-ex", "thread apply all bt"])
        .stdout(match std::io::stderr().as_fd().try_clone_to_owned() {
            Ok(fd) => std::process::Stdio::from(fd),
            Err(_) => std::process::Stdio::inherit(),
        })
        .status();
}

/// The cache shared by processes named `name` whose segment lies in
/// `dir`, with `config` (created or attached).
#[cfg(not(loom))]
#[allow(dead_code)]
pub fn shared_in(name: &str, dir: &Path, config: Config) -> PageCache {
    PageCache::shared_with(
        name,
        config,
        &pagecache::SharedOptions {
            dir: Some(dir.to_path_buf()),
            group: None,
        },
    )
    .unwrap()
}
