//! The randomized model check's harness: an operation stream against the
//! cache and an in-memory model of the file, with faults injected. Shared
//! by `tests/model_check.rs` (random streams) and the fuzz target
//! (`crates/pagecache/fuzz`, streams decoded from the fuzzer's bytes), so
//! both check the same things. Operations draw their choices from a
//! [`Choose`].
#![allow(dead_code)] // each user takes a part

use pagecache::{
    os_error, Config, Faults, FaultyBackend, File, IoEngine, OpenOptions, PageCache, PosixBackend,
    WritebackCause, WritebackDecision, WritebackHook,
};
use std::collections::VecDeque;
use std::future::Future;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const PS: usize = 4096;
/// Largest file the generator makes, in pages.
pub const MAX_PAGES: u64 = 48;

/// Where an operation stream's choices come from.
pub trait Choose {
    /// The next 64 random bits.
    fn next(&mut self) -> u64;
    /// A number below `n` (0 if `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// True `percent` times in a hundred.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// `n` bytes: runs of one value with a counter, so a misplaced page
    /// shows.
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let b = self.next() as u8;
        (0..n).map(|i| b.wrapping_add((i / 512) as u8)).collect()
    }
}

/// xorshift64*: small, fast, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
}

impl Choose for Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The seed, the operation count and the last operations, for failures.
pub struct Log {
    what: String,
    seed: u64,
    /// The cache's configuration, when it was chosen at random.
    pub config: String,
    pub ops: u64,
    /// The last 24 operations; shared with a watchdog thread, which
    /// prints them if the stream stops making progress.
    last: Arc<Mutex<VecDeque<String>>>,
}

impl Log {
    pub fn new(what: &str, seed: u64) -> Log {
        Log {
            what: what.to_string(),
            seed,
            config: String::new(),
            ops: 0,
            last: Arc::default(),
        }
    }
    /// The last operations, for a watchdog.
    pub fn recent(&self) -> Arc<Mutex<VecDeque<String>>> {
        self.last.clone()
    }
    pub fn op(&mut self, s: String) {
        self.ops += 1;
        if std::env::var_os("MODEL_CHECK_TRACE").is_some() {
            eprintln!("{} {s}", self.ops);
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.len() == 24 {
            last.pop_front();
        }
        last.push_back(s);
    }
    #[track_caller]
    pub fn fail(&self, msg: String) -> ! {
        let mut s = format!(
            "model check `{}` failed: {msg}\n  seed {} (replay: MODEL_CHECK_SEED={}), after {} operations{}; the last ones:\n",
            self.what, self.seed, self.seed, self.ops, self.config
        );
        for o in self.last.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            s += &format!("    {o}\n");
        }
        panic!("{s}");
    }
    #[track_caller]
    pub fn check(&self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.fail(msg());
        }
    }
}

/// Which faults are switched on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    ReadError,
    WriteError,
    Enospc,
    ShortReads,
    TruncateError,
}

/// A write-back hook the stream steers: it writes every page, defers some
/// (by a hash of the page and a call counter) or defers all, and may sleep
/// before deferring a page eviction offered it (so that a sync meets that
/// write-back under way). It counts its deferrals by cause.
#[derive(Default)]
pub struct HookCtl {
    /// 0: write every page; 1: defer about a third; 2: defer every page.
    mode: AtomicU64,
    /// Microseconds to sleep before deferring a page eviction offered.
    delay_us: AtomicU64,
    calls: AtomicU64,
    /// Deferrals by cause: eviction, the flusher, sync.
    deferred: [AtomicU64; 3],
}

