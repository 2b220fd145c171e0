//! Stress under oversubscription (many more threads than cores) and memory
//! pressure (working set twice the capacity), checking every byte read
//! against a model.
//!
//! Every 8-byte word of page `i` of file `f` holds `enc(f, i, c)`, where `c`
//! is the page's write counter. Writers of a page are serialized by the
//! model (not by the cache) so counters grow; a reader that saw counter `c`
//! checks `committed_before <= c <= started_after`, and that all words of
//! the page agree (no torn page, no stale bytes of another page or file).

mod common;
use common::*;
use pagecache::{File, PageCache};
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Mutex;

const FILES: usize = 4;
const PAGES: u64 = 48;
const FRAMES: usize = 96; // working set: 192 pages + a truncated file; pins can exceed it
const TRUNC_PAGES: u64 = 8;
const READERS: usize = 14;
const WRITERS: usize = 10;
const SYNCERS: usize = 2;
const ANON_WORKERS: u64 = 3;
const OPS: usize = 4000;
/// Normally ~1.5 s in a debug build; generous for a loaded machine.
const WATCHDOG_SECS: u64 = 240;

fn enc(f: usize, i: u64, c: u64) -> u64 {
    ((f as u64) << 56) | (i << 32) | c
}

fn page_of(f: usize, i: u64, c: u64) -> Vec<u8> {
    let w = enc(f, i, c).to_ne_bytes();
    let mut v = Vec::with_capacity(PS);
    while v.len() < PS {
        v.extend_from_slice(&w);
    }
    v
}

/// Checks that `bytes` (starting at byte `off` of the page, length a
/// multiple of 8 and 8-aligned) all encode page (f, i) with one counter;
/// returns it.
fn decode(bytes: &[u8], f: usize, i: u64) -> u64 {
    let w0 = u64::from_ne_bytes(bytes[..8].try_into().unwrap());
    assert!(
        bytes.chunks(8).all(|w| w == w0.to_ne_bytes()),
        "torn or mixed page {i} of file {f}"
    );
    assert_eq!(
        w0 >> 32,
        ((f as u64) << 24) | i,
        "page {i} of file {f} holds {w0:#x}"
    );
    w0 & 0xffff_ffff
}

struct Model {
    started: Vec<Vec<AtomicU64>>,
    committed: Vec<Vec<AtomicU64>>,
    locks: Vec<Vec<Mutex<()>>>,
}

