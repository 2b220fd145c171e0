//! set_len: shrink drops pages and zeroes the tail; growing reads zeros.
mod common;
use common::*;

#[test]
fn shrink_then_grow_reads_zeros_never_stale_bytes() {
    let d = TempDir::new("setlen");
    let p = d.path("f");
    make_file(&p, 8 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    // Cache every page and dirty some of them.
    let mut buf = vec![0u8; 8 * PS];
    f.read_at(&mut buf, 0).unwrap();
    f.write_at(&[0xAB; PS], 6 * PS as u64).unwrap();
    f.set_len(2 * PS as u64 + 100).unwrap();
    assert_eq!(f.len(), 2 * PS as u64 + 100);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 2 * PS as u64 + 100);
    f.set_len(8 * PS as u64).unwrap();
    let mut after = vec![0xFFu8; 8 * PS];
    assert_eq!(f.read_at(&mut after, 0).unwrap(), 8 * PS);
    assert_eq!(&after[..2 * PS + 100], &buf[..2 * PS + 100]);
    assert!(
        after[2 * PS + 100..].iter().all(|&b| b == 0),
        "grown part is zero"
    );
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), after);
    c.validate();
}

#[test]
fn pinned_page_survives_truncate_and_is_freed_by_its_last_release() {
    let d = TempDir::new("setlen");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let pinned = f.page(3).unwrap();
    let before: Vec<u8> = pinned.to_vec();
    f.set_len(PS as u64).unwrap();
    assert_eq!(&pinned[..], &before[..], "a pin keeps its bytes");
    let free_before = c.free_frames();
    drop(pinned);
    assert_eq!(
        c.free_frames(),
        free_before + 1,
        "last release freed the frame"
    );
    c.validate();
    assert_eq!(
        f.page(3).unwrap_err().kind(),
        std::io::ErrorKind::UnexpectedEof
    );
}

#[test]
fn truncate_discards_dirty_pages_past_the_end() {
    let d = TempDir::new("setlen");
    let p = d.path("f");
    make_file(&p, 0);
    // No flusher: four dirty pages of 16 are past its threshold, and it
    // may write page 0 back before the count below under load.
    let c = cache_without_flusher(16);
    let f = c.open(&p).unwrap();
    f.write_at(&vec![7u8; 4 * PS], 0).unwrap();
    assert_eq!(f.dirty_pages(), 4);
    f.set_len(PS as u64).unwrap();
    assert_eq!(f.dirty_pages(), 1);
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), vec![7u8; PS]);
    c.validate();
}
