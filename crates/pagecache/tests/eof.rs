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
