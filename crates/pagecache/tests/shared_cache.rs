//! A cache shared by processes (`PageCache::shared`): pages one process
//! wrote and has not synced are read by another through the same cache;
//! a page the other wrote is read back by the first; reclaim in a process
//! evicts clean pages of a file only another process has open; a file
//! closed everywhere keeps its pages for the next opener unless it changed
//! meanwhile; a page a killed process held latched is dropped and its loss
//! reported; a later process asking for another geometry or a policy not
//! shared yet gets a clear error.
//!
//! The second process is this test binary again, running the ignored
//! `child` entry with its role in the environment. Caches are made in a
//! fresh directory per test (not `/dev/shm`). Background write-back is
//! off: the tests decide when pages are written.
#![cfg(not(loom))]

mod common;
use common::{reap, spawn_child, TempDir};
use pagecache::{Config, PageCache, PolicyKind, SharedOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const PS: usize = 4096;

fn config(frames: usize) -> Config {
    Config {
        capacity: frames * PS,
        policy: PolicyKind::Clock,
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        dirty_expire: std::time::Duration::MAX,
        readahead_max: 0,
        ..Config::default()
    }
}

fn shared(dir: &Path, frames: usize) -> PageCache {
    common::shared_in("t", dir, config(frames))
}

/// A shared cache whose pages are written back once dirty for 300 ms
/// (the age bound, W1).
fn aged(dir: &Path) -> PageCache {
    common::shared_in(
        "t",
        dir,
        Config {
            dirty_expire: std::time::Duration::from_millis(300),
            ..config(64)
        },
    )
}

/// Page `i` of the file on disk.
fn on_disk(path: &Path, i: u64) -> Vec<u8> {
    let mut b = vec![0u8; PS];
    std::os::unix::fs::FileExt::read_exact_at(
        &std::fs::File::open(path).unwrap(),
        &mut b,
        i * PS as u64,
    )
    .unwrap();
    b
}

/// Page `i`'s bytes as written by `who`.
fn page(who: u8, i: u64) -> Vec<u8> {
    (0..PS).map(|b| who ^ (i as u8) ^ (b as u8)).collect()
}

fn check(f: &pagecache::File, who: u8, i: u64) {
    let mut buf = vec![0u8; PS];
    f.read_at(&mut buf, i * PS as u64).unwrap();
    assert!(buf == page(who, i), "page {i} is not {who}'s");
}

fn spawn(role: &str, dir: &Path, file: &Path) -> std::process::Child {
    spawn_child(&[
        ("PC_SHARED_ROLE", role),
        ("PC_SHARED_DIR", dir.to_str().unwrap()),
        ("PC_SHARED_FILE", file.to_str().unwrap()),
    ])
}

#[test]
#[ignore = "run by the tests in a second process"]
fn child() {
    let role = std::env::var("PC_SHARED_ROLE").unwrap();
    let dir = PathBuf::from(std::env::var("PC_SHARED_DIR").unwrap());
    let file = PathBuf::from(std::env::var("PC_SHARED_FILE").unwrap());
    match role.as_str() {
        "read-then-write" => {
            let c = shared(&dir, 64);
            // Another path to the same file: the same pages.
            let alias = dir.join("alias");
            std::fs::hard_link(&file, &alias).unwrap();
            let f = c.open(&alias).unwrap();
            for i in 0..4 {
                check(&f, 1, i);
            }
            assert_eq!(c.stats().misses, 0, "every page was the other process's");
            f.write_at(&page(2, 4), 4 * PS as u64).unwrap();
            assert_eq!(f.len(), 5 * PS as u64);
        }
        "read-other-file" => {
            let c = shared(&dir, 64);
            let f = c.open(&file).unwrap();
            for round in 0..3 {
                for i in 0..100 {
                    check(&f, 3, i);
                }
                let _ = round;
            }
        }
        "truncate" => {
            let c = shared(&dir, 64);
            let f = c.open(&file).unwrap();
            // The parent's run holds pages 0..8: their frames are kept for
            // it, and this process exits before the run ends.
            f.set_len(0).unwrap();
        }
        "die-latched" => {
            let c = shared(&dir, 64);
            let f = c.open(&file).unwrap();
            // Page 3 dirty (the child's own change, never synced), then
            // latched and half rewritten when the parent kills us.
            f.write_at(&page(5, 3), 3 * PS as u64).unwrap();
            let mut m = f.page_mut(3).unwrap();
            m[..PS / 2].fill(0xEE);
            std::fs::write(dir.join("latched"), b"").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
            drop(m);
        }
        "die-writing-back" | "die-writing-back-aged" => {
            let c = if role.ends_with("aged") {
                aged(&dir)
            } else {
                shared(&dir, 64)
            };
            let f = c.open(&file).unwrap();
            f.write_at(&page(5, 3), 3 * PS as u64).unwrap();
            // The write-back of page 3 starts, then stops in the hook
            // (before any byte is written) until the parent kills us.
            let marker = dir.join("writing");
            f.set_writeback_hook(Some(pagecache::WritebackHook::new(move |pg| {
                if pg.index == 3 {
                    std::fs::write(&marker, b"").unwrap();
                    std::thread::sleep(std::time::Duration::from_secs(60));
                }
                pagecache::WritebackDecision::Write
            })));
            f.sync().unwrap();
        }
        "age-holder" => {
            let c = aged(&dir);
            let f = c.open(&file).unwrap();
            // A dirty page starts this process's flusher, which takes the
            // age lease at its first look.
            f.write_at(&page(6, 0), 0).unwrap();
            common::wait_until("the age lease", || c.holds_age_lease());
            std::fs::write(dir.join("holding"), b"").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        "die-cutting" => {
            let c = shared(&dir, 64);
            let f = c.open(&file).unwrap();
            // The parent pins page 2, the cut's new last page: this call
            // cuts the file on disk, then waits for that page (its cut
            // recorded, 5.6 T0) until the parent kills us.
            f.set_len(2 * PS as u64 + 100).unwrap();
            unreachable!("the parent kills this process first");
        }
        "die-pinned" => {
            let c = shared(&dir, 64);
            let f = c.open(&file).unwrap();
            // Two pins of page 1 (a clone), and one of page 2 taken by a
            // thread that hands it over and exits (its table folded into
            // this process's row, 5.15 P2); a pin of page 0 taken and
            // given back (counted, then uncounted).
            let one = f.page(1).unwrap();
            let again = one.clone();
            drop(f.page(0).unwrap());
            let two = std::thread::scope(|s| s.spawn(|| f.page(2).unwrap()).join().unwrap());
            // And a run over page 3, cached: one pin of its index leaf's
            // slot, no pin of the page (5.7).
            check(&f, 1, 3);
            let run = f.run(3, 1).unwrap();
            assert!(run.one_pin(), "a leaf pin");
            std::fs::write(dir.join("pinned"), b"").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
            drop((one, again, two, run));
        }
        "die-pinned-large" => {
            let c = shared(&dir, LARGE);
            let f = c.open(&file).unwrap();
            let one = f.page(1).unwrap();
            std::fs::write(dir.join("pinned"), b"").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
            drop(one);
        }
        "die-anon" => {
            let c = shared(&dir, 64);
            // 40 pages of a region faulted in, one of them latched and
            // another pinned when the parent kills us; a page freed before
            // (given back while alive).
            let r = c.anon(40 * PS as u64).unwrap();
            for i in 0..40 {
                r.page_mut(i).unwrap()[..8].copy_from_slice(&i.to_le_bytes());
            }
            r.free(39..40);
            let mut m = r.page_mut(7).unwrap();
            m[..PS / 2].fill(0xEE);
            let pinned = r.page(8).unwrap();
            std::fs::write(dir.join("anon"), b"").unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
            drop((m, pinned));
            drop(r);
        }
        r => panic!("unknown role {r}"),
    }
}

/// A file of 4 pages (`page(1, i)`), this process's shared cache over it,
/// and a child in `role` of the same cache, SIGKILLed once it made the
/// file `marker` (left a zombie until the test reaps it: it counts as
/// dead).
struct Killed {
    /// Kept for the directory's life.
    _td: TempDir,
    path: PathBuf,
    disk: Vec<u8>,
    c: PageCache,
    child: std::process::Child,
}

fn kill_child_when(name: &str, role: &str, marker: &str) -> Killed {
    kill_child_of(|d| shared(d, 64), name, role, marker)
}

/// [`kill_child_when`] with this process's cache made by `cache`.
fn kill_child_of(
    cache: impl FnOnce(&Path) -> PageCache,
    name: &str,
    role: &str,
    marker: &str,
) -> Killed {
    let td = TempDir::new(name);
    let path = td.path("f");
    let disk: Vec<u8> = (0..4).flat_map(|i| page(1, i)).collect();
    std::fs::write(&path, &disk).unwrap();
    let c = cache(&td.0);
    let mut child = spawn(role, &td.0, &path);
    common::wait_until(&format!("the child's {marker}"), || {
        td.path(marker).exists()
    });
    child.kill().unwrap();
    Killed {
        _td: td,
        path,
        disk,
        c,
        child,
    }
}

/// Runs `f` on another thread and fails the test (aborting: the thread
/// cannot be stopped) if it has not returned within 20 s; prints how long
/// it took.
fn within(what: &str, f: impl FnOnce() + Send) {
    let t0 = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            f();
            tx.send(()).unwrap();
        });
        if rx.recv_timeout(std::time::Duration::from_secs(20)).is_err() {
            eprintln!("{what}: hung");
            std::process::abort();
        }
    });
    eprintln!("{what}: {:?} after the kill", t0.elapsed());
}

