//! The shared segment (protocol 5.11): creation and attachment by name,
//! racing creators, the creator's geometry against an attacher's, corrupt
//! and foreign files, bad names, the file's mode and another user's
//! attempt, the process table (a killed process is seen dead and does not
//! keep the segment from removal), a latch wait between two processes
//! through the segment's own wait table, and the index node arena's free
//! list (protocol 5.12), the free-frame pool and the file table used by
//! two processes at once.
//!
//! Segments are made in a fresh directory per test (not `/dev/shm`), so
//! tests never meet each other's or a user's segments.
#![cfg(not(loom))]

mod common;
use common::{reap, spawn_child, wait_until, TempDir};
use pagecache::internals::alloc::{FrameAllocator, PerCpuPool};
use pagecache::internals::nodes::NodeArena;
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
    policy: 0,
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
            policy: 0,
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
    // The descriptors' offset moved (the header's tables start at byte 56,
    // 16 bytes each: the descriptors' offset is at 72).
    f.write_all_at(&4096u64.to_ne_bytes(), 72).unwrap();
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
            policy: 0,
        },
        Geometry {
            page_size: 4096,
            frames: 0,
            policy: 0,
        },
        Geometry {
            page_size: 1 << 40,
            frames: 1 << 31,
            policy: 0,
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

/// The segment's node arena, and a byte per node id in the frames' table
/// that says who holds it (to catch an id handed out twice).
fn arena(seg: &Segment) -> (NodeArena, &[std::sync::atomic::AtomicU8]) {
    let g = seg.geometry();
    let max = NodeArena::max_nodes(g.frames as usize, g.page_size as usize).unwrap();
    assert!((max as u64) < g.frames * g.page_size);
    // SAFETY: the nodes' table holds an arena of `max` nodes (the layout
    // puts it there), zeroed at creation and used only through arenas; the
    // frames' table holds `frames * page_size` bytes, used by nothing else
    // in these tests; both live as long as `seg`, which the caller keeps
    // longer than the arena.
    unsafe {
        (
            NodeArena::over(seg.table(TableId::Nodes), max),
            std::slice::from_raw_parts(
                seg.table(TableId::Frames).as_ptr().cast(),
                max as usize + 1,
            ),
        )
    }
}

/// Takes and gives back ids (nodes, frames) for `rounds` rounds, holding
/// up to `cap` at a time, checking through `held` (a byte per id, shared by
/// the processes) that no id is handed out while held elsewhere. `take`
/// and `give` get each round's random word; `take` may find none (others
/// hold the rest for a moment).
fn churn(
    held: &[std::sync::atomic::AtomicU8],
    (rounds, seed, cap): (usize, u64, usize),
    take: impl Fn(u64) -> Option<u32>,
    give: impl Fn(u64, u32),
) {
    use std::sync::atomic::Ordering::SeqCst;
    let mut mine = Vec::new();
    let mut x = seed | 1;
    for _ in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if mine.len() < cap && (x % 3 != 0 || mine.is_empty()) {
            if let Some(id) = take(x) {
                assert_eq!(
                    held[id as usize].swap(1, SeqCst),
                    0,
                    "{id} handed out twice"
                );
                mine.push(id);
            }
        } else {
            let id = mine.swap_remove((x as usize / 3) % mine.len());
            assert_eq!(held[id as usize].swap(0, SeqCst), 1, "{id} not held");
            give(x, id);
        }
    }
    for id in mine {
        assert_eq!(held[id as usize].swap(0, SeqCst), 1);
        give(x, id);
    }
}

/// Node ids of `a`, 16 at most held: every take must succeed.
fn churn_nodes(a: &NodeArena, held: &[std::sync::atomic::AtomicU8], rounds: usize, seed: u64) {
    churn(
        held,
        (rounds, seed, 16),
        |_| Some(a.alloc().unwrap()),
        |_, id| a.free_node(id),
    );
}

