//! Direct I/O by default: pages move between the disk and the cache's
//! frames with `O_DIRECT`, so the kernel's page cache holds no second copy;
//! a partial last page goes through a buffered descriptor, so the length on
//! disk is exact after `sync`; `Config::direct_io = false` and filesystems
//! that refuse `O_DIRECT` use buffered I/O, and users can see which.
mod common;
use common::*;
use pagecache::{Config, OpenOptions, PageCache};
use std::os::fd::AsRawFd;
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
    let d = TempDir::new("direct");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    drop_from_kernel_cache(&p);
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