/// A process killed while a write-back of a page is in flight (protocol
/// 5.14 W1-W3; here stopped in its write-back hook, holding the file's
/// flush lock): the other process's `sync` takes the flush lock over, the
/// recovery of the dead process ends its write-back as failed (the page
/// dirty again), and the `sync` writes the page itself: the dead
/// process's change, which it had made before its write-back, reaches the
/// disk. With the write-back left in flight the `sync` waits forever (the
/// watchdog fails the test). Its `sync` held the file's size lock shared:
/// a `set_len` then goes through once the recovery gives that back (5.15;
/// without it the `set_len` waits forever).
#[test]
fn a_write_back_left_in_flight_by_a_process_that_died_is_ended() {
    let mut k = kill_child_when("shared-wb-death", "die-writing-back", "writing");
    let f = k.c.open(&k.path).unwrap();
    within("the sync past the dead process's write-back", || {
        f.sync().unwrap()
    });
    let on_disk = std::fs::read(&k.path).unwrap();
    assert!(
        on_disk[3 * PS..4 * PS] == page(5, 3)[..],
        "the dead process's change, written"
    );
    assert!(on_disk[..3 * PS] == k.disk[..3 * PS]);
    check(&f, 5, 3);
    // Its sync held the file's size lock shared (5.15): given back, so a
    // cut of the file goes through.
    within("the set_len past the dead process's size-lock hold", || {
        f.set_len(2 * PS as u64).unwrap()
    });
    assert_eq!(std::fs::metadata(&k.path).unwrap().len(), 2 * PS as u64);
    k.c.validate();
    k.child.wait().unwrap();
}

