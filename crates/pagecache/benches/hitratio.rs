//! Hit ratios of replacement policies on the same key streams: strict LRU
//! (the reference), CLOCK as this cache implements it (new pages enter
//! unreferenced, a hit sets one bit), SIEVE and S3-FIFO, each simulated
//! exactly; plus the real `PageCache` on a real file, to check that the
//! implementation behaves like its model.
//!
//! ```sh
//! cargo bench -p pagecache --bench hitratio            # full
//! cargo bench -p pagecache --bench hitratio -- --quick
//! ```

use pagecache::{Config, PageCache, PolicyKind};
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::unix::fs::FileExt;

const PS: usize = 4096;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) over `n` keys by inverse CDF; key ranks scattered over the key
/// space (hot pages are not neighbours).
fn zipf(n: u64, s: f64, len: usize, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(n as usize);
    let mut acc = 0.0;
    for k in 1..=n {
        acc += 1.0 / (k as f64).powf(s);
        cdf.push(acc);
    }
    let mut r = Rng(seed);
    (0..len)
        .map(|_| {
            let u = r.unit() * acc;
            let rank = cdf.partition_point(|&c| c < u) as u64;
            (rank.wrapping_mul(2_654_435_761)) % n
        })
        .collect()
}

/// A hot set of `hot` pages re-read at random, interleaved one-for-one with
/// one sequential pass over `scan` other pages; returns the stream and the
/// range of stream positions during the scan.
fn hot_scan(hot: u64, scan: u64, warm: usize, seed: u64) -> Vec<u64> {
    let mut r = Rng(seed);
    let mut v: Vec<u64> = (0..warm).map(|_| r.next() % hot).collect();
    for k in 0..scan {
        v.push(r.next() % hot);
        v.push(hot + k);
    }
    // after the scan: is the hot set still cached?
    v.extend((0..warm).map(|_| r.next() % hot));
    v
}

trait Policy {
    /// Accesses `k`; returns whether it was a hit.
    fn access(&mut self, k: u64) -> bool;
}

struct Lru {
    cap: usize,
    map: HashMap<u64, usize>,
    // doubly linked list in a slab: (key, prev, next)
    node: Vec<(u64, usize, usize)>,
    head: usize,
    tail: usize,
}
const NIL: usize = usize::MAX;
impl Lru {
    fn new(cap: usize) -> Self {
        Lru {
            cap,
            map: HashMap::new(),
            node: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }
    fn unlink(&mut self, i: usize) {
        let (_, p, n) = self.node[i];
        if p != NIL {
            self.node[p].2 = n
        } else {
            self.head = n
        }
        if n != NIL {
            self.node[n].1 = p
        } else {
            self.tail = p
        }
    }
    fn push_front(&mut self, i: usize) {
        self.node[i].1 = NIL;
        self.node[i].2 = self.head;
        if self.head != NIL {
            self.node[self.head].1 = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }
}
impl Policy for Lru {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.map.get(&k) {
            self.unlink(i);
            self.push_front(i);
            return true;
        }
        let i = if self.map.len() < self.cap {
            self.node.push((k, NIL, NIL));
            self.node.len() - 1
        } else {
            let t = self.tail;
            self.unlink(t);
            self.map.remove(&self.node[t].0);
            self.node[t].0 = k;
            t
        };
        self.map.insert(k, i);
        self.push_front(i);
        false
    }
}

/// CLOCK over frame slots, as `reclaim::Clock`: a new page is unreferenced,
/// a hit sets the bit, the hand clears set bits and evicts the first clear.
struct Clock {
    map: HashMap<u64, usize>,
    slot: Vec<(u64, bool)>,
    hand: usize,
    cap: usize,
}
impl Clock {
    fn new(cap: usize) -> Self {
        Clock {
            map: HashMap::new(),
            slot: Vec::new(),
            hand: 0,
            cap,
        }
    }
}
impl Policy for Clock {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.map.get(&k) {
            self.slot[i].1 = true;
            return true;
        }
        if self.slot.len() < self.cap {
            self.slot.push((k, false));
            self.map.insert(k, self.slot.len() - 1);
            return false;
        }
        loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.cap;
            if self.slot[i].1 {
                self.slot[i].1 = false;
            } else {
                self.map.remove(&self.slot[i].0);
                self.slot[i] = (k, false);
                self.map.insert(k, i);
                return false;
            }
        }
    }
}

