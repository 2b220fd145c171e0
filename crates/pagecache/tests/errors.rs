//! Every error kind of `docs/contract.md` section 4, from the input that causes it,
//! with the cache still usable afterwards.
mod common;
use common::*;
use pagecache::{Config, OpenOptions, PageCache};
use std::io::ErrorKind;
use std::time::{Duration, Instant};

#[test]
fn missing_file_is_not_found_and_names_the_file() {
    let d = TempDir::new("err");
    let c = cache(16);
    let e = c.open(d.path("nope")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains("nope"), "{e}");
    let f = c
        .open_with(
            d.path("nope"),
            OpenOptions::new().read(true).write(true).create(true),
        )
        .unwrap();
    assert!(f.is_empty());
}

#[test]
fn bad_config_is_invalid_input() {
    for cfg in [
        Config {
            capacity: 1 << 20,
            page_size: 3000,
            ..Config::default()
        },
        Config {
            capacity: 1 << 20,
            page_size: 2048,
            ..Config::default()
        },
        Config {
            capacity: 1 << 30,
            page_size: 4 << 20,
            ..Config::default()
        },
        Config {
            capacity: 3 * 4096,
            page_size: 4096,
            ..Config::default()
        },
        Config {
            capacity: 0,
            ..Config::default()
        },
    ] {
        let e = PageCache::new(cfg).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{cfg:?}");
    }
    assert!(PageCache::new(Config {
        capacity: 4 * 4096,
        ..Config::default()
    })
    .is_ok());
    assert!(PageCache::new(Config {
        capacity: 8 << 20,
        page_size: 2 << 20,
        ..Config::default()
    })
    .is_ok());
}

#[test]
fn bad_arguments_are_invalid_input() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let e = f.write_at(b"abc", u64::MAX - 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(
        f.set_len(u64::MAX).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let e = c
        .open_with(&p, OpenOptions::new().read(true).create(true))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = c.open(&d.0).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::IsADirectory),
        "{e}"
    );
    f.write_at(b"ok", 0).unwrap();
}

#[test]
fn writes_through_a_read_only_handle_are_permission_denied() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, 2 * PS as u64);
    let c = cache(16);
    let r = c.open_with(&p, OpenOptions::new().read(true)).unwrap();
    assert_eq!(
        r.write_at(b"x", 0).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(
        r.page_mut(0).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(
        r.set_len(0).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert!(r.page(1).is_ok());
    assert_eq!(r.len(), 2 * PS as u64);
}

#[test]
fn page_past_the_end_is_unexpected_eof() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let e = f.page(1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("page 1"), "{e}");
}

#[test]
fn all_frames_pinned_is_out_of_memory_promptly_and_recoverable() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, 32 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let pins: Vec<_> = (0..16).map(|i| f.page(i).unwrap()).collect();
    let t = Instant::now();
    let e = f.page(20).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory);
    assert!(t.elapsed() < Duration::from_secs(5), "prompt, no deadlock");
    let mut buf = [0u8; 4];
    assert_eq!(
        f.read_at(&mut buf, 25 * PS as u64).unwrap_err().kind(),
        ErrorKind::OutOfMemory
    );
    // Cached pages are still readable while everything is pinned.
    f.read_at(&mut buf, 3 * PS as u64).unwrap();
    assert_eq!(buf[0], pattern(3 * PS as u64));
    drop(pins);
    let pg = f.page(20).unwrap();
    assert_eq!(pg[0], pattern(20 * PS as u64));
    drop(pg);
    c.validate();
}

#[test]
fn failed_read_passes_the_os_error_through_and_the_next_read_succeeds() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    faults.fail_nth_read(1, libc::EIO);
    let e = f.page(2).unwrap_err();
    assert_eq!(
        e.kind(),
        std::io::Error::from_raw_os_error(libc::EIO).kind()
    );
    let src = std::error::Error::source(e.get_ref().unwrap()).unwrap();
    let os = src.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(os.raw_os_error(), Some(libc::EIO));
    assert!(e.to_string().contains("page 2"), "{e}");
    assert_eq!(c.stats().read_errors, 1);
    // The failed page was not left in the cache: the next access reads again.
    let pg = f.page(2).unwrap();
    assert_eq!(pg[9], pattern(2 * PS as u64 + 9));
    drop(pg);
    c.validate();
}

#[test]
fn enospc_on_sync_is_storage_full_and_keeps_the_data() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, 0);
    let (c, faults) = faulty(16);
    let f = c.open(&p).unwrap();
    f.write_at(&vec![5u8; 3 * PS], 0).unwrap();
    faults.enospc_past(PS as u64);
    let e = f.sync().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull);
    assert_eq!(f.dirty_pages(), 3, "pages stay dirty");
    let mut b = vec![0u8; 3 * PS];
    f.read_at(&mut b, 0).unwrap();
    assert!(b.iter().all(|&x| x == 5), "data kept in the cache");
    faults.clear();
    f.sync().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), vec![5u8; 3 * PS]);
    c.validate();
}

#[test]
fn short_reads_are_completed() {
    let d = TempDir::new("err");
    let p = d.path("f");
    make_file(&p, 4 * PS as u64);
    let (c, faults) = faulty(16);
    faults.short_reads(100);
    let f = c.open(&p).unwrap();
    let pg = f.page(1).unwrap();
    assert!(pg
        .iter()
        .enumerate()
        .all(|(i, &b)| b == pattern((PS + i) as u64)));
}
