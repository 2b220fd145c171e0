//! Who holds the pins of a cache shared by processes (protocol 5.15,
//! numbered as in `docs/design.md`): each process's pins of each frame,
//! counted in the segment, so that the pins of a process that dies can be
//! given back.
//!
//! A frame's state word counts its pins (5.1) but not whose they are. A
//! process killed while it holds pins would leave them in the count for
//! ever: the frame never evicted, and a writer of the page waiting for
//! the pins to drain (5.5 W2) waiting for ever. So in a shared cache every
//! pin and every release of one is also counted per process:
//!
//! * P1. Each thread that pins a frame of a shared cache has a *table* of
//!   its own in the segment (4 KiB: the owner's tag, its intent word
//!   (P5-P7), then a list of 510 entries of frame and count), claimed from
//!   the segment's pool by a CAS of its owner word and kept for the
//!   thread's life (in this process's thread-local storage). Only that
//!   thread writes it (the intent word too): plain stores, no
//!   read-modify-write, on a line no other thread writes. A pin appends an
//!   entry; its release by the same thread, found among the last eight,
//!   clears it in place (P6c), and the list's end shrinks over cleared
//!   entries, so it stays on one or two lines.
//! * P2. Each process has a *row* in the segment (a signed count per frame,
//!   claimed at attach like a table). A thread folds its table's frame
//!   counts into the row (atomic adds) when the table is full and when
//!   the thread exits (then the table is freed, unless a run's entries are
//!   left in it: it stays its process's), and counts in the row directly
//!   when no table was to be had.
//! * P3. A pin is counted after the RMW that took it succeeded; a release
//!   is uncounted before the RMW that drops it. Counts are signed: a pin
//!   released by another thread than the one that took it is +1 in one
//!   table and -1 in the other, and only the process's sum (its tables and
//!   its row) means anything.
//! * P4. So a process that stops at any instruction leaves, for each frame,
//!   a sum that is its pins or one fewer (never more: a count always trails
//!   the pin and leads the release, and a fold clears an entry before it
//!   adds it to the row). The recovery of a dead process (5.14 D5) drops,
//!   for each frame, the sum of its tables and row, marking each entry
//!   taken before it drops what the entry counted; then, after its
//!   recounts (P6), it frees the tables and the row (P6f). What a death inside P3's window leaves is one pin nobody
//!   counts (the frame never evicted, a writer of its page waiting for the
//!   pin to drain), never a release too many, which would free a page
//!   another process still reads: P6 (`ledger_window.rs`) finds it by the
//!   window's intent and drops it.
//! * P5. An eviction freezes its victim (5.2 A: the count to zero) and
//!   takes it out of its index (C) under the tree lock; a death between
//!   would leave a frame with no reference in the index, its readers
//!   waiting for ever. So the evicting thread records the frame in its
//!   table's `intent` word before the freeze and clears it after C (or
//!   when it gives up); the recovery finds a dead process's intent and,
//!   under the same tree lock (taken over), takes out and frees a frame it
//!   finds there with no reference (a run's pin on the slot meanwhile: it
//!   stays, cached and clean).
//!
//! A run (5.7) pins index leaf slots, not frames: its entries, their
//! window and their recount are P7 (`ledger_runs.rs`); the recovery
//! unpins, slot by slot, what a dead process's run entries add up to.
//!
//! What else a process raises while it works and lowers when done is not
//! counted here: the cache-wide counts of fills, reclaims and removals in
//! flight, a file's write-backs in flight and its size lock's holds are
//! each kept per process (`cache/words.rs`' `Counts`,
//! `FileSlot::writeback`, `size_lock.rs`), a count no other process
//! writes, and a size lock's exclusive mutex names its holder, so the
//! recovery gives back exactly what the dead one held there.
//!
//! What is not counted here: the cache's own reference of each cached
//! page (`FrameDesc::release_base`), and the frames a thread holds with no
//! reference at all (taken from the pool, or freed by its last release, on
//! their way to the index or the pool), which name their holder's process
//! in their state word instead (P8, `desc_hand.rs`).

#![cfg(not(loom))]

use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering::{self, Acquire, Relaxed, Release};
use std::sync::atomic::{compiler_fence, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};