impl HookCtl {
    fn decide(&self, index: u64, cause: WritebackCause) -> WritebackDecision {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        let defer = match self.mode.load(Ordering::Relaxed) {
            0 => false,
            1 => (index ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62 == 0,
            _ => true,
        };
        if !defer {
            return WritebackDecision::Write;
        }
        let k = match cause {
            WritebackCause::Eviction => {
                let us = self.delay_us.load(Ordering::Relaxed);
                if us > 0 {
                    std::thread::sleep(Duration::from_micros(us));
                }
                0
            }
            WritebackCause::Background => 1,
            _ => 2,
        };
        self.deferred[k].fetch_add(1, Ordering::Relaxed);
        WritebackDecision::Defer
    }

    fn deferrals(&self) -> [u64; 3] {
        std::array::from_fn(|k| self.deferred[k].load(Ordering::Relaxed))
    }
}

/// A write that waits this long was throttled past a flusher pass that
/// ended (the throttle's bound is 2 s; a pass that writes nothing, as with
/// a hook that defers every page, must let throttled writers go at once).
const THROTTLE_STALL: Duration = Duration::from_millis(1500);

pub struct Harness {
    path: PathBuf,
    faults: Arc<Faults>,
    /// The write-back hook of the file, if the stream has one.
    hook: Option<Arc<HookCtl>>,
    /// The hook's deferrals when the current operation began.
    deferrals: [u64; 3],
    cache: Option<PageCache>,
    handles: Vec<File>,
    model: Vec<u8>,
    fault: Fault,
    config: Config,
    pub log: Log,
    /// The current cache's held frames, for a watchdog (it is replaced
    /// when the stream drops the cache and reopens).
    pub probe: Arc<Mutex<pagecache::HeldProbe>>,
}

/// A configuration for `frames` frames drawn from `seed`: the flusher's
/// thresholds from 1% (it writes all the time) to off, either I/O engine,
/// stable pages or not.
pub fn config_for(frames: usize, seed: u64) -> Config {
    let mut rng = Rng::new(seed ^ 0x5EED_C0F1_6000_0001);
    let bg = [1, 2, 10, 100][rng.below(4) as usize];
    let limit = [bg, (bg * 3).min(100), 100][rng.below(3) as usize];
    Config {
        capacity: frames * PS,
        dirty_background_percent: bg,
        dirty_limit_percent: limit,
        io_engine: if rng.chance(50) {
            IoEngine::Auto
        } else {
            IoEngine::Threads
        },
        stable_writes: rng.chance(25),
        ..Config::default()
    }
}

/// How a [`config_for`] configuration prints in a failure.
fn describe(c: &Config) -> String {
    format!(
        " with Config {{ frames: {}, dirty_background_percent: {}, dirty_limit_percent: {}, io_engine: {:?}, stable_writes: {} }}",
        c.capacity / PS,
        c.dirty_background_percent,
        c.dirty_limit_percent,
        c.io_engine,
        c.stable_writes
    )
}

pub fn new_cache(config: &Config, faults: &Arc<Faults>) -> PageCache {
    PageCache::with_backend(*config, FaultyBackend::new(PosixBackend, faults.clone())).unwrap()
}

pub fn open(c: &PageCache, p: &Path) -> File {
    c.open_with(p, OpenOptions::new().read(true).write(true))
        .unwrap()
}

impl Harness {
    pub fn new(dir: &Path, what: &str, seed: u64, frames: usize, nhandles: usize) -> Harness {
        Harness::with_hook(dir, what, seed, frames, nhandles, false)
    }

    /// With `hooked`, the file has a write-back hook the stream steers
    /// (`HookCtl`): deferrals from eviction, the flusher and sync, sync
    /// checked against the disk, throttled writers with a flusher that
    /// can write nothing.
    pub fn with_hook(
        dir: &Path,
        what: &str,
        seed: u64,
        frames: usize,
        nhandles: usize,
        hooked: bool,
    ) -> Harness {
        let path = dir.join(format!("{what}-{seed}"));
        std::fs::write(&path, b"").unwrap();
        let faults = Faults::new();
        let config = config_for(frames, seed);
        let cache = new_cache(&config, &faults);
        let mut log = Log::new(what, seed);
        log.config = describe(&config);
        let probe = Arc::new(Mutex::new(cache.held_probe()));
        let mut h = Harness {
            path,
            faults,
            hook: hooked.then(|| Arc::new(HookCtl::default())),
            deferrals: [0; 3],
            cache: Some(cache),
            handles: Vec::new(),
            model: Vec::new(),
            fault: Fault::None,
            config,
            log,
            probe,
        };
        h.handles = (0..nhandles).map(|_| h.open_file()).collect();
        h
    }

    /// A handle of the file through the current cache, with the hook (a
    /// file's hook is shared by its handles; a reopened file needs it set
    /// again).
    fn open_file(&self) -> File {
        let f = open(self.cache(), &self.path);
        if let Some(h) = &self.hook {
            let h = h.clone();
            f.set_writeback_hook(Some(WritebackHook::new(move |p| {
                h.decide(p.index, p.cause)
            })));
        }
        f
    }

    /// Whether the hook deferred a page for `cause` (0 eviction, 1 the
    /// flusher, 2 sync) since the current operation began.
    fn deferred_since(&self, cause: usize) -> bool {
        self.hook
            .as_ref()
            .is_some_and(|h| h.deferrals()[cause] != self.deferrals[cause])
    }

    /// The hook writes everything from now on.
    fn hook_off(&self) {
        if let Some(h) = &self.hook {
            h.mode.store(0, Ordering::Relaxed);
        }
    }

    fn frames(&self) -> usize {
        self.config.capacity / PS
    }

    fn cache(&self) -> &PageCache {
        self.cache.as_ref().unwrap()
    }

    fn set_fault(&mut self, f: Fault) {
        self.faults.clear();
        self.fault = f;
        match f {
            Fault::None => {}
            Fault::ReadError => self.faults.fail_nth_read(1, libc::EIO),
            Fault::WriteError => self.faults.fail_writes_from(1, libc::EIO),
            Fault::Enospc => self.faults.enospc_past(1),
            Fault::ShortReads => self.faults.short_reads(1000),
            Fault::TruncateError => self.faults.fail_set_len(libc::EIO),
        }
    }