/// A process killed while its `sync` holds a file's flush lock (stopped
/// in its write-back hook, as above), in a cache that writes pages back
/// by age: this process's flusher takes the age lease and the flush lock
/// over and writes by age both the page this process dirties afterwards
/// and the dead process's page, whose write-back its recovery ended
/// (dirty again). The flusher only tries the flush lock (it skips a file
/// a sync holds): before it took the lock over from a dead holder, it
/// skipped the file for ever, and neither page reached the disk without
/// a `sync` (the age-lease test below met it in about 1 run in 60).
#[test]
fn the_age_flusher_takes_over_a_flush_lock_left_by_a_process_that_died() {
    let mut k = kill_child_of(
        aged,
        "shared-flush-lock-death",
        "die-writing-back-aged",
        "writing",
    );
    k.child.wait().unwrap();
    let (c, path) = (&k.c, &k.path);
    let f = c.open(path).unwrap();
    f.write_at(&page(2, 1), PS as u64).unwrap();
    within("page 1 written by age", || {
        common::wait_until("page 1", || on_disk(path, 1) == page(2, 1))
    });
    within("the dead process's page 3 written by age", || {
        common::wait_until("page 3", || on_disk(path, 3) == page(5, 3))
    });
    assert!(c.holds_age_lease());
    assert!(on_disk(path, 0) == page(1, 0) && on_disk(path, 2) == page(1, 2));
    f.sync().unwrap();
    c.validate();
}

