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