/// SIEVE (Zhang et al., NSDI'24): FIFO order, a visited bit, and a hand
/// moving from the oldest object towards newer ones that keeps visited
/// objects in place (clearing the bit) and evicts the first unvisited one.
struct Sieve {
    cap: usize,
    map: HashMap<u64, usize>,
    /// (key, visited, newer, older)
    node: Vec<(u64, bool, usize, usize)>,
    head: usize, // newest
    tail: usize, // oldest
    hand: usize,
}
impl Sieve {
    fn new(cap: usize) -> Self {
        Sieve {
            cap,
            map: HashMap::new(),
            node: Vec::new(),
            head: NIL,
            tail: NIL,
            hand: NIL,
        }
    }
}
impl Policy for Sieve {
    fn access(&mut self, k: u64) -> bool {
        if let Some(&i) = self.map.get(&k) {
            self.node[i].1 = true;
            return true;
        }
        let i = if self.map.len() < self.cap {
            self.node.push((k, false, NIL, NIL));
            self.node.len() - 1
        } else {
            let mut h = if self.hand == NIL {
                self.tail
            } else {
                self.hand
            };
            while self.node[h].1 {
                self.node[h].1 = false;
                h = if self.node[h].2 == NIL {
                    self.tail
                } else {
                    self.node[h].2
                };
            }
            let (_, _, newer, older) = self.node[h];
            self.hand = newer;
            if newer != NIL {
                self.node[newer].3 = older
            } else {
                self.head = older
            }
            if older != NIL {
                self.node[older].2 = newer
            } else {
                self.tail = newer
            }
            self.map.remove(&self.node[h].0);
            h
        };
        self.node[i] = (k, false, NIL, self.head);
        if self.head != NIL {
            self.node[self.head].2 = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
        self.map.insert(k, i);
        false
    }
}

/// S3-FIFO (Yang et al., SOSP'23): small FIFO (10%), main FIFO, ghost FIFO
/// of keys evicted from small; 2-bit frequency.
struct S3Fifo {
    small_cap: usize,
    main_cap: usize,
    small: VecDeque<u64>,
    main: VecDeque<u64>,
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64>,
    freq: HashMap<u64, u8>,
}
impl S3Fifo {
    fn new(cap: usize) -> Self {
        let small_cap = (cap / 10).max(1);
        S3Fifo {
            small_cap,
            main_cap: cap - small_cap,
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            ghost_set: HashSet::new(),
            freq: HashMap::new(),
        }
    }
    fn evict_main(&mut self) {
        while let Some(k) = self.main.pop_front() {
            let f = self.freq[&k];
            if f > 0 {
                self.freq.insert(k, f - 1);
                self.main.push_back(k);
            } else {
                self.freq.remove(&k);
                return;
            }
        }
    }
    fn evict_small(&mut self) {
        while let Some(k) = self.small.pop_front() {
            if self.freq[&k] > 0 {
                self.freq.insert(k, 0);
                if self.main.len() >= self.main_cap {
                    self.evict_main();
                }
                self.main.push_back(k);
            } else {
                self.freq.remove(&k);
                self.ghost.push_back(k);
                self.ghost_set.insert(k);
                if self.ghost.len() > self.main_cap {
                    let g = self.ghost.pop_front().unwrap();
                    self.ghost_set.remove(&g);
                }
                return;
            }
        }
    }
}
impl Policy for S3Fifo {
    fn access(&mut self, k: u64) -> bool {
        if let Some(f) = self.freq.get_mut(&k) {
            *f = (*f + 1).min(3);
            return true;
        }
        if self.ghost_set.remove(&k) {
            if self.main.len() >= self.main_cap {
                self.evict_main();
            }
            self.main.push_back(k);
        } else {
            if self.small.len() >= self.small_cap {
                self.evict_small();
            }
            self.small.push_back(k);
        }
        self.freq.insert(k, 0);
        false
    }
}

fn ratio(p: &mut dyn Policy, keys: &[u64], from: usize, to: usize) -> f64 {
    let mut hits = 0;
    for (i, &k) in keys.iter().enumerate() {
        let h = p.access(k);
        if i >= from && i < to && h {
            hits += 1;
        }
    }
    hits as f64 / (to - from) as f64
}

/// The real cache: `capacity` frames over a file of `n` pages, one 64-byte
/// `read_at` per key; hit ratio over stream positions `from..to`.
fn real(
    dir: &std::path::Path,
    policy: PolicyKind,
    n: u64,
    cap: usize,
    keys: &[u64],
    from: usize,
    to: usize,
) -> f64 {
    let path = dir.join(format!("f{n}"));
    if !path.exists() {
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(n * PS as u64).unwrap();
        f.write_at(&[1], n * PS as u64 - 1).unwrap();
    }
    let cache = PageCache::new(Config {
        capacity: cap * PS,
        policy,
        ..Config::default()
    })
    .unwrap();
    let file = cache.open(&path).unwrap();
    let mut b = [0u8; 64];
    let mut before = cache.stats();
    for (i, &k) in keys.iter().enumerate() {
        if i == from {
            before = cache.stats();
        }
        if i == to {
            break;
        }
        file.read_at(&mut b, k * PS as u64).unwrap();
    }
    let s = cache.stats();
    (s.hits - before.hits) as f64 / (to - from) as f64
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, cap, len) = if quick {
        (10_000u64, 1_000usize, 100_000usize)
    } else {
        (40_000u64, 4_000usize, 1_000_000usize)
    };
    let dir = std::env::temp_dir().join(format!("pagecache-hitratio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!("# Hit ratios\n");
    println!(
        "{} keys (pages), cache of {} pages ({}%), {} accesses per Zipf stream; hit ratio over the second half (warm)\n",
        n,
        cap,
        cap as u64 * 100 / n,
        len
    );
    println!(
        "| stream | strict LRU | CLOCK (model) | pagecache CLOCK (real) | SIEVE | S3-FIFO (model) | pagecache S3-FIFO (real, default) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for s in [0.9, 1.1] {
        let keys = zipf(n, s, len, 42);
        let (a, b) = (len / 2, len);
        println!(
            "| Zipf {s} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            ratio(&mut Lru::new(cap), &keys, a, b),
            ratio(&mut Clock::new(cap), &keys, a, b),
            real(&dir, PolicyKind::Clock, n, cap, &keys, a, b),
            ratio(&mut Sieve::new(cap), &keys, a, b),
            ratio(&mut S3Fifo::new(cap), &keys, a, b),
            real(&dir, PolicyKind::S3Fifo, n, cap, &keys, a, b),
        );
    }
    // hot set (half the cache) re-read while one pass scans 2x the cache
    let hot = cap as u64 / 2;
    let warm = 4 * cap;
    let keys = hot_scan(hot, 2 * cap as u64, warm, 7);
    let scan_end = warm + 4 * cap;
    for (label, a, b) in [
        (
            "hot set + scan: during the scan (all accesses)",
            warm,
            scan_end,
        ),
        (
            "hot set + scan: after the scan (hot set only)",
            scan_end,
            keys.len(),
        ),
    ] {
        let n = hot + 2 * cap as u64;
        println!(
            "| {label} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            ratio(&mut Lru::new(cap), &keys, a, b),
            ratio(&mut Clock::new(cap), &keys, a, b),
            real(&dir, PolicyKind::Clock, n, cap, &keys, a, b),
            ratio(&mut Sieve::new(cap), &keys, a, b),
            ratio(&mut S3Fifo::new(cap), &keys, a, b),
            real(&dir, PolicyKind::S3Fifo, n, cap, &keys, a, b),
        );
    }
    println!(
        "\nDuring the scan at most half the accesses (the hot ones) can hit: 0.500 is perfect. \
         After it, 1.000 means the hot set survived the scan."
    );
    let _ = std::fs::remove_dir_all(&dir);
}
