//! A failed write-back keeps the data dirty, is reported, and is retried.
mod common;
use common::*;

#[test]
fn failed_sync_keeps_pages_dirty_and_a_later_sync_succeeds() {
    let d = TempDir::new("wbf");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    f.write_at(&[1u8; 100], 0).unwrap();
    f.write_at(&[2u8; 100], 2 * PS as u64).unwrap();
    faults.fail_writes_from(1, libc::EIO);
    let e = f.sync().unwrap_err();
    assert_eq!(
        e.kind(),
        std::io::Error::from_raw_os_error(libc::EIO).kind()
    );
    assert!(e.to_string().contains("writing back pages"), "{e}");
    assert_eq!(f.dirty_pages(), 2);
    assert_eq!(c.stats().write_errors, 2, "both runs failed");
    assert_eq!(faults.syncs(), 0, "no fdatasync after a failed write");
    // Still failing: still reported, still dirty.
    assert!(f.sync().is_err());
    assert_eq!(f.dirty_pages(), 2);
    faults.clear();
    f.sync().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    let disk = std::fs::read(&p).unwrap();
    assert_eq!(&disk[..100], &[1u8; 100]);
    assert_eq!(&disk[2 * PS..2 * PS + 100], &[2u8; 100]);
    assert_eq!(disk[100], pattern(100));
    c.validate();
}
use std::io::ErrorKind;

/// The call that needed the frame hears the eviction's error; the pages
/// stay dirty; the next `sync` writes them and returns `Ok` (the error is
/// not reported a second time).
#[test]
fn eviction_write_back_failure_keeps_the_page_and_the_next_sync_writes_it() {
    let d = TempDir::new("wbf");
    let DirtyCache {
        faults,
        f,
        g,
        f_path: p,
        ..
    } = dirty_cache(&d);
    faults.fail_writes_from(1, libc::EIO);
    // Reading another file needs frames: eviction tries to write back the
    // dirty pages, fails, and must neither drop them nor deadlock.
    let mut buf = [0u8; 16];
    let e = g.read_at(&mut buf, 40 * PS as u64).unwrap_err();
    // Not "out of memory": the write-back error itself, with its errno, so
    // a caller can tell a full or failing disk from a cache too small.
    assert_eq!(pagecache::os_error(&e), Some(libc::EIO), "{e}");
    assert_ne!(e.kind(), ErrorKind::OutOfMemory, "{e}");
    assert!(e.to_string().contains("writing back"), "{e}");
    assert_eq!(f.dirty_pages(), 8, "no dirty page dropped");
    faults.clear();
    // The next sync writes them, and says so.
    f.sync().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    for i in 0..8usize {
        assert_eq!(&std::fs::read(&p).unwrap()[i * PS..i * PS + 16], &[9u8; 16]);
    }
    f.sync().unwrap();
    // And with the pages clean, eviction makes room again.
    g.read_at(&mut buf, 40 * PS as u64).unwrap();
    assert_eq!(buf[0], pattern(40 * PS as u64));
}

#[test]
fn failed_close_keeps_the_data_for_a_later_open() {
    let d = TempDir::new("wbf");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    f.write_at(b"precious", 0).unwrap();
    faults.fail_writes_from(1, libc::EIO);
    assert!(f.close().is_err());
    faults.clear();
    let f = c.open(&p).unwrap();
    let mut b = [0u8; 8];
    f.read_at(&mut b, 0).unwrap();
    assert_eq!(&b, b"precious", "still cached after the failed close");
    f.sync().unwrap();
    assert_eq!(&std::fs::read(&p).unwrap()[..8], b"precious");
}

/// SQLite's case: a transaction's writes fail with ENOSPC while eviction
/// writes pages back (the write that needed a frame gets `StorageFull`, and
/// the database rolls back); the fault clears; the next transaction writes
/// its pages and syncs. That sync wrote every dirty page, so it returns
/// `Ok`, and the disk holds every page: the earlier error, reported once
/// to the call that met it, is not reported again to a commit whose data
/// is on disk.
#[test]
fn a_sync_after_a_reported_eviction_error_returns_ok_when_its_writes_succeed() {
    let d = TempDir::new("wbf-sqlite");
    let p = d.path("db");
    make_file(&p, 0);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    // Transaction 1: 12 pages, synced.
    f.write_at(&[1u8; 12 * PS], 0).unwrap();
    f.sync().unwrap();
    // Transaction 2 grows the file on a full disk: its writes need frames,
    // eviction writes its dirty pages back and fails.
    faults.fail_writes_from(1, libc::ENOSPC);
    let mut full = None;
    for i in 12..64u64 {
        if let Err(e) = f.write_at(&[2u8; PS], i * PS as u64) {
            full = Some((i, e));
            break;
        }
    }
    let (stopped, e) = full.expect("a write that needed a frame failed");
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
    // The database rolls back: the file is cut back to transaction 1.
    faults.clear();
    f.set_len(12 * PS as u64).unwrap();
    // Transaction 3: writes and commits.
    f.write_at(&[3u8; 2 * PS], 12 * PS as u64).unwrap();
    f.write_at(&[3u8; 100], 0).unwrap();
    f.sync().unwrap_or_else(|e| {
        panic!(
            "commit after the disk had room again (transaction 2 stopped at page {stopped}): {e}"
        )
    });
    assert_eq!(f.dirty_pages(), 0);
    let disk = std::fs::read(&p).unwrap();
    assert_eq!(disk.len(), 14 * PS);
    assert_eq!(&disk[..100], &[3u8; 100]);
    assert!(disk[100..12 * PS].iter().all(|&b| b == 1));
    assert!(disk[12 * PS..].iter().all(|&b| b == 3));
    c.validate();
}