/// A process killed while it holds a page's latch (protocol 5.14 L1-L4):
/// the other process's read of that page waits about 200 ms after the
/// kill, takes the latch over, drops the page (it may be torn) and reads
/// it from the file; the dead process's unsynced change to it is lost,
/// and the next `sync` says so, naming the page, once.
#[test]
fn a_page_latched_by_a_process_that_died_is_dropped_and_its_loss_reported() {
    let mut k = kill_child_when("shared-torn", "die-latched", "latched");
    let f = k.c.open(&k.path).unwrap();
    check(&f, 1, 2);
    // (A read that never takes the latch over hangs.)
    within("the read of the dead process's page", || check(&f, 1, 3));
    let e = f.sync().unwrap_err();
    assert!(e.to_string().contains("page 3"), "{e}");
    assert!(e.to_string().contains("lost"), "{e}");
    f.sync().unwrap();
    check(&f, 1, 3);
    assert_eq!(std::fs::read(&k.path).unwrap(), k.disk);
    k.child.wait().unwrap();
}

/// The same with only a future waiting for the page (futures never take a
/// latch over themselves): the dead process's watcher-side recovery (5.14
/// D5: some attached process's watcher claims the dead slot and drops the
/// pages it held latched) unlatches it, which wakes the future.
#[test]
fn a_future_waiting_on_a_dead_processs_latch_is_woken_by_its_recovery() {
    let mut k = kill_child_when("shared-torn-async", "die-latched", "latched");
    let f = k.c.open(&k.path).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut got = Vec::new();
    within("the future on the dead process's latch", || {
        got = rt.block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(20), f.page_async(3))
                .await
                .expect("the future waiting on the dead process's latch was never woken")
                .unwrap()
                .to_vec()
        })
    });
    assert!(got == page(1, 3), "the file's bytes, not the torn page's");
    let e = f.sync().unwrap_err();
    assert!(e.to_string().contains("page 3"), "{e}");
    f.sync().unwrap();
    k.child.wait().unwrap();
}