/// Entries of a table.
pub const ENTRIES: usize = 510;
/// Tables in a segment's pool: threads of all its processes that pin at
/// once (a thread that finds none counts in its process's row).
pub const TABLES: usize = 1024;
/// A table's bytes.
pub const TABLE_BYTES: usize = 4096;
/// Rows in a segment: one per process attached at once.
pub const ROWS: usize = crate::segment::MAX_PROCS;

/// One thread's table (P1).
#[repr(C, align(4096))]
pub struct Table {
    /// The tag of the process whose thread owns it; 0 free.
    owner: AtomicU32,
    /// Entries in use, `entries[..used]` (the rest are 0): read and
    /// written by the owning thread only.
    used: AtomicU32,
    /// P5, P6: what the owning thread is in the middle of that a count
    /// cannot say, for the recovery if it dies there: `(frame + 1) << 32 |
    /// INTENT_EVICT` while its eviction has the frame frozen and still in
    /// its index, `| INTENT_PIN` inside a pin count's window; 0 otherwise.
    intent: AtomicU64,
    /// `(frame + 1) << 32 | count as u32` (an `i32`, mostly 1 or -1; a
    /// frame may have several), 0 empty.
    entries: [AtomicU64; ENTRIES],
}
const _: () = assert!(std::mem::size_of::<Table>() == TABLE_BYTES);

/// An intent (P5): the thread froze the frame to evict it (5.2 A) and has
/// not yet taken it out of its index.
const INTENT_EVICT: u64 = 1;

/// The pins area of a segment: the rows' owners, the tables, the rows.
/// `bytes(frames)` of it, laid out by the segment (`TableId::Pins`).
#[derive(Debug, Clone, Copy)]
pub struct Area {
    /// Where it starts in this process.
    pub base: usize,
    /// Frames of the cache (a row's length).
    pub frames: usize,
}

impl Area {
    /// Bytes of the area for a cache of `frames` frames.
    pub fn bytes(frames: usize) -> usize {
        TABLE_BYTES + TABLES * TABLE_BYTES + ROWS * Self::row_bytes(frames)
    }

    fn row_bytes(frames: usize) -> usize {
        (frames * 4).next_multiple_of(4096)
    }

    fn row_owner(&self, r: usize) -> &AtomicU32 {
        // SAFETY: the first 4 KiB of the area hold ROWS owner words (the
        // area is mapped as long as `self` is used: the caller's).
        unsafe { &*(self.base as *const AtomicU32).add(r) }
    }

    fn table(&self, t: usize) -> &Table {
        // SAFETY: table `t < TABLES` lies in the area (see `bytes`).
        unsafe { &*((self.base + TABLE_BYTES + t * TABLE_BYTES) as *const Table) }
    }

    fn row(&self, r: usize) -> &[AtomicI32] {
        let at = self.base + TABLE_BYTES + TABLES * TABLE_BYTES + r * Self::row_bytes(self.frames);
        // SAFETY: row `r < ROWS` lies in the area (see `bytes`).
        unsafe { std::slice::from_raw_parts(at as *const AtomicI32, self.frames) }
    }

    /// Claims a row for the process tagged `tag` (attach); `None` if every
    /// row is held (dead processes not yet recovered).
    pub fn claim_row(&self, tag: u32) -> Option<usize> {
        // Acquire: the row as its last recovery or detach left it (zeroed).
        (0..ROWS).find(|&r| {
            self.row_owner(r)
                .compare_exchange(0, tag, Acquire, Relaxed)
                .is_ok()
        })
    }
}

/// The key bit of a run's entry (the rest: the leaf's node id). Frame
/// keys stay below it and [`HIGH_KEY`]: a shared cache has fewer than
/// 2^30 frames (`segment::layout` refuses more).
const RUN_KEY: u64 = 1 << 31;
/// The key bit a recovery sets on an entry it took (P6f; frames and leaf
/// nodes stay below it): counts, recounts and folds skip such an entry,
/// and a second take lists its frame or leaf as a suspect.
const HIGH_KEY: u64 = 1 << 30;
/// Frames a shared cache may have at most.
pub const MAX_FRAMES: u64 = HIGH_KEY - 1;
/// Index nodes a shared cache may have at most (a run entry's key).
pub const MAX_NODES: u64 = HIGH_KEY - 1;
/// The value bit of a run entry released by another thread.
const RUN_NEG: u64 = 1 << 31;

/// A table entry, decoded.
enum Entry {
    Empty,
    /// Frame, pins.
    Frame(u32, i64),
    /// A run's leaf node, its first slot and slot mask from there, +1 or
    /// -1.
    Run(u32, u32, u32, i64),
}

