//! Bytes past the end of file read as zero whenever the file grows over
//! them, including bytes a `PageMut` of the last page wrote past the end
//! while another thread grew the file.
mod common;
use common::*;
use std::time::Duration;

#[test]
fn bytes_a_page_mut_wrote_past_eof_read_as_zero_after_a_concurrent_growth() {
    let d = TempDir::new("pmeof");
    let p = d.path("f");
    make_file(&p, 100);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let mut m = f.page_mut(0).unwrap();
    m[50] = 7; // inside the file
    m[100..200].fill(0xFF); // past the end
    let g = f.clone();
    std::thread::spawn(move || g.write_at(b"z", 5000).unwrap())
        .join()
        .unwrap(); // grows the file over page 0's tail
    std::thread::sleep(Duration::from_millis(10));
    drop(m);
    assert_eq!(f.len(), 5001);
    let mut buf = vec![0xAAu8; 5001];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!(buf[50], 7);
    assert!(
        buf[100..5000].iter().all(|&b| b == 0),
        "stale bytes past the old end"
    );
    assert_eq!(buf[5000], b'z');
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), buf);
}

/// `PageMut::into_raw` / `from_raw` (the C ABI's latch record): the page
/// stays latched between the two, and the guard given back keeps the end
/// of file it found and whether it was written through.
#[test]
fn a_latch_taken_apart_and_given_back_is_still_held_and_keeps_its_end_and_its_writes() {
    let d = TempDir::new("pmraw");
    let p = d.path("f");
    make_file(&p, 100);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    f.sync().unwrap();
    // Untouched: given back and dropped, the page stays clean.
    let raw = f.page_mut(0).unwrap().into_raw();
    assert!(
        f.try_latch(0).unwrap().is_none(),
        "the parts hold the latch"
    );
    // SAFETY: the parts of that latch of page 0 of `f`, given back once.
    drop(unsafe { pagecache::PageMut::from_raw(&f, 0, raw) });
    assert_eq!(f.dirty_pages(), 0);
    assert!(f.try_latch(0).unwrap().is_some(), "released");
    // Written through before and after, with the file grown meanwhile.
    let mut m = f.page_mut(0).unwrap();
    m[50] = 7;
    m[100..200].fill(0xFF); // past the end
    let raw = m.into_raw();
    assert!(raw.touched);
    let g = f.clone();
    std::thread::spawn(move || g.write_at(b"z", 5000).unwrap())
        .join()
        .unwrap();
    // SAFETY: as above.
    let mut m = unsafe { pagecache::PageMut::from_raw(&f, 0, raw) };
    assert_eq!(m.index(), 0);
    m[60] = 8;
    drop(m);
    assert_eq!(f.dirty_pages(), 2, "page 0, and page 1 the growth wrote");
    let mut buf = vec![0xAAu8; 5001];
    f.read_at(&mut buf, 0).unwrap();
    assert_eq!((buf[50], buf[60]), (7, 8));
    assert!(
        buf[100..5000].iter().all(|&b| b == 0),
        "bytes past the end the latch found"
    );
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), buf);
}