/// One flusher writes by age for the whole cache (W1, the age lease): the
/// pages another process dirties in a file the lease holder has open for
/// writing are written by the holder's flusher, not by their own
/// process's. When the holder dies, the recovery frees the lease and
/// another process's flusher takes it (printed: how long after the kill)
/// and writes by age from then on.
#[test]
fn one_process_writes_by_age_and_another_takes_over_when_it_dies() {
    let td = TempDir::new("shared-age-lease");
    let path = td.path("f");
    let disk: Vec<u8> = (0..4).flat_map(|i| page(1, i)).collect();
    std::fs::write(&path, &disk).unwrap();
    let c = aged(&td.0);
    let f = c.open(&path).unwrap();
    let mut child = spawn("age-holder", &td.0, &path);
    common::wait_until("the child's lease", || td.path("holding").exists());
    assert!(!c.holds_age_lease());
    let seg =
        pagecache::internals::segment::Segment::inspect(c.shared_path().unwrap(), None).unwrap();
    assert_eq!(
        seg.age_flusher(),
        Some(child.id()),
        "the tools name the holder"
    );
    f.write_at(&page(2, 1), PS as u64).unwrap();
    common::wait_until("page 1 written by age", || on_disk(&path, 1) == page(2, 1));
    assert_eq!(
        c.stats().writebacks,
        0,
        "the holder's flusher wrote it, not ours"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    within("the age lease taken over", || {
        common::wait_until("the lease", || c.holds_age_lease())
    });
    assert_eq!(seg.age_flusher(), Some(std::process::id()));
    f.write_at(&page(2, 2), 2 * PS as u64).unwrap();
    common::wait_until("page 2 written by age", || on_disk(&path, 2) == page(2, 2));
    // The flusher counts its write-back once the write has returned: the
    // page may be on disk a moment before.
    common::wait_until("page 2's write-back counted as ours", || {
        c.stats().writebacks >= 1
    });
}

/// A process killed inside `set_len` (protocol 5.6 T0), here while it
/// waits for its new last page, which this process pins: the file is cut
/// on disk, the cache's length and pages are not yet. The recovery of the
/// dead process (its watcher round, 250 ms) finishes the cut: the length,
/// the pages past it gone, the new last page's tail zeros once the file
/// grows again. Without it the cache keeps the old length over a shorter
/// file (the wait below times out), and reads past the cut see zeros
/// nobody wrote.
#[test]
fn a_cut_left_by_a_process_that_died_in_set_len_is_finished() {
    let td = TempDir::new("shared-cut-death");
    let path = td.path("f");
    let disk: Vec<u8> = (0..4).flat_map(|i| page(1, i)).collect();
    std::fs::write(&path, &disk).unwrap();
    let c = shared(&td.0, 64);
    let f = c.open(&path).unwrap();
    check(&f, 1, 3);
    let pin = f.page(2).unwrap();
    let mut child = spawn("die-cutting", &td.0, &path);
    let cut = 2 * PS as u64 + 100;
    common::wait_until("the child's ftruncate", || {
        std::fs::metadata(&path).unwrap().len() == cut
    });
    child.kill().unwrap();
    child.wait().unwrap();
    drop(pin);
    within("the cut the dead process left, finished", || {
        common::wait_until("the cache's length", || f.len() == cut)
    });
    check(&f, 1, 0);
    check(&f, 1, 1);
    let mut buf = vec![0u8; PS];
    assert_eq!(f.read_at(&mut buf, 2 * PS as u64).unwrap(), 100);
    assert!(buf[..100] == page(1, 2)[..100]);
    assert_eq!(
        f.read_at(&mut buf, 3 * PS as u64).unwrap(),
        0,
        "page 3 is gone"
    );
    f.set_len(4 * PS as u64).unwrap();
    f.read_at(&mut buf, 2 * PS as u64).unwrap();
    assert!(buf[..100] == page(1, 2)[..100] && buf[100..].iter().all(|&b| b == 0));
    f.read_at(&mut buf, 3 * PS as u64).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "page 3 grown back as zeros");
    f.sync().unwrap();
    c.validate();
}

/// A process killed while it holds pins and a run (protocol 5.15): the
/// other process's writes of those pages wait for them to drain, and the
/// recovery of the dead process (its watcher round, 250 ms) drops them:
/// the writes end, and afterwards no pin is counted or held anywhere.
/// With the pins left in place the writes wait forever (the watchdog
/// fails the test).
#[test]
fn the_pins_of_a_process_that_died_are_given_back() {
    let mut k = kill_child_when("shared-pins-death", "die-pinned", "pinned");
    let f = k.c.open(&k.path).unwrap();
    within("the writes past the dead process's pins", || {
        f.write_at(&page(9, 1), PS as u64).unwrap();
        f.write_at(&page(9, 2), 2 * PS as u64).unwrap();
        f.write_at(&page(9, 3), 3 * PS as u64).unwrap();
    });
    check(&f, 9, 1);
    check(&f, 9, 2);
    check(&f, 9, 3);
    check(&f, 1, 0);
    k.c.validate();
    k.child.wait().unwrap();
}

