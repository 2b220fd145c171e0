//! `set_len` waits only for the page it touches (the new last page), never
//! while holding the size lock exclusively: threads holding pins can still
//! write and sync other pages, and eviction can still write back the file's
//! dirty pages.
mod common;
use common::*;
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread and fails the test if it does not finish in time
/// (a deadlock), instead of hanging the suite.
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not return within {secs} s: deadlock"))
}

#[test]
fn a_pin_holder_writes_and_syncs_other_pages_while_set_len_waits_for_its_pin() {
    let d = TempDir::new("slw");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let c = cache(64);
    let f = c.open(&p).unwrap();
    let pin = f.page(20).unwrap();
    let old: Vec<u8> = pin.to_vec();
    let g = f.clone();
    let shrink = std::thread::spawn(move || g.set_len(20 * PS as u64 + 100));
    std::thread::sleep(Duration::from_millis(200)); // set_len now waits for our pin
    let h = f.clone();
    within(10, "write_at of another page", move || {
        h.write_at(b"x", 0).unwrap()
    });
    let h = f.clone();
    within(10, "sync", move || h.sync().unwrap());
    let mut b = [0u8; 1];
    f.read_at(&mut b, 0).unwrap();
    assert_eq!(b[0], b'x');
    assert_eq!(&pin[..], &old[..], "a pin's bytes never change");
    drop(pin);
    shrink.join().unwrap().unwrap();
    assert_eq!(f.len(), 20 * PS as u64 + 100);
    let page = f.page(20).unwrap();
    assert_eq!(&page[..100], &old[..100]);
    assert!(
        page[100..].iter().all(|&b| b == 0),
        "tail past the end zeroed"
    );
    drop(page);
    c.validate();
}

#[test]
fn eviction_writes_back_dirty_pages_while_set_len_waits() {
    let d = TempDir::new("slw");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    for i in 0..15u64 {
        f.write_at(&[i as u8 + 1; 8], i * PS as u64).unwrap(); // 15 dirty pages
    }
    let pin = f.page(20).unwrap(); // the 16th frame
    let g = f.clone();
    let shrink = std::thread::spawn(move || g.set_len(20 * PS as u64 + 100));
    std::thread::sleep(Duration::from_millis(200));
    // Every frame is dirty or pinned: a miss must write a dirty page back.
    let h = f.clone();
    let got = within(10, "page(16)", move || h.page(16).map(|p| p[0]));
    assert_eq!(got.unwrap(), pattern(16 * PS as u64));
    let h = f.clone();
    let mut b = [0u8; 1];
    let b = within(10, "read_at of page 17", move || {
        h.read_at(&mut b, 17 * PS as u64).unwrap();
        b[0]
    });
    assert_eq!(b, pattern(17 * PS as u64));
    drop(pin);
    shrink.join().unwrap().unwrap();
    f.sync().unwrap();
    let disk = std::fs::read(&p).unwrap();
    for i in 0..15usize {
        assert_eq!(disk[i * PS], i as u8 + 1, "dirty page {i} kept");
    }
    c.validate();
}

/// `set_len` is not starved by writers that keep writing: shared holders of
/// the size lock never queue behind it (rule 10), so 8 threads rewriting
/// the file on 2 CPUs used to hold it off for as long as they wrote (5 s in
/// a 5 s run). The writers here stop only when the `set_len`s are done, or
/// after 60 s: the test fails if the `set_len`s needed the writers to stop.
#[test]
fn set_len_is_not_starved_by_writers_that_keep_writing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let d = TempDir::new("set-len-starve");
    let p = d.path("f");
    make_file(&p, 512 * PS as u64);
    let c = cache_without_flusher(1024);
    let f = c.open(&p).unwrap();
    let done = AtomicBool::new(false);
    let cap = Duration::from_secs(60);
    let t0 = Instant::now();
    let mut took = Duration::ZERO;
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let (f, done) = (&f, &done);
            s.spawn(move || {
                let b = vec![t as u8; PS];
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1);
                while !done.load(Ordering::Relaxed) && t0.elapsed() < cap {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    f.write_at(&b, (x % 256) * PS as u64).unwrap();
                }
            });
        }
        // Let the writers get going first.
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        for i in 0..50u64 {
            // Above the pages being written: grow and shrink the tail.
            f.set_len((512 + i % 2) * PS as u64).unwrap();
        }
        took = start.elapsed();
        done.store(true, Ordering::Relaxed);
    });
    assert!(
        took < cap / 2,
        "50 set_len calls took {took:?} beside 8 writers: starved until the writers stopped"
    );
    assert_eq!(f.len(), 513 * PS as u64);
    c.validate();
}
