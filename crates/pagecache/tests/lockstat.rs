//! Lock profiling: populated with the `lockstat` feature, empty without.
mod common;
use common::*;
use pagecache::lockstat;

#[test]
fn lock_profile_counts_classes_only_when_enabled() {
    let d = TempDir::new("lockstat");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    // Misses and evictions take the pool, shard and tree locks; two threads
    // writing one page make latch waits likely.
    let mut buf = vec![0u8; PS];
    for i in 0..64 {
        f.read_exact_at(&mut buf, i * PS as u64).unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let f = &f;
            s.spawn(move || {
                for _ in 0..200 {
                    f.write_at(&[t; 64], 0).unwrap();
                    let _pin = f.page(0).unwrap();
                }
            });
        }
    });
    let prof = c.lock_profile();
    if !lockstat::ENABLED {
        assert!(prof.is_empty(), "no profiling without the feature");
        return;
    }
    let get = |name: &str| prof.iter().find(|p| p.name == name).unwrap().clone();
    assert!(
        get("file index (tree lock)").count >= 64,
        "each miss takes the tree lock"
    );
    let pool = get("frame pool (global)").count + get("frame pool (per-CPU shard)").count;
    assert!(pool >= 64, "each miss allocates a frame");
    for w in prof.windows(2) {
        assert!(w[0].wait_total >= w[1].wait_total, "sorted by wait_total");
    }
    let table = lockstat::format(&prof);
    assert!(table.lines().next().unwrap().contains("wait_total"));
    assert_eq!(table.lines().count(), prof.len() + 1);
    println!("{table}");
}
