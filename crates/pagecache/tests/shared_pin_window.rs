//! A process of a shared cache killed between a pin's RMW and its count
//! (protocol 5.15 P6), or between a run's RMW on its leaf and its count
//! (P7): the pin is in the frame's (or the slot's) count and in no
//! process's, and the recovery's recount drops it, and nothing else: a pin
//! (or a run) another process holds meanwhile stays. And a process killed
//! holding frames with no reference (P8): its recovery frees them.
#![cfg(not(loom))]

mod common;
use common::{reap, spawn_child, TempDir};
use pagecache::{Config, PageCache, PolicyKind};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PS: usize = 4096;

fn shared(dir: &Path) -> PageCache {
    common::shared_in(
        "w",
        dir,
        Config {
            capacity: 64 * PS,
            policy: PolicyKind::Clock,
            dirty_expire: Duration::MAX,
            readahead_max: 0,
            ..Config::default()
        },
    )
}

#[test]
#[ignore = "run by the tests in a second process"]
fn child() {
    let dir = PathBuf::from(std::env::var("PC_WINDOW_DIR").unwrap());
    let c = shared(&dir);
    let f = c.open(dir.join("f")).unwrap();
    match std::env::var("PC_WINDOW").as_deref() {
        // A run's slot pinned, never counted (R1's window).
        Ok("run") => f.die_in_run_window(1, false),
        // A run's slot uncounted, never unpinned (R4's window).
        Ok("unrun") => f.die_in_run_window(1, true),
        // A frame with no reference in hand (P8).
        Ok(what @ ("hand" | "batch")) => c.die_holding_frames(what),
        Ok("frozen") => f.die_frozen_in_index(2),
        Ok("freed") => {
            // The last reference of a page `set_len` cut, dropped.
            let p = f.page(3).unwrap();
            f.set_len(2 * PS as u64).unwrap();
            f.die_freeing(p)
        }
        _ => {
            // ("pin") A pin counted, then one more taken and never counted.
            let p = f.page(1).unwrap();
            f.die_in_pin_window(&p);
        }
    }
}

/// A new directory with a file `f` of four pages of 7s, a shared cache
/// there, and the file open.
fn with_file(name: &str) -> (TempDir, PageCache, pagecache::File) {
    let td = TempDir::new(name);
    std::fs::write(td.path("f"), vec![7u8; 4 * PS]).unwrap();
    let c = shared(&td.0);
    let f = c.open(td.path("f")).unwrap();
    (td, c, f)
}

/// Runs the child in `mode` (its `PC_WINDOW`), which must die by SIGKILL,
/// and waits until its recovery is done. When it died (was reaped).
fn child_dies(c: &PageCache, td: &TempDir, mode: &str) -> std::time::Instant {
    let child = spawn_child(&[
        ("PC_WINDOW_DIR", td.0.to_str().unwrap()),
        ("PC_WINDOW", mode),
    ]);
    let st = reap(child);
    let t0 = std::time::Instant::now();
    assert_eq!(st.signal(), Some(libc::SIGKILL), "the child: {st:?}");
    recovered(c);
    t0
}

/// `op` on another thread, which must end within 20 s; else the frames
/// the cache holds are printed and the test aborts, naming `what` it
/// waited for.
fn ends<T: Send>(c: &PageCache, what: &str, op: impl FnOnce() -> T + Send) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(op()).unwrap());
        rx.recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| {
                eprintln!("{}", c.describe_held());
                eprintln!("{what} never ended");
                std::process::abort()
            })
    })
}

/// Waits until no dead process is left to recover.
fn recovered(c: &PageCache) {
    let seg =
        pagecache::internals::segment::Segment::inspect(c.shared_path().unwrap(), None).unwrap();
    common::wait_until("the dead process recovered", || {
        seg.processes().iter().all(|&(_, live)| live) && seg.recovering() == 0
    });
}

/// The dead process's uncounted pin is dropped by its recovery: a write
/// of the page, which waits for its pins to drain, ends (without the
/// recount it waits for ever: the watchdog aborts), and afterwards no
/// frame holds a reference beyond the cache's own. This process held a
/// pin of the page throughout, which the recount kept: its release after
/// the recovery is the page's last pin, not one too many (a debug
/// assertion, and `validate`).
#[test]
fn a_pin_a_process_took_and_died_before_counting_is_dropped_and_no_other() {
    let (td, c, f) = with_file("pin-window");
    let mine = f.page(1).unwrap();
    let t0 = child_dies(&c, &td, "pin");
    assert_eq!(mine[0], 7);
    drop(mine);
    write_ends(&c, &f, t0, "pin");
    drop(f);
    c.validate();
}