impl Entry {
    fn of(v: u64) -> Entry {
        if v == 0 || v >> 32 & HIGH_KEY != 0 {
            // (A taken entry, P6f.)
            Entry::Empty
        } else if v >> 32 & RUN_KEY != 0 {
            let (node, lo, mask, sign) = run_entry(v);
            Entry::Run(node, lo, mask, sign)
        } else {
            Entry::Frame((v >> 32) as u32 - 1, v as u32 as i32 as i64)
        }
    }
}

/// The slots a run entry names: `lo + k` for each bit `k` of `mask`.
fn run_slots(lo: u32, mask: u32) -> impl Iterator<Item = u32> {
    (0..16)
        .filter(move |k| mask >> k & 1 != 0)
        .map(move |k| lo + k)
}

/// `sums`' entries that are not zero, as `item` makes them, sorted.
fn nonzero<K, T: Ord>(
    sums: std::collections::HashMap<K, i64>,
    item: impl Fn(K, i64) -> T,
) -> Vec<T> {
    let mut v: Vec<T> = sums
        .into_iter()
        .filter(|&(_, n)| n != 0)
        .map(|(k, n)| item(k, n))
        .collect();
    v.sort_unstable();
    v
}

/// A run entry's node, first slot, slot mask (from that slot) and sign.
fn run_entry(v: u64) -> (u32, u32, u32, i64) {
    let node = (v >> 32 & !RUN_KEY) as u32;
    let lo = (v & 63) as u32;
    let mask = (v >> 6 & 0xffff) as u32;
    (node, lo, mask, if v & RUN_NEG != 0 { -1 } else { 1 })
}

/// A registered area (this process's view of one attached segment's).
/// Immutable once published and never freed (as `futex::Region`).
struct Reg {
    area: Area,
    /// The descriptors: `[descs, descs + 64 * frames)`.
    descs: usize,
    /// This process's tag and row.
    tag: u32,
    row: usize,
}

const MAX_AREAS: usize = 8;
#[allow(clippy::declare_interior_mutable_const)]
const NO_AREA: AtomicPtr<Reg> = AtomicPtr::new(std::ptr::null_mut());
static AREAS: [AtomicPtr<Reg>; MAX_AREAS] = [NO_AREA; MAX_AREAS];
/// Slots ever used: 0 in a process with no shared cache, so the hot path
/// costs one load of a line nobody writes.
static AREAS_N: AtomicUsize = AtomicUsize::new(0);
/// Bounds of every area's descriptors ever registered in this process
/// (`[DESCS_LO, DESCS_HI)`, empty with none): a descriptor outside them (a
/// private cache's, even in a process that also has a shared one) is
/// turned away with two loads of words nobody writes. They only widen
/// (`fetch_min`, `fetch_max`), so each may be read alone: any value a
/// thread reads once an area is registered bounds that area.
static DESCS_LO: AtomicUsize = AtomicUsize::new(usize::MAX);
static DESCS_HI: AtomicUsize = AtomicUsize::new(0);
/// Serializes registration against itself and against a thread's exit
/// (which folds its tables into rows that must still be mapped), and
/// keeps every record made (as an address: records are never freed).
static REGISTER: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());
/// Bumped by every [`unregister`]: a thread's cached table (`FAST`) is
/// used only while the epoch it was cached in lasts.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Counts this process's pins of the descriptors `[descs, descs + 64 *
/// frames)` in `area`, as tag `tag` with row `row` (P1-P2).
///
/// # Safety
///
/// The segment stays mapped until [`unregister`] of `descs`, which the
/// caller makes before unmapping it, once no thread of this process holds
/// or takes a pin there.
pub unsafe fn register(area: Area, descs: usize, tag: u32, row: usize) -> bool {
    let mut records = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(i) = (0..MAX_AREAS).find(|&i| AREAS[i].load(Relaxed).is_null()) else {
        return false;
    };
    let r = Box::into_raw(Box::new(Reg {
        area,
        descs,
        tag,
        row,
    }));
    records.push(r as usize);
    // Release: the record's fields before a reader's Acquire.
    AREAS[i].store(r, Release);
    if i >= AREAS_N.load(Relaxed) {
        AREAS_N.store(i + 1, Relaxed);
    }
    // Relaxed: the cache over the area is made after this and reaches
    // other threads through their own synchronization, after which they
    // read these values or later (wider) ones.
    DESCS_LO.fetch_min(descs, Relaxed);
    DESCS_HI.fetch_max(descs + area.frames * 64, Relaxed);
    true
}

