//! End of file and the partial last page.
mod common;
use common::*;
use std::io::ErrorKind;

#[test]
fn read_at_is_short_only_at_end_of_file() {
    let d = TempDir::new("eof");
    let p = d.path("f");
    make_file(&p, 10_000); // 2 full pages + 1808 bytes
    let c = cache(16);
    let f = c.open(&p).unwrap();
    assert_eq!(f.len(), 10_000);
    let mut buf = vec![0u8; 5000];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), 5000);
    assert_eq!(f.read_at(&mut buf, 6000).unwrap(), 4000);
    assert!(buf[..4000]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(6000 + i as u64)));
    assert_eq!(f.read_at(&mut buf, 10_000).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, 1 << 40).unwrap(), 0);
    let e = f.read_exact_at(&mut buf, 9000).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
}

#[test]
fn last_partial_page_is_zero_past_end_of_file() {
    let d = TempDir::new("eof");
    let p = d.path("f");
    make_file(&p, 10_000);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let page = f.page(2).unwrap();
    assert_eq!(page.len(), PS);
    let tail = 10_000 - 2 * PS;
    assert!(page[..tail]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern((2 * PS + i) as u64)));
    assert!(
        page[tail..].iter().all(|&b| b == 0),
        "bytes past EOF are zero"
    );
}

#[test]
fn page_at_or_past_the_last_page_is_unexpected_eof() {
    let d = TempDir::new("eof");
    let p = d.path("f");
    make_file(&p, 2 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    assert!(f.page(1).is_ok());
    for i in [2u64, 3, u64::MAX] {
        assert_eq!(f.page(i).unwrap_err().kind(), ErrorKind::UnexpectedEof);
        assert_eq!(f.page_mut(i).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    }
    let mut v = Vec::new();
    assert_eq!(f.pages(1, &mut v, 16).unwrap(), 1, "gang stops at EOF");
    assert_eq!(f.pages(2, &mut v, 16).unwrap(), 0);
}

#[test]
fn empty_file_has_no_pages() {
    let d = TempDir::new("eof");
    let p = d.path("f");
    make_file(&p, 0);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    assert!(f.is_empty());
    assert_eq!(f.page(0).unwrap_err().kind(), ErrorKind::UnexpectedEof);
    assert_eq!(f.read_at(&mut [0u8; 8], 0).unwrap(), 0);
}

#[test]
fn write_past_end_extends_with_zeros_between() {
    let d = TempDir::new("eof");
    let p = d.path("f");
    make_file(&p, 100);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    f.write_at(b"xyz", 3 * PS as u64 + 10).unwrap();
    assert_eq!(f.len(), 3 * PS as u64 + 13);
    let mut buf = vec![0xFFu8; f.len() as usize];
    assert_eq!(f.read_at(&mut buf, 0).unwrap(), buf.len());
    assert!(buf[..100]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern(i as u64)));
    assert!(buf[100..3 * PS + 10].iter().all(|&b| b == 0));
    assert_eq!(&buf[3 * PS + 10..], b"xyz");
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), buf, "same bytes on disk");
}

/// Writers that extend a file and writers that rewrite pages inside it,
/// at once, oversubscribed, with syncs and eviction (a 64-frame cache: dirty
/// pages are written back by the flusher and by reclaim while the file
/// grows). A write inside the file leaves the length alone (only a write
/// that extends it takes the read-modify-write): the file on disk must
/// still end exactly where the furthest write ended and hold every page.
#[test]
fn concurrent_extending_and_inner_writes_keep_the_length_and_every_page() {
    const APPENDERS: u64 = 8;
    const PAGES: u64 = 1024;
    const TAIL: usize = 100; // the last write is a partial page
    let d = TempDir::new("eof");
    let p = d.path("f");
    let c = cache(64);
    let f = c
        .open_with(
            &p,
            pagecache::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true),
        )
        .unwrap();
    // Every byte depends only on its position, so whichever writer of a
    // page comes last, the page must read the same.
    let page = |i: u64| -> Vec<u8> { (0..PS as u64).map(|b| pattern(i * PS as u64 + b)).collect() };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..APPENDERS {
            let (f, page) = (&f, &page);
            s.spawn(move || {
                // Pages t, t + 8, t + 16, ...: the file grows from all sides.
                let mut i = t;
                while i < PAGES {
                    f.write_at(&page(i), i * PS as u64).unwrap();
                    i += APPENDERS;
                }
            });
        }
        for r in 0..4u64 {
            let (f, page, done) = (&f, &page, &done);
            s.spawn(move || {
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (r + 1);
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let pages = f.len() / PS as u64;
                    if pages == 0 {
                        std::thread::yield_now();
                        continue;
                    }
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let i = x % pages;
                    f.write_at(&page(i), i * PS as u64).unwrap();
                }
            });
        }
        let (f, done) = (&f, &done);
        s.spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                f.sync().unwrap();
            }
        });
        // The appenders are the first 8 threads spawned; wait for the file
        // to reach its full length, then stop the others.
        while f.len() < PAGES * PS as u64 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    // The tail: a partial page past the end.
    let tail: Vec<u8> = (0..TAIL as u64)
        .map(|b| pattern(PAGES * PS as u64 + b))
        .collect();
    f.write_at(&tail, PAGES * PS as u64).unwrap();
    let len = PAGES * PS as u64 + TAIL as u64;
    assert_eq!(f.len(), len);
    f.sync().unwrap();
    let disk = std::fs::read(&p).unwrap();
    assert_eq!(disk.len() as u64, len, "the length on disk");
    for (pos, &b) in disk.iter().enumerate() {
        assert_eq!(
            b,
            pattern(pos as u64),
            "byte {pos} (page {}) on disk",
            pos / PS
        );
    }
    c.validate();
}
