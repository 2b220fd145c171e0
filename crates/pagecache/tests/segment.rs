//! The shared segment (protocol 5.11): creation and attachment by name,
//! racing creators, the creator's geometry against an attacher's, corrupt
//! and foreign files, bad names, the file's mode and another user's
//! attempt, the process table (a killed process is seen dead and does not
//! keep the segment from removal), and a latch wait between two processes
//! through the segment's own wait table.
//!
//! Segments are made in a fresh directory per test (not `/dev/shm`), so
//! tests never meet each other's or a user's segments.
#![cfg(not(loom))]

mod common;
use common::{reap, spawn_child, wait_until, TempDir};
use pagecache::internals::segment::{Geometry, Segment, TableId, LAYOUT_VERSION};
use pagecache::internals::state::{FrameDesc, PinKind, Released, State};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

const G: Geometry = Geometry {
    page_size: 4096,
    frames: 64,
};

fn desc(seg: &Segment, f: usize) -> &FrameDesc {
    assert!(f < seg.geometry().frames as usize);
    // SAFETY: the descriptors' table holds `frames` descriptors,
    // initialised by the creator; they live as long as the mapping.
    unsafe {
        &*seg
            .table(TableId::Descs)
            .cast::<FrameDesc>()
            .as_ptr()
            .add(f)
    }
}

fn spawn(role: &str, d: &Path) -> Child {
    spawn_child(&[("PC_SEG_ROLE", role), ("PC_SEG_DIR", d.to_str().unwrap())])
}

#[test]
fn the_first_open_creates_and_later_ones_attach_to_the_same_memory() {
    let td = TempDir::new("segment-attach");
    let d = td.0.clone();
    let a = Segment::open(&d, "c1", G, None).unwrap();
    assert!(a.created());
    let b = Segment::open(&d, "c1", G, None).unwrap();
    assert!(!b.created());
    assert_eq!(b.geometry(), G);
    assert_ne!(
        a.table(TableId::Descs),
        b.table(TableId::Descs),
        "two mappings"
    );
    // One memory: a pin through one mapping is seen through the other.
    desc(&a, 5).assign(1, 9, State::cached(1));
    assert_eq!(desc(&b, 5).identity(), (1, 9));
    desc(&b, 5).try_pin(PinKind::User).unwrap();
    assert_eq!(desc(&a, 5).snapshot().refs(), 2);
    // The frames, too.
    // SAFETY: frame bytes of a test-owned segment, no other user.
    unsafe {
        *a.table(TableId::Frames).as_ptr().add(4096 * 3 + 7) = 42;
        assert_eq!(*b.table(TableId::Frames).as_ptr().add(4096 * 3 + 7), 42);
    }
    let me = std::process::id();
    assert_eq!(a.processes(), vec![(me, true), (me, true)]);
    drop(b);
    assert_eq!(a.processes(), vec![(me, true)]);
    // Only this user may open it.
    let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    drop(a);
    Segment::remove(&d, "c1").unwrap();
    assert!(!d.join("pagecache.c1").exists());
}

#[test]
fn racing_creators_make_one_segment() {
    let td = TempDir::new("segment-race");
    let d = td.0.clone();
    for round in 0..20 {
        let name = format!("r{round}");
        let segs: Vec<Segment> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..6)
                .map(|_| s.spawn(|| Segment::open(&d, &name, G, None).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            segs.iter().filter(|s| s.created()).count(),
            1,
            "round {round}"
        );
        desc(&segs[0], 0).assign(3, round, State::cached(1));
        for s in &segs {
            assert_eq!(
                desc(s, 0).identity(),
                (3, round),
                "all attached to one segment"
            );
        }
        drop(segs);
        Segment::remove(&d, &name).unwrap();
    }
    // No temporary file left behind.
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}