    /// An error is acceptable only while a fault that explains it is on,
    /// or the hook explains it: `WouldBlock` from a sync (or close) whose
    /// hook deferred a page, `OutOfMemory` when eviction's hook deferred
    /// pages during the operation (every frame dirty and deferred).
    #[track_caller]
    fn allowed(&self, e: &std::io::Error, op: &str) {
        if (e.kind() == ErrorKind::WouldBlock && self.deferred_since(2))
            || (e.kind() == ErrorKind::OutOfMemory && self.deferred_since(0))
        {
            return;
        }
        let errno = os_error(e);
        let ok = match self.fault {
            Fault::ReadError => errno == Some(libc::EIO),
            Fault::WriteError => errno == Some(libc::EIO),
            Fault::Enospc => errno == Some(libc::ENOSPC),
            Fault::TruncateError => errno == Some(libc::EIO),
            Fault::None | Fault::ShortReads => false,
        };
        self.log.check(ok, || {
            format!(
                "{op} failed with no fault to explain it ({:?}): {e}",
                self.fault
            )
        });
    }

    fn expect(&self, off: u64, n: usize) -> Vec<u8> {
        let len = self.model.len() as u64;
        if off >= len {
            return Vec::new();
        }
        let end = (off + n as u64).min(len) as usize;
        self.model[off as usize..end].to_vec()
    }

    /// The model's page `i`, zero past the end.
    fn model_page(&self, i: u64) -> Vec<u8> {
        let mut p = self.expect(i * PS as u64, PS);
        p.resize(PS, 0);
        p
    }

    fn handle(&mut self, rng: &mut impl Choose) -> File {
        let k = rng.below(self.handles.len() as u64) as usize;
        self.handles[k].clone()
    }

    fn check_disk(&self, when: &str) {
        let disk = std::fs::read(&self.path).unwrap();
        if disk != self.model {
            let at = disk.iter().zip(&self.model).position(|(a, b)| a != b);
            self.log.fail(format!(
                "after {when}: disk ({} bytes) differs from the model ({} bytes), first difference at {at:?}",
                disk.len(),
                self.model.len()
            ));
        }
    }

