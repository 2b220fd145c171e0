//! Unit tests of the radix tree and its node arena (`mod.rs`).
use super::*;

fn arena() -> NodeArena {
    NodeArena::new(4096).unwrap()
}

#[test]
fn node_is_cache_aligned() {
    assert_eq!(std::mem::align_of::<Node>(), 64);
    assert_eq!(std::mem::size_of::<Node>(), 640);
}

#[test]
fn insert_lookup_remove_and_free_nodes() {
    let a = arena();
    let t = Tree::default();
    let indices = [0u64, 1, 63, 64, 4095, 4096, 1 << 20, (1 << 40) + 5];
    {
        let mut g = t.lock();
        for (i, &idx) in indices.iter().enumerate() {
            assert!(g.insert(&a, idx, i as FrameNo).unwrap().is_ok());
        }
        assert_eq!(g.insert(&a, 64, 99).unwrap(), Err(3));
        let n = g.validate(&a, |_, _, _| {});
        assert_eq!(n, indices.len());
    }
    for (i, &idx) in indices.iter().enumerate() {
        assert_eq!(t.lookup(&a, idx), Some(i as FrameNo), "index {idx}");
    }
    assert_eq!(t.lookup(&a, 2), None);
    assert_eq!(t.lookup(&a, u64::MAX), None);
    let mut g = t.lock();
    let mut all = Vec::new();
    g.entries_from(&a, 64, &mut all);
    assert_eq!(
        all.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![64, 4095, 4096, 1 << 20, (1 << 40) + 5]
    );
    for (i, &idx) in indices.iter().enumerate() {
        assert!(!g.remove(&a, idx, 1000), "wrong frame is not removed");
        assert!(g.remove(&a, idx, i as FrameNo));
    }
    assert_eq!(t.lookup(&a, 0), None);
    assert_eq!(a.in_use(), 0, "all nodes returned");
    assert_eq!(g.validate(&a, |_, _, _| {}), 0);
}

#[test]
fn dirty_tags_are_taken_once_and_survive_growth() {
    let a = arena();
    let t = Tree::default();
    {
        let mut g = t.lock();
        for i in 0..10 {
            g.insert(&a, i, i as FrameNo).unwrap().unwrap();
        }
    }
    t.tag_dirty(&a, 3);
    t.tag_dirty(&a, 7);
    {
        // growth after tagging keeps the tags reachable
        let mut g = t.lock();
        g.insert(&a, 1 << 13, 50).unwrap().unwrap();
        let mut tagged = Vec::new();
        g.validate(&a, |i, _, tg| {
            if tg {
                tagged.push(i)
            }
        });
        assert_eq!(tagged, vec![3, 7]);
        let mut d = Vec::new();
        g.take_dirty(&a, &mut d);
        assert_eq!(d, vec![(3, 3), (7, 7)]);
        d.clear();
        g.take_dirty(&a, &mut d);
        assert!(d.is_empty(), "tags cleared by the first take");
    }
}

#[test]
fn arena_exhaustion_is_an_error_not_a_panic() {
    let a = NodeArena::new(2).unwrap();
    let t = Tree::default();
    let mut g = t.lock();
    g.insert(&a, 0, 0).unwrap().unwrap();
    let e = g.insert(&a, 1 << 30, 1).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
}

#[test]
fn garbage_ids_are_rejected() {
    let a = arena();
    assert!(a.get(0).is_none());
    assert!(a.get(4097).is_none());
    assert!(a.get(4096).is_some());
}

/// The flusher's bounded take clears only the tags of the pages it
/// returns (in range, at most `max`, in index order); every other tag stays
/// set, down the whole path, so a later take or sync finds it.
#[test]
fn a_bounded_take_leaves_the_other_tags() {
    let a = NodeArena::new(64).unwrap();
    let t = Tree::default();
    let pages: Vec<u64> = vec![1, 2, 63, 64, 65, 4095, 4096, 5000, 70000];
    {
        let mut g = t.lock();
        for &p in &pages {
            g.insert(&a, p, p as FrameNo).unwrap().unwrap();
        }
    }
    for &p in &pages {
        t.tag_dirty(&a, p);
    }
    let g = t.lock();
    let mut d = Vec::new();
    g.take_dirty_range(&a, 2, u64::MAX, 3, &mut d);
    assert_eq!(d, vec![(2, 2), (63, 63), (64, 64)]);
    let mut tagged = Vec::new();
    g.validate(&a, |i, _, tg| {
        if tg {
            tagged.push(i)
        }
    });
    assert_eq!(tagged, vec![1, 65, 4095, 4096, 5000, 70000]);
    d.clear();
    g.take_dirty_range(&a, 0, 4096, usize::MAX, &mut d);
    assert_eq!(d, vec![(1, 1), (65, 65), (4095, 4095)]);
    d.clear();
    g.take_dirty(&a, &mut d);
    assert_eq!(d, vec![(4096, 4096), (5000, 5000), (70000, 70000)]);
    d.clear();
    g.take_dirty(&a, &mut d);
    assert!(d.is_empty(), "every tag taken once");
}
