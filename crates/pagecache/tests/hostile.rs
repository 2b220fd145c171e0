//! Every public entry point against hostile arguments: a clear error (or a
//! defined result), never a panic, a hang or lost data. `docs/errors.md`
//! lists each case with what it gets.
mod common;
use common::*;
use pagecache::{os_error, Config, OpenOptions, PageCache};
use std::io::ErrorKind;

#[track_caller]
fn kind<T: std::fmt::Debug>(r: std::io::Result<T>) -> ErrorKind {
    let e = r.expect_err("an error");
    assert!(!e.to_string().is_empty());
    e.kind()
}

#[test]
fn offsets_lengths_and_indexes_near_the_limits() {
    let d = TempDir::new("hostile");
    let p = d.path("f");
    make_file(&p, 3 * PS as u64 + 10);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let mut buf = [0u8; 16];
    assert_eq!(f.read_at(&mut buf, u64::MAX).unwrap(), 0);
    assert_eq!(f.read_at(&mut buf, u64::MAX - 3).unwrap(), 0);
    assert_eq!(f.read_at(&mut [], 0).unwrap(), 0);
    assert_eq!(f.read_at(&mut [], u64::MAX).unwrap(), 0);
    f.write_at(&[], u64::MAX).unwrap(); // nothing to write: nothing changes
    assert_eq!(f.len(), 3 * PS as u64 + 10);
    assert_eq!(kind(f.write_at(b"x", u64::MAX)), ErrorKind::InvalidInput);
    assert_eq!(
        kind(f.write_at(b"xy", i64::MAX as u64)),
        ErrorKind::InvalidInput
    );
    assert_eq!(kind(f.set_len(u64::MAX)), ErrorKind::InvalidInput);
    let e = f.set_len(i64::MAX as u64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::FileTooLarge, "{e}");
    assert_eq!(os_error(&e), Some(libc::EFBIG));
    assert_eq!(kind(f.page(u64::MAX)), ErrorKind::UnexpectedEof);
    assert_eq!(kind(f.page(4)), ErrorKind::UnexpectedEof);
    assert_eq!(kind(f.page_mut(u64::MAX)), ErrorKind::UnexpectedEof);
    let mut out = Vec::new();
    assert_eq!(f.pages(u64::MAX, &mut out, usize::MAX).unwrap(), 0);
    assert_eq!(f.pages(0, &mut out, 0).unwrap(), 0);
    assert_eq!(f.pages(0, &mut out, usize::MAX).unwrap(), 4);
    drop(out);
    assert_eq!(f.len(), 3 * PS as u64 + 10, "nothing changed");
    c.validate();
}

#[test]
fn a_gang_larger_than_the_cache_is_out_of_memory_not_a_hang() {
    let d = TempDir::new("hostile");
    let p = d.path("f");
    make_file(&p, 64 * PS as u64);
    let c = cache(8);
    let f = c.open(&p).unwrap();
    let mut out = Vec::new();
    let e = f.pages(0, &mut out, usize::MAX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
    out.clear(); // the pins it took are the caller's to drop
    assert_eq!(f.pages(0, &mut out, 4).unwrap(), 4);
    drop(out);
    c.validate();
}

#[test]
fn configurations_at_and_past_their_limits() {
    let bad = [
        Config {
            capacity: 0,
            ..Config::default()
        },
        Config {
            capacity: 3 * PS,
            ..Config::default()
        },
        Config {
            capacity: usize::MAX,
            ..Config::default()
        },
        Config {
            page_size: 0,
            ..Config::default()
        },
        Config {
            page_size: 4095,
            ..Config::default()
        },
        Config {
            page_size: 2048,
            ..Config::default()
        },
        Config {
            page_size: 4 << 20,
            capacity: 64 << 20,
            ..Config::default()
        },
        Config {
            page_size: usize::MAX,
            ..Config::default()
        },
    ];
    for cfg in bad {
        let e = PageCache::new(cfg).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::OutOfMemory),
            "{cfg:?}: {e}"
        );
    }
    assert!(PageCache::new(Config {
        capacity: 4 * PS,
        ..Config::default()
    })
    .is_ok());
    assert!(PageCache::new(Config {
        capacity: 8 << 20,
        page_size: 2 << 20,
        ..Config::default()
    })
    .is_ok());
    let c = cache(16);
    assert_eq!(kind(c.anon(u64::MAX)), ErrorKind::InvalidInput);
    assert_eq!(kind(c.anon(17 * PS as u64)), ErrorKind::InvalidInput);
    let r = c.anon(0).unwrap();
    assert_eq!(r.pages(), 0);
    assert_eq!(kind(r.page(0)), ErrorKind::UnexpectedEof);
    r.free(0..u64::MAX); // clamped
    let r = c.anon(PS as u64).unwrap();
    assert_eq!(kind(r.page_mut(u64::MAX)), ErrorKind::UnexpectedEof);
    #[allow(clippy::reversed_empty_ranges)]
    r.free(u64::MAX..0); // reversed: empty
}

