//! Unit tests of the pin counts (`ledger.rs`, protocol 5.15).
use super::*;

/// An area over heap memory for `frames` frames, registered for fake
/// descriptors at `descs` (never dereferenced: only their addresses
/// are counted: kernel addresses, which no real descriptor of another
/// test has), as tag 7 with row 0; unregistered when dropped.
struct Fake {
    mem: *mut u8,
    layout: std::alloc::Layout,
    area: Area,
    descs: usize,
}

impl Fake {
    fn new(frames: usize, descs: usize) -> Fake {
        let layout = std::alloc::Layout::from_size_align(Area::bytes(frames), 4096).unwrap();
        // SAFETY: a non-zero size.
        let mem = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!mem.is_null());
        let area = Area {
            base: mem as usize,
            frames,
        };
        assert_eq!(area.claim_row(7), Some(0));
        // SAFETY: the memory lives until Drop, which unregisters first.
        assert!(unsafe { register(area, descs, 7, 0) });
        Fake {
            mem,
            layout,
            area,
            descs,
        }
    }

    fn desc(&self, f: usize) -> usize {
        self.descs + 64 * f
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        // SAFETY: no pin is being counted (the test's threads ended).
        unsafe { unregister(self.descs) };
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.mem, self.layout) };
    }
}

fn counts(a: &Area) -> Vec<(usize, i64)> {
    a.frame_counts()
        .into_iter()
        .enumerate()
        .filter(|&(_, n)| n != 0)
        .collect()
}

#[test]
fn pins_released_by_their_thread_leave_nothing_counted() {
    let fake = Fake::new(100, 0xffff_9000_0000_0000);
    for f in 0..50 {
        count(fake.desc(f), 1);
        count(fake.desc(f + 1), 1);
        count(fake.desc(f + 1), -1);
    }
    assert_eq!(counts(&fake.area).len(), 50);
    for f in 0..50 {
        count(fake.desc(f), -1);
    }
    assert_eq!(counts(&fake.area), []);
}

#[test]
fn a_pin_released_by_another_thread_nets_to_zero_and_a_full_table_folds() {
    let fake = Fake::new(1000, 0xffff_a000_0000_0000);
    // More pins than a table holds: folded into the row on the way.
    for f in 0..900 {
        count(fake.desc(f), 1);
    }
    let d = fake.descs;
    std::thread::spawn(move || {
        for f in 0..900 {
            count(d + 64 * f, -1);
        }
        // This thread's table is folded into the row as it exits.
    })
    .join()
    .unwrap();
    assert_eq!(counts(&fake.area), []);
    count(fake.desc(3), 1);
    count(fake.desc(3), 1);
    assert_eq!(counts(&fake.area), [(3, 2)]);
    count(fake.desc(3), -1);
    count(fake.desc(3), -1);
}

#[test]
fn a_processs_counts_are_taken_whole_once_and_its_tables_freed_after() {
    let fake = Fake::new(100, 0xffff_b000_0000_0000);
    let d = fake.descs;
    count(fake.desc(5), 1);
    count(fake.desc(5), 1);
    std::thread::spawn(move || {
        count(d + 64 * 9, 1);
        count(d + 64 * 5, -1);
    })
    .join()
    .unwrap();
    // Descriptors outside the area are not counted.
    count(fake.desc(100), 1);
    let taken = fake.area.take_process(7);
    assert_eq!(taken.frames, [(5, 1), (9, 1)]);
    assert_eq!(taken.suspects, []);
    assert_eq!(counts(&fake.area), []);
    // Taken again (a recovery killed before it dropped them): nothing to
    // drop, every frame counted a suspect to recount (P6f).
    let again = fake.area.take_process(7);
    assert_eq!(again.frames, []);
    assert_eq!(again.suspects, [5, 9]);
    fake.area.free_process(7);
    assert!((0..TABLES).all(|t| fake.area.table(t).owner.load(Relaxed) == 0));
    assert!((0..ROWS).all(|r| fake.area.row_owner(r).load(Relaxed) == 0));
}

#[test]
fn a_runs_pins_are_counted_by_slot_and_narrowed_by_its_unpins() {
    let fake = Fake::new(100, 0xffff_c000_0000_0000);
    let d = fake.descs;
    // A run of slots 4..12 of node 3, cut to 4..7 (R3's partial
    // unpin), then one of slots 60..64 of node 8 ended by another
    // thread.
    count_run(d, 3, 4, 8, true);
    count_run(d, 3, 7, 5, false);
    count_run(d, 8, 60, 4, true);
    std::thread::spawn(move || count_run(d, 8, 60, 4, false))
        .join()
        .unwrap();
    count(fake.desc(2), 1);
    assert_eq!(fake.area.other_counts().len(), 3);
    let t = fake.area.take_process(7);
    assert_eq!(t.frames, [(2, 1)]);
    assert_eq!(t.runs, [(3, 4, 1), (3, 5, 1), (3, 6, 1)]);
    // Ended by its own thread: nothing left.
    count_run(d, 5, 0, 16, true);
    count_run(d, 5, 0, 16, false);
    assert_eq!(fake.area.other_counts().len(), 0);
}

#[test]
fn a_runs_window_its_fold_and_its_taken_entries_make_its_leaf_a_suspect() {
    let fake = Fake::new(100, 0xffff_d000_0000_0000);
    let d = fake.descs;
    count_run(d, 3, 4, 8, true);
    count_run(d, 9, 0, 2, true);
    let on3 = fake.area.counted_run_pins(3).unwrap();
    assert_eq!(on3[3..13], [0, 1, 1, 1, 1, 1, 1, 1, 1, 0]);
    // A thread dead inside a run window on leaf 5 (P7b).
    let w = RunWindow::open(d, 5).unwrap();
    assert_eq!(fake.area.counted_run_pins(5), None, "a window on the leaf");
    assert!(fake.area.counted_run_pins(3).is_some(), "not on another");
    // Never closed: the thread died inside it.
    let _never_closed = w;
    // And inside a fold moving a run entry of leaf 11 (P7a).
    fake.area.moving(0).store((RUN_KEY | 11) as u32, Relaxed);
    let t = fake.area.take_process(7);
    assert_eq!(t.runs.len(), 10);
    assert_eq!(t.run_suspects, [5, 11]);
    assert_eq!(
        fake.area.counted_run_pins(3),
        Some([0; 64]),
        "taken entries count no live run"
    );
    // Taken again (a recovery killed before it dropped them): nothing to
    // unpin, every leaf they or the intent name a suspect (P7d).
    let again = fake.area.take_process(7);
    assert_eq!(again.runs, []);
    assert_eq!(again.run_suspects, [3, 5, 9]);
    fake.area.free_process(7);
}
