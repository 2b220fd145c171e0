//! Direct I/O by default: pages move between the disk and the cache's
//! frames with `O_DIRECT`, so the kernel's page cache holds no second copy;
//! a partial last page goes through a buffered descriptor, so the length on
//! disk is exact after `sync`; `Config::direct_io = false` and filesystems
//! that refuse `O_DIRECT` use buffered I/O, and users can see which.
mod common;
use common::*;
use pagecache::{Config, IoEngine, OpenOptions, PageCache, StreamReads};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

fn kernel_cached_pages(path: &Path) -> usize {
    pagecache::internals::kernel_cached_pages(path).unwrap()
}

/// Writes `path` back and drops it from the kernel's page cache.
fn drop_from_kernel_cache(path: &Path) {
    let f = std::fs::File::open(path).unwrap();
    f.sync_all().unwrap();
    // SAFETY: plain advice on our own descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[test]
fn pages_bypass_the_kernel_cache_and_the_length_on_disk_is_exact() {
    let (d, p) = cold_file("direct", 64 * PS as u64);
    let before = kernel_cached_pages(&p);
    let c = cache(128);
    let f = c.open(&p).unwrap();
    if !f.direct_io() {
        eprintln!("skipped: {} refuses O_DIRECT", d.0.display());
        return;
    }
    assert_eq!(c.stats().direct_files, 1);
    let mut buf = vec![0u8; 64 * PS];
    f.read_at(&mut buf, 0).unwrap();
    assert!(buf.iter().enumerate().all(|(i, &b)| b == pattern(i as u64)));
    // Whole pages written back directly; a partial last page buffered.
    f.write_at(&vec![7u8; 8 * PS], 8 * PS as u64).unwrap();
    f.set_len(64 * PS as u64 + 100).unwrap();
    f.write_at(&[9u8; 100], 64 * PS as u64).unwrap();
    f.sync().unwrap();
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        64 * PS as u64 + 100,
        "exact length"
    );
    let after = kernel_cached_pages(&p);
    assert!(
        after <= before + 1,
        "the kernel cached {after} pages of the file (before: {before}): a second copy"
    );
    let disk = std::fs::read(&p).unwrap();
    assert!(disk[8 * PS..16 * PS].iter().all(|&b| b == 7));
    assert_eq!(&disk[64 * PS..], &[9u8; 100]);
    assert_eq!(disk[0], pattern(0));
    c.validate();
}

#[test]
fn buffered_when_asked_and_both_see_the_same_bytes() {
    let d = TempDir::new("direct");
    let p = d.path("f");
    make_file(&p, 16 * PS as u64 + 5);
    let buffered = PageCache::new(Config {
        capacity: 32 * PS,
        direct_io: false,
        ..Config::default()
    })
    .unwrap();
    let f = buffered.open(&p).unwrap();
    assert!(!f.direct_io());
    assert_eq!(buffered.stats().buffered_files, 1);
    f.write_at(b"buffered", 3).unwrap();
    f.close().unwrap();
    let direct = cache(32);
    let g = direct.open_with(&p, OpenOptions::new().read(true)).unwrap();
    let mut b = [0u8; 8];
    g.read_at(&mut b, 3).unwrap();
    assert_eq!(&b, b"buffered");
    let mut tail = [0u8; 5];
    assert_eq!(g.read_at(&mut tail, 16 * PS as u64).unwrap(), 5);
    assert_eq!(tail[4], pattern(16 * PS as u64 + 4));
}

fn stream_cache(frames: usize, stream_reads: StreamReads) -> PageCache {
    PageCache::new(Config {
        capacity: frames * PS,
        stream_reads,
        // No background write-back racing the checks below.
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        ..Config::default()
    })
    .unwrap()
}

/// Reads `f` from start to end in 1 MiB requests, checking each byte
/// against `want`, and returns the most pages of `p` the kernel's cache
/// held at any 8 MiB step.
fn scan_checked(f: &pagecache::File, p: &Path, len: u64, want: impl Fn(u64) -> u8) -> usize {
    let mut most = 0;
    scan_from(f, 0, 1 << 20, len, want, |off| {
        if off % (8 << 20) == 0 {
            most = most.max(kernel_cached_pages(p));
        }
    });
    most
}

