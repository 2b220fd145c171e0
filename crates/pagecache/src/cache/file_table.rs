//! The files of a cache shared by processes: a fixed table of
//! [`FileSlot`]s, found by device and inode, in a table of the segment.
//! Every process that opens the same file, by any path, gets the same slot
//! (the same index, length, size lock, flush lock and write-back counts);
//! each keeps its own descriptors in its own `FileShared`.
//!
//! ```text
//! Head     the table lock (a futex mutex, 5.10), the next generation
//! entries  MAX_FILES x Entry: state (FREE / LIVE / CLOSING), opens (by
//!          every process), borrows, the change stamp of an idle file
//! ledger   MAX_OPENERS x MAX_FILES opens by one process (a u16 each): the
//!          truth an entry's `opens` is the sum of, so that the opens of a
//!          process that died can be given back (5.14)
//! slots    MAX_FILES x FileSlot, apart: a scan of the entries never
//!          touches the slots of entries not in use
//! ```
//!
//! All zeros is an empty table. Opening, closing and finding a file by id
//! take the table lock (leaf of the lock order: nothing is taken under it
//! and it is never held across I/O or a wait). A file's id is its entry's
//! index plus one in the low [`INDEX_BITS`] bits and a generation above,
//! bumped by every new file: frames name their file by id, and an id names
//! one entry and, through the generation, one file that ever lived there.
//!
//! LIVE entries with no open are idle: their pages stay cached for the
//! next opener of the unchanged file (the change stamp). CLOSING entries
//! are found by no open: a stale idle entry (its file changed), or one a
//! tool's `close` left for `release`. An entry no process has open is
//! freed (`free_if_unused`) once its index is empty and nothing borrows it.
//!
//! An entry is written (its slot made afresh) only while FREE, under the
//! lock, and only read by processes that have it open, by reclaim through
//! a borrow, or under the lock, so no one reads a slot while it is remade.
//!
//! A process that dies (protocol 5.14): whoever recovers it calls
//! [`FileTable::forget_process`], which gives back its opens (its ledger
//! row); an entry it was the last opener of stays LIVE and idle as an
//! *orphan*, adopted by the next opener of the file whatever its change
//! stamp (its pages, dirty ones included, are what the dead process wrote:
//! dropping them would lose its writes). A process that dies holding the
//! table lock leaves at most one operation half-done; every operation
//! writes its ledger row before `opens` and makes an entry LIVE last and
//! FREE first, so the lock's next holder, told by the lock that it took it
//! over, recounts every `opens` from the ledger and finds every entry
//! either whole or free.

// Under loom only the type is used: no segment exists there.
#![cfg_attr(loom, allow(dead_code))]

use super::registry::FileSlot;
use crate::size_lock::ProcShards;
use crate::sync::{AtomicU32, AtomicU64, Mutex, Ordering};
use std::cell::UnsafeCell;
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

/// Files a shared cache has room for at once.
pub const MAX_FILES: usize = 4096;
/// Bits of a file id that hold its entry's index plus one.
pub const INDEX_BITS: u32 = 20;
const _: () = assert!(MAX_FILES < 1 << INDEX_BITS);

/// Processes whose opens the ledger keeps (a segment's process slots).
pub const MAX_OPENERS: usize = 64;

const FREE: u32 = 0;
const LIVE: u32 = 1;
const CLOSING: u32 = 2;

/// The stamp of an orphan: an idle entry whose last opener died. It
/// matches every opener's stamp (see the module docs).
const ORPHAN: (u64, u64) = (u64::MAX - 1, u64::MAX - 1);

#[repr(C, align(128))]
struct Head {
    /// The table lock.
    lock: Mutex<()>,
    /// (L) generations handed out so far.
    gens: AtomicU64,
}

