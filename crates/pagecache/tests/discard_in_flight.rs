//! `File::discard` and `PageCache::forget` do not return while a write of a
//! page they dropped is still in flight: no discarded byte reaches the
//! disk after they return, so a later `sync` that returned `Ok` still
//! describes the disk.
mod common;
use common::*;
use pagecache::{Config, PageCache};
use std::time::{Duration, Instant};

/// A 256-frame cache over the fault-injecting backend whose flusher writes
/// every dirty page at its next look (an age bound of 0: every 10 ms), on a
/// device where every write takes `delay`.
fn slow_flushing_cache(delay: Duration) -> (PageCache, std::sync::Arc<pagecache::Faults>) {
    let faults = pagecache::Faults::new();
    faults.delay_io(delay);
    let c = PageCache::with_backend(
        Config {
            capacity: 256 * PS,
            dirty_expire: Duration::ZERO,
            ..Config::default()
        },
        pagecache::FaultyBackend::new(pagecache::PosixBackend, faults.clone()),
    )
    .unwrap();
    (c, faults)
}

/// `p` opened empty (created if need be), read and write.
fn open_empty(c: &PageCache, p: &std::path::Path) -> pagecache::File {
    let mut opts = pagecache::OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(true);
    c.open_with(p, &opts).unwrap()
}

/// Runs `dirty`, then waits until the flusher has issued a write (now in
/// its device delay).
fn until_a_write_is_in_flight(faults: &pagecache::Faults, dirty: impl FnOnce()) {
    let before = faults.writes();
    dirty();
    let t = Instant::now();
    while faults.writes() == before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the flusher never wrote"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Dirties 64 pages of a new file at `p` and waits until the flusher has
/// issued at least one write of them (now in its device delay).
fn dirty_with_writes_in_flight(
    c: &PageCache,
    faults: &pagecache::Faults,
    p: &std::path::Path,
) -> pagecache::File {
    let f = open_empty(c, p);
    until_a_write_is_in_flight(faults, || f.write_at(&vec![0xAB; 64 * PS], 0).unwrap());
    f
}

/// Reopens `p`, empties it, writes one page and syncs; then waits longer
/// than any write of the old pages could take and checks the disk.
fn reuse_and_check(c: &PageCache, p: &std::path::Path, what: &str) {
    let g = c.open(p).unwrap();
    g.set_len(0).unwrap();
    g.write_at(&[0x11; PS], 0).unwrap();
    g.sync().unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let disk = std::fs::read(p).unwrap();
    assert_eq!(
        disk.len(),
        PS,
        "{what}: the file changed after a sync returned Ok"
    );
    assert!(
        disk.iter().all(|&b| b == 0x11),
        "{what}: discarded bytes landed after the sync"
    );
    drop(g);
}

#[test]
fn discard_waits_for_the_writes_of_the_pages_it_dropped() {
    let d = TempDir::new("discard-inflight");
    let p = d.path("f");
    let (c, faults) = slow_flushing_cache(Duration::from_millis(40));
    for round in 0..3 {
        let f = dirty_with_writes_in_flight(&c, &faults, &p);
        assert!(f.discard());
        reuse_and_check(&c, &p, &format!("discard, round {round}"));
    }
    c.validate();
}

#[test]
fn forget_waits_for_the_writes_of_the_pages_it_dropped() {
    let d = TempDir::new("forget-inflight");
    let p = d.path("f");
    let other = d.path("other");
    make_file(&other, 0);
    let (c, faults) = slow_flushing_cache(Duration::from_millis(40));
    let h = c.open(&other).unwrap();
    for round in 0..3 {
        // A last close whose write-back fails keeps the file registered
        // with its dirty pages.
        let f = open_empty(&c, &p);
        faults.fail_writes_from(1, libc::EIO);
        f.write_at(&vec![0xAB; 64 * PS], 0).unwrap();
        assert!(f.close().is_err(), "round {round}");
        faults.clear();
        // Another file's writes wake the flusher, which writes the kept
        // pages back again (each write in its 40 ms device delay).
        until_a_write_is_in_flight(&faults, || h.write_at(&[1; 4 * PS], 0).unwrap());
        assert_eq!(c.forget(&p), 1, "round {round}");
        reuse_and_check(&c, &p, &format!("forget, round {round}"));
    }
    drop(h);
    c.validate();
}