#[test]
fn an_attacher_asking_for_another_geometry_is_refused_naming_both() {
    let td = TempDir::new("segment-geom");
    let d = td.0.clone();
    let _a = Segment::open(&d, "g", G, None).unwrap();
    let e = Segment::open(
        &d,
        "g",
        Geometry {
            page_size: 8192,
            frames: 64,
        },
        None,
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let m = e.to_string();
    assert!(
        m.contains("64 frames of 4096 bytes") && m.contains("64 frames of 8192 bytes"),
        "{m}"
    );
    assert!(m.contains("pagecache.g"), "{m}");
}

#[test]
fn foreign_short_and_corrupt_files_are_clear_errors() {
    let td = TempDir::new("segment-bad");
    let d = td.0.clone();
    let expect = |name: &str, words: &[&str]| {
        let e = Segment::open(&d, name, G, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData, "{name}: {e}");
        let m = e.to_string();
        assert!(m.contains(&format!("pagecache.{name}")), "{m}");
        for w in words {
            assert!(m.contains(w), "{name}: {m:?} lacks {w:?}");
        }
    };
    std::fs::write(d.join("pagecache.empty"), b"").unwrap();
    expect("empty", &["0 bytes, shorter than a header"]);
    std::fs::write(d.join("pagecache.text"), vec![b'x'; 64 << 10]).unwrap();
    expect("text", &["wrong magic"]);
    // A real segment, then altered in its file.
    let path = d.join("pagecache.v");
    drop(Segment::open(&d, "v", G, None).unwrap());
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&(LAYOUT_VERSION + 1).to_ne_bytes(), 8)
        .unwrap();
    expect("v", &[&format!("layout version {}", LAYOUT_VERSION + 1)]);
    f.write_all_at(&LAYOUT_VERSION.to_ne_bytes(), 8).unwrap();
    assert!(Segment::open(&d, "v", G, None).is_ok(), "restored");
    let len = f.metadata().unwrap().len();
    f.set_len(len + 4096).unwrap();
    expect("v", &["in all, the file has"]);
    f.set_len(len).unwrap();
    // The descriptors' offset moved (the header's tables start at byte 48,
    // 16 bytes each: the descriptors' offset is at 64).
    f.write_all_at(&4096u64.to_ne_bytes(), 64).unwrap();
    expect("v", &["not where its geometry puts them"]);
    // Names.
    for bad in ["", "a/b", ".hidden", &"n".repeat(201), "sp ace"] {
        let e = Segment::open(&d, bad, G, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
    }
    // A geometry that cannot be.
    for g in [
        Geometry {
            page_size: 4095,
            frames: 1,
        },
        Geometry {
            page_size: 4096,
            frames: 0,
        },
        Geometry {
            page_size: 1 << 40,
            frames: 1 << 31,
        },
    ] {
        let e = Segment::open(&d, "geom", g, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{g:?}");
    }
    assert!(!d.join("pagecache.geom").exists());
}

/// Another user cannot attach to a segment made with the default mode
/// (the test switches users in a child process, so it needs root).
#[test]
fn another_user_cannot_attach() {
    // SAFETY: a plain getter.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: cannot switch users to test it (the mode is checked elsewhere)");
        return;
    }
    let td = TempDir::new("segment-perm");
    let d = td.0.clone();
    // The directory must let the other user reach the file.
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _a = Segment::open(&d, "p", G, None).unwrap();
    let st = reap(spawn("nobody", &d));
    assert!(st.success(), "the child (uid 65534) failed: {st}");
}

/// A process sleeping for a latch in one process is woken by the unlatch
/// in another, through the segment's own wait table.
#[test]
fn a_latch_wait_crosses_processes_through_the_segment() {
    let td = TempDir::new("segment-wait");
    let d = td.0.clone();
    let a = Segment::open(&d, "w", G, None).unwrap();
    let x = desc(&a, 7);
    x.assign(2, 11, State::cached(1));
    x.try_pin(PinKind::User).unwrap();
    assert!(x.try_latch());
    let child = spawn("latch", &d);
    // The child attaches (a second live process) and sleeps.
    wait_until("the child to attach", || a.processes().len() == 2);
    std::thread::sleep(Duration::from_millis(50));
    assert!(still_running(&child), "the child returned while latched");
    assert_eq!(x.unlatch_release(), Released::Alive);
    assert!(reap(child).success());
    drop(a);
    Segment::remove(&d, "w").unwrap();
}

fn still_running(c: &Child) -> bool {
    // The child's /proc entry: still running (or sleeping), not a zombie.
    let s = std::fs::read_to_string(format!("/proc/{}/stat", c.id())).unwrap_or_default();
    let state = s
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    matches!(state, Some("S") | Some("R"))
}

/// Removal waits for no one but refuses while a live process is attached;
/// a killed process's slot is seen dead and does not keep it.
#[test]
fn removal_is_refused_while_a_live_process_is_attached_and_not_for_a_dead_one() {
    let td = TempDir::new("segment-remove");
    let d = td.0.clone();
    drop(Segment::open(&d, "r", G, None).unwrap());
    let mut child = spawn("hold", &d);
    let seg = Segment::attach(&d.join("pagecache.r"), None).unwrap();
    wait_until("the child to attach", || seg.processes().len() == 2);
    drop(seg);
    let e = Segment::remove(&d, "r").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ResourceBusy);
    assert!(e.to_string().contains(&child.id().to_string()), "{e}");
    child.kill().unwrap();
    child.wait().unwrap();
    let seg = Segment::attach(&d.join("pagecache.r"), None).unwrap();
    assert!(
        seg.processes().contains(&(child.id(), false)),
        "{:?}",
        seg.processes()
    );
    drop(seg);
    Segment::remove(&d, "r").unwrap();
}

/// The other process of the tests above (ignored: they run it).
#[test]
#[ignore = "run by the tests above in a second process"]
fn child() {
    let (Ok(role), Ok(d)) = (std::env::var("PC_SEG_ROLE"), std::env::var("PC_SEG_DIR")) else {
        eprintln!("child: run by the other tests of this file");
        return;
    };
    let d = PathBuf::from(d);
    match role.as_str() {
        "nobody" => {
            // SAFETY: plain syscalls; this process only opens a file after.
            unsafe {
                assert_eq!(libc::setgid(65534), 0);
                assert_eq!(libc::setuid(65534), 0);
            }
            let e = Segment::open(&d, "p", G, None).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
            assert!(
                e.to_string().contains("does not let this user attach"),
                "{e}"
            );
        }
        "latch" => {
            let s = Segment::open(&d, "w", G, None).unwrap();
            assert!(!s.created());
            let x = desc(&s, 7);
            assert!(x.snapshot().is_latched());
            x.wait_unlatched_as(2, 11);
            assert!(!x.snapshot().is_latched());
        }
        "hold" => {
            let _s = Segment::open(&d, "r", G, None).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        r => panic!("unknown role {r}"),
    }
}
