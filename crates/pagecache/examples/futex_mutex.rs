//! The crate's mutex, one futex word that works between processes
//! (`FutexMutex`, protocol 5.10) against `parking_lot`'s, alone and with 2,
//! 8 and 32 threads on one lock (each acquisition adds to eight counters),
//! three rounds; checks the counts.
//!
//! ```sh
//! cargo run --release -p pagecache --example futex_mutex
//! ```

use pagecache::internals::wait::SharedMutex;
use std::time::Instant;

/// Nanoseconds per acquisition of `threads` threads doing `n` each.
fn run<M: Sync>(m: &M, threads: usize, n: u64, f: impl Fn(&M) + Sync) -> f64 {
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for _ in 0..n {
                    f(m)
                }
            });
        }
    });
    t.elapsed().as_secs_f64() * 1e9 / (n * threads as u64) as f64
}

fn main() {
    const OPS: u64 = 10_000_000;
    for threads in [1usize, 2, 8, 32] {
        let n = OPS / threads as u64;
        for round in 0..3 {
            let a = parking_lot::Mutex::new([0u64; 8]);
            let pl = run(&a, threads, n, |m| {
                m.lock().iter_mut().for_each(|x| *x += 1)
            });
            let b: SharedMutex<[u64; 8]> = SharedMutex::new([0; 8]);
            let fx = run(&b, threads, n, |m| {
                m.lock().iter_mut().for_each(|x| *x += 1)
            });
            assert_eq!(*a.lock(), [n * threads as u64; 8]);
            assert_eq!(*b.lock(), [n * threads as u64; 8]);
            println!(
                "{threads:>2} threads, round {round}: parking_lot {pl:5.1} ns, futex word {fx:5.1} ns per acquisition"
            );
        }
    }
}