#[repr(C)]
struct Entry {
    /// (L) `FREE`, `LIVE` or `CLOSING`.
    state: AtomicU32,
    /// (L) opens of the file by every process: the sum of its ledger
    /// column (each `FileShared` counts one).
    opens: AtomicU32,
    /// (A) borrows of the slot right now ([`FileTable::borrow`]): taken
    /// under the lock of a LIVE entry, given back without it; the entry
    /// is not freed while any is held.
    borrows: AtomicU32,
    /// (L) the file's change stamp (`BackendFile::change_stamp`) when its
    /// last open was given back by [`FileTable::close_idle`]: its pages
    /// are served to the next opener only if the file still has it.
    stamp: [AtomicU64; 2],
}

/// An entry's slot, in an array of their own after the entries: a scan of
/// the entries (every open) reads 32 bytes per entry, and the slots of
/// entries never used stay untouched, so shared memory never gives them
/// pages.
#[repr(C)]
struct Slot(UnsafeCell<MaybeUninit<FileSlot>>);

/// A file table over memory of [`FileTable::bytes`] bytes (see module
/// docs).
#[derive(Debug)]
pub(crate) struct FileTable {
    head: NonNull<Head>,
    entries: NonNull<Entry>,
    ledger: NonNull<std::sync::atomic::AtomicU16>,
    slots: NonNull<Slot>,
    procs: NonNull<ProcShards>,
    /// This process's ledger row (`None`: a table only looked at).
    me: Option<usize>,
}

// SAFETY: the table is reached through its lock and atomics; slots are
// shared state made of atomics and futex locks.
unsafe impl Send for FileTable {}
// SAFETY: as above.
unsafe impl Sync for FileTable {}

/// What [`FileTable::open`] found.
#[derive(Debug)]
pub(crate) struct Opened<'a> {
    /// The file's slot.
    pub(crate) slot: &'a FileSlot,
    /// Whether this open made the slot (the file was not open anywhere).
    pub(crate) created: bool,
}

impl FileTable {
    /// Bytes a table takes.
    pub(crate) fn bytes() -> usize {
        Self::procs_at() + MAX_FILES * std::mem::size_of::<ProcShards>()
    }

    /// Alignment a table needs.
    pub(crate) fn align() -> usize {
        std::mem::align_of::<Head>().max(std::mem::align_of::<Entry>())
    }

    /// Each entry's size-lock shards by process (`size_lock.rs`), after
    /// the slots: untouched (no memory) until the entry's file is opened.
    fn procs_at() -> usize {
        (Self::slots_at() + MAX_FILES * std::mem::size_of::<Slot>())
            .next_multiple_of(std::mem::align_of::<ProcShards>().max(4096))
    }

    fn slots_at() -> usize {
        (Self::ledger_at() + MAX_OPENERS * MAX_FILES * 2)
            .next_multiple_of(std::mem::align_of::<Slot>().max(4096))
    }

    fn ledger_at() -> usize {
        (Self::entries_at() + MAX_FILES * std::mem::size_of::<Entry>()).next_multiple_of(4096)
    }

    fn entries_at() -> usize {
        std::mem::size_of::<Head>().next_multiple_of(std::mem::align_of::<Entry>())
    }

    /// The table at `base`, used by the process whose ledger row is `me`
    /// (`None`: only to look, [`FileTable::list`] and
    /// [`FileTable::opens`]; every open and close is then an error).
    ///
    /// # Safety
    ///
    /// `base` is [`FileTable::bytes`] bytes aligned to [`FileTable::align`],
    /// all zeros when first used by any table, used only through tables,
    /// and mapped while the result lives; no two live processes use the
    /// same `me`.
    pub(crate) unsafe fn over(base: NonNull<u8>, me: Option<usize>) -> FileTable {
        FileTable {
            head: base.cast(),
            // SAFETY: inside the caller's memory.
            entries: unsafe {
                NonNull::new_unchecked(base.as_ptr().add(Self::entries_at()).cast())
            },
            // SAFETY: inside the caller's memory.
            ledger: unsafe { NonNull::new_unchecked(base.as_ptr().add(Self::ledger_at()).cast()) },
            // SAFETY: inside the caller's memory.
            slots: unsafe { NonNull::new_unchecked(base.as_ptr().add(Self::slots_at()).cast()) },
            // SAFETY: inside the caller's memory.
            procs: unsafe { NonNull::new_unchecked(base.as_ptr().add(Self::procs_at()).cast()) },
            me: me.filter(|&m| m < MAX_OPENERS),
        }
    }