/// Reads `f` from `start` to `len` in requests of `req` bytes, checking
/// each byte against `want`; `after(offset)` after each request.
fn scan_from(
    f: &pagecache::File,
    start: u64,
    req: usize,
    len: u64,
    want: impl Fn(u64) -> u8,
    mut after: impl FnMut(u64),
) {
    let mut buf = vec![0u8; req];
    let mut off = start;
    while off < len {
        let n = f.read_at(&mut buf, off).unwrap();
        assert!(n > 0, "short scan at {off}");
        for (i, &b) in buf[..n].iter().enumerate() {
            let pos = off + i as u64;
            assert_eq!(b, want(pos), "byte {pos} (page {})", pos / PS as u64);
        }
        off += n as u64;
        after(off);
    }
}

/// A fresh file of `len` bytes (`make_file`'s pattern) in a new directory,
/// dropped from the kernel's cache.
fn cold_file(tag: &str, len: u64) -> (TempDir, std::path::PathBuf) {
    let d = TempDir::new(tag);
    let p = d.path("f");
    make_file(&p, len);
    drop_from_kernel_cache(&p);
    (d, p)
}

/// Scans a fresh 96 MiB file, dropped from the kernel's cache first,
/// through a 16 MiB cache reading streams `mode`, checking every byte and
/// that the kernel's cache never held more than a few 8 MiB blocks of it
/// (two behind plus the one being read, plus the kernel's own readahead,
/// 8 MiB on the project's machine): well under the file. Returns the
/// directory (kept alive), the file and the cache.
fn cold_scan(tag: &str, mode: StreamReads) -> (TempDir, std::path::PathBuf, PageCache) {
    cold_scan_of(tag, mode, 96 << 20)
}

/// As `cold_scan`, of a file of `len` bytes.
fn cold_scan_of(
    tag: &str,
    mode: StreamReads,
    len: u64,
) -> (TempDir, std::path::PathBuf, PageCache) {
    let (d, p) = cold_file(tag, len);
    assert!(
        kernel_cached_pages(&p) < 256,
        "precondition: the kernel's copy dropped"
    );
    let c = stream_cache(4096, mode);
    let f = c.open(&p).unwrap();
    let most = scan_checked(&f, &p, len, pattern);
    assert!(
        most * PS <= 40 << 20,
        "{mode:?}: the kernel's cache held {} MiB of a {} MiB file during the scan",
        (most * PS) >> 20,
        len >> 20
    );
    (d, p, c)
}

#[test]
fn buffered_streams_read_scans_right_and_drop_the_kernels_copy_behind() {
    // A file six times the cache: the stream bypasses the frames, read
    // straight into the caller's buffer through the kernel's readahead.
    // (The thread-pool engine reads streams direct.)
    let (_d, _p, c) = cold_scan("streams", StreamReads::Buffered);
    let s = c.stats();
    if c.io_engine() == IoEngine::Uring {
        assert!(
            s.streamed_pages >= 24576 - 256,
            "the scan bypassed the frames: {s}"
        );
        assert_eq!(s.readahead_pages, 0, "no window of our own: {s}");
        assert_eq!(s.reads, 0, "no page read into a frame: {s}");
    } else {
        assert_eq!(s.streamed_pages, 0, "{s}");
    }
}

/// A file as large as the cache is kept: its stream reads windows into
/// the frames (buffered), so that the next pass hits.
#[test]
fn buffered_streams_of_a_file_the_cache_holds_keep_it() {
    let len = 8u64 << 20;
    let (_d, p) = cold_file("streams-fits", len);
    let c = stream_cache(4096, StreamReads::Buffered); // 16 MiB
    let f = c.open(&p).unwrap();
    scan_checked(&f, &p, len, pattern);
    let s = c.stats();
    assert_eq!(s.streamed_pages, 0, "{s}");
    scan_checked(&f, &p, len, pattern);
    let t = c.stats();
    assert_eq!(t.misses, s.misses, "the second pass hit: {t}");
}