    pub fn step(&mut self, rng: &mut impl Choose) {
        // Faults come and go.
        if self.fault == Fault::None && rng.chance(3) {
            let f = [
                Fault::ReadError,
                Fault::WriteError,
                Fault::Enospc,
                Fault::ShortReads,
                Fault::TruncateError,
            ][rng.below(5) as usize];
            self.log.op(format!("fault on: {f:?}"));
            self.set_fault(f);
        } else if self.fault != Fault::None && rng.chance(15) {
            self.log.op(format!("fault off: {:?}", self.fault));
            self.set_fault(Fault::None);
        }
        if let Some(h) = &self.hook {
            self.deferrals = h.deferrals();
        }
        let f = self.handle(rng);
        let len = self.model.len() as u64;
        let span = (len + 2 * PS as u64).min(MAX_PAGES * PS as u64);
        // The asynchronous twin of the call (protocol 5.9), driven to its
        // end on this thread: the same bytes and errors are expected.
        let asy = rng.chance(40);
        let sfx = if asy { "_async" } else { "" };
        match rng.below(108) {
            0..=24 => {
                let off = rng.below(span);
                let n = if rng.chance(50) {
                    rng.below(100)
                } else {
                    rng.below(3 * PS as u64)
                } as usize;
                self.log.op(format!("read_at{sfx}({off}, {n})"));
                let mut buf = vec![0xEEu8; n];
                let res = if asy {
                    pagecache::block_on(f.read_at_async(&mut buf, off))
                } else {
                    f.read_at(&mut buf, off)
                };
                match res {
                    Ok(got) => {
                        let want = self.expect(off, n);
                        self.log.check(got == want.len(), || {
                            format!("read_at returned {got}, want {}", want.len())
                        });
                        if buf[..got] != want[..] {
                            self.log
                                .fail(format!("read_at({off}, {n}) returned wrong bytes"));
                        }
                    }
                    Err(e) => self.allowed(&e, "read_at"),
                }
            }
            25..=49 => {
                let off = rng.below(span.min(MAX_PAGES * PS as u64 - 3 * PS as u64));
                let n = 1 + if rng.chance(50) {
                    rng.below(64)
                } else {
                    rng.below(3 * PS as u64)
                } as usize;
                let data = rng.bytes(n);
                self.log
                    .op(format!("write_at{sfx}({off}, {n} bytes {:#x}..)", data[0]));
                let t = Instant::now();
                let res = if asy {
                    pagecache::block_on(f.write_at_async(&data, off))
                } else {
                    f.write_at(&data, off)
                };
                self.check_stall(t, "write_at");
                match res {
                    Ok(()) => self.apply_write(off, &data),
                    Err(e) => {
                        self.allowed(&e, "write_at");
                        self.after_failed_write(&f, off, &data);
                    }
                }
            }
            50..=57 => {
                let new = if rng.chance(50) {
                    rng.below(len + 1)
                } else {
                    rng.below(MAX_PAGES * PS as u64)
                };
                self.log.op(format!("set_len({new})"));
                match f.set_len(new) {
                    Ok(()) => self.model.resize(new as usize, 0),
                    Err(e) => {
                        self.allowed(&e, "set_len");
                        self.log.check(f.len() == len, || {
                            "a failed set_len changed the length".into()
                        });
                    }
                }
            }
            58..=61 => {
                self.log.op(format!("sync{sfx}"));
                // `Ok` exactly when the disk holds the model: an earlier
                // write-back error (eviction's, the flusher's) is never
                // reported again once the pages are written.
                let res = if asy {
                    pagecache::block_on(f.sync_async())
                } else {
                    f.sync()
                };
                match res {
                    Ok(()) => {
                        self.log
                            .check(f.dirty_pages() == 0 || self.handles.len() > 1, || {
                                "dirty pages after a sync".into()
                            });
                        self.check_disk("sync");
                    }
                    Err(e) => self.allowed(&e, "sync"),
                }
            }
            62..=73 => {
                let pages = len.div_ceil(PS as u64);
                let i = rng.below(pages + 1);
                if asy && rng.chance(30) {
                    // A future polled once (a miss starts its read, a
                    // latch holder registers it), then dropped: nothing
                    // changes, nothing stays pinned or latched.
                    let what = rng.below(3);
                    self.log
                        .op(format!("future {what} of page {i} polled once, dropped"));
                    let waker = &super::common::noop_waker();
                    let mut cx = std::task::Context::from_waker(waker);
                    let mut buf = vec![0u8; PS + 10];
                    match what {
                        0 => drop(Box::pin(f.page_async(i)).as_mut().poll(&mut cx)),
                        1 => drop(Box::pin(f.page_mut_async(i)).as_mut().poll(&mut cx)),
                        _ => drop(
                            Box::pin(f.read_at_async(&mut buf, i * PS as u64 + 5))
                                .as_mut()
                                .poll(&mut cx),
                        ),
                    }
                    return;
                }
                self.log.op(format!("page{sfx}({i})"));
                let res = if asy {
                    pagecache::block_on(f.page_async(i))
                } else {
                    f.page(i)
                };
                match res {
                    Ok(p) => {
                        if p[..] != self.model_page(i)[..] {
                            self.log.fail(format!("page({i}) has wrong bytes"));
                        }
                    }
                    Err(e) if i >= pages => {
                        self.log.check(e.kind() == ErrorKind::UnexpectedEof, || {
                            format!("page past the end: {e}")
                        })
                    }
                    Err(e) => self.allowed(&e, "page"),
                }
            }
            74..=81 => {
                let pages = len.div_ceil(PS as u64);
                if pages == 0 {
                    return;
                }
                let i = rng.below(pages);
                let edits: Vec<(usize, u8)> = (0..1 + rng.below(8))
                    .map(|_| (rng.below(PS as u64) as usize, rng.next() as u8))
                    .collect();
                self.log
                    .op(format!("page_mut{sfx}({i}), {} edits", edits.len()));
                let t = Instant::now();
                let res = if asy {
                    pagecache::block_on(f.page_mut_async(i))
                } else {
                    f.page_mut(i)
                };
                self.check_stall(t, "page_mut");
                match res {
                    Ok(mut p) => {
                        for &(o, b) in &edits {
                            p[o] = b;
                        }
                        drop(p);
                        // Bytes past the end read as zero.
                        for &(o, b) in &edits {
                            let pos = i as usize * PS + o;
                            if pos < self.model.len() {
                                self.model[pos] = b;
                            }
                        }
                    }
                    Err(e) => self.allowed(&e, "page_mut"),
                }
            }
            82..=89 if rng.chance(50) => {
                // A run (protocol 5.7): one leaf pin over cached pages, or
                // per-page pins of pages it reads.
                let pages = len.div_ceil(PS as u64);
                let start = rng.below(pages + 1);
                // Pages it reads are pinned each: at most half the cache.
                let cap = (File::RUN_MAX as u64).min(self.frames() as u64 / 2).max(1);
                let max = 1 + rng.below(cap) as usize;
                self.log.op(format!("run({start}, {max})"));
                match f.run(start, max) {
                    Ok(run) => {
                        let n = run.len() as u64;
                        let leaf_end = (start / File::RUN_GROUP + 1) * File::RUN_GROUP;
                        let most = pages.min(start + max as u64).min(leaf_end);
                        self.log.check(
                            (start >= pages && n == 0) || (n >= 1 && start + n <= most),
                            || {
                                format!(
                                    "run held {n} pages, want 1..={}",
                                    most.saturating_sub(start)
                                )
                            },
                        );
                        for (k, p) in run.iter().enumerate() {
                            if p[..] != self.model_page(start + k as u64)[..] {
                                self.log
                                    .fail(format!("run: page {} wrong", start + k as u64));
                            }
                        }
                    }
                    Err(e) => self.allowed(&e, "run"),
                }
            }
            82..=89 => {
                let pages = len.div_ceil(PS as u64);
                let start = rng.below(pages + 1);
                // Pins hold frames: at most half the cache.
                let max = 1 + rng.below(self.frames() as u64 / 2) as usize;
                self.log.op(format!("pages({start}, {max})"));
                let mut out = Vec::new();
                match f.pages(start, &mut out, max) {
                    Ok(n) => {
                        let want = (pages.saturating_sub(start) as usize).min(max);
                        self.log
                            .check(n == want, || format!("pages returned {n}, want {want}"));
                        for (k, p) in out.iter().enumerate() {
                            if p[..] != self.model_page(start + k as u64)[..] {
                                self.log
                                    .fail(format!("pages: page {} wrong", start + k as u64));
                            }
                        }
                    }
                    Err(e) => self.allowed(&e, "pages"),
                }
            }
            90..=95 => {
                let k = rng.below(self.handles.len() as u64) as usize;
                self.log.op(format!("close handle {k} and reopen"));
                let h = self.handles.swap_remove(k);
                drop(f);
                match h.close() {
                    Ok(()) => {
                        if self.handles.is_empty() {
                            self.check_disk("close of the last handle");
                        }
                    }
                    Err(e) => self.allowed(&e, "close"),
                }
                let reopened = self.open_file();
                self.log
                    .check(reopened.len() == self.model.len() as u64, || {
                        format!(
                            "reopened length {} != model {}",
                            reopened.len(),
                            self.model.len()
                        )
                    });
                self.handles.push(reopened);
            }
            96 => self.discard_and_reuse(f),
            97 => self.forget_after_failed_close(f),
            98 => self.run_held_across_truncate(f, rng),
            105 if self.hook.is_some() => self.steer_hook(rng),
            106..=107 if self.hook.is_some() => self.sync_while_evicting(f, rng),
            100..=107 => self.view_held_across(f, rng),
            _ => {
                // Drop the whole cache: only with write-back working (a
                // dropped cache cannot keep what it failed to write).
                self.log.op("drop the cache and reopen".into());
                drop(f);
                self.set_fault(Fault::None);
                self.hook_off();
                let n = self.handles.len();
                for h in std::mem::take(&mut self.handles) {
                    if let Err(e) = h.close() {
                        self.log.fail(format!("close with no fault: {e}"));
                    }
                }
                self.cache().validate();
                self.cache = None;
                self.check_disk("dropping the cache");
                let cache = new_cache(&self.config, &self.faults);
                *self.probe.lock().unwrap_or_else(|e| e.into_inner()) = cache.held_probe();
                self.cache = Some(cache);
                self.handles = (0..n).map(|_| self.open_file()).collect();
            }
        }
    }

