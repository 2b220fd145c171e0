//! Handles to the same file share one set of cached pages.
mod common;
use common::*;
use pagecache::OpenOptions;

#[test]
fn a_write_through_one_handle_is_seen_through_another() {
    let d = TempDir::new("shared");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let c = cache(16);
    let a = c.open(&p).unwrap();
    let b = c.open_with(&p, OpenOptions::new().read(true)).unwrap();
    let mut buf = [0u8; 8];
    b.read_at(&mut buf, 100).unwrap();
    let reads = c.stats().reads;
    a.write_at(b"shared!!", 100).unwrap();
    b.read_at(&mut buf, 100).unwrap();
    assert_eq!(&buf, b"shared!!");
    assert_eq!(c.stats().reads, reads, "no second read: same cached page");
    assert_eq!(b.len(), a.len());
    // A third handle through a different path spelling (same inode).
    let alias = d.0.join(".").join("f");
    let c3 = c.open(&alias).unwrap();
    let page = c3.page(0).unwrap();
    assert_eq!(&page[100..108], b"shared!!");
}

#[test]
fn pages_stay_cached_while_any_handle_is_open() {
    let d = TempDir::new("shared");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let c = cache(16);
    let a = c.open(&p).unwrap();
    let b = a.clone();
    a.write_at(b"x", 0).unwrap();
    drop(a);
    let mut buf = [0u8; 1];
    b.read_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"x");
    drop(b);
    // Last handle gone: written back and the pages dropped.
    assert_eq!(std::fs::read(&p).unwrap()[0], b'x');
    assert_eq!(c.free_frames(), 16);
}
