//! Errors a client can act on: the OS error number of any error, a full
//! disk reported as such (not as "out of memory"), each write-back error
//! reported once, lengths past the filesystem's limit refused up front.
mod common;
use common::*;
use pagecache::{os_error, OpenOptions};
use std::io::ErrorKind;

#[test]
fn the_os_error_number_is_reachable_through_the_context() {
    let d = TempDir::new("ae");
    let c = cache(16);
    let e = c.open(d.path("missing")).unwrap_err();
    assert_eq!(e.raw_os_error(), None, "wrapped with context");
    assert_eq!(os_error(&e), Some(libc::ENOENT));
    assert!(e.to_string().contains("missing"), "{e}");

    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    faults.fail_nth_read(1, libc::EIO);
    let e = f.page(2).unwrap_err();
    assert_eq!(os_error(&e), Some(libc::EIO), "{e}");
    assert!(e.to_string().contains("page 2"), "{e}");
    f.write_at(b"abc", 0).unwrap();
    faults.fail_syncs(libc::EIO);
    let e = f.sync().unwrap_err();
    assert_eq!(os_error(&e), Some(libc::EIO), "{e}");
    faults.clear();
    f.sync().unwrap();
    // The cache's own errors have none.
    let e = f.page(99).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert_eq!(os_error(&e), None);
}

#[test]
fn a_full_disk_during_eviction_is_reported_as_a_full_disk() {
    let d = TempDir::new("ae");
    let p = d.path("f");
    make_file(&p, 0);
    let (c, faults) = faulty(4);
    let f = c.open(&p).unwrap();
    faults.enospc_past(1); // every write-back fails with ENOSPC
    for i in 0..4u64 {
        f.write_at(&[i as u8; 10], i * PS as u64).unwrap();
    }
    // A fifth page needs a frame; every frame is dirty and cannot be
    // written back: the caller learns the disk is full.
    let e = f.write_at(b"fifth", 4 * PS as u64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
    assert_eq!(os_error(&e), Some(libc::ENOSPC));
    assert_eq!(f.dirty_pages(), 4, "nothing dropped");
    faults.clear();
    f.write_at(b"fifth", 4 * PS as u64).unwrap();
}

/// Each write-back error is reported once, to the call that met it: the
/// read that needed a frame (eviction's), or a `sync` whose own writes
/// failed. A `sync` whose writes succeed returns `Ok`: what it returns is
/// the truth about the disk now, not about an earlier failure whose pages
/// stayed dirty and are written now (an eviction's error is not reported
/// again to the next sync).
#[test]
fn each_write_back_error_is_reported_once_to_the_call_that_met_it() {
    let d = TempDir::new("ae");
    let DirtyCache {
        faults,
        f,
        g,
        f_path,
        ..
    } = dirty_cache(&d);
    faults.fail_writes_from(1, libc::EIO);
    let mut buf = [0u8; 16];
    let e = g.read_at(&mut buf, 40 * PS as u64).unwrap_err(); // eviction failed
    assert_eq!(os_error(&e), Some(libc::EIO), "{e}");
    let e = f.sync().unwrap_err();
    assert_eq!(
        os_error(&e),
        Some(libc::EIO),
        "a sync while the fault lasts fails: {e}"
    );
    faults.clear();
    f.sync().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    f.sync().unwrap();
    // An eviction error, then a sync that writes the pages: Ok, and on disk.
    for i in 0..8u64 {
        f.write_at(&[8u8; 16], i * PS as u64).unwrap();
    }
    faults.fail_writes_from(1, libc::EIO);
    assert!(g.read_at(&mut buf, 41 * PS as u64).is_err());
    faults.clear();
    f.sync().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    let disk = std::fs::read(&f_path).unwrap();
    for i in 0..8usize {
        assert_eq!(&disk[i * PS..i * PS + 16], &[8u8; 16], "page {i}");
    }
}

#[test]
fn lengths_past_the_filesystems_limit_are_refused_and_leave_the_file_usable() {
    let d = TempDir::new("ae");
    let p = d.path("f");
    make_file(&p, PS as u64);
    // What the kernel itself says about a write that far out.
    let probe = std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .and_then(|fd| std::os::unix::fs::FileExt::write_at(&fd, b"x", 1 << 62));
    let kernel_refuses = probe.as_ref().err().and_then(|e| e.raw_os_error()) == Some(libc::EFBIG);
    if !kernel_refuses {
        eprintln!("skipped: this filesystem accepts a write at 2^62 ({probe:?})");
        return;
    }
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let e = f.write_at(b"x", 1 << 62).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FileTooLarge, "{e}");
    assert_eq!(os_error(&e), Some(libc::EFBIG));
    assert_eq!(f.len(), PS as u64, "nothing changed");
    let e = f.set_len(1 << 50).unwrap_err();
    assert_eq!(os_error(&e), Some(libc::EFBIG), "{e}");
    assert_eq!(f.len(), PS as u64);
    // Every valid operation still works.
    f.set_len(100).unwrap();
    f.set_len(3 * PS as u64).unwrap();
    f.write_at(b"ok", 2 * PS as u64).unwrap();
    f.sync().unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 3 * PS as u64);
    assert_eq!(f.dirty_pages(), 0);
}

#[test]
fn a_failed_truncate_changes_nothing_and_a_later_one_succeeds() {
    let d = TempDir::new("ae");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    f.write_at(&[5u8; 16], 3 * PS as u64).unwrap();
    faults.fail_set_len(libc::EIO);
    for len in [PS as u64 + 10, 0, 8 * PS as u64] {
        let e = f.set_len(len).unwrap_err();
        assert_eq!(os_error(&e), Some(libc::EIO), "{e}");
        assert_eq!(f.len(), 4 * PS as u64, "length unchanged");
        assert_eq!(f.dirty_pages(), 1, "dirty page past the new end kept");
    }
    let mut b = [0u8; 16];
    f.read_at(&mut b, 3 * PS as u64).unwrap();
    assert_eq!(b, [5u8; 16]);
    // Writes and syncs are unaffected, and the next set_len succeeds.
    f.write_at(b"more", 4 * PS as u64).unwrap();
    f.sync().unwrap();
    faults.clear();
    f.set_len(PS as u64 + 10).unwrap();
    f.set_len(4 * PS as u64).unwrap();
    f.read_at(&mut b, 3 * PS as u64).unwrap();
    assert_eq!(b, [0u8; 16], "truncated bytes read as zero after regrowth");
    f.sync().unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 4 * PS as u64);
    c.validate();
}

#[test]
fn open_with_neither_read_nor_write_is_invalid_input() {
    let d = TempDir::new("ae");
    let p = d.path("f");
    make_file(&p, 10);
    let c = cache(16);
    let e = c.open_with(&p, &OpenOptions::new()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    assert!(e.to_string().contains("neither read nor write"), "{e}");
}