    /// Every handle discarded (write-backs of the file, the flusher's or
    /// eviction's, may be in flight): the last discard returns only once
    /// none is, so the disk is final when it returns. The model becomes
    /// the disk; the file is reopened and used on, and every later sync
    /// compares the disk with the model: a discarded page written late
    /// fails that comparison.
    fn discard_and_reuse(&mut self, f: File) {
        self.log.op("discard every handle, reopen".into());
        drop(f);
        let n = self.handles.len();
        let mut last = false;
        for h in std::mem::take(&mut self.handles) {
            last = h.discard();
        }
        self.log.check(last, || {
            "the last handle's discard did not drop the file".into()
        });
        self.reuse_from_disk(n);
    }

    /// A close that fails (write faults on) keeps the file with its dirty
    /// pages; `forget` drops them, while the flusher or eviction may still
    /// be writing them. Then as `discard_and_reuse`.
    fn forget_after_failed_close(&mut self, f: File) {
        self.log
            .op("fail writes, close every handle, forget, reopen".into());
        drop(f);
        let fault = self.fault;
        self.set_fault(Fault::WriteError);
        let n = self.handles.len();
        for h in std::mem::take(&mut self.handles) {
            let _ = h.close(); // may fail: that is the point
        }
        self.set_fault(fault);
        let forgot = self.cache().forget(&self.path);
        self.log
            .check(forgot <= 1, || format!("forget dropped {forgot} files"));
        self.reuse_from_disk(n);
    }

