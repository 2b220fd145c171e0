//! Many threads writing, latching, pinning and reading the same page at once,
//! with no serialization outside the cache: no deadlock, no torn page.
mod common;
use common::*;
use pagecache::File;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Runs `f` on a thread; fails the test if it does not finish in `secs`
/// (a deadlocked thread cannot be unwound, so it is left behind).
fn within(secs: u64, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => {}
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("not done in {secs} s: deadlock"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("worker panicked"),
    }
}

fn uniform(b: &[u8]) -> u8 {
    assert!(
        b.iter().all(|&x| x == b[0]),
        "torn page: {} then {}",
        b[0],
        b.iter().find(|&&x| x != b[0]).unwrap()
    );
    b[0]
}

#[test]
fn concurrent_writers_latches_and_readers_of_one_page() {
    let d = Arc::new(TempDir::new("samepage"));
    let p = d.path("f");
    std::fs::write(&p, vec![0u8; 2 * PS]).unwrap();
    let c = cache(16);
    let f: Arc<File> = Arc::new(c.open(&p).unwrap());
    let keep = d.clone();
    within(120, move || {
        std::thread::scope(|s| {
            for t in 0..24u8 {
                let f = &f;
                s.spawn(move || {
                    let mut buf = vec![0u8; PS];
                    let mut gang = Vec::new();
                    for k in 0..300u32 {
                        let v = (t as u32 * 7 + k) as u8;
                        match (t as u32 + k) % 5 {
                            0 => f.write_at(&vec![v; PS], 0).unwrap(),
                            1 => f.page_mut(0).unwrap().fill(v),
                            2 => {
                                f.read_exact_at(&mut buf, 0).unwrap();
                                uniform(&buf);
                            }
                            3 => {
                                let pg = f.page(0).unwrap();
                                uniform(&pg);
                            }
                            _ => {
                                f.pages(0, &mut gang, 2).unwrap();
                                uniform(&gang[0]);
                                gang.clear();
                            }
                        }
                    }
                });
            }
        });
        let _ = &keep;
    });
    let f = c.open(&p).unwrap();
    let mut buf = vec![0u8; PS];
    f.read_exact_at(&mut buf, 0).unwrap();
    let v = uniform(&buf);
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap()[..PS], vec![v; PS][..]);
    c.validate();
}

#[test]
fn set_len_races_writers_and_pins_on_the_last_page() {
    let d = Arc::new(TempDir::new("samepage"));
    let p = d.path("f");
    std::fs::write(&p, vec![1u8; 2 * PS]).unwrap();
    let c = cache(16);
    let f: Arc<File> = Arc::new(c.open(&p).unwrap());
    let keep = d.clone();
    let f2 = f.clone();
    within(120, move || {
        let f = f2;
        std::thread::scope(|s| {
            let fl = &f;
            s.spawn(move || {
                for k in 0..300u64 {
                    fl.set_len(PS as u64 + 1 + k % 4000).unwrap();
                    fl.set_len(2 * PS as u64).unwrap();
                }
            });
            for t in 0..8u8 {
                let f = &f;
                s.spawn(move || {
                    for k in 0..300u32 {
                        match (t as u32 + k) % 3 {
                            0 => f.write_at(&[t; 64], PS as u64).unwrap(),
                            1 => {
                                if let Ok(mut m) = f.page_mut(1) {
                                    m[0] = t;
                                }
                            }
                            _ => {
                                if let Ok(pg) = f.page(1) {
                                    let _ = pg[PS - 1];
                                }
                            }
                        }
                    }
                });
            }
        });
        let _ = &keep;
    });
    f.sync().unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), f.len());
    c.validate();
}
