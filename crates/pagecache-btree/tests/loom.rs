//! Loom model of the tree's upgrade-and-split path (I1-I4, S1-S4) on the
//! real code: the whole `pagecache` crate builds under `--cfg loom`, so the
//! views, validations, upgrades and `page_new` below are the cache's real
//! protocol steps under loom's scheduler.
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" cargo test --release -p pagecache-btree --test loom
//! ```
#![cfg(loom)]

use loom::thread;
use pagecache::{Config, OpenOptions, PageCache, PolicyKind, PoolKind};
use pagecache_btree::BTree;
use std::sync::Arc;

/// Runs `f` under loom with preemption bound `MODEL_PREEMPTIONS`, else
/// `bound`, and prints how many executions it explored.
fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(
        std::env::var("MODEL_PREEMPTIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(bound),
    );
    b.max_branches = 1_000_000;
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = runs.clone();
    b.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    println!(
        "explored {} executions",
        runs.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A fresh tree in a 16-frame cache with no background write-back, and
/// its file's path.
fn tree() -> (PageCache, Arc<BTree>, std::path::PathBuf) {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("pagecache-btree-loom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("t{n}"));
    let c = PageCache::new(Config {
        capacity: 16 * 4096,
        policy: PolicyKind::Clock,
        pool: PoolKind::Global,
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        ..Config::default()
    })
    .unwrap();
    let f = c
        .open_with(
            &path,
            OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    let t = Arc::new(BTree::open(f).unwrap());
    (c, t, path)
}

/// The largest key: four entries fill a leaf, so a fifth insert splits it.
fn big_key(b: u8) -> Vec<u8> {
    vec![b; 996]
}

/// A root leaf holding three of the largest entries; two threads insert one
/// more each, so one of them splits the root (a new root above it, the
/// leaf's upper half moved to a new page) while the other inserts, upgrades
/// or restarts. Both entries are found afterwards, in order, with the
/// three old ones, and the count is right.
#[test]
fn two_inserts_race_a_root_split() {
    model(2, || {
        let (c, t, path) = tree();
        for k in [1u8, 3, 5] {
            t.insert(&big_key(k), &[k; 8]).unwrap();
        }
        let t2 = t.clone();
        let other = thread::spawn(move || t2.insert(&big_key(4), &[4; 8]).unwrap());
        assert!(!t.insert(&big_key(2), &[2; 8]).unwrap());
        assert!(!other.join().unwrap());
        let all = t.range(b"", None).unwrap();
        let keys: Vec<u8> = all.iter().map(|(k, _)| k[0]).collect();
        assert_eq!(keys, [1, 2, 3, 4, 5], "an entry lost or misplaced");
        assert!(all.iter().all(|(k, v)| v == &[k[0]; 8]));
        assert_eq!(t.len(), 5);
        for k in 1..=5u8 {
            assert_eq!(t.get(&big_key(k)).unwrap(), Some(vec![k; 8]));
        }
        drop(t);
        c.validate();
        let _ = std::fs::remove_file(&path);
    });
}

/// I0 against a split: a root leaf full of four of the largest keys (empty
/// values, so a short entry still fits) was the main thread's latest
/// insert, so its insert of a short key between them takes the leaf
/// through its last-leaf hint, with no descent, while another thread's
/// append splits that leaf (its upper part, where the short key then
/// belongs, moves to a new leaf). The short key's insert must land where a
/// lookup finds it: in the old leaf if its latch came first, else, its
/// upgrade failing, through I0's test (now outside the old leaf's keys)
/// and a descent, in the new one. One preemption covers that (the split
/// run whole between the hinted view and its upgrade, or anywhere else);
/// two explore 264 k executions in 4.5 minutes.
#[test]
fn a_hinted_insert_races_a_split_of_its_leaf() {
    model(1, || {
        let (c, t, path) = tree();
        for k in [1u8, 3, 5, 7] {
            t.insert(&big_key(k), &[]).unwrap();
        }
        let t2 = t.clone();
        let other = thread::spawn(move || t2.insert(&big_key(9), &[]).unwrap());
        assert!(!t.insert(&[6], &[6; 8]).unwrap());
        assert!(!other.join().unwrap());
        let keys: Vec<u8> = t
            .range(b"", None)
            .unwrap()
            .iter()
            .map(|(k, _)| k[0])
            .collect();
        assert_eq!(keys, [1, 3, 5, 6, 7, 9], "an entry lost or misplaced");
        assert_eq!(
            t.get(&[6]).unwrap(),
            Some(vec![6; 8]),
            "the hinted insert is not where a lookup looks"
        );
        for k in [1u8, 3, 5, 7, 9] {
            assert_eq!(t.get(&big_key(k)).unwrap(), Some(vec![]));
        }
        assert_eq!(t.len(), 6);
        drop(t);
        c.validate();
        let _ = std::fs::remove_file(&path);
    });
}
