//! Drop-behind of long sequential write streams (`Config::drop_behind_writes`,
//! `cache/write_behind.rs`): a file written in order past an eighth of the
//! cache (at least 4 MiB) is written back as it goes and its pages past that point leave
//! the cache once written, so the stream does not take every frame; the
//! file's bytes are whole on disk and read back through the cache; writes
//! out of order, and a cache with it off, keep their pages.
#![cfg(not(loom))]

mod common;
use common::{pattern, TempDir, PS};
use pagecache::{Config, OpenOptions, PageCache};

/// 8 MiB. A stream counts as one past an eighth of the cache but never
/// before 4 MiB (`write_behind.rs`): here half of it, so that what it
/// keeps is bounded (in a cache under 4 MiB it would fill every frame
/// first, and what stays would be a matter of timing).
const FRAMES: usize = 2048;
/// 4x the cache.
const FILE: usize = 4 * FRAMES * PS;
const WRITE: usize = 64 << 10;
/// Free frames once a stream has passed and been synced: it keeps its
/// first 4 MiB (half of this cache: pages written before the run counted
/// as a stream, cached as any written page) and less than a batch (64
/// pages) at its end; the rest of what it wrote left the cache.
const SETTLED: usize = FRAMES * 3 / 8;

fn cache(drop_behind_writes: bool) -> PageCache {
    PageCache::new(Config {
        capacity: FRAMES * PS,
        // Nothing written by age: only the stream's own write-back (and
        // reclaim's) runs.
        dirty_expire: std::time::Duration::MAX,
        readahead_max: 0,
        drop_behind_writes,
        ..Config::default()
    })
    .unwrap()
}

fn bytes(off: usize, n: usize) -> Vec<u8> {
    (off..off + n).map(|p| pattern(p as u64)).collect()
}

/// Writes the file in `WRITE`-byte pieces in the order `order` gives,
/// syncs, and returns the cache's free frames then (with `settles`, once
/// `SETTLED` frames are free or 20 s have passed).
fn write(c: &PageCache, d: &TempDir, order: impl Iterator<Item = usize>, settles: bool) -> usize {
    let f = c
        .open_with(
            d.path("f"),
            OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    for k in order {
        f.write_at(&bytes(k * WRITE, WRITE), (k * WRITE) as u64)
            .unwrap();
    }
    f.sync().unwrap();
    // The flusher drops the pages queued behind the stream in the
    // background, some of them after `sync` wrote them: with `settles`,
    // wait for that (up to 20 s) rather than race it.
    let t0 = std::time::Instant::now();
    let mut free = c.free_frames();
    while settles && free < SETTLED && t0.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(5));
        free = c.free_frames();
    }
    if settles && free < SETTLED {
        eprintln!("cached:\n{}{:?}", c.describe_cached(), c.stats());
    }
    let disk = std::fs::read(d.path("f")).unwrap();
    assert_eq!(disk.len(), FILE);
    assert!(
        disk == bytes(0, FILE),
        "the file on disk is what was written"
    );
    // Read back through the cache (from the file, where dropped).
    let mut buf = vec![0u8; WRITE];
    for k in (0..FILE / WRITE).step_by(7) {
        f.read_at(&mut buf, (k * WRITE) as u64).unwrap();
        assert!(buf == bytes(k * WRITE, WRITE), "piece {k} read back");
    }
    c.validate();
    free
}

#[test]
fn a_long_sequential_stream_leaves_the_cache_behind_it() {
    let d = TempDir::new("write-behind");
    let c = cache(true);
    let free = write(&c, &d, 0..FILE / WRITE, true);
    assert!(
        free >= SETTLED,
        "the stream's written pages left the cache: {free} of {FRAMES} frames free"
    );
    assert!(c.stats().evictions > 0);
}

#[test]
fn writes_out_of_order_keep_their_pages() {
    let d = TempDir::new("write-behind-random");
    let c = cache(true);
    // Every other piece, then the rest: no run longer than one piece.
    let n = FILE / WRITE;
    let free = write(&c, &d, (0..n).step_by(2).chain((1..n).step_by(2)), false);
    assert!(free < FRAMES / 8, "{free} of {FRAMES} frames free");
}

#[test]
fn without_drop_behind_a_stream_keeps_its_pages() {
    let d = TempDir::new("write-behind-off");
    let c = cache(false);
    let free = write(&c, &d, 0..FILE / WRITE, false);
    assert!(free < FRAMES / 8, "{free} of {FRAMES} frames free");
}

/// Under the background threshold nothing is written ahead of need, a
/// stream's pages included: a 16 MiB file written in order into a 64 MiB
/// cache whose background threshold is all of it stays dirty and cached
/// until `sync`. Past the threshold (the default, 10%), the same stream
/// is written back as it goes.
#[test]
fn a_stream_under_the_background_threshold_is_not_written_ahead() {
    for (background, ahead) in [(100, false), (10, true)] {
        let d = TempDir::new("write-behind-background");
        let c = PageCache::new(Config {
            capacity: 64 << 20,
            dirty_expire: std::time::Duration::MAX,
            dirty_background_percent: background,
            dirty_limit_percent: 100,
            readahead_max: 0,
            ..Config::default()
        })
        .unwrap();
        let f = c
            .open_with(
                d.path("f"),
                OpenOptions::new().read(true).write(true).create(true),
            )
            .unwrap();
        let len = 16 << 20;
        for k in 0..len / WRITE {
            f.write_at(&bytes(k * WRITE, WRITE), (k * WRITE) as u64)
                .unwrap();
        }
        if ahead {
            // The flusher writes the queued pages in the background.
            common::wait_until("the stream written behind", || c.stats().writebacks > 0);
        } else {
            assert_eq!(c.stats().writebacks, 0, "nothing written before sync");
            assert_eq!(c.dirty_pages() * PS, len);
        }
        f.sync().unwrap();
        assert!(std::fs::read(d.path("f")).unwrap() == bytes(0, len));
    }
}