    /// The table lock; taken over from a holder that died (5.14 R3), the
    /// table is audited first (see the module docs).
    fn lock(&self) -> crate::sync::MutexGuard<'_, ()> {
        let g = self.head().lock.lock();
        #[cfg(not(loom))]
        if crate::sync::futex::took_over() {
            self.audit();
        }
        g
    }

    /// Runs `f` under the table lock (tests).
    #[cfg(not(loom))]
    pub(crate) fn with_locked(&self, f: impl FnOnce()) {
        let _g = self.lock();
        f()
    }

    /// Process `who`'s opens of entry `i`.
    fn ledger(&self, who: usize, i: usize) -> &std::sync::atomic::AtomicU16 {
        assert!(who < MAX_OPENERS && i < MAX_FILES);
        // SAFETY: in bounds of the ledger; zeroed memory is no open.
        unsafe { &*self.ledger.as_ptr().add(who * MAX_FILES + i) }
    }

    /// This process's ledger row, or the error of a table only looked at.
    fn who(&self) -> io::Result<usize> {
        self.me.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the shared cache's file table is only inspected here: no process slot to count opens in",
            )
        })
    }

    /// `opens` of entry `i` recounted from the ledger. Under the lock.
    fn recount(&self, i: usize) -> u32 {
        // Relaxed: (L).
        let n = (0..MAX_OPENERS)
            .map(|w| self.ledger(w, i).load(Ordering::Relaxed) as u32)
            .sum();
        self.entry(i).opens.store(n, Ordering::Relaxed);
        n
    }

    /// After a takeover of the lock: every entry's `opens` recounted. Under
    /// the lock.
    fn audit(&self) {
        for i in 0..MAX_FILES {
            // Relaxed: (L).
            if self.entry(i).state.load(Ordering::Relaxed) != FREE {
                self.recount(i);
            }
        }
    }

    /// Gives back every open of process `who` (which died: its recovery,
    /// 5.14; or which detaches with opens a tool left). Entries it was the
    /// last opener of become orphans (see the module docs). Returns how
    /// many entries it had open. Context: no sleep; takes the table lock
    /// (maybe taking it over from `who`).
    pub(crate) fn forget_process(&self, who: usize) -> usize {
        if who >= MAX_OPENERS {
            return 0;
        }
        let _g = self.lock();
        let mut n = 0;
        for i in 0..MAX_FILES {
            // Relaxed: (L).
            if self.ledger(who, i).swap(0, Ordering::Relaxed) == 0 {
                continue;
            }
            n += 1;
            let e = self.entry(i);
            if e.state.load(Ordering::Relaxed) != FREE {
                // SAFETY: LIVE or CLOSING under the lock: an initialised
                // slot. Relaxed: a hint for the age flusher.
                unsafe { (*self.cell(e)).assume_init_ref() }
                    .writers
                    .fetch_and(!(1u64 << who), Ordering::Relaxed);
            }
            let had = e.opens.load(Ordering::Relaxed);
            if self.recount(i) == 0 && had > 0 && e.state.load(Ordering::Relaxed) == LIVE {
                e.stamp[0].store(ORPHAN.0, Ordering::Relaxed);
                e.stamp[1].store(ORPHAN.1, Ordering::Relaxed);
            }
        }
        n
    }

    fn head(&self) -> &Head {
        // SAFETY: the head's place in the table's memory (zeroed: an
        // unlocked mutex, no generation yet).
        unsafe { self.head.as_ref() }
    }

    fn entry(&self, i: usize) -> &Entry {
        assert!(i < MAX_FILES);
        // SAFETY: in bounds; zeroed memory is a FREE entry.
        unsafe { &*self.entries.as_ptr().add(i) }
    }

    /// The slot of a LIVE entry.
    ///
    /// # Safety
    ///
    /// `e` is LIVE, and stays so while the result is used (the caller holds
    /// an open of it, or the table lock).
    unsafe fn slot(&self, e: &Entry) -> &FileSlot {
        // SAFETY: LIVE entries hold an initialised slot (made under the
        // lock before the state became LIVE).
        unsafe { (*self.cell(e)).assume_init_ref() }
    }

    /// Entry `e`'s index.
    fn index_in(&self, e: &Entry) -> usize {
        let i = (e as *const Entry as usize - self.entries.as_ptr() as usize)
            / std::mem::size_of::<Entry>();
        assert!(i < MAX_FILES);
        i
    }

    /// Entry `e`'s slot's place.
    fn cell(&self, e: &Entry) -> *mut MaybeUninit<FileSlot> {
        let i = self.index_in(e);
        // SAFETY: in bounds of the slots' array.
        unsafe { (*self.slots.as_ptr().add(i)).0.get() }
    }

    /// Opens the file `(device, inode)`: its slot, counted one more open;
    /// made afresh (with `len` and `max_len`) if no process has it open
    /// and no idle entry of it has `stamp` (its change stamp now): an idle
    /// entry (left LIVE by [`FileTable::close_idle`] with no open, its
    /// pages still cached) of a file that changed since goes CLOSING, its
    /// pages unreachable by the new slot's id, left to age out. An error if
    /// the table is full. Context: no sleep; takes the table lock.
    pub(crate) fn open(
        &self,
        ident: (u64, u64),
        len: u64,
        max_len: u64,
        stamp: (u64, u64),
    ) -> io::Result<Opened<'_>> {
        let who = self.who()?;
        let _g = self.lock();
        let mut free = None;
        for i in 0..MAX_FILES {
            let e = self.entry(i);
            // Relaxed: under the table lock (L).
            match e.state.load(Ordering::Relaxed) {
                LIVE => {
                    // SAFETY: LIVE under the lock we hold.
                    let s = unsafe { self.slot(e) };
                    if s.ident != ident {
                        continue;
                    }
                    // Relaxed (all four): (L).
                    let idle = e.opens.load(Ordering::Relaxed) == 0;
                    let had = (
                        e.stamp[0].load(Ordering::Relaxed),
                        e.stamp[1].load(Ordering::Relaxed),
                    );
                    let same = had == stamp || had == ORPHAN;
                    if idle && !same {
                        // Changed behind the cache's back while no one had
                        // it open: its pages are stale. With none left, the
                        // entry is free at once (it may be the new one).
                        e.state.store(CLOSING, Ordering::Relaxed);
                        if self.free_unused(e) {
                            free.get_or_insert(i);
                        }
                        continue;
                    }
                    self.count_open(who, i)?;
                    return Ok(Opened {
                        slot: s,
                        created: false,
                    });
                }
                FREE => {
                    free.get_or_insert(i);
                }
                _ => {} // CLOSING
            }
        }
        let Some(i) = free else {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("the shared cache's file table is full ({MAX_FILES} files open)"),
            ));
        };
        let e = self.entry(i);
        // Relaxed: (L).
        let gen = self.head().gens.fetch_add(1, Ordering::Relaxed) + 1;
        let id = (gen << INDEX_BITS) | (i as u64 + 1);
        // Its size lock's shards by process: zeroed (a dead process's
        // holds on a closing entry were nobody's to give back), found from
        // the lock by their distance.
        // SAFETY: in bounds of the blocks' array; a FREE entry's block,
        // under the lock: no lock uses it.
        let procs = unsafe { &*self.procs.as_ptr().add(i) };
        for s in procs {
            // Relaxed: published with the slot (below).
            s.store(0, Ordering::Relaxed);
        }
        let cell = self.cell(e);
        let from = cell as isize + std::mem::offset_of!(FileSlot, size) as isize;
        // SAFETY: a FREE entry, under the lock: no one reads its slot; its
        // lock's shards lie `procs` bytes from it, in the segment, zeroed,
        // for this entry only (`size_lock::SizeLock::per_process`).
        unsafe {
            (*cell).write(FileSlot::new(
                id,
                ident,
                len,
                max_len,
                procs as *const ProcShards as isize - from,
            ))
        };
        // The ledger, then the recount, then LIVE last (see the module
        // docs). Relaxed: (L); the slot is published to other processes
        // by the lock's release (they find it under the lock) and to this
        // process's threads by the `FileShared` that holds it.
        self.ledger(who, i).fetch_add(1, Ordering::Relaxed);
        self.recount(i);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        e.state.store(LIVE, Ordering::Relaxed);
        Ok(Opened {
            // SAFETY: LIVE now, and we hold the open just counted.
            slot: unsafe { self.slot(e) },
            created: true,
        })
    }

    /// Counts an open of entry `i` by `who`: its ledger, then `opens`.
    /// Under the lock.
    fn count_open(&self, who: usize, i: usize) -> io::Result<()> {
        let l = self.ledger(who, i);
        // Relaxed: (L).
        if l.load(Ordering::Relaxed) == u16::MAX {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "a file of the shared cache is open {} times in this process",
                    u16::MAX
                ),
            ));
        }
        l.fetch_add(1, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        self.entry(i).opens.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back an open of entry `i` by `who` (an error if it has none):
    /// its ledger, then `opens`. Returns the opens left. Under the lock.
    fn count_close(&self, who: usize, i: usize, id: u64) -> io::Result<u32> {
        let l = self.ledger(who, i);
        // Relaxed: (L).
        if l.load(Ordering::Relaxed) == 0 {
            return Err(not_open(id));
        }
        l.fetch_sub(1, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        Ok(self.entry(i).opens.fetch_sub(1, Ordering::Relaxed) - 1)
    }

    /// The entry index of file id `id`, if it can name one.
    fn index_of(id: u64) -> Option<usize> {
        ((id & ((1 << INDEX_BITS) - 1)) as usize)
            .checked_sub(1)
            .filter(|&i| i < MAX_FILES)
    }

    /// The LIVE or CLOSING entry of file `id`, under the table lock.
    fn entry_of(&self, id: u64) -> Option<&Entry> {
        let e = self.entry(Self::index_of(id)?);
        // Relaxed: (L), the caller holds the lock.
        let st = e.state.load(Ordering::Relaxed);
        // SAFETY: LIVE or CLOSING entries hold an initialised slot; under
        // the lock nobody remakes it.
        (st != FREE && unsafe { self.slot(e) }.id == id).then_some(e)
    }

    /// Gives back one open of file `id` (from [`FileTable::open`]). Returns
    /// whether it was the last open anywhere: then the entry is CLOSING
    /// (no open finds it, none reuses it) until the caller, having dropped
    /// the file's pages, calls [`FileTable::release`]; an open of the same
    /// file meanwhile makes a new slot (the file was written back before
    /// its last close, so the new one reads what the old one held). An
    /// error if `id` names no open file. Context: no sleep; takes the
    /// table lock.
    pub(crate) fn close(&self, id: u64) -> io::Result<bool> {
        let who = self.who()?;
        let _g = self.lock();
        let e = self
            .entry_of(id)
            // Relaxed: (L).
            .filter(|e| e.state.load(Ordering::Relaxed) == LIVE)
            .ok_or_else(|| not_open(id))?;
        let left = self.count_close(who, self.index_in(e), id)?;
        if left == 0 {
            e.state.store(CLOSING, Ordering::Relaxed);
        }
        Ok(left == 0)
    }

    /// Gives back one open of file `id` (from [`FileTable::open`]), as a
    /// cache does: the last one anywhere leaves the entry LIVE and idle,
    /// with `stamp` (the file's change stamp now; `None`: unknown, never
    /// matched), its pages cached for the next opener of the unchanged
    /// file (see [`FileTable::open`]). Returns whether it was the last. An
    /// error if `id` names no open file. Context: no sleep; takes the
    /// table lock.
    pub(crate) fn close_idle(&self, id: u64, stamp: Option<(u64, u64)>) -> io::Result<bool> {
        let who = self.who()?;
        let _g = self.lock();
        let e = self
            .entry_of(id)
            // Relaxed: (L).
            .filter(|e| e.state.load(Ordering::Relaxed) == LIVE)
            .ok_or_else(|| not_open(id))?;
        let left = self.count_close(who, self.index_in(e), id)?;
        if left == 0 {
            let (a, b) = stamp.unwrap_or((u64::MAX, u64::MAX));
            e.stamp[0].store(a, Ordering::Relaxed);
            e.stamp[1].store(b, Ordering::Relaxed);
        }
        Ok(left == 0)
    }

    /// Frees the CLOSING entry of file `id` (after [`FileTable::close`]
    /// returned true and the file's pages are gone; references to its
    /// slot end here). An error if `id` is not CLOSING. Context: no sleep;
    /// takes the table lock.
    pub(crate) fn release(&self, id: u64) -> io::Result<()> {
        let mut g = self.lock();
        let e = self
            .entry_of(id)
            // Relaxed: (L).
            .filter(|e| e.state.load(Ordering::Relaxed) == CLOSING)
            .ok_or_else(|| not_open(id))?;
        // A borrower (another process's reclaim, evicting one clean page:
        // no I/O, no wait) may still hold the slot; no new one comes now
        // that the entry is CLOSING. Acquire: pairs with `unborrow`.
        while e.borrows.load(Ordering::Acquire) != 0 {
            drop(g);
            crate::sync::yield_now();
            g = self.lock();
        }
        // FREE first (see the module docs). Relaxed: (L).
        e.state.store(FREE, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        // SAFETY: it was CLOSING: no open is left and no one finds it; the
        // slot is the caller's to drop.
        unsafe { (*self.cell(e)).assume_init_drop() };
        Ok(())
    }

    /// The slot of file `id` (LIVE, or CLOSING and still holding pages), held until
    /// [`FileTable::unborrow`]: for reclaim in a process that does not
    /// have the file open, which evicts its clean pages through the slot.
    /// `None` if `id` names no entry. Context: no sleep; takes the table
    /// lock.
    pub(crate) fn borrow(&self, id: u64) -> Option<&FileSlot> {
        let _g = self.lock();
        let e = self.entry_of(id)?;
        // Relaxed: counted under the lock, which `release` checks it under.
        e.borrows.fetch_add(1, Ordering::Relaxed);
        // SAFETY: LIVE under the lock, and not freed while borrowed.
        Some(unsafe { self.slot(e) })
    }

    /// Gives back a [`FileTable::borrow`] of file `id`. Context: any, no
    /// lock.
    pub(crate) fn unborrow(&self, id: u64) {
        if let Some(i) = Self::index_of(id) {
            // Release: the borrower's uses of the slot before `release`'s
            // Acquire load frees it.
            self.entry(i).borrows.fetch_sub(1, Ordering::Release);
        }
    }

    /// Frees the entry of file `id` if nothing holds it any more: CLOSING
    /// (stale) or LIVE with no open, its index empty (reclaim evicted its
    /// last page), no borrow held. A later open of the same file makes a
    /// new slot, which reads what is on disk. Returns whether it did.
    /// Context: no sleep; takes the table lock.
    pub(crate) fn free_if_unused(&self, id: u64) -> bool {
        let _g = self.lock();
        self.entry_of(id).is_some_and(|e| self.free_unused(e))
    }

    /// `free_if_unused` of entry `e`, under the table lock.
    fn free_unused(&self, e: &Entry) -> bool {
        // Relaxed (state, opens): (L); borrows: Acquire, as `release`.
        let st = e.state.load(Ordering::Relaxed);
        let unused = st == CLOSING || st == LIVE && e.opens.load(Ordering::Relaxed) == 0;
        if !unused || e.borrows.load(Ordering::Acquire) != 0 {
            return false;
        }
        // SAFETY: LIVE or CLOSING (the callers' `entry_of` or scan): an
        // initialised slot, not remade under the lock.
        if !unsafe { self.slot(e) }.tree.is_empty() {
            return false;
        }
        // FREE first (see the module docs).
        e.state.store(FREE, Ordering::Relaxed);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::Release);
        // SAFETY: no open, no borrow, no page: nothing reaches the slot
        // but through the table, whose lock we hold.
        unsafe { (*self.cell(e)).assume_init_drop() };
        true
    }

    /// Opens of the file with id `id` by every process (0 if it is not
    /// open). Context: no sleep; takes the table lock.
    pub(crate) fn opens(&self, id: u64) -> u32 {
        let _g = self.lock();
        self.entry_of(id)
            // Relaxed: (L).
            .filter(|e| e.state.load(Ordering::Relaxed) == LIVE)
            .map_or(0, |e| e.opens.load(Ordering::Relaxed))
    }
}

fn not_open(id: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("file id {id} is not open in this shared cache"),
    )
}