/// Stops counting pins of the descriptors at `descs` and gives back this
/// process's tables and row (zeroed: a detach holds no pin). The record
/// stays allocated (a few words): threads may still name it.
///
/// # Safety
///
/// No thread of this process holds or takes a pin of those descriptors.
pub unsafe fn unregister(descs: usize) {
    let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    for slot in &AREAS {
        let r = slot.load(Relaxed);
        // SAFETY: published records are never freed.
        if let Some(reg) = unsafe { r.as_ref() } {
            if reg.descs == descs {
                slot.store(std::ptr::null_mut(), Release);
                // Every thread's cached table of it is stale now.
                EPOCH.fetch_add(1, Release);
                // (No recount to hold off: this process holds no pin.)
                let _ = reg.area.take_process(reg.tag);
                reg.area.free_process(reg.tag);
            }
        }
    }
}

fn find(desc: usize) -> Option<&'static Reg> {
    find_by(|r| desc.wrapping_sub(r.descs) < r.area.frames * 64)
}

fn find_by(hit: impl Fn(&Reg) -> bool) -> Option<&'static Reg> {
    let n = AREAS_N.load(Relaxed);
    AREAS[..n].iter().find_map(|slot| {
        // Acquire: pairs with `register`'s Release.
        // SAFETY: a published record is immutable and never freed.
        let r = unsafe { slot.load(Acquire).as_ref() }?;
        hit(r).then_some(r)
    })
}

/// This thread's tables, by area record: (record, table number). Folded
/// into their rows and freed when the thread exits.
struct Mine(Vec<(usize, usize)>);

impl Drop for Mine {
    fn drop(&mut self) {
        // A count made later in this thread's exit (another thread-local's
        // destructor) must not reach a table freed here through the cached
        // one: it goes to the row (`count_in` finds no `MINE`).
        let _ = FAST.try_with(|c| {
            c.set(Fast {
                epoch: u64::MAX,
                ..c.get()
            })
        });
        let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        for &(reg, t) in &self.0 {
            // Only if still registered (else its tables were given back
            // with the segment, which may be unmapped).
            let live = AREAS.iter().any(|s| s.load(Relaxed) as usize == reg);
            if live {
                // SAFETY: registered: the record and its area are mapped.
                let reg = unsafe { &*(reg as *const Reg) };
                fold(reg, t);
                // A table left with run entries (runs this thread took and
                // another will end) stays its process's until it detaches
                // or dies.
                let table = reg.area.table(t);
                if table.used.load(Relaxed) == 0 {
                    // Release: the folded (cleared) entries first.
                    table.owner.store(0, Release);
                }
            }
        }
    }
}

/// The table this thread counted in last: its descriptors' range, the
/// table, and the [`EPOCH`] it was cached in.
#[derive(Clone, Copy)]
struct Fast {
    epoch: u64,
    lo: usize,
    len: usize,
    table: usize,
}

thread_local! {
    static MINE: RefCell<Mine> = const { RefCell::new(Mine(Vec::new())) };
    static FAST: Cell<Fast> = const {
        Cell::new(Fast {
            epoch: u64::MAX,
            lo: 0,
            len: 0,
            table: 0,
        })
    };
}

/// P2: moves table `t`'s frame counts into the row, each entry cleared
/// first; its run entries stay, moved to the front (each cleared before it
/// is written again).
fn fold(reg: &Reg, t: usize) {
    // The moves into the row hold recounts off (P6c).
    let _q = reg.area.unquiet(reg.row);
    let table = reg.area.table(t);
    let row = reg.area.row(reg.row);
    let mut kept = 0;
    for i in 0..ENTRIES {
        let e = &table.entries[i];
        let v = e.load(Relaxed);
        if v == 0 {
            continue;
        }
        let moving = reg.area.moving(reg.row);
        match Entry::of(v) {
            // P6c: for the recovery, if this process dies before the add.
            Entry::Frame(f, _) => moving.store(f + 1, Relaxed),
            // Already in its place.
            _ if i == kept => {
                kept += 1;
                continue;
            }
            // P7: likewise, before it is written again (`RUN_KEY | node`).
            _ => moving.store((v >> 32) as u32, Relaxed),
        }
        e.store(0, Relaxed);
        // Keeps the clear before the add (or the write) in the instruction
        // stream (P4: a death between them undercounts, never overcounts).
        compiler_fence(Ordering::SeqCst);
        match Entry::of(v) {
            Entry::Frame(f, c) => {
                if let Some(r) = row.get(f as usize) {
                    r.fetch_add(c as i32, Relaxed);
                }
                compiler_fence(Ordering::SeqCst);
                moving.store(0, Relaxed);
            }
            _ => {
                table.entries[kept].store(v, Relaxed);
                kept += 1;
                compiler_fence(Ordering::SeqCst);
                moving.store(0, Relaxed);
            }
        }
    }
    table.used.store(kept as u32, Relaxed);
}