/// Frames of the cache of `a_process_is_detached_once_its_last_handle_is_gone`:
/// 1 GiB, so that a recovery's scans of the descriptors after the pins
/// take milliseconds.
const LARGE: usize = 1 << 18;

/// A process whose last handle of a shared cache is dropped while its
/// recovery of a dead process goes on (the pins given back, the later
/// scans not done) is detached when the drop returns: the drop waits for
/// the recovery, whose thread holds the cache. Without the wait, the
/// segment could not be removed for some milliseconds after ("in use by
/// processes" with this process's pid; 2 runs of 3 failed so).
#[test]
fn a_process_is_detached_once_its_last_handle_is_gone() {
    let mut k = kill_child_of(
        |d| shared(d, LARGE),
        "shared-detach",
        "die-pinned-large",
        "pinned",
    );
    let dir = k.path.parent().unwrap().to_path_buf();
    let f = k.c.open(&k.path).unwrap();
    within("the write past the dead process's pin", || {
        f.write_at(&page(9, 1), PS as u64).unwrap();
    });
    k.child.wait().unwrap();
    drop(f);
    let Killed { c, _td, .. } = k;
    drop(c);
    PageCache::remove_shared("t", Some(&dir)).unwrap();
}

/// A process killed with pages of an anonymous region in a shared cache
/// (one latched, one pinned): they were reachable only through its
/// region, so its recovery frees them (5.14 D5, `recover_dead_anon`); the
/// other process then faults a region of every frame's size. Without the
/// recovery 39 frames stay taken for ever (the wait below fails).
#[test]
fn the_anonymous_pages_of_a_process_that_died_are_freed() {
    let mut k = kill_child_when("shared-anon-death", "die-anon", "anon");
    let c = &k.c;
    let t0 = std::time::Instant::now();
    common::wait_until("the dead process's anonymous frames back", || {
        c.free_frames() >= 60
    });
    eprintln!(
        "anonymous frames back {:?} after the kill ({} free)",
        t0.elapsed(),
        c.free_frames()
    );
    // Every frame but a few for the file's pages: the region faults in
    // whole, zeroed (no page of the dead region's shows).
    let r = c.anon(60 * PS as u64).unwrap();
    for i in 0..60 {
        let p = r.page(i).unwrap();
        assert!(
            p.iter().all(|&b| b == 0),
            "page {i} of a new region is not zero"
        );
    }
    drop(r);
    c.validate();
    k.child.wait().unwrap();
}