/// One file of a [`FileTable::list`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) ident: (u64, u64),
    pub(crate) id: u64,
    pub(crate) opens: u32,
    pub(crate) len: u64,
}

impl FileTable {
    /// The files open now, if the table lock is free within a few tries
    /// (`None`: held that long, perhaps by a process that died holding it).
    /// For inspection: it never waits on the lock. Context: no sleep.
    pub(crate) fn list(&self) -> Option<Vec<Listed>> {
        let _g = (0..100).find_map(|_| {
            let g = self.head().lock.try_lock();
            if g.is_none() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            g
        })?;
        let mut out = Vec::new();
        for i in 0..MAX_FILES {
            let e = self.entry(i);
            // Relaxed: (L).
            if e.state.load(Ordering::Relaxed) == LIVE {
                // SAFETY: LIVE under the lock.
                let s = unsafe { self.slot(e) };
                out.push(Listed {
                    ident: s.ident,
                    id: s.id,
                    opens: e.opens.load(Ordering::Relaxed),
                    // Relaxed: a snapshot.
                    len: s.len.load(Ordering::Relaxed),
                });
            }
        }
        Some(out)
    }
}

impl FileTable {
    /// The ids of the files open now whose slot `pred` picks (the
    /// recovery of a dead process: the cuts it left, 5.6 T0). Context: may
    /// sleep (the table lock, taken over from a dead holder).
    #[cfg(not(loom))]
    pub(crate) fn ids_where(&self, pred: impl Fn(&FileSlot) -> bool) -> Vec<u64> {
        let _g = self.lock();
        let out = (0..MAX_FILES)
            .filter_map(|i| {
                let e = self.entry(i);
                // Relaxed: (L).
                (e.state.load(Ordering::Relaxed) == LIVE).then(|| {
                    // SAFETY: LIVE under the lock.
                    unsafe { self.slot(e) }
                })
            })
            .filter(|s| pred(s))
            .map(|s| s.id)
            .collect();
        out
    }
}

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileTable::Head")
    }
}

#[cfg(all(test, not(loom)))]
#[path = "file_table_tests.rs"]
mod tests;