#[test]
fn special_files_are_refused_with_a_reason_and_never_hang() {
    let d = TempDir::new("hostile");
    let c = cache(16);
    let fifo = d.path("fifo");
    let cpath = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
    for (p, ro) in [
        (fifo.as_path(), true),
        (fifo.as_path(), false),
        (std::path::Path::new("/dev/null"), false),
        (std::path::Path::new("/dev/zero"), true),
        (std::path::Path::new("/proc/self/status"), true),
        (
            std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled"),
            true,
        ),
        (d.0.as_path(), true),
    ] {
        if !p.exists() {
            continue;
        }
        let opts = if ro {
            *OpenOptions::new().read(true)
        } else {
            *OpenOptions::new().read(true).write(true)
        };
        let e = c.open_with(p, &opts).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{}: {e}", p.display());
        assert!(e.to_string().contains(p.to_str().unwrap()), "{e}");
    }
    assert_eq!(kind(c.open(d.path("missing"))), ErrorKind::NotFound);
    let e = c
        .open_with(d.path("x"), OpenOptions::new().read(true).create(true))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "create needs write");
}

#[test]
fn read_only_handles_refuse_every_change() {
    let d = TempDir::new("hostile");
    let p = d.path("f");
    make_file(&p, PS as u64);
    let c = cache(16);
    let f = c.open_with(&p, OpenOptions::new().read(true)).unwrap();
    assert_eq!(kind(f.write_at(b"x", 0)), ErrorKind::PermissionDenied);
    assert_eq!(kind(f.page_mut(0)), ErrorKind::PermissionDenied);
    assert_eq!(kind(f.set_len(0)), ErrorKind::PermissionDenied);
    f.sync().unwrap(); // nothing dirty: nothing to do
    assert_eq!(std::fs::read(&p).unwrap()[0], pattern(0));
}

#[test]
fn a_file_shrunk_behind_the_caches_back_reads_zeros_and_keeps_its_length() {
    // The documented coherence caveat: the cache is the file's only
    // writer. Breaking that must not panic, hang or report a wrong length.
    let d = TempDir::new("hostile");
    let p = d.path("f");
    make_file(&p, 8 * PS as u64);
    let c = cache(16);
    let f = c.open(&p).unwrap();
    let mut buf = vec![0u8; PS];
    f.read_at(&mut buf, 0).unwrap(); // page 0 cached
    f.write_at(b"dirty", 2 * PS as u64).unwrap(); // page 2 dirty
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .set_len(0)
        .unwrap(); // behind our back
    assert_eq!(f.len(), 8 * PS as u64, "the cache's length stands");
    let mut b = vec![0xFFu8; PS];
    assert_eq!(f.read_at(&mut b, 5 * PS as u64).unwrap(), PS);
    assert!(
        b.iter().all(|&x| x == 0),
        "an uncached page now reads zeros"
    );
    f.read_at(&mut b, 0).unwrap();
    assert_eq!(b[..], buf[..], "a cached page keeps its bytes");
    f.sync().unwrap();
    assert_eq!(
        std::fs::metadata(&p).unwrap().len(),
        8 * PS as u64,
        "length persisted"
    );
    assert_eq!(&std::fs::read(&p).unwrap()[2 * PS..2 * PS + 5], b"dirty");
    c.validate();
}