/// Writes page 1 and reads it back; the write must end within 20 s (it
/// waits for the page's pins and its slot's run pins to go).
fn write_ends(c: &PageCache, f: &pagecache::File, t0: std::time::Instant, what: &str) {
    ends(
        c,
        &format!("the write past the dead process's uncounted {what}"),
        || f.write_at(&[9u8; PS], PS as u64).unwrap(),
    );
    eprintln!(
        "the write past the dead process's uncounted {what}: {:?} after its death",
        t0.elapsed()
    );
    let mut b = [0u8; 8];
    f.read_at(&mut b, PS as u64).unwrap();
    assert_eq!(b, [9u8; 8]);
}

/// A run's slot pin the dead process took (`mode` "run") or uncounted
/// (`mode` "unrun") in a window, and nobody counts, is dropped by its
/// recovery: a write of the page, which waits for runs on its slot (5.7
/// W3), ends. This process held a run over the page throughout, which the
/// recount kept: its end after the recovery is the slot's last pin, not
/// one too many (a debug assertion, and `validate`: no leaf run-pinned).
fn a_run_pin_in_a_window_is_dropped_and_no_other(mode: &str) {
    let (td, c, f) = with_file("run-window");
    drop(f.page(1).unwrap());
    let run = f.run(0, 4).unwrap();
    assert_eq!(run.len(), 4, "pages 0..4 in one run");
    let t0 = child_dies(&c, &td, mode);
    drop(run);
    write_ends(&c, &f, t0, &format!("{mode} window's run pin"));
    drop(f);
    c.validate();
}

#[test]
fn a_run_pin_a_process_took_and_died_before_counting_is_dropped_and_no_other() {
    a_run_pin_in_a_window_is_dropped_and_no_other("run");
}

#[test]
fn a_run_pin_a_process_uncounted_and_died_before_dropping_is_dropped_and_no_other() {
    a_run_pin_in_a_window_is_dropped_and_no_other("unrun");
}

/// Frames the dead process held with no reference (`mode`: one taken from
/// the pool, a batch taken off the global stack and not yet pushed on a
/// shard, a frame whose last reference it dropped and had not yet freed)
/// are found by its recovery's census and freed: every frame is back in
/// the pool or in an index (`validate`), and as many are free as before
/// the child ran (without the census, `validate` finds them lost).
fn frames_held_with_no_reference_come_back(mode: &str) {
    let (td, c, f) = with_file("hand");
    drop(f.page(1).unwrap());
    let free = c.free_frames();
    child_dies(&c, &td, mode);
    c.validate();
    assert_eq!(c.free_frames(), free, "every frame the child held back");
    assert_eq!(f.page(1).unwrap()[0], 7, "this process's page still cached");
}

#[test]
fn a_frame_a_process_took_from_the_pool_and_died_holding_comes_back() {
    frames_held_with_no_reference_come_back("hand");
}

#[test]
fn a_batch_a_process_died_moving_between_two_stacks_comes_back() {
    frames_held_with_no_reference_come_back("batch");
}

#[test]
fn a_frame_a_process_died_freeing_comes_back() {
    frames_held_with_no_reference_come_back("freed");
}

/// A frame a dead process froze for an eviction that no intent recorded
/// (a thread with no table) and left in its index: its recovery's census
/// finds it with no reference and the dead process's tag, and, finding it
/// still in its index, takes it out as P5 does instead of freeing it
/// under the index (which would leave the slot naming a frame that holds
/// another page, and readers of the page going round for ever). The page
/// is read again from the file.
#[test]
fn a_page_a_process_froze_with_no_intent_and_died_is_taken_out() {
    let (td, c, f) = with_file("frozen");
    drop(f.page(2).unwrap());
    child_dies(&c, &td, "frozen");
    let b = ends(&c, "a read of the page the dead process froze", || {
        f.page(2).unwrap()[0]
    });
    assert_eq!(b, 7);
    c.validate();
}