    /// After a discard or forget: what the disk holds is the file, now and
    /// from now on; `n` handles open on it again.
    fn reuse_from_disk(&mut self, n: usize) {
        self.model = std::fs::read(&self.path).unwrap();
        let handles: Vec<File> = (0..n).map(|_| self.open_file()).collect();
        self.handles = handles;
        let f = self.handles[0].clone();
        self.log.check(f.len() == self.model.len() as u64, || {
            format!(
                "reopened length {} != the disk's {}",
                f.len(),
                self.model.len()
            )
        });
        // Back within the generator's bounds (a failed cut changes nothing).
        let most = MAX_PAGES * PS as u64;
        if self.model.len() as u64 > most {
            match f.set_len(most) {
                Ok(()) => self.model.truncate(most as usize),
                Err(e) => self.allowed(&e, "set_len"),
            }
        }
    }

    /// A run held while the file is cut below its pages (or not), the new
    /// pages at its indices written twice and the file synced, all by the
    /// run's holder: none of it waits for the run (a page truncate removed
    /// and a new page at its index are different pages; the holder's sync
    /// passes a writer waiting for it), and the run's bytes never change.
    fn run_held_across_truncate(&mut self, f: File, rng: &mut impl Choose) {
        let len = self.model.len() as u64;
        let pages = len.div_ceil(PS as u64);
        if pages == 0 {
            return;
        }
        let start = rng.below(pages);
        let cap = (File::RUN_MAX as u64).min(self.frames() as u64 / 2).max(1);
        let max = 1 + rng.below(cap) as usize;
        self.log.op(format!("run({start}, {max}) held across:"));
        let run = match f.run(start, max) {
            Ok(run) => run,
            Err(e) => return self.allowed(&e, "run"),
        };
        let held: Vec<Vec<u8>> = run.iter().map(|p| p.to_vec()).collect();
        for (k, p) in held.iter().enumerate() {
            if p[..] != self.model_page(start + k as u64)[..] {
                self.log
                    .fail(format!("run: page {} wrong", start + k as u64));
            }
        }
        let end = start + held.len() as u64;
        // Cut at or below the run's first page (never in the middle of a
        // page the run holds: set_len would wait for the run, as for a
        // pin), or leave it be.
        let cut = rng.chance(70);
        if cut {
            let new = rng.below(start * PS as u64 + 1);
            self.log.op(format!("  set_len({new})"));
            match f.set_len(new) {
                Ok(()) => self.model.resize(new as usize, 0),
                Err(e) => self.allowed(&e, "set_len"),
            }
        }
        // Writes: of the run's indices if the cut removed them (new
        // pages), else of pages outside the run.
        let cut_done = self.model.len() as u64 <= start * PS as u64;
        for _ in 0..2 {
            let i = if cut_done {
                start + rng.below(end - start)
            } else {
                rng.below(MAX_PAGES)
            };
            if !cut_done && (start..end).contains(&i) {
                continue; // the holder would wait for its own run
            }
            let data = rng.bytes(PS);
            self.log.op(format!("  write_at({}, {PS})", i * PS as u64));
            match f.write_at(&data, i * PS as u64) {
                Ok(()) => self.apply_write(i * PS as u64, &data),
                Err(e) => {
                    self.allowed(&e, "write_at");
                    self.after_failed_write(&f, i * PS as u64, &data);
                }
            }
        }
        // Another thread writes a page the run holds: it waits for the run
        // (W3), and the holder's sync must not wait for it.
        let waiter = (!cut_done && end > start && rng.chance(50)).then(|| {
            let i = start + rng.below(end - start);
            let data = rng.bytes(PS);
            self.log.op(format!(
                "  another thread: write_at({}, {PS})",
                i * PS as u64
            ));
            let g = f.clone();
            let d = data.clone();
            (
                i,
                data,
                std::thread::spawn(move || g.write_at(&d, i * PS as u64)),
            )
        });
        self.log.op("  sync".into());
        match f.sync() {
            Ok(()) => self.check_disk("a run holder's sync"),
            Err(e) => self.allowed(&e, "sync"),
        }
        for (k, p) in run.iter().enumerate() {
            if p[..] != held[k][..] {
                self.log.fail(format!(
                    "page {} changed under the run that held it",
                    start + k as u64
                ));
            }
        }
        drop(run);
        if let Some((i, data, t)) = waiter {
            match t.join().unwrap() {
                Ok(()) => self.apply_write(i * PS as u64, &data),
                Err(e) => {
                    self.allowed(&e, "write_at");
                    self.after_failed_write(&f, i * PS as u64, &data);
                }
            }
        }
    }