/// Counts a pin of the frame whose descriptor is at `desc` (`delta` 1,
/// after the RMW that took it) or its release (-1, before the RMW that
/// drops it), if the frame is in a shared cache. P3.
#[inline(always)]
pub(crate) fn count(desc: usize, delta: i32) {
    if in_shared(desc) {
        count_shared(desc, delta);
    }
}

/// Whether `desc` lies within the shared caches' descriptors' bounds.
#[inline(always)]
pub(crate) fn in_shared(desc: usize) -> bool {
    desc >= DESCS_LO.load(Relaxed) && desc < DESCS_HI.load(Relaxed)
}

#[inline(never)]
fn count_shared(desc: usize, delta: i32) {
    // Keeps the count after a pin's RMW and before a release's in the
    // instruction stream (P3-P4: what a death leaves behind).
    compiler_fence(Ordering::SeqCst);
    let fast = FAST.try_with(Cell::get).ok();
    let done = fast.is_some_and(|f| {
        // Acquire: pairs with `unregister`'s bump (a table of a segment
        // given back is not written).
        f.epoch == EPOCH.load(Acquire) && desc.wrapping_sub(f.lo) < f.len && {
            // SAFETY: cached in this epoch: its segment is still attached
            // (an unregister bumps the epoch first), and a pin of one of
            // its frames is being counted, so it stays so.
            let table = unsafe { &*(f.table as *const Table) };
            add(table, (desc - f.lo) / 64, delta)
        }
    });
    if !done {
        let Some(reg) = find(desc) else { return };
        count_in(reg, |reg, t| {
            let frame = (desc - reg.descs) / 64;
            match t {
                Some(t) => add(t, frame, delta),
                None => {
                    reg.area.row(reg.row)[frame].fetch_add(delta, Relaxed);
                    true
                }
            }
        });
    }
    compiler_fence(Ordering::SeqCst);
}

/// P5: records (`evict`) or clears that this thread's eviction has the
/// frame whose descriptor is at `desc` frozen and in its index, if the
/// frame is in a shared cache (a thread with no table records nothing: a
/// death there leaves the frame frozen in its index, where the census of
/// frames in hand finds it by its `HOLDER`, P8).
#[inline]
pub(crate) fn intend_evict(desc: usize, evict: bool) {
    if !in_shared(desc) {
        return;
    }
    let Some(reg) = find(desc) else { return };
    let frame = (desc - reg.descs) / 64;
    let v = if evict {
        (frame as u64 + 1) << 32 | INTENT_EVICT
    } else {
        0
    };
    // Keeps the record before the freeze and the clear after the removal
    // from the index, in the instruction stream.
    compiler_fence(Ordering::SeqCst);
    with_table(reg, |t| {
        // Release (and the fence after a record): as a window's (P6b),
        // for a recount of the frame; the recovery reads it once the
        // process is dead (all its stores done, as the entries).
        if let Some(t) = t {
            t.intent.store(v, Release);
            if evict {
                std::sync::atomic::fence(Release);
            }
        }
        true
    });
    compiler_fence(Ordering::SeqCst);
}

/// `op` on this thread's table of `reg`'s area: the cached one, else the
/// one `count_in` finds or claims (folded and given again if `op` found it
/// full); `op(None)` if no table can be had.
#[inline]
fn with_table(reg: &'static Reg, op: impl Fn(Option<&Table>) -> bool) {
    if !cached_table(reg).is_some_and(|t| op(Some(t))) {
        count_in(reg, |_, t| op(t));
    }
}