/// Every way a pin is taken and given back, from four threads of one
/// process on a shared cache smaller than the files (eviction, write-back
/// from the flusher and `sync`, the reaper's completions, runs, futures,
/// upgrades, latches, truncation): afterwards no pin is counted for any
/// process and no frame holds one (5.15: a reference the counts missed, or
/// the cache's own counted as a pin, shows here).
#[test]
fn every_pin_taken_in_a_shared_cache_is_counted_and_uncounted() {
    let td = TempDir::new("shared-pin-counts");
    let c = PageCache::shared_with(
        "t",
        Config {
            dirty_background_percent: 10,
            dirty_limit_percent: 30,
            readahead_max: 64 * 1024,
            ..config(64)
        },
        &SharedOptions {
            dir: Some(td.0.clone()),
            group: None,
        },
    )
    .unwrap();
    let paths: Vec<PathBuf> = (0..2).map(|i| td.path(&format!("f{i}"))).collect();
    for p in &paths {
        std::fs::write(p, (0..100).flat_map(|i| page(1, i)).collect::<Vec<u8>>()).unwrap();
    }
    let files: Vec<pagecache::File> = paths.iter().map(|p| c.open(p).unwrap()).collect();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let files = &files;
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                let mut x = t + 1;
                for _ in 0..2000 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let f = &files[(x >> 60) as usize % 2];
                    let i = (x >> 33) % 100;
                    match (x >> 20) % 8 {
                        0 => drop(f.page(i).unwrap().clone()),
                        1 => f.write_at(&page(2, i), i * PS as u64).unwrap(),
                        2 => {
                            if let Ok(v) = f.optimistic(i) {
                                let _ = v.upgrade().map(|mut m| m[0] = 2);
                            }
                        }
                        3 => drop(f.run(i, 8).unwrap()),
                        4 => drop(rt.block_on(f.page_async(i)).unwrap()),
                        5 => f.sync().unwrap(),
                        6 => drop(f.try_latch(i).unwrap()),
                        _ => {
                            let mut b = [0u8; 100];
                            f.read_at(&mut b, i * PS as u64 + 7).unwrap();
                        }
                    }
                }
            });
        }
    });
    // A cut and a regrowth, then the dirty rest written.
    files[0].set_len(10 * PS as u64).unwrap();
    files[0].write_at(&page(3, 50), 50 * PS as u64).unwrap();
    for f in &files {
        f.sync().unwrap();
    }
    c.validate();
}

#[test]
fn pages_one_process_wrote_are_read_by_another_without_a_sync() {
    let td = TempDir::new("shared-rw");
    let path = td.path("f");
    std::fs::write(&path, b"").unwrap();
    let c = shared(&td.0, 64);
    assert_eq!(c.shared_path(), Some(td.0.join("pagecache.t").as_path()));
    let f = c.open(&path).unwrap();
    for i in 0..4 {
        f.write_at(&page(1, i), i * PS as u64).unwrap();
    }
    // Nothing on disk yet: only the cache holds them.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    let mine = c.stats().hits;
    let st = reap(spawn("read-then-write", &td.0, &path));
    assert!(st.success(), "child: {st:?}");
    // The cache's statistics count every process's: the child's four
    // hits stay after it left (published at its detach), ours come
    // within the watcher's round.
    let seg =
        pagecache::internals::segment::Segment::inspect(&td.0.join("pagecache.t"), None).unwrap();
    common::wait_until("the processes' hits in the cache's statistics", || {
        seg.stats().hits >= mine + 4
    });
    drop(seg);
    // The child's page, and the length it made.
    assert_eq!(f.len(), 5 * PS as u64);
    check(&f, 2, 4);
    for i in 0..4 {
        check(&f, 1, i);
    }
    f.sync().unwrap();
    let disk = std::fs::File::open(&path).unwrap();
    for i in 0..5u64 {
        let mut b = vec![0u8; PS];
        disk.read_exact_at(&mut b, i * PS as u64).unwrap();
        assert!(b == page(if i == 4 { 2 } else { 1 }, i), "page {i} on disk");
    }
    c.validate();
}

#[test]
fn reclaim_evicts_clean_pages_of_a_file_open_only_in_another_process() {
    let td = TempDir::new("shared-evict");
    let (a, b) = (td.path("a"), td.path("b"));
    let fill = |p: &Path, who: u8, n: u64| {
        let data: Vec<u8> = (0..n).flat_map(|i| page(who, i)).collect();
        std::fs::write(p, data).unwrap();
    };
    fill(&a, 4, 48);
    fill(&b, 3, 100);
    let c = shared(&td.0, 64);
    let fa = c.open(&a).unwrap();
    for i in 0..48 {
        check(&fa, 4, i);
    }
    // The child reads a file larger than the cache: it can only go on by
    // evicting our pages, whose file it does not have open.
    let st = reap(spawn("read-other-file", &td.0, &b));
    assert!(st.success(), "child: {st:?}");
    for i in 0..48 {
        check(&fa, 4, i);
    }
    assert!(
        c.stats().misses > 48,
        "some of ours were evicted and read again"
    );
    c.validate();
}