    /// A write (or `page_mut`) that took `THROTTLE_STALL` or more missed
    /// the end of the flusher's pass it was throttled for.
    #[track_caller]
    fn check_stall(&self, t: Instant, op: &str) {
        let waited = t.elapsed();
        self.log.check(waited < THROTTLE_STALL, || {
            let d = self.hook.as_ref().map(|h| {
                let now = h.deferrals();
                std::array::from_fn::<u64, 3, _>(|k| now[k] - self.deferrals[k])
            });
            format!(
                "{op} waited {waited:?}: a throttled writer missed the flusher's pass (the hook's deferrals meanwhile, by eviction, the flusher and sync: {d:?}; {})",
                self.cache().stats()
            )
        });
    }

    /// `write_at` of `data` at `off`, logged, timed and applied to the
    /// model (a failed one as `after_failed_write` finds it).
    fn write_logged(&mut self, f: &File, off: u64, data: &[u8]) {
        self.log.op(format!(
            "  write_at({off}, {} bytes {:#x}..)",
            data.len(),
            data[0]
        ));
        let t = Instant::now();
        let res = f.write_at(data, off);
        self.check_stall(t, "write_at");
        match res {
            Ok(()) => self.apply_write(off, data),
            Err(e) => {
                self.allowed(&e, "write_at");
                self.after_failed_write(f, off, data);
            }
        }
    }

