//! Data written and synced is on disk; close and drop write back.
mod common;
use common::*;
use pagecache::OpenOptions;

#[test]
fn synced_data_is_on_disk() {
    let d = TempDir::new("dur");
    let p = d.path("f");
    // No background write-back: six dirty pages are past the default 10%
    // of 32 frames, and the flusher writing some of them before `sync` (as
    // it may) made this test's "nothing on disk yet" and "one write"
    // checks fail now and then.
    let c = pagecache::PageCache::new(pagecache::Config {
        capacity: 32 * PS,
        dirty_background_percent: 100,
        dirty_limit_percent: 100,
        ..pagecache::Config::default()
    })
    .unwrap();
    let f = c
        .open_with(&p, OpenOptions::new().read(true).write(true).create(true))
        .unwrap();
    let data: Vec<u8> = (0..5 * PS as u64 + 77).map(pattern).collect();
    f.write_at(&data, 0).unwrap();
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        0,
        "only dirtied so far"
    );
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), data);
    assert_eq!(f.dirty_pages(), 0);
    let s = c.stats();
    assert_eq!(s.writebacks, 6);
    assert_eq!(
        s.writes, 1,
        "six consecutive dirty pages in one gathered write"
    );
}

#[test]
fn page_mut_dirties_on_drop() {
    let d = TempDir::new("dur");
    let p = d.path("f");
    make_file(&p, 2 * PS as u64);
    // No flusher: the dirty count is asserted before the sync.
    let c = cache_without_flusher(16);
    let f = c.open(&p).unwrap();
    {
        let mut m = f.page_mut(1).unwrap();
        m[..4].copy_from_slice(b"mut!");
    }
    assert_eq!(f.dirty_pages(), 1);
    f.sync().unwrap();
    let disk = std::fs::read(&p).unwrap();
    assert_eq!(&disk[PS..PS + 4], b"mut!");
    assert_eq!(disk[PS + 4], pattern(PS as u64 + 4));
}

#[test]
fn close_writes_back_and_reports() {
    let d = TempDir::new("dur");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    f.write_at(b"closed", 0).unwrap();
    f.close().unwrap();
    assert_eq!(&std::fs::read(&p).unwrap()[..6], b"closed");
}

#[test]
fn dropping_the_last_handle_writes_back() {
    let d = TempDir::new("dur");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let c = cache(16);
    {
        let f = c.open(&p).unwrap();
        f.write_at(b"dropped", 10).unwrap();
    }
    assert_eq!(&std::fs::read(&p).unwrap()[10..17], b"dropped");
}

#[test]
fn open_with_truncate_drops_cached_pages_of_other_handles() {
    let d = TempDir::new("dur");
    let p = d.path("f");
    make_file(&p, 3 * PS as u64);
    let c = cache(16);
    let a = c.open(&p).unwrap();
    a.page(2).unwrap();
    let b = c
        .open_with(&p, OpenOptions::new().write(true).truncate(true))
        .unwrap();
    assert_eq!(a.len(), 0);
    assert_eq!(b.len(), 0);
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
}