/// This thread's table of `reg`'s area, if it is the one cached.
#[inline]
fn cached_table(reg: &Reg) -> Option<&'static Table> {
    let f = FAST.try_with(Cell::get).ok()?;
    // Acquire: as in `count_shared`.
    // SAFETY: as in `count_shared`: cached in this epoch, for this area
    // (its segment attached while the caller counts in it).
    (f.epoch == EPOCH.load(Acquire) && f.lo == reg.descs)
        .then(|| unsafe { &*(f.table as *const Table) })
}

/// Removes entry `i` of the `n` in use: cleared in place (entries never
/// move but in a fold, P6c), the end shrunk over the cleared entries
/// before it.
fn remove(table: &Table, i: usize, n: usize) {
    table.entries[i].store(0, Relaxed);
    if i + 1 == n {
        let mut end = i;
        while end > 0 && table.entries[end - 1].load(Relaxed) == 0 {
            end -= 1;
        }
        table.used.store(end as u32, Relaxed);
    }
}

/// The slow path of the counts: this thread's table of `reg`'s area
/// (claimed if none, cached in `FAST`), given to `op`; folded and given
/// again if `op` found it full; `op(reg, None)` if no table can be had.
#[cold]
fn count_in(reg: &'static Reg, op: impl Fn(&Reg, Option<&Table>) -> bool) {
    let epoch = EPOCH.load(Acquire);
    let done = MINE
        .try_with(|m| {
            let mut m = m.try_borrow_mut().ok()?;
            let key = reg as *const Reg as usize;
            let t = match m.0.iter().find(|&&(r, _)| r == key) {
                Some(&(_, t)) => t,
                None => {
                    let t = claim_table(reg)?;
                    m.0.push((key, t));
                    t
                }
            };
            let table = reg.area.table(t);
            let _ = FAST.try_with(|c| {
                c.set(Fast {
                    epoch,
                    lo: reg.descs,
                    len: reg.area.frames * 64,
                    table: table as *const Table as usize,
                })
            });
            if op(reg, Some(table)) {
                return Some(());
            }
            fold(reg, t);
            op(reg, Some(table)).then_some(())
        })
        .ok()
        .flatten();
    if done.is_none() {
        // No table (the pool is empty, or the thread is exiting).
        op(reg, None);
    }
}

fn claim_table(reg: &Reg) -> Option<usize> {
    // Acquire: the table as its last owner or recovery left it (cleared).
    (0..TABLES).find(|&t| {
        let o = &reg.area.table(t).owner;
        o.load(Relaxed) == 0 && o.compare_exchange(0, reg.tag, Acquire, Relaxed).is_ok()
    })
}

/// How far back from its end a release looks in the table for the pin
/// it ends (pins are mostly released in the reverse order of their
/// taking, by the thread that took them).
const SCAN: usize = 8;

/// Counts `delta` pins of `frame` in `table`: a release of a pin counted
/// among the table's last [`SCAN`] entries removes that entry (cleared in
/// place); anything else is a new entry at the end. False
/// if the table is full. Only the owning thread writes the table (Relaxed
/// throughout), and the entries it writes are at its end: the same one or
/// two cache lines, pin after pin.
#[inline]
fn add(table: &Table, frame: usize, delta: i32) -> bool {
    let key = frame as u64 + 1;
    let n = table.used.load(Relaxed) as usize;
    if delta == -1 {
        let pin = key << 32 | 1;
        for i in (n.saturating_sub(SCAN)..n).rev() {
            if table.entries[i].load(Relaxed) == pin {
                remove(table, i, n);
                return true;
            }
        }
    }
    if n >= ENTRIES {
        return false;
    }
    table.entries[n].store(key << 32 | delta as u32 as u64, Relaxed);
    table.used.store(n as u32 + 1, Relaxed);
    true
}

// P4, P6f: what the recovery of a dead process takes of its counts.
#[path = "ledger_take.rs"]
mod take;

// P6: a pin count's window, and the recount of a frame a dead process
// may have pinned in one.
#[path = "ledger_window.rs"]
mod window;
pub(crate) use window::Window;

// A run's entries, and P7: a run count's window, and the recount of a leaf
// a dead process may have pinned in one.
#[path = "ledger_runs.rs"]
mod runs;
#[cfg(test)]
use runs::count_run;
pub(crate) use runs::RunWindow;

// What an audit reads of the counts (tests, and a test's report of a
// stuck cache).
#[path = "ledger_audit.rs"]
mod audit;

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