    /// An optimistic view of page `i` (and, half the time, a pin of it)
    /// held across one to three events: a cut at or below the page
    /// (`set_len`), the page written anew (growing the file back over a
    /// cut page), reads of other pages (eviction and frame reuse), writes
    /// of other pages (growing the file back over a cut page too). A
    /// validation that passes, before or after, read the model's page as
    /// it was when the view was taken, and none passes once the page was
    /// cut off or its bytes changed; a view through the frame hint that
    /// validates reads the page as it is now; an upgrade succeeds only on
    /// an unchanged page.
    fn view_held_across(&mut self, f: File, rng: &mut impl Choose) {
        let pages = (self.model.len() as u64).div_ceil(PS as u64);
        if pages == 0 {
            return;
        }
        let i = rng.below(pages);
        let pinned = rng.chance(50);
        self.log.op(format!(
            "view of page {i}{} held across:",
            if pinned { ", pinned," } else { "" }
        ));
        let pin = if pinned {
            match f.page(i) {
                Ok(p) => Some(p),
                Err(e) => return self.allowed(&e, "page"),
            }
        } else {
            None
        };
        let o = match f.optimistic(i) {
            Ok(o) => o,
            Err(e) => return self.allowed(&e, "optimistic"),
        };
        let want = self.model_page(i);
        let mut buf = vec![0u8; PS];
        o.copy_to(0, &mut buf);
        if o.validate() && buf != want {
            self.log
                .fail(format!("a validated view of page {i} read other bytes"));
        }
        let hint = o.frame_hint();
        let mut cut = false;
        for _ in 0..1 + rng.below(3) {
            match rng.below(4) {
                0 => {
                    let new = rng.below(i + 1) * PS as u64;
                    self.log.op(format!("  set_len({new})"));
                    match f.set_len(new) {
                        Ok(()) => {
                            self.model.resize(new as usize, 0);
                            cut = true;
                        }
                        Err(e) => self.allowed(&e, "set_len"),
                    }
                }
                // A pinned page still in the file: its writer would wait
                // for our own pin.
                1 if pinned && !cut => {}
                1 => {
                    let data = rng.bytes(PS);
                    self.write_logged(&f, i * PS as u64, &data);
                }
                2 => {
                    self.log.op("  read every other page".into());
                    let mut b = vec![0u8; PS];
                    for j in (0..MAX_PAGES).filter(|&j| j != i) {
                        if let Err(e) = f.read_at(&mut b, j * PS as u64) {
                            self.allowed(&e, "read_at");
                        }
                    }
                }
                _ => {
                    let j = rng.below(MAX_PAGES - 3);
                    let j = if j >= i { j + 1 } else { j };
                    let data = rng.bytes(PS);
                    self.write_logged(&f, j * PS as u64, &data);
                }
            }
        }
        let changed = cut || self.model_page(i) != want;
        o.copy_to(0, &mut buf);
        if o.validate() {
            self.log.check(!changed, || {
                format!("a view of page {i} validated after the page was cut off (cut: {cut}) or changed")
            });
            self.log.check(buf == want, || {
                format!("a validated view of page {i} read other bytes")
            });
        }
        if let Some(h) = f.optimistic_hinted(i, hint) {
            h.copy_to(0, &mut buf);
            if h.validate() {
                let now = (self.model.len() as u64).div_ceil(PS as u64);
                self.log.check(i < now && buf == self.model_page(i), || {
                    format!("a validated view of page {i} from its frame hint is not the page now")
                });
            }
        }
        drop(pin);
        if rng.chance(40) {
            self.log.op(format!("  upgrade the view of page {i}"));
            match o.upgrade() {
                Ok(mut m) => {
                    self.log.check(!changed, || {
                        format!("the upgrade of a view of page {i} succeeded after a change")
                    });
                    let (at, b) = (rng.below(PS as u64) as usize, rng.next() as u8);
                    m[at] = b;
                    drop(m);
                    let pos = i as usize * PS + at;
                    if pos < self.model.len() {
                        self.model[pos] = b;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => self.allowed(&e, "upgrade"),
            }
        }
    }

    /// Sets how the hook decides: write all, defer some, defer all; and
    /// how long it sleeps before deferring a page eviction offered it.
    fn steer_hook(&mut self, rng: &mut impl Choose) {
        let Some(h) = self.hook.clone() else { return };
        let mode = rng.below(3);
        let us = [0, 300, 3000][rng.below(3) as usize];
        self.log.op(format!(
            "hook: mode {mode} (0 write, 1 defer some, 2 defer all), eviction delay {us} us"
        ));
        h.mode.store(mode, Ordering::Relaxed);
        h.delay_us.store(us, Ordering::Relaxed);
    }

    /// Pages dirtied, then a sync while another thread's misses make
    /// eviction write dirty pages back through the hook (which may defer
    /// them, after a sleep): the sync may meet those write-backs under
    /// way. `Ok` only with the disk equal to the model, whatever eviction
    /// deferred meanwhile.
    fn sync_while_evicting(&mut self, f: File, rng: &mut impl Choose) {
        let pages = (self.model.len() as u64).div_ceil(PS as u64);
        if pages == 0 {
            return;
        }
        self.log.op("sync while another thread misses:".into());
        for _ in 0..1 + rng.below(self.frames() as u64) {
            let data = rng.bytes(PS);
            self.write_logged(&f, rng.below(pages) * PS as u64, &data);
        }
        let pages = (self.model.len() as u64).div_ceil(PS as u64);
        let reads: Vec<(u64, Vec<u8>)> = (0..2 * self.frames())
            .map(|_| {
                let j = rng.below(pages);
                (j, self.model_page(j))
            })
            .collect();
        let g = f.clone();
        let t = std::thread::spawn(move || {
            let mut errs = Vec::new();
            let mut buf = vec![0u8; PS];
            for (j, want) in reads {
                match g.read_at(&mut buf, j * PS as u64) {
                    Ok(n) if buf[..n] != want[..n] => {
                        return Err(format!("another thread's read of page {j}: wrong bytes"))
                    }
                    Ok(_) => {}
                    Err(e) => errs.push(e),
                }
            }
            Ok(errs)
        });
        self.log.op("  sync".into());
        let res = f.sync();
        match t.join().unwrap() {
            Ok(errs) => {
                for e in &errs {
                    self.allowed(e, "read_at (another thread)");
                }
            }
            Err(msg) => self.log.fail(msg),
        }
        match res {
            Ok(()) => self.check_disk("a sync during eviction"),
            Err(e) => self.allowed(&e, "sync"),
        }
    }

    fn apply_write(&mut self, off: u64, data: &[u8]) {
        let end = off as usize + data.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(data);
    }

    /// A failed multi-page `write_at` wrote a prefix of its pages, each
    /// page whole: read what the cache has (with the fault off) and check.
    fn after_failed_write(&mut self, f: &File, off: u64, data: &[u8]) {
        let fault = self.fault;
        self.faults.clear();
        // The reads need frames: with the hook deferring every dirty page
        // (the write may have failed for want of a frame), let it write.
        let mode = self
            .hook
            .as_ref()
            .map(|h| h.mode.swap(0, Ordering::Relaxed));
        let old = self.model.clone();
        let mut pos = 0usize;
        let mut written = true;
        while pos < data.len() {
            let at = off + pos as u64;
            let n = (PS - (at % PS as u64) as usize).min(data.len() - pos);
            let mut now = vec![0u8; n];
            let got = f.read_at(&mut now, at).unwrap();
            now.truncate(got);
            let is_new = got == n && now[..] == data[pos..pos + n];
            let mut was = self.expect(at, n);
            was.truncate(got);
            let is_old = now == was;
            if written && is_new {
                self.apply_write(at, &data[pos..pos + n]);
            } else {
                written = false;
                self.log.check(is_old, || {
                    format!(
                        "failed write_at: page at {at} is neither old nor new (or not a prefix)"
                    )
                });
            }
            pos += n;
        }
        let _ = old;
        if let (Some(h), Some(m)) = (&self.hook, mode) {
            h.mode.store(m, Ordering::Relaxed);
        }
        self.set_fault(fault);
    }

    pub fn finish(mut self) {
        self.set_fault(Fault::None);
        self.hook_off();
        for h in std::mem::take(&mut self.handles) {
            if let Err(e) = h.close() {
                self.log.fail(format!("final close: {e}"));
            }
        }
        self.check_disk("the final close");
        self.cache().validate();
    }
}
