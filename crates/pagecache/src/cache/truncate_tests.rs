//! Tests of removals a dead process left half-done (5.6, 5.15 P6e).

use crate::{Config, PageCache};

/// A page left marked REMOVED in its index (a remover whose process
/// died between T1 and T2, made here by hand) is taken out by its next
/// reader, which then reads the file, instead of finding it for ever.
#[test]
fn a_removed_page_left_in_its_index_is_taken_out_by_its_reader() {
    let dir = std::env::temp_dir().join(format!("pc-finish-removal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f");
    std::fs::write(&path, vec![7u8; 3 * 4096]).unwrap();
    let c = PageCache::new(Config {
        capacity: 16 * 4096,
        ..Config::default()
    })
    .unwrap();
    let f = c.open(&path).unwrap();
    assert_eq!(f.page(1).unwrap()[0], 7);
    let (inner, fs) = f.parts();
    let fr = fs.tree.lookup(&inner.nodes, 1).unwrap();
    {
        let _g = fs.tree.lock();
        inner.desc(fr).mark_removed();
    }
    let p = f.page(1).unwrap();
    assert!(p.iter().all(|&b| b == 7));
    // (Its frame may hold the page again, freed and taken anew.)
    let now = fs.tree.lookup(&inner.nodes, 1).unwrap();
    assert!(
        !inner.desc(now).snapshot().is_removed(),
        "the removed frame is out"
    );
    drop(p);
    c.validate();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same page left by a dead remover of a shared cache, reached
/// next by a cut instead of a reader: the cut finishes its removal
/// (no second T1 of a page already REMOVED, no dirty count given back
/// twice) and its frame comes back.
#[test]
fn a_cut_finishes_a_removal_a_dead_remover_left_in_a_shared_cache() {
    let (dir, c, f) = shared_over("cut-removed");
    assert_eq!(f.page(1).unwrap()[0], 7);
    f.write_at(&[9u8; 8], 2 * 4096).unwrap();
    let dirty = c.dirty_pages();
    let (inner, fs) = f.parts();
    let fr = fs.tree.lookup(&inner.nodes, 1).unwrap();
    {
        let _g = fs.tree.lock();
        inner.desc(fr).mark_removed();
    }
    f.set_len(4096).unwrap();
    assert_eq!(fs.tree.lookup(&inner.nodes, 1), None, "page 1 still cached");
    assert_eq!(fs.tree.lookup(&inner.nodes, 2), None, "page 2 still cached");
    // Page 2's DIRTY counted off once, by this cut.
    assert_eq!(c.dirty_pages(), dirty - 1);
    done(dir, c, f);
}

/// `validate` once the file is closed, then the cache dropped and its
/// directory removed.
fn done(dir: std::path::PathBuf, c: PageCache, f: crate::File) {
    drop(f);
    c.validate();
    drop(c);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The recovery's scan of removed pages (5.15 P6e), with a second to
/// recount in.
fn recover_removed(inner: &crate::cache::Inner) {
    inner.recover_removed_frames(std::time::Instant::now() + std::time::Duration::from_secs(1));
}

/// A shared cache over a 4-page file of 7s in a fresh directory.
fn shared_over(tag: &str) -> (std::path::PathBuf, PageCache, crate::File) {
    let dir = std::env::temp_dir().join(format!("pc-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("f");
    std::fs::write(&path, vec![7u8; 4 * 4096]).unwrap();
    let c = PageCache::shared_with(
        tag,
        Config {
            capacity: 16 * 4096,
            policy: crate::PolicyKind::Clock,
            dirty_expire: std::time::Duration::MAX,
            readahead_max: 0,
            ..Config::default()
        },
        &crate::SharedOptions {
            dir: Some(dir.clone()),
            group: None,
        },
    )
    .unwrap();
    let f = c.open(&path).unwrap();
    (dir, c, f)
}

/// 5.15 P6e: a page a remover took out of its index and died before it
/// dropped the cache's reference (made here by hand, under the tree lock
/// as a remover does): nobody accounts for that reference, so the
/// recovery's scan drops it and frees the frame (`validate` counts every
/// frame back).
#[test]
fn the_reference_a_dead_remover_had_in_hand_is_dropped_and_its_frame_freed() {
    let (dir, c, f) = shared_over("dead-remover");
    assert_eq!(f.page(1).unwrap()[0], 7);
    let (inner, fs) = f.parts();
    let fr = fs.tree.lookup(&inner.nodes, 1).unwrap();
    {
        let mut g = fs.tree.lock();
        inner.desc(fr).mark_removed();
        assert!(g.remove(&inner.nodes, 1, fr));
    }
    assert_eq!(inner.desc(fr).snapshot().refs(), 1);
    recover_removed(inner);
    assert_eq!(inner.desc(fr).snapshot().refs(), 0, "the reference dropped");
    assert_eq!(f.page(1).unwrap()[0], 7);
    done(dir, c, f);
}

/// The references of removed pages that something does account for stay:
/// a page cut off while a run holds it (its cache reference kept by the
/// deferred-free queue until the run ends) and one a reader still pins
/// (counted). The scan drops neither; each frame is freed by its last
/// holder.
#[test]
fn the_scan_keeps_a_queued_reference_and_a_counted_pin_of_removed_pages() {
    let (dir, c, f) = shared_over("removed-kept");
    let run = f.run(2, 1).unwrap();
    let pinned = f.page(3).unwrap();
    let (inner, fs) = f.parts();
    let (f2, f3) = (
        fs.tree.lookup(&inner.nodes, 2).unwrap(),
        fs.tree.lookup(&inner.nodes, 3).unwrap(),
    );
    f.set_len(2 * 4096).unwrap();
    let (r2, r3) = (
        inner.desc(f2).snapshot().refs(),
        inner.desc(f3).snapshot().refs(),
    );
    assert!(inner.desc(f2).snapshot().is_removed() && r2 == 1, "queued");
    assert!(inner.desc(f3).snapshot().is_removed() && r3 == 1, "pinned");
    recover_removed(inner);
    assert_eq!(inner.desc(f2).snapshot().refs(), r2);
    assert_eq!(inner.desc(f3).snapshot().refs(), r3);
    assert!(run.page(0).iter().all(|&b| b == 7));
    assert!(pinned.iter().all(|&b| b == 7));
    drop((run, pinned));
    assert_eq!(inner.desc(f2).snapshot().refs(), 0);
    assert_eq!(inner.desc(f3).snapshot().refs(), 0);
    done(dir, c, f);
}

/// 5.15 P5: a page an evictor froze (its count to zero) and died before
/// it took it out of its index (made here by hand), reached by a cut
/// before the recovery: the cut gives it its cache reference back and
/// removes it as any page (it used to mark a frame with no reference and
/// drop a reference it did not have), and its frame comes back.
#[test]
fn a_cut_removes_a_page_a_dead_evictor_left_frozen_in_its_index() {
    let (dir, c, f) = shared_over("frozen-cut");
    assert_eq!(f.page(2).unwrap()[0], 7);
    let (inner, fs) = f.parts();
    let fr = fs.tree.lookup(&inner.nodes, 2).unwrap();
    {
        let _g = fs.tree.lock();
        inner.desc(fr).freeze(1).unwrap();
    }
    f.set_len(4096).unwrap();
    assert_eq!(fs.tree.lookup(&inner.nodes, 2), None);
    assert_eq!(inner.desc(fr).snapshot().refs(), 0);
    f.set_len(4 * 4096).unwrap();
    assert!(f.page(2).unwrap().iter().all(|&b| b == 0), "cut and grown");
    done(dir, c, f);
}