/// Two processes of two threads each take and give back index nodes of one
/// segment's arena at once: no id is ever held twice, and all come back.
#[test]
fn two_processes_share_the_index_node_arena() {
    let td = TempDir::new("segment-nodes");
    let d = td.0.clone();
    let seg = Segment::open(&d, "n", G, None).unwrap();
    let (a, held) = arena(&seg);
    let child = spawn("nodes", &d);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (a, held) = (&a, held);
            s.spawn(move || churn_nodes(a, held, 500_000, 7 + t));
        }
    });
    assert!(reap(child).success());
    assert_eq!(a.in_use(), 0, "every node back on the free list");
    // The ids handed out stayed a few dozen: freed ones were reused.
    let used = a.alloc().unwrap();
    assert!(used <= 4 * 17, "id {used}: the free list is not reused");
    drop(a);
    drop(seg);
    Segment::remove(&d, "n").unwrap();
}

/// The segment's free-frame pool, and a byte per frame in the frames'
/// table that says who holds it.
fn pool(seg: &Segment) -> (PerCpuPool, &[std::sync::atomic::AtomicU8]) {
    let n = seg.geometry().frames as usize;
    // SAFETY: the pool's table holds the pool the creator placed for `n`
    // frames; the frames' table is used by nothing else in these tests;
    // both live as long as `seg`, which the caller keeps longer.
    unsafe {
        (
            PerCpuPool::over(seg.table(TableId::Pool), n).unwrap(),
            std::slice::from_raw_parts(seg.table(TableId::Frames).as_ptr().cast(), n),
        )
    }
}

/// Frames of `p` on random shards (refills, drains, steals), 12 at most
/// held.
fn churn_frames(p: &PerCpuPool, held: &[std::sync::atomic::AtomicU8], rounds: usize, seed: u64) {
    let shard = |x: u64| (x >> 40) as usize % p.shards();
    churn(
        held,
        (rounds, seed, 12),
        |x| p.alloc_on(shard(x)),
        |x, f| p.free_on(shard(x), f),
    );
}

/// Two processes of two threads each take and give back frames of one
/// segment's free-frame pool at once, on every shard (refills, drains and
/// steals across processes): no frame is ever held twice, none is lost.
#[test]
fn two_processes_share_the_free_frame_pool() {
    let td = TempDir::new("segment-pool");
    let d = td.0.clone();
    let seg = Segment::open(&d, "f", G, None).unwrap();
    let (p, held) = pool(&seg);
    assert_eq!(p.free_count(), 64);
    let child = spawn("frames", &d);
    std::thread::scope(|s| {
        for t in 0..2 {
            let (p, held) = (&p, held);
            s.spawn(move || churn_frames(p, held, 300_000, 11 + t));
        }
    });
    assert!(reap(child).success());
    assert_eq!(p.free_count(), 64, "every frame back");
    p.validate(64);
    drop(p);
    drop(seg);
    Segment::remove(&d, "f").unwrap();
}

/// Where each process writes the ids it got for the files it opened: the
/// frames' table, as u64s (process p's ids from word `p * FILES`).
const FILES: u64 = 100;

fn ids_area(seg: &Segment) -> &[std::sync::atomic::AtomicU64] {
    // SAFETY: the frames' table holds 64 * 4096 bytes, used by nothing
    // else in this test; it lives as long as `seg`.
    unsafe {
        std::slice::from_raw_parts(
            seg.table(TableId::Frames).as_ptr().cast(),
            2 * FILES as usize,
        )
    }
}