impl Model {
    fn new() -> Model {
        let grid = || {
            (0..FILES)
                .map(|_| (0..PAGES).map(|_| AtomicU64::new(0)).collect())
                .collect()
        };
        Model {
            started: grid(),
            committed: grid(),
            locks: (0..FILES)
                .map(|_| (0..PAGES).map(|_| Mutex::new(())).collect())
                .collect(),
        }
    }
    fn check(&self, f: usize, i: u64, lo: u64, c: u64) {
        let hi = self.started[f][i as usize].load(SeqCst);
        assert!(
            lo <= c && c <= hi,
            "file {f} page {i}: saw {c}, expected {lo}..={hi}"
        );
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Retries an operation that may meet `OutOfMemory` when, for a moment,
/// every frame is pinned by other threads (the documented behaviour).
fn retry<T>(oom: &AtomicU64, mut op: impl FnMut() -> std::io::Result<T>) -> T {
    loop {
        match op() {
            Ok(v) => return v,
            Err(e) if e.kind() == ErrorKind::OutOfMemory => {
                oom.fetch_add(1, SeqCst);
                std::thread::yield_now();
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}

fn reader(files: &[File], m: &Model, seed: u64, oom: &AtomicU64) {
    let mut r = Rng(seed);
    let mut gang = Vec::new();
    let mut buf = vec![0u8; PS];
    for _ in 0..OPS {
        let f = r.below(FILES as u64) as usize;
        let i = r.below(PAGES);
        let lo = m.committed[f][i as usize].load(SeqCst);
        match r.below(5) {
            4 => {
                // a run (one leaf pin, protocol 5.7): bytes checked, then
                // checked again after other threads ran (writers of these
                // pages wait for the run)
                let n = 1 + r.below(4);
                let start = i.min(PAGES - n);
                let los: Vec<u64> = (start..start + n)
                    .map(|j| m.committed[f][j as usize].load(SeqCst))
                    .collect();
                let run = retry(oom, || files[f].run(start, n as usize));
                assert!(!run.is_empty() && run.len() as u64 <= n);
                assert_eq!(run.start(), start);
                let seen: Vec<u64> = run
                    .iter()
                    .enumerate()
                    .map(|(k, pg)| {
                        let j = start + k as u64;
                        let c = decode(pg, f, j);
                        m.check(f, j, los[k], c);
                        c
                    })
                    .collect();
                std::thread::yield_now();
                for (k, pg) in run.iter().enumerate() {
                    assert_eq!(
                        decode(pg, f, start + k as u64),
                        seen[k],
                        "page {} of file {f} changed under a run",
                        start + k as u64
                    );
                }
            }
            0 => {
                // whole-page read_at
                retry(oom, || files[f].read_exact_at(&mut buf, i * PS as u64));
                m.check(f, i, lo, decode(&buf, f, i));
            }
            1 => {
                // 64-byte optimistic read at a random word
                let off = r.below((PS - 64) as u64 / 8) * 8;
                let mut small = [0u8; 64];
                retry(oom, || {
                    files[f].read_exact_at(&mut small, i * PS as u64 + off)
                });
                m.check(f, i, lo, decode(&small, f, i));
            }
            2 => {
                let pg = retry(oom, || files[f].page(i));
                m.check(f, i, lo, decode(&pg, f, i));
            }
            _ => {
                let start = i.min(PAGES - 3);
                let los: Vec<u64> = (start..start + 3)
                    .map(|j| m.committed[f][j as usize].load(SeqCst))
                    .collect();
                let n = retry(oom, || files[f].pages(start, &mut gang, 3));
                assert_eq!(n, 3);
                for (k, pg) in gang.iter().enumerate() {
                    let j = start + k as u64;
                    assert_eq!(pg.index(), j);
                    m.check(f, j, los[k], decode(pg, f, j));
                }
                gang.clear();
            }
        }
    }
}

fn writer(files: &[File], m: &Model, seed: u64, oom: &AtomicU64) {
    let mut r = Rng(seed);
    for _ in 0..OPS / 2 {
        let f = r.below(FILES as u64) as usize;
        let i = r.below(PAGES - 1);
        let two = r.below(4) == 0; // a two-page write_at, atomic per page
        let _g1 = m.locks[f][i as usize].lock().unwrap();
        let _g2 = two.then(|| m.locks[f][i as usize + 1].lock().unwrap());
        let c1 = m.started[f][i as usize].fetch_add(1, SeqCst) + 1;
        if two {
            let c2 = m.started[f][i as usize + 1].fetch_add(1, SeqCst) + 1;
            let mut data = page_of(f, i, c1);
            data.extend(page_of(f, i + 1, c2));
            retry(oom, || files[f].write_at(&data, i * PS as u64));
            m.committed[f][i as usize + 1].store(c2, SeqCst);
        } else if r.below(2) == 0 {
            retry(oom, || files[f].write_at(&page_of(f, i, c1), i * PS as u64));
        } else {
            let mut pm = retry(oom, || files[f].page_mut(i));
            pm.copy_from_slice(&page_of(f, i, c1));
        }
        m.committed[f][i as usize].store(c1, SeqCst);
    }
}

fn truncator(t: &File, done: &AtomicBool, seed: u64, oom: &AtomicU64) {
    let mut r = Rng(seed);
    let mut c = 0;
    let mut buf = vec![0u8; PS];
    while !done.load(SeqCst) {
        let k = r.below(TRUNC_PAGES + 1);
        t.set_len(k * PS as u64).unwrap();
        t.set_len(TRUNC_PAGES * PS as u64).unwrap();
        for i in 0..TRUNC_PAGES {
            // A miss may find every frame pinned for a moment (oversubscribed
            // threads each holding pages): counted and retried, as the
            // writers' and readers' misses are.
            retry(oom, || t.read_exact_at(&mut buf, i * PS as u64));
            if i >= k {
                assert!(
                    buf.iter().all(|&b| b == 0),
                    "stale bytes after shrink+grow, page {i}"
                );
            } else {
                decode(&buf, FILES, i);
            }
        }
        c += 1;
        for i in k..TRUNC_PAGES {
            retry(oom, || t.write_at(&page_of(FILES, i, c), i * PS as u64));
        }
    }
}

/// Readers of the truncated file accept a valid page, a zero page, or EOF.
fn trunc_reader(t: &File, done: &AtomicBool, seed: u64, oom: &AtomicU64) {
    let mut r = Rng(seed);
    let mut buf = vec![0u8; PS];
    while !done.load(SeqCst) {
        let i = r.below(TRUNC_PAGES);
        let n = retry(oom, || t.read_at(&mut buf, i * PS as u64));
        if n == PS && buf.iter().any(|&b| b != 0) {
            decode(&buf, FILES, i);
        }
        match t.page(i) {
            Ok(pg) if pg.iter().any(|&b| b != 0) => {
                decode(&pg, FILES, i);
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::OutOfMemory) => {}
            Err(e) => panic!("{e}"),
        }
        // A run over pages a truncate may remove while it holds them: the
        // bytes stay whole (zero or a valid page) until it is dropped.
        match t.run(i, TRUNC_PAGES as usize) {
            Ok(run) => {
                let check = |run: &pagecache::PageRun<'_>| {
                    for (k, pg) in run.iter().enumerate() {
                        if pg.iter().any(|&b| b != 0) {
                            decode(pg, FILES, i + k as u64);
                        }
                    }
                };
                check(&run);
                std::thread::yield_now();
                check(&run);
            }
            Err(e) if e.kind() == ErrorKind::OutOfMemory => {}
            Err(e) => panic!("{e}"),
        }
    }
}

/// Anonymous pages compete for the same frames: each worker owns a region,
/// writes a pattern naming (worker, page, round) into random pages, checks
/// them, frees ranges and checks they come back zero.
fn anon_worker(cache: &PageCache, w: u64, oom: &AtomicU64) {
    const APAGES: u64 = 8;
    let r = retry(oom, || cache.anon(APAGES * PS as u64));
    let mut model = [0u64; APAGES as usize]; // 0 = zero page
    let mut rng = Rng(0x7777 + w);
    for round in 1..=(OPS as u64 / 4) {
        let i = rng.below(APAGES);
        match rng.below(4) {
            0 | 1 => {
                let v = (w << 48) | (i << 32) | round;
                let mut m = retry(oom, || r.page_mut(i));
                for c in m.chunks_mut(8) {
                    c.copy_from_slice(&v.to_ne_bytes());
                }
                model[i as usize] = v;
            }
            2 => {
                let pg = retry(oom, || r.page(i));
                let want = model[i as usize].to_ne_bytes();
                assert!(
                    pg.chunks(8).all(|c| c == want),
                    "anon worker {w} page {i}: wrong bytes"
                );
            }
            _ => {
                let end = (i + 1 + rng.below(3)).min(APAGES);
                r.free(i..end);
                for j in i..end {
                    model[j as usize] = 0;
                }
            }
        }
    }
}

#[test]
fn oversubscribed_mixed_workload_keeps_every_byte_right() {
    let d = TempDir::new("stress");
    let cache: PageCache = cache(FRAMES);
    let mut files = Vec::new();
    for f in 0..FILES {
        let p = d.path(&format!("f{f}"));
        let data: Vec<u8> = (0..PAGES).flat_map(|i| page_of(f, i, 0)).collect();
        std::fs::write(&p, data).unwrap();
        files.push(cache.open(&p).unwrap());
    }
    let tp = d.path("trunc");
    std::fs::write(
        &tp,
        (0..TRUNC_PAGES)
            .flat_map(|i| page_of(FILES, i, 0))
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let t = cache.open(&tp).unwrap();
    let m = Model::new();
    let done = AtomicBool::new(false);
    let oom = AtomicU64::new(0);
    let syncs = AtomicU64::new(0);
    // A deadlock must fail the test, not hang CI: if the workers are not
    // done in time, report and exit non-zero (blocked threads cannot be
    // unwound by a panic).
    let finished = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let t0 = std::time::Instant::now();
            while !finished.load(SeqCst) {
                if t0.elapsed() > std::time::Duration::from_secs(WATCHDOG_SECS) {
                    eprintln!(
                        "stress: workers not done after {WATCHDOG_SECS} s: deadlock? stats {}",
                        cache.stats()
                    );
                    std::process::exit(101);
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
        let mut work = Vec::new();
        for k in 0..READERS {
            let (files, m, oom) = (&files, &m, &oom);
            work.push(s.spawn(move || reader(files, m, 0x1234 + k as u64 * 77, oom)));
        }
        for k in 0..WRITERS {
            let (files, m, oom) = (&files, &m, &oom);
            work.push(s.spawn(move || writer(files, m, 0x9876 + k as u64 * 31, oom)));
        }
        for k in 0..SYNCERS {
            let (files, done, syncs) = (&files, &done, &syncs);
            s.spawn(move || {
                let mut r = Rng(0x5555 + k as u64);
                while !done.load(SeqCst) {
                    files[r.below(FILES as u64) as usize].sync().unwrap();
                    syncs.fetch_add(1, SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            });
        }
        for w in 0..ANON_WORKERS {
            let (cache, oom) = (&cache, &oom);
            work.push(s.spawn(move || anon_worker(cache, w, oom)));
        }
        s.spawn(|| truncator(&t, &done, 0xABCD, &oom));
        for k in 0..4 {
            let (t, done, oom) = (&t, &done, &oom);
            s.spawn(move || trunc_reader(t, done, 0x4242 + k, oom));
        }
        for w in work {
            w.join().unwrap();
        }
        done.store(true, SeqCst);
        finished.store(true, SeqCst);
    });
    // Everything written is on disk after a final sync, as the model says.
    for (f, file) in files.iter().enumerate() {
        file.sync().unwrap();
        let disk = std::fs::read(d.path(&format!("f{f}"))).unwrap();
        for i in 0..PAGES {
            let c = m.committed[f][i as usize].load(SeqCst);
            let pg = &disk[i as usize * PS..(i as usize + 1) * PS];
            assert_eq!(decode(pg, f, i), c, "disk page {i} of file {f}");
        }
    }
    let st = cache.stats();
    println!(
        "stress: {st}; syncs {}; transient OutOfMemory retries {}",
        syncs.load(SeqCst),
        oom.load(SeqCst)
    );
    assert!(st.evictions > 0, "memory pressure evicted pages");
    assert!(st.optimistic_reads > 0);
    assert!(st.writebacks > 0);
    assert!(st.anon_faults > 0, "anonymous pages competed for frames");
    cache.validate();
}
