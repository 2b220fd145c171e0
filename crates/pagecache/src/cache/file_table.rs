//! The files of a cache shared by processes: a fixed table of
//! [`FileSlot`]s, found by device and inode, in a table of the segment.
//! Every process that opens the same file, by any path, gets the same slot
//! (the same index, length, size lock, flush lock and write-back counts);
//! each keeps its own descriptors in its own `FileShared`.
//!
//! ```text
//! Head     the table lock (a futex mutex, 5.10), the next generation
//! entries  MAX_FILES x Entry: state (FREE / LIVE / CLOSING), opens (one
//!          per process that has the file open), borrows, the change
//!          stamp of an idle file
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

// Under loom only the type is used: no segment exists there.
#![cfg_attr(loom, allow(dead_code))]

use super::registry::FileSlot;
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

const FREE: u32 = 0;
const LIVE: u32 = 1;
const CLOSING: u32 = 2;

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
    /// (L) opens of the file by every process (each `FileShared`, one per
    /// process, counts one).
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
    slots: NonNull<Slot>,
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
        Self::slots_at() + MAX_FILES * std::mem::size_of::<Slot>()
    }

    /// Alignment a table needs.
    pub(crate) fn align() -> usize {
        std::mem::align_of::<Head>().max(std::mem::align_of::<Entry>())
    }

    fn slots_at() -> usize {
        (Self::entries_at() + MAX_FILES * std::mem::size_of::<Entry>())
            .next_multiple_of(std::mem::align_of::<Slot>().max(4096))
    }

    fn entries_at() -> usize {
        std::mem::size_of::<Head>().next_multiple_of(std::mem::align_of::<Entry>())
    }

    /// The table at `base`.
    ///
    /// # Safety
    ///
    /// `base` is [`FileTable::bytes`] bytes aligned to [`FileTable::align`],
    /// all zeros when first used by any table, used only through tables,
    /// and mapped while the result lives.
    pub(crate) unsafe fn over(base: NonNull<u8>) -> FileTable {
        FileTable {
            head: base.cast(),
            // SAFETY: inside the caller's memory.
            entries: unsafe {
                NonNull::new_unchecked(base.as_ptr().add(Self::entries_at()).cast())
            },
            // SAFETY: inside the caller's memory.
            slots: unsafe { NonNull::new_unchecked(base.as_ptr().add(Self::slots_at()).cast()) },
        }
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

    /// Entry `e`'s slot's place.
    fn cell(&self, e: &Entry) -> *mut MaybeUninit<FileSlot> {
        let i = (e as *const Entry as usize - self.entries.as_ptr() as usize)
            / std::mem::size_of::<Entry>();
        assert!(i < MAX_FILES);
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
        let _g = self.head().lock.lock();
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
                    let same = e.stamp[0].load(Ordering::Relaxed) == stamp.0
                        && e.stamp[1].load(Ordering::Relaxed) == stamp.1;
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
                    e.opens.fetch_add(1, Ordering::Relaxed);
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
        // SAFETY: a FREE entry, under the lock: no one reads its slot.
        unsafe { (*self.cell(e)).write(FileSlot::new(id, ident, len, max_len)) };
        // Relaxed: (L); the slot is published to other processes by the
        // lock's release (they find it under the lock) and to this
        // process's threads by the `FileShared` that holds it.
        e.opens.store(1, Ordering::Relaxed);
        e.state.store(LIVE, Ordering::Relaxed);
        Ok(Opened {
            // SAFETY: LIVE now, and we hold the open just counted.
            slot: unsafe { self.slot(e) },
            created: true,
        })
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
        let _g = self.head().lock.lock();
        let e = self
            .entry_of(id)
            // Relaxed: (L).
            .filter(|e| e.state.load(Ordering::Relaxed) == LIVE)
            .ok_or_else(|| not_open(id))?;
        // Relaxed: (L).
        let left = e.opens.load(Ordering::Relaxed).saturating_sub(1);
        e.opens.store(left, Ordering::Relaxed);
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
        let _g = self.head().lock.lock();
        let e = self
            .entry_of(id)
            // Relaxed: (L).
            .filter(|e| {
                e.state.load(Ordering::Relaxed) == LIVE && e.opens.load(Ordering::Relaxed) > 0
            })
            .ok_or_else(|| not_open(id))?;
        // Relaxed (all): (L).
        let left = e.opens.load(Ordering::Relaxed) - 1;
        e.opens.store(left, Ordering::Relaxed);
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
        let mut g = self.head().lock.lock();
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
            g = self.head().lock.lock();
        }
        // SAFETY: CLOSING: no open is left and no one finds it; the slot
        // is the caller's to drop.
        unsafe { (*self.cell(e)).assume_init_drop() };
        // Relaxed: (L).
        e.state.store(FREE, Ordering::Relaxed);
        Ok(())
    }

    /// The slot of file `id` (LIVE, or CLOSING and still holding pages), held until
    /// [`FileTable::unborrow`]: for reclaim in a process that does not
    /// have the file open, which evicts its clean pages through the slot.
    /// `None` if `id` names no entry. Context: no sleep; takes the table
    /// lock.
    pub(crate) fn borrow(&self, id: u64) -> Option<&FileSlot> {
        let _g = self.head().lock.lock();
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
        let _g = self.head().lock.lock();
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
        // SAFETY: no open, no borrow, no page: nothing reaches the slot
        // but through the table, whose lock we hold.
        unsafe { (*self.cell(e)).assume_init_drop() };
        e.state.store(FREE, Ordering::Relaxed);
        true
    }

    /// Opens of the file with id `id` by every process (0 if it is not
    /// open). Context: no sleep; takes the table lock.
    pub(crate) fn opens(&self, id: u64) -> u32 {
        let _g = self.head().lock.lock();
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

impl std::fmt::Debug for Head {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileTable::Head")
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::sync::futex::{register_region, unregister_region, WaitTable};

    /// Two mappings of one memfd, each registered with the wait table
    /// that follows the file table in it (as a segment does): what two
    /// processes see.
    struct Shared {
        a: NonNull<u8>,
        b: NonNull<u8>,
        len: usize,
    }

    impl Shared {
        fn new() -> Shared {
            let waits = FileTable::bytes().next_multiple_of(4096);
            let len = waits + std::mem::size_of::<WaitTable>().next_multiple_of(4096);
            // SAFETY: plain syscalls, results checked; the mappings are
            // unmapped by Drop.
            unsafe {
                let fd = libc::memfd_create(c"file-table-test".as_ptr(), libc::MFD_CLOEXEC);
                assert!(fd >= 0);
                assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
                let map = || {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        0,
                    );
                    assert_ne!(p, libc::MAP_FAILED);
                    NonNull::new(p.cast::<u8>()).unwrap()
                };
                let (a, b) = (map(), map());
                libc::close(fd);
                for m in [a, b] {
                    let t = m.as_ptr().add(waits).cast::<WaitTable>();
                    assert!(register_region(m.as_ptr() as usize, len, t, None));
                }
                Shared { a, b, len }
            }
        }
    }

    impl Drop for Shared {
        fn drop(&mut self) {
            // SAFETY: our two mappings, unregistered first.
            unsafe {
                unregister_region(self.a.as_ptr() as usize);
                unregister_region(self.b.as_ptr() as usize);
                libc::munmap(self.a.as_ptr().cast(), self.len);
                libc::munmap(self.b.as_ptr().cast(), self.len);
            }
        }
    }

    #[test]
    fn one_file_one_slot_whoever_opens_it() {
        let m = Shared::new();
        // SAFETY: zeroed memfd memory of the table's size, page aligned,
        // mapped while `m` lives (longer than the tables).
        let (a, b) = unsafe { (FileTable::over(m.a), FileTable::over(m.b)) };
        let x = a.open((8, 100), 4096, 1 << 40, (0, 0)).unwrap();
        assert!(x.created);
        // The other mapping finds the same slot, length and all.
        let y = b.open((8, 100), 0, 0, (0, 0)).unwrap();
        assert!(!y.created);
        assert_eq!(y.slot.id, x.slot.id);
        assert_eq!(y.slot.len.load(Ordering::Relaxed), 4096);
        x.slot.len.store(8192, Ordering::Relaxed);
        assert_eq!(y.slot.len.load(Ordering::Relaxed), 8192);
        assert_eq!(b.opens(x.slot.id), 2);
        // Another inode is another file.
        let z = b.open((8, 101), 0, 1 << 40, (0, 0)).unwrap();
        assert!(z.created);
        assert_ne!(z.slot.id, x.slot.id);
        let listed = a.list().unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.contains(&Listed {
            ident: (8, 100),
            id: x.slot.id,
            opens: 2,
            len: 8192
        }));
        // Closes: the last one leaves the entry CLOSING (found by nobody)
        // until released.
        let id = x.slot.id;
        assert!(!a.close(x.slot.id).unwrap());
        assert!(b.close(y.slot.id).unwrap());
        assert_eq!(a.opens(id), 0);
        let again = a.open((8, 100), 0, 1 << 40, (0, 0)).unwrap();
        assert!(again.created, "a closing file is not reopened");
        assert_ne!(again.slot.id, id);
        a.release(id).unwrap();
        assert_eq!(a.release(id).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(a.close(id).unwrap_err().kind(), io::ErrorKind::NotFound);
        // Its entry is free again, with a new generation.
        assert_eq!(a.list().unwrap().len(), 2);
        assert!(b.close(z.slot.id).unwrap());
        b.release(z.slot.id).unwrap();
        let w = b.open((9, 1), 0, 1 << 40, (0, 0)).unwrap();
        assert_eq!(
            w.slot.id & ((1 << INDEX_BITS) - 1),
            1,
            "the first entry reused"
        );
        assert_ne!(w.slot.id, id);
    }

    #[test]
    fn an_idle_file_is_found_again_unless_its_stamp_changed() {
        let m = Shared::new();
        // SAFETY: as above.
        let (a, b) = unsafe { (FileTable::over(m.a), FileTable::over(m.b)) };
        let x = a.open((8, 7), 4096, 1 << 40, (11, 4096)).unwrap();
        let id = x.slot.id;
        let y = b.open((8, 7), 0, 1 << 40, (99, 1)).unwrap();
        assert_eq!(y.slot.id, id, "open elsewhere: found whatever its stamp");
        assert!(!a.close_idle(id, Some((12, 4096))).unwrap());
        assert!(b.close_idle(id, Some((12, 8192))).unwrap());
        assert_eq!(
            a.close_idle(id, None).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        // Idle: listed with no open, found by an opener of the same stamp.
        assert_eq!(a.list().unwrap()[0].opens, 0);
        let z = a.open((8, 7), 0, 1 << 40, (12, 8192)).unwrap();
        assert!(!z.created);
        assert_eq!(z.slot.id, id);
        // Closed again with no stamp known: never matched. With no page
        // cached, the stale entry is free at once, and reused.
        assert!(a.close_idle(id, None).unwrap());
        let w = b.open((8, 7), 0, 1 << 40, (12, 8192)).unwrap();
        assert!(w.created, "a stale idle entry is not served");
        assert_ne!(w.slot.id, id);
        assert_eq!(
            w.slot.id & ((1 << INDEX_BITS) - 1),
            id & ((1 << INDEX_BITS) - 1)
        );
        assert!(a.borrow(id).is_none());
        assert_eq!(a.list().unwrap().len(), 1);
        // An idle entry with no page is freed when asked (reclaim asks when
        // it evicts a file's last page); an open one is not.
        assert!(!a.free_if_unused(w.slot.id), "open");
        let wid = w.slot.id;
        assert!(b.close_idle(wid, Some((1, 1))).unwrap());
        let s = a.borrow(wid).unwrap();
        assert_eq!(s.id, wid);
        assert!(!a.free_if_unused(wid), "borrowed");
        a.unborrow(wid);
        assert!(a.free_if_unused(wid));
        assert!(a.list().unwrap().is_empty());
        assert_eq!(a.release(wid).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn racing_opens_of_one_file_share_one_slot() {
        let m = Shared::new();
        // SAFETY: as above.
        let (a, b) = unsafe { (FileTable::over(m.a), FileTable::over(m.b)) };
        for round in 0..200u64 {
            let ident = (1, round);
            let ids: Vec<(u64, bool)> = std::thread::scope(|s| {
                let ts: Vec<_> = [&a, &b, &a, &b]
                    .into_iter()
                    .map(|t| {
                        s.spawn(move || {
                            let o = t.open(ident, 0, 1 << 40, (0, 0)).unwrap();
                            (o.slot.id, o.created)
                        })
                    })
                    .collect();
                ts.into_iter().map(|t| t.join().unwrap()).collect()
            });
            assert!(ids.iter().all(|x| x.0 == ids[0].0), "{ids:?}");
            assert_eq!(ids.iter().filter(|x| x.1).count(), 1, "{ids:?}");
            assert_eq!(a.opens(ids[0].0), 4);
        }
    }

    #[test]
    fn a_full_table_is_an_error() {
        let m = Shared::new();
        // SAFETY: as above.
        let a = unsafe { FileTable::over(m.a) };
        for i in 0..MAX_FILES as u64 {
            a.open((2, i), 0, 1 << 40, (0, 0)).unwrap();
        }
        let e = a.open((3, 0), 0, 1 << 40, (0, 0)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        assert!(e.to_string().contains("file table is full"), "{e}");
    }
}
