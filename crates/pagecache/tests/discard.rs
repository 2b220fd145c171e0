//! Files whose last close failed do not stay open forever: eviction that
//! later writes their pages back releases them, and `PageCache::forget` /
//! `File::discard` drop pages without writing them back.
mod common;
use common::*;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// One test in this file (descriptor counts are per process, and the test
/// harness runs tests of one file on parallel threads).
#[test]
fn failed_close_then_release_forget_and_discard() {
    let d = TempDir::new("discard");
    let p = d.path("journal");
    let q = d.path("data");
    make_file(&p, 0);
    make_file(&q, 64 * PS as u64);
    let (c, faults) = faulty(8);
    let base = open_fds();
    // Descriptors one open file holds (two with direct I/O: an O_DIRECT one
    // and a buffered one).
    let per_file = {
        let g = c.open(&q).unwrap();
        let n = open_fds() - base;
        drop(g);
        assert_eq!(open_fds(), base);
        n
    };
    assert!(per_file >= 1);

    // 1. A failed close keeps the file (and its dirty pages, and its
    // descriptor); once eviction writes the pages back, the file is
    // released and its descriptor closed.
    let f = c.open(&p).unwrap();
    f.write_at(&[3u8; 3 * PS], 0).unwrap();
    faults.fail_writes_from(1, libc::EIO);
    assert!(f.close().is_err());
    assert_eq!(open_fds(), base + per_file, "kept with its dirty pages");
    faults.clear();
    let g = c.open(&q).unwrap();
    let mut buf = [0u8; 8];
    for i in 0..32u64 {
        g.read_at(&mut buf, i * PS as u64).unwrap(); // pressure: evicts the journal
    }
    assert_eq!(
        std::fs::read(&p).unwrap(),
        vec![3u8; 3 * PS],
        "written back"
    );
    assert_eq!(
        open_fds(),
        base + per_file,
        "journal released, data still open"
    );
    drop(g);
    assert_eq!(open_fds(), base);
    c.validate();

    // 2. `forget`: a failed close, then the file is deleted: drop its pages
    // without writing them back.
    let f = c.open(&p).unwrap();
    f.write_at(&[4u8; 100], 0).unwrap();
    faults.fail_writes_from(1, libc::EIO);
    assert!(f.close().is_err());
    faults.clear();
    std::fs::remove_file(&p).unwrap();
    let free = c.free_frames();
    assert_eq!(c.forget(d.path("nothing")), 0);
    assert_eq!(c.forget(&p), 1);
    assert_eq!(c.free_frames(), free + 1, "its frame is back");
    assert_eq!(open_fds(), base, "its descriptor closed");
    c.validate();

    // 3. `discard` on the last handle: dirty pages dropped, nothing written.
    make_file(&p, 0);
    let f = c.open(&p).unwrap();
    let f2 = f.clone();
    f.write_at(&[5u8; 2 * PS], 0).unwrap();
    assert!(!f2.discard(), "another handle is open: pages kept");
    assert_eq!(f.dirty_pages(), 2);
    assert!(f.discard());
    assert_eq!(
        std::fs::read(&p).unwrap(),
        Vec::<u8>::new(),
        "nothing written"
    );
    assert_eq!(open_fds(), base);
    assert_eq!(c.free_frames(), 8);
    c.validate();
    // The file can be opened again, fresh.
    let f = c.open(&p).unwrap();
    assert_eq!(f.len(), 0);
    drop(f);
    assert_eq!(open_fds(), base);

    // 4. A handle dropped while its prefetch is in flight: the reads keep
    // the descriptor until they end, and not a moment longer. Their frames
    // are freed as they complete (the file's pages are gone), and by then
    // the descriptor is closed.
    faults.delay_io(std::time::Duration::from_millis(50));
    let g = c.open(&q).unwrap();
    g.prefetch(0, 4 * PS as u64).unwrap();
    drop(g);
    assert!(c.free_frames() < 8, "reads in flight");
    let t = std::time::Instant::now();
    while c.free_frames() < 8 {
        assert!(t.elapsed().as_secs() < 10, "prefetch reads never ended");
        std::thread::yield_now();
    }
    assert_eq!(open_fds(), base, "the last read closed the descriptor");
    faults.clear();
    c.validate();
}
