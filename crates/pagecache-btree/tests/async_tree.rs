//! `get_async` and `scan_async` on a tree many times the cache: many
//! lookups in flight from one thread, each checked against the model,
//! with a writer inserting other keys meanwhile and lookups cancelled at
//! random; nothing pinned afterwards.
#![cfg(not(loom))]

use pagecache::{Config, OpenOptions, PageCache};
use pagecache_btree::{BTree, Coupling};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn key(n: u64) -> Vec<u8> {
    format!("key{:08}", n).into_bytes()
}

fn value(n: u64) -> Vec<u8> {
    vec![(n % 251) as u8; 40 + (n % 60) as usize]
}

fn dir(tag: &str) -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let p = std::env::temp_dir().join(format!(
        "pagecache-btree-async-{}-{tag}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn run(coupling: Coupling, workers: usize) {
    const N: u64 = 40_000;
    let d = dir("get");
    let c = PageCache::new(Config {
        capacity: 64 * 4096,
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        ..Config::default()
    })
    .unwrap();
    let f = c
        .open_with(
            d.join("tree"),
            OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    let t = Arc::new(BTree::open_with(f, coupling).unwrap());
    // Even keys first: the tree is many times the cache's 64 frames.
    let mut model = BTreeMap::new();
    for n in (0..N).step_by(2) {
        t.insert(&key(n), &value(n)).unwrap();
        model.insert(key(n), value(n));
    }
    assert!(
        t.file().len() > 4 * 64 * 4096,
        "a tree larger than the cache"
    );
    let model = Arc::new(model);
    // A writer inserts the odd keys meanwhile (splits, evictions).
    let writer = {
        let t = t.clone();
        std::thread::spawn(move || {
            for n in (1..N).step_by(2) {
                t.insert(&key(n), &value(n)).unwrap();
            }
        })
    };
    let rt = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    };
    let cancelled = Arc::new(AtomicU64::new(0));
    rt.block_on(async {
        let mut tasks = Vec::new();
        for task in 0..48u64 {
            let (t, model, cancelled) = (t.clone(), model.clone(), cancelled.clone());
            tasks.push(tokio::spawn(async move {
                let mut x = (task + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for round in 0..150u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let n = x % N;
                    if round % 10 == 9 {
                        // A lookup under a short timeout: dropped mid-way.
                        let r = tokio::time::timeout(
                            Duration::from_micros(x % 200),
                            t.get_async(&key(n)),
                        )
                        .await;
                        match r {
                            Ok(v) => check(n, v.unwrap(), &model),
                            Err(_) => {
                                cancelled.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    } else {
                        check(n, t.get_async(&key(n)).await.unwrap(), &model);
                    }
                }
                // A short scan from a random key: in order, the even keys
                // all there.
                let from = x % N;
                let mut seen = Vec::new();
                t.scan_async(&key(from), |k, v| {
                    seen.push((k.to_vec(), v.to_vec()));
                    seen.len() < 50
                })
                .await
                .unwrap();
                assert!(
                    seen.windows(2).all(|w| w[0].0 < w[1].0),
                    "scan out of order"
                );
                for (k, v) in &seen {
                    assert!(k.as_slice() >= key(from).as_slice());
                    let n: u64 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                    assert_eq!(v, &value(n), "key {n}");
                }
                let evens = seen
                    .iter()
                    .filter(|(k, _)| {
                        let n: u64 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                        n % 2 == 0
                    })
                    .count();
                let want = model.range(key(from)..).take(evens).count();
                assert_eq!(evens, want, "even keys missing from a scan");
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    writer.join().unwrap();
    // Every key now, through the blocking path.
    for n in 0..N {
        assert_eq!(t.get(&key(n)).unwrap(), Some(value(n)), "key {n}");
    }
    assert!(
        cancelled.load(Ordering::Relaxed) > 0,
        "no lookup was cancelled"
    );
    c.validate();
    drop(t);
    let _ = std::fs::remove_dir_all(&d);
}

/// An even key is always there with its value; an odd one is absent or
/// there with its value (the writer may not have reached it).
fn check(n: u64, got: Option<Vec<u8>>, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    match got {
        Some(v) => assert_eq!(v, value(n), "key {n}"),
        None => assert!(n % 2 == 1 && !model.contains_key(&key(n)), "key {n} lost"),
    }
}

#[test]
fn get_async_on_one_thread_out_of_memory() {
    run(Coupling::Optimistic, 0);
}

#[test]
fn get_async_on_two_threads_out_of_memory() {
    run(Coupling::Optimistic, 2);
}

#[test]
fn get_async_of_a_pin_coupled_tree() {
    run(Coupling::Pin, 0);
}