/// Opens files (device 5, inodes 0..FILES) from two threads, records the
/// ids in `area[at..]`; every pair of threads must agree.
fn open_files(seg: &Segment, area: &[std::sync::atomic::AtomicU64]) {
    use std::sync::atomic::Ordering::SeqCst;
    let got: Vec<Vec<u64>> = std::thread::scope(|s| {
        let ts: Vec<_> = (0..2u64)
            .map(|t| {
                s.spawn(move || {
                    (0..FILES)
                        .map(|i| {
                            // The two threads go opposite ways: they race on
                            // the middle files.
                            let i = if t == 0 { i } else { FILES - 1 - i };
                            (i, seg.open_file((5, i), 4096 * i, 1 << 40).unwrap().0)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        ts.into_iter()
            .map(|t| {
                let mut v = t.join().unwrap();
                v.sort_unstable();
                v.into_iter().map(|x| x.1).collect()
            })
            .collect()
    });
    assert_eq!(got[0], got[1], "two threads, one file, two ids");
    for (i, id) in got[0].iter().enumerate() {
        area[i].store(*id, SeqCst);
    }
}

/// Two processes of two threads each open the same 100 files (by device
/// and inode) through one segment's file table at once: one entry per
/// file, the same id everywhere, four opens each (the child waits until it
/// sees them); the child's are given back when it detaches, the parent's
/// closes free the entries.
#[test]
fn two_processes_open_each_file_once_in_the_file_table() {
    use std::sync::atomic::Ordering::SeqCst;
    let td = TempDir::new("segment-files");
    let d = td.0.clone();
    let seg = Segment::open(&d, "t", G, None).unwrap();
    let area = ids_area(&seg);
    let child = spawn("files", &d);
    open_files(&seg, &area[..FILES as usize]);
    assert!(reap(child).success());
    for i in 0..FILES as usize {
        let (mine, theirs) = (area[i].load(SeqCst), area[FILES as usize + i].load(SeqCst));
        assert_eq!(mine, theirs, "file {i}: two processes, two ids");
        assert_eq!(seg.file_opens(mine), 2, "the child's opens given back");
    }
    let listed = seg.files().unwrap();
    assert_eq!(listed.len(), FILES as usize);
    assert!(listed
        .iter()
        .all(|f| f.device == 5 && f.opens == 2 && f.len == 4096 * f.inode));
    // Two closes each; the second frees the entry.
    for w in &area[..FILES as usize] {
        let id = w.load(SeqCst);
        let closed: Vec<bool> = (0..2).map(|_| seg.close_file(id).unwrap()).collect();
        assert_eq!(closed, [false, true]);
        assert_eq!(seg.close_file(id).unwrap_err().kind(), ErrorKind::NotFound);
    }
    assert!(seg.files().unwrap().is_empty());
    drop(seg);
    Segment::remove(&d, "t").unwrap();
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

/// A process killed while it holds the file table's lock (protocol
/// 5.14) stalls no one for long: the next open takes the lock over once
/// the holder is seen dead (the child is killed and left a zombie, not
/// reaped, which counts as dead), the watcher gives back its opens and
/// its process slot, and a file it alone had open stays cached for the
/// next opener, whatever that opener's change stamp (an orphan).
#[test]
fn a_process_killed_holding_the_file_table_lock_stalls_no_one() {
    let td = TempDir::new("segment-death");
    let d = td.0.clone();
    let seg = Segment::open(&d, "k", G, None).unwrap();
    let (one, _) = seg.open_file((5, 1), 0, 1 << 40).unwrap();
    let mut child = spawn("die-locked", &d);
    // Inspection never waits: a held lock is reported. (The child takes
    // it after its opens.)
    wait_until("the child to hold the lock", || {
        seg.files()
            .is_err_and(|e| e.kind() == ErrorKind::WouldBlock)
    });
    child.kill().unwrap();
    let t0 = std::time::Instant::now();
    let (three, created) = seg.open_file((5, 3), 0, 1 << 40).unwrap();
    let took = t0.elapsed();
    assert!(created);
    eprintln!("an open waited {took:?} for the dead holder's lock");
    assert!(took < Duration::from_secs(10), "{took:?}");
    wait_until("the dead child's opens given back", || {
        seg.file_opens(one) == 1
    });
    wait_until("its slot freed", || {
        !seg.processes().iter().any(|&(pid, _)| pid == child.id())
    });
    assert!(still_zombie(&child), "the test meant a zombie");
    child.wait().unwrap();
    // The file only the dead child had open: an orphan, adopted.
    assert_eq!(seg.files().unwrap().len(), 3, "files 1, 3 and the orphan 9");
    let (nine, created) = seg.open_file((5, 9), 0, 1 << 40).unwrap();
    assert!(!created, "an orphan is adopted, not made afresh");
    for id in [one, three, nine] {
        assert!(seg.close_file(id).unwrap());
    }
    assert!(seg.files().unwrap().is_empty());
    drop(seg);
    Segment::remove(&d, "k").unwrap();
}

/// A process that detaches while another holds the file table's lock
/// waits for it and is woken by its release, across processes: its
/// detach gives back its opens under that lock, and waits for it on the
/// shared futex (a detach that unregistered its region first slept on a
/// private futex that the other process's unlock never woke: a reader of
/// the lab's `processes` scenario hung there for minutes).
#[test]
fn a_detach_waits_for_another_process_holding_the_file_table_lock() {
    let td = TempDir::new("segment-detach");
    let d = td.0.clone();
    let seg = Segment::open(&d, "w", G, None).unwrap();
    let child = spawn("detach", &d);
    wait_until("the child to attach", || seg.processes().len() == 2);
    seg.debug_with_files_locked(|| {
        // The child sees the lock held, then detaches and waits for it.
        wait_until("the child to start its detach", || {
            seg.processes().len() == 1 || std::fs::metadata(d.join("detaching")).is_ok()
        });
        std::thread::sleep(Duration::from_millis(300));
    });
    let st = reap(child);
    assert!(st.success(), "the child failed: {st}");
    assert_eq!(seg.processes().len(), 1, "the child's slot given back");
    drop(seg);
    Segment::remove(&d, "w").unwrap();
}

fn still_zombie(c: &Child) -> bool {
    let s = std::fs::read_to_string(format!("/proc/{}/stat", c.id())).unwrap_or_default();
    s.rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next())
        == Some("Z")
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
            assert!(!x.wait_unlatched_as(2, 11));
            assert!(!x.snapshot().is_latched());
        }
        "nodes" => {
            let seg = Segment::open(&d, "n", G, None).unwrap();
            let (a, held) = arena(&seg);
            std::thread::scope(|s| {
                for t in 0..2 {
                    let (a, held) = (&a, held);
                    s.spawn(move || churn_nodes(a, held, 500_000, 1000 + t));
                }
            });
        }
        "frames" => {
            let seg = Segment::open(&d, "f", G, None).unwrap();
            let (p, held) = pool(&seg);
            std::thread::scope(|s| {
                for t in 0..2 {
                    let (p, held) = (&p, held);
                    s.spawn(move || churn_frames(p, held, 300_000, 2000 + t));
                }
            });
        }
        "files" => {
            let seg = Segment::open(&d, "t", G, None).unwrap();
            let area = ids_area(&seg);
            open_files(&seg, &area[FILES as usize..]);
            let ids: Vec<u64> = area[FILES as usize..]
                .iter()
                .map(|w| w.load(std::sync::atomic::Ordering::SeqCst))
                .collect();
            wait_until("both processes' opens", || {
                ids.iter().all(|&id| seg.file_opens(id) == 4)
            });
        }
        "die-locked" => {
            let seg = Segment::open(&d, "k", G, None).unwrap();
            seg.open_file((5, 1), 0, 1 << 40).unwrap();
            seg.open_file((5, 9), 0, 1 << 40).unwrap();
            seg.debug_with_files_locked(|| std::thread::sleep(Duration::from_secs(60)));
        }
        "detach" => {
            let seg = Segment::open(&d, "w", G, None).unwrap();
            wait_until("the parent to hold the lock", || {
                seg.files()
                    .is_err_and(|e| e.kind() == ErrorKind::WouldBlock)
            });
            std::fs::write(d.join("detaching"), b"").unwrap();
            drop(seg);
            // Woken by the parent's unlock, not by the bound on a sleep
            // that nobody would wake (the lock's tag-1 path).
            assert_eq!(
                pagecache::internals::wait::untagged_long_sleeps(),
                0,
                "the detach slept on a futex the other process's unlock does not wake"
            );
        }
        "hold" => {
            let _s = Segment::open(&d, "r", G, None).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        r => panic!("unknown role {r}"),
    }
}