#[test]
fn frames_a_truncate_kept_for_another_process_run_come_back_when_it_ends() {
    let td = TempDir::new("shared-deferred");
    let path = td.path("f");
    let data: Vec<u8> = (0..8).flat_map(|i| page(7, i)).collect();
    std::fs::write(&path, &data).unwrap();
    let c = shared(&td.0, 64);
    let f = c.open(&path).unwrap();
    let free0 = c.free_frames();
    // Cached first: a run over cached pages pins their leaf (one count per
    // slot), not the pages.
    for i in 0..8 {
        check(&f, 7, i);
    }
    let run = f.run(0, 8).unwrap();
    assert_eq!(run.len(), 8);
    assert_eq!(c.free_frames(), free0 - 8);
    // Another process cuts the file under the run, then exits.
    let st = reap(spawn("truncate", &td.0, &path));
    assert!(st.success(), "child: {st:?}");
    assert_eq!(f.len(), 0);
    // The run still reads its pages (the frames were kept for it) ...
    for k in 0..8 {
        assert!(run.page(k) == page(7, k as u64).as_slice(), "page {k}");
    }
    // ... and when it ends they go back, though the process that cut the
    // file is gone.
    drop(run);
    assert_eq!(c.free_frames(), free0, "the truncated pages' frames");
    c.validate();
}

#[test]
fn a_closed_file_keeps_its_pages_for_the_next_opener_unless_it_changed() {
    let td = TempDir::new("shared-idle");
    let path = td.path("f");
    let data: Vec<u8> = (0..8).flat_map(|i| page(5, i)).collect();
    std::fs::write(&path, &data).unwrap();
    let c = shared(&td.0, 64);
    let f = c.open(&path).unwrap();
    for i in 0..8 {
        check(&f, 5, i);
    }
    drop(f);
    let misses = c.stats().misses;
    let f = c.open(&path).unwrap();
    for i in 0..8 {
        check(&f, 5, i);
    }
    assert_eq!(c.stats().misses, misses, "kept while no one had it open");
    drop(f);
    // Changed behind the cache's back: its pages are not served again.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&page(6, 2), 2 * PS as u64)
        .unwrap();
    let f = c.open(&path).unwrap();
    check(&f, 6, 2);
    check(&f, 5, 3);
    let files = || {
        pagecache::internals::segment::Segment::inspect(c.shared_path().unwrap(), None)
            .unwrap()
            .files()
            .unwrap()
    };
    assert_eq!(files().len(), 1, "the stale entry is no file's");
    // Reading another file through the whole cache evicts the stale pages;
    // their entry is freed with the last of them.
    drop(f);
    let other = td.path("g");
    std::fs::write(&other, vec![1u8; 128 * PS]).unwrap();
    let g = c.open(&other).unwrap();
    let mut b = vec![0u8; PS];
    for i in 0..128 {
        g.read_at(&mut b, i * PS as u64).unwrap();
    }
    let open: Vec<u64> = files().iter().map(|f| f.opens as u64).collect();
    assert_eq!(open, [1], "the other file alone: {:?}", files());
    c.validate();
}

#[test]
fn a_later_process_asking_for_another_cache_gets_a_clear_error() {
    let td = TempDir::new("shared-mismatch");
    let _c = shared(&td.0, 64);
    let opts = SharedOptions {
        dir: Some(td.0.clone()),
        group: None,
    };
    let e = PageCache::shared_with("t", config(128), &opts).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("128 frames"), "{e}");
    let e = PageCache::shared_with(
        "u",
        Config {
            policy: PolicyKind::S3Fifo,
            ..config(64)
        },
        &opts,
    )
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported);
    assert!(e.to_string().contains("PolicyKind::Clock"), "{e}");
    assert!(!td.0.join("pagecache.u").exists());
}