/// A stream that bypasses the frames reads what the cache holds from the
/// cache: dirty pages in the middle of its requests, a page written past
/// the end of the file on disk, and the gap before it as zeros; requests
/// that start and end inside pages.
#[test]
fn a_stream_past_the_cache_reads_dirty_pages_from_the_cache_and_holes_as_zeros() {
    let disk = 24u64 << 20;
    let (_d, p) = cold_file("streams-bypass", disk);
    let c = stream_cache(1024, StreamReads::Buffered); // 4 MiB, no flusher
    let f = c
        .open_with(&p, OpenOptions::new().read(true).write(true))
        .unwrap();
    let new = |pos: u64| pattern(pos) ^ 0xA5;
    let written = [
        (1000 * PS as u64, PS),           // a whole page
        (2500 * PS as u64 + 100, 3 * PS), // across four pages, partial ends
        (6000 * PS as u64 + 4000, 200),   // across a page boundary
        ((28u64 << 20) + 12, 5000),       // past the end on disk
    ];
    for &(off, n) in &written {
        let b: Vec<u8> = (off..off + n as u64).map(new).collect();
        f.write_at(&b, off).unwrap();
    }
    let len = f.len();
    assert_eq!(len, (28u64 << 20) + 12 + 5000);
    let want = |pos: u64| {
        if written.iter().any(|&(o, n)| pos >= o && pos < o + n as u64) {
            new(pos)
        } else if pos < disk {
            pattern(pos)
        } else {
            0
        }
    };
    scan_from(&f, 7, (1 << 20) + 123, len, want, |_| {});
    let s = c.stats();
    if c.io_engine() == IoEngine::Uring {
        assert!(s.streamed_pages > 6000, "the scan bypassed the frames: {s}");
        // (Streams through the frames evict, and so write back.)
        assert_eq!(c.dirty_pages(), 9, "the written pages are still dirty");
    }
}

/// `StreamReads::Measure`: the scan's first windows are read both ways;
/// the device gets a choice, made from two measured rates; the bytes are
/// right whatever the choice, and the kernel's cache never holds the file.
#[test]
fn measured_streams_choose_per_device_and_read_right() {
    // 400 MiB: each side's warm-up reads 64 MiB and each side 16 MiB, in
    // windows of this small cache's readahead (512 KiB) where misses are
    // not all windows: the direct phase took about 200 MiB.
    let (d, p, c) = cold_scan_of("streams-measure", StreamReads::Measure, 400 << 20);
    let choices = c.stream_choices();
    if c.io_engine() == IoEngine::Uring {
        let dev = std::fs::metadata(&p).unwrap().dev();
        assert_eq!(choices.len(), 1, "{choices:?}");
        let ch = choices[0];
        assert_eq!(ch.device, dev);
        assert!(ch.direct_rate > 0.0 && ch.buffered_rate > 0.0, "{ch:?}");
        assert_eq!(
            ch.buffered,
            ch.buffered_rate >= 1.05 * ch.direct_rate,
            "{ch:?}"
        );
        // The buffered side was read past the cache (the file is 25
        // times the cache).
        let s = c.stats();
        assert!(s.streamed_pages > 0, "{s}");
        // A second file of the device: read the chosen way, no new probe.
        let q = d.path("g");
        make_file(&q, 16 << 20);
        let g = c.open(&q).unwrap();
        scan_checked(&g, &q, 16 << 20, pattern);
        assert_eq!(c.stream_choices(), choices);
    } else {
        // The thread pool reads streams direct: nothing to measure.
        assert!(choices.is_empty(), "{choices:?}");
    }
}

#[test]
fn buffered_streams_see_what_the_cache_wrote_back_not_an_older_kernel_copy() {
    let d = TempDir::new("streams-coherent");
    let p = d.path("f");
    let len = 48u64 << 20;
    make_file(&p, len);
    // The kernel's cache holds the old bytes of the whole file.
    std::fs::read(&p).unwrap();
    let c = stream_cache(2048, StreamReads::Buffered); // 8 MiB: the writes below are evicted, written back
    let f = c.open(&p).unwrap();
    let new = |pos: u64| pattern(pos) ^ 0x5A;
    let mut chunk = Vec::with_capacity(1 << 20);
    for off in (0..len).step_by(1 << 20) {
        chunk.clear();
        chunk.extend((off..off + (1 << 20)).map(new));
        f.write_at(&chunk, off).unwrap();
    }
    // Some of it still dirty in the cache, most written back (direct
    // writes, which invalidate the kernel's old copy); a stream reads the
    // rest through the kernel's cache.
    assert!(c.stats().writebacks > 0);
    scan_checked(&f, &p, len, new);
    f.sync().unwrap();
    drop(f);
    drop(c);
    let all = std::fs::read(&p).unwrap();
    assert!(all.iter().enumerate().all(|(i, &b)| b == new(i as u64)));
}
