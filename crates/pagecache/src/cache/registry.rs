//! The file registry: one [`FileShared`] per open file (same device and
//! inode), found by inode on open and by id on eviction.
//!
//! Handles count themselves in `FileShared::handles`; 0 -> 1 happens only
//! under the registry lock (`attach`), so `detach` can re-check it under the
//! same lock before it forgets the file.

use super::Inner;
use crate::index::Tree;
use crate::io::BackendFile;
use crate::placed::Placed;
use crate::size_lock::SizeLock;
use crate::stats::Counter;
use crate::sync::{AtomicU32, AtomicU64, AtomicUsize, LockClass, Mutex, Ordering, Witness};
use crossbeam_utils::CachePadded;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock};

/// Proof that the caller holds a file's size lock shared (write-back's
/// precondition: `set_len` cannot run under it).
pub(crate) use crate::size_lock::{SizeExclusive, SizeShared};

/// What every user of one file shares, wherever they are: the part of a
/// file's state with no address and no heap in it (an index, atomics and
/// futex locks), so that it can live in memory processes share. Reached
/// through [`FileShared`] (which derefs to it).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct FileSlot {
    /// (C) unique id, the `owner` of this file's frames.
    pub(crate) id: u64,
    /// (C) `(device, inode)`, the registry key.
    pub(crate) ident: (u64, u64),
    /// (C) the largest length the file may have (the filesystem's limit).
    pub(crate) max_len: u64,
    /// (A) set (never cleared) before the first run over this file's
    /// pages pins its slots (protocol 5.7 R1): until then a writer's W2
    /// has no leaf to look at. Read after W2's fence, stored before R1's,
    /// so of a run and a writer at least one sees the other as before.
    pub(crate) had_runs: crate::sync::AtomicBool,
    /// The index; its own mutex is the tree lock (T).
    pub(crate) tree: Tree,
    /// (A) logical length in bytes; grows by `fetch_max` per written page,
    /// shrinks only under the size lock held exclusively. On a line of its
    /// own: appends write it, while every lookup reads the lines above.
    pub(crate) len: CachePadded<AtomicU64>,
    /// (A) bytes of the file that may hold data on disk: its length when
    /// opened, raised (`fetch_max`, before the write is issued) to the end
    /// of every write-back, lowered by a truncate (under the size lock
    /// held exclusively). Past it the file is zeros on disk (a hole, or an
    /// extension by `set_len`, `fallocate` or a persisted length), so a
    /// page there that is not cached was never written by anyone:
    /// `page_new` may create it without reading.
    pub(crate) disk_end: AtomicU64,
    /// (A) pages of this file under write-back right now (any writer:
    /// sync, eviction, the flusher), one count per process slot (a
    /// private cache's all in the first): `sync` waits for their sum to be
    /// 0 (`writeback_in_flight`). A process adds to and takes from its own
    /// count only (its write-backs end on its own threads), so the
    /// recovery of a dead one zeroes its count once its write-backs are
    /// ended (5.14 W3), with no window in which a death leaves a count no
    /// one can take back (5.15).
    pub(crate) writeback: [AtomicU32; WB_SLOTS],
    /// (A) when the file last became dirty, in the cache's dirty sequence
    /// (`Inner::file_dirtied`; 0: no page dirtied since its dirty pages
    /// were last taken for write-back): the kernel's `dirtied_when`, the
    /// flusher's order. A hint (see `Inner::flush_pass`).
    pub(crate) dirtied_when: crate::sync::unmodelled::AtomicU64,
    /// (A) write-backs of this file's pages that ended with their pages
    /// dirty again, ever: a failed write, or a write-back that eviction or
    /// the flusher started and then gave up (the hook deferred the page, or
    /// a writer held it). A `sync` that sees it move while it waits for
    /// others' write-backs writes those pages itself (`Inner::flush`).
    pub(crate) wb_undone: AtomicU64,
    /// (A) the first page whose unwritten changes were lost with a process
    /// that died holding its latch, plus one (0: none): the next `sync`, in
    /// any process, reports it and clears it (5.14 L4).
    pub(crate) lost: AtomicU64,
    /// (X1) the cut a `set_len` is making (protocol 5.6 T0): its new
    /// length plus one, with [`CUT_DONE`](super::truncate::CUT_DONE) once
    /// its `ftruncate` returned; 0 while no cut is under way. Written and
    /// read under the size lock's exclusive mutex only, so one found set
    /// there was left by a holder that died (or is waiting for the new
    /// last page to be idle): the taker finishes it first.
    pub(crate) cut: AtomicU64,
    /// (X1) the tag of the process whose `set_len` recorded `cut` (5.14
    /// R1; 0 in a private cache): its recovery finishes the cut if it died
    /// while waiting for the new last page, the size lock let go.
    pub(crate) cut_by: AtomicU32,
    /// (A) in a cache shared by processes, bit `s` set while the process
    /// in slot `s` has the file open for writing (0 in a private cache):
    /// the age flusher's process writes the file's expired pages, and the
    /// others those of files it cannot write (`cache/shared.rs`).
    pub(crate) writers: AtomicU64,
    /// (A) where the flusher's next pass over this file starts (the page
    /// after the last one its previous pass wrote; the kernel's
    /// `writeback_index`). A hint.
    pub(crate) wb_cursor: crate::sync::unmodelled::AtomicU64,
    /// The flush lock: held by `sync` and close for their whole write-back
    /// (so they serialise), tried by the flusher, which skips a file being
    /// synced — a sync then never misses pages the flusher took from under
    /// it. Above the size lock in the lock order.
    pub(crate) flushing: Mutex<()>,
    /// The size lock (S, `size_lock.rs`), over page ranges: shared by
    /// `write_at` (its pages), write-back (its run's) and `sync` (all),
    /// recursively; exclusive for `set_len` from the first page it
    /// changes, which excludes only shared holders that reach that page and
    /// never waits for a page while it holds it. Sharded by thread: a
    /// shared hold writes only its thread's shard.
    pub(crate) size: SizeLock,
}

impl FileSlot {
    /// A fresh slot for file `id` at `ident`, `len` bytes long, at most
    /// `max_len`; `procs`: in a cache shared by processes, where its size
    /// lock's shards by process lie from the lock (0: a private cache's).
    ///
    /// # Safety
    ///
    /// A nonzero `procs` meets [`SizeLock::per_process`]'s contract for
    /// the lock at the place the slot is written to.
    pub(super) unsafe fn new(
        id: u64,
        ident: (u64, u64),
        len: u64,
        max_len: u64,
        procs: isize,
    ) -> FileSlot {
        FileSlot {
            id,
            ident,
            tree: Tree::new(id),
            len: CachePadded::new(AtomicU64::new(len)),
            max_len,
            disk_end: AtomicU64::new(len),
            size: if procs != 0 {
                // SAFETY: the caller's.
                unsafe { SizeLock::per_process(procs) }
            } else {
                SizeLock::new()
            },
            flushing: Mutex::with_class((), LockClass::Other),
            writeback: std::array::from_fn(|_| AtomicU32::new(0)),
            dirtied_when: crate::sync::unmodelled::AtomicU64::new(0),
            wb_undone: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            cut: AtomicU64::new(0),
            cut_by: AtomicU32::new(0),
            writers: AtomicU64::new(0),
            wb_cursor: Default::default(),
            had_runs: crate::sync::AtomicBool::new(false),
        }
    }

    /// Pages of this file under write-back now, by every process (a sum:
    /// each count read Acquire, pairing with `writeback_done`'s Release).
    /// A write-back counted before the caller's look began is in it until
    /// it ends: its process's count never dips below what it has in flight.
    pub(crate) fn writeback_in_flight(&self) -> u32 {
        self.writeback
            .iter()
            .fold(0u32, |n, w| n.wrapping_add(w.load(Ordering::Acquire)))
    }

    /// Zeroes the write-back count of the dead process in slot `slot`
    /// (its write-backs ended first, 5.14 W3). Context: the recovery's
    /// thread.
    #[cfg(not(loom))]
    pub(crate) fn writeback_dead(&self, slot: usize) {
        if let Some(w) = self.writeback.get(slot) {
            // Release: as `writeback_done`'s.
            w.store(0, Ordering::Release);
        }
    }
}

/// Write-back counts per file: one per process slot of a shared cache.
#[cfg(not(loom))]
const WB_SLOTS: usize = crate::segment::MAX_PROCS;
#[cfg(loom)]
const WB_SLOTS: usize = 1;

impl FileShared {
    /// This process's slot in its shared cache (0 in a private cache):
    /// which of the file's write-back counts is its own.
    #[inline]
    fn proc_slot(&self) -> usize {
        self.shared.as_ref().map_or(0, |sh| sh.slot())
    }

    /// `n` more pages under write-back (taken, or about to start), in this
    /// process's count.
    #[inline]
    pub(crate) fn writeback_started(&self, n: usize) {
        // Relaxed: ordered by the tree lock or the start's RMW that
        // follows (see the callers).
        self.writeback[self.proc_slot()].fetch_add(n as u32, Ordering::Relaxed);
    }

    /// `n` pages' write-backs ended (or given up), taken from this
    /// process's count (they were started here).
    #[inline]
    pub(crate) fn writeback_done(&self, n: usize) {
        // Release: the pages' end of write-back (dirty again and tagged,
        // or written) happens-before a waiting sync's Acquire load.
        self.writeback[self.proc_slot()].fetch_sub(n as u32, Ordering::Release);
    }
}

/// One file as this process holds it (same device and inode): its shared
/// [`FileSlot`] (what `Deref` reaches) and what stays with the process,
/// its descriptors, handles, write-back hook and hints.
#[derive(Debug)]
pub(crate) struct FileShared {
    /// The shared part: on the heap, or a shared cache's file table's.
    slot: Placed<FileSlot>,
    /// A shared cache's segment, whose file table this holds an open of
    /// until it drops (then the slot is no longer ours to use: the open
    /// goes back last, in `Drop`, however long the `Arc` lives).
    shared: Option<Arc<super::SharedPart>>,
    /// (C) path given at first open, for error messages.
    pub(crate) path: PathBuf,
    /// (C) descriptor used for reads.
    pub(crate) read_fd: Arc<dyn BackendFile>,
    /// (O) descriptor used for writes, set once by the first writable
    /// open.
    pub(crate) write_fd: OnceLock<Arc<dyn BackendFile>>,
    /// (A) open handles; 0 means only the registry keeps it (dirty pages
    /// whose write-back failed).
    pub(crate) handles: AtomicUsize,
    /// The file's contents on disk as loom sees them: every read, write
    /// and length change of the file touches it first (nothing without
    /// loom; see `sync::Witness`).
    pub(crate) disk: Witness,
    /// The write-back hook (`File::set_writeback_hook`), if any.
    pub(crate) hook: crate::sync::unmodelled::RwLock<Option<crate::cache::WritebackHook>>,
    /// (A) whether `hook` is set: write-back then keeps pages stable.
    pub(crate) hooked: crate::sync::unmodelled::AtomicBool,
    /// Bytes from the file's start whose kernel-cache copy a buffered
    /// stream has dropped (`Config::stream_reads`; see
    /// `Inner::drop_behind`). A hint.
    pub(crate) dropped_behind: crate::sync::unmodelled::AtomicU64,
    /// Whether a stream read this file through the kernel's cache
    /// (`Config::stream_reads`): its last close drops what the kernel
    /// still holds of it. A hint.
    pub(crate) streamed: crate::sync::unmodelled::AtomicBool,
    /// Whether its device's streams read buffered, once known (0: not
    /// yet, 1: no, 2: yes; `Inner::bypasses`): the choice never changes
    /// once made, so it is asked of `Streams` until then only.
    pub(crate) stream_buffered: crate::sync::unmodelled::AtomicU8,
    /// This process's pages of the file behind long write runs
    /// (`write_behind.rs`).
    pub(crate) behind: super::write_behind::Behind,
}

impl Drop for FileShared {
    fn drop(&mut self) {
        if let Some(sh) = &self.shared {
            // This process's descriptors go with it. Relaxed: as `attach`.
            self.slot
                .writers
                .fetch_and(!sh.writer_bit(), Ordering::Relaxed);
            // The file's stamp now, for the next opener (`None` if it
            // cannot be had: the pages are then not served again).
            let stamp = self.read_fd.change_stamp().ok();
            sh.close_file(self.id, stamp);
        }
    }
}

impl std::ops::Deref for FileShared {
    type Target = FileSlot;
    #[inline(always)]
    fn deref(&self) -> &FileSlot {
        &self.slot
    }
}

/// Open files (R: the registry lock guards both maps).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_inode: HashMap<(u64, u64), Arc<FileShared>>,
    pub(crate) by_id: HashMap<u64, Arc<FileShared>>,
}

impl Inner {
    /// Finds or registers the shared state of the file behind `fd`, and
    /// counts one more handle. Context: no sleep (a `stat` of the
    /// descriptor); takes the registry lock exclusively.
    pub(crate) fn attach(
        &self,
        path: &Path,
        fd: Arc<dyn BackendFile>,
        writable: bool,
    ) -> io::Result<Arc<FileShared>> {
        let ident = fd.identity()?;
        let mut reg = self.registry.write();
        if let Some(fs) = reg.by_inode.get(&ident) {
            if writable {
                let _ = fs.write_fd.set(fd);
                // Relaxed: a hint for the age flusher.
                fs.writers.fetch_or(self.writer_bit(), Ordering::Relaxed);
            }
            // Relaxed: 0 -> 1 happens only here, under the registry lock that
            // `detach` re-checks under; other changes come from live handles.
            fs.handles.fetch_add(1, Ordering::Relaxed);
            return Ok(fs.clone());
        }
        let len = fd.len()?;
        let (slot, id) = match self.file_table() {
            // A shared cache: the slot every process that has the file open
            // shares (made here if none has).
            Some(t) => {
                let o = t.open(ident, len, fd.max_len(), fd.change_stamp()?)?;
                let id = o.slot.id;
                // SAFETY: the slot stays in the segment (which the
                // `FileShared` keeps mapped through `shared`) while our open
                // of it is held: until the `FileShared`'s drop, after its
                // last use.
                (unsafe { Placed::at(NonNull::from(o.slot)) }, id)
            }
            None => {
                // Relaxed: a unique number, published with the file under
                // the lock.
                let id = self.next_id.fetch_add(1, Ordering::Relaxed);
                let slot = Placed::new(
                    // SAFETY: a private cache's slot (no shards by process).
                    unsafe { FileSlot::new(id, ident, len, fd.max_len(), 0) },
                );
                (slot, id)
            }
        };
        let write_fd = OnceLock::new();
        if writable {
            let _ = write_fd.set(fd.clone());
        }
        let fs = Arc::new(FileShared {
            slot,
            shared: self.shared.clone(),
            path: path.to_path_buf(),
            read_fd: fd,
            write_fd,
            handles: AtomicUsize::new(1),
            disk: Witness::default(),
            hook: Default::default(),
            hooked: Default::default(),
            dropped_behind: Default::default(),
            streamed: Default::default(),
            stream_buffered: Default::default(),
            behind: Default::default(),
        });
        self.count(if fs.read_fd.is_direct() {
            Counter::DirectFiles
        } else {
            Counter::BufferedFiles
        });
        if writable {
            // Relaxed: as above.
            fs.writers.fetch_or(self.writer_bit(), Ordering::Relaxed);
        }
        reg.by_inode.insert(ident, fs.clone());
        reg.by_id.insert(id, fs.clone());
        Ok(fs)
    }

    /// The last handle of `fs` went away: write its dirty pages back, then
    /// drop its pages and forget it (its descriptors close with the last
    /// `Arc`). If write-back fails the file stays registered with its dirty
    /// pages (no dirty data is dropped): a later open of the same file and
    /// `sync` retries, eviction may write them back (and then releases the
    /// file, see [`Inner::release_idle`]), or `PageCache::forget` drops them.
    /// Context: may sleep (write-back I/O); takes the registry lock
    /// exclusively after the flush; no pin or latch of the file held.
    pub(crate) fn detach(&self, fs: &Arc<FileShared>) -> io::Result<()> {
        let res = self.flush(fs, false);
        // Buffered streams drop the kernel's copy behind them in 8 MiB
        // blocks; what they left (the last blocks, the kernel's readahead
        // past them, a file smaller than that) goes now. Relaxed: a hint.
        if fs.streamed.swap(false, Ordering::Relaxed) {
            // Acquire: as `read_at`.
            fs.read_fd.drop_behind(0, fs.len.load(Ordering::Acquire));
        }
        // Even if the flush failed: only a file with dirty pages stays (the
        // error may have been an earlier one, reported now, with every page
        // written).
        let reg = self.registry.write();
        self.unregister_idle(reg, fs, false);
        res
    }

    /// Drops every cached page of `fs`, dirty or not, without writing any
    /// back, and forgets the file, if no handle of it is open. Returns
    /// whether it did, and only once no write of a dropped page is in
    /// flight any more.
    /// Context: may sleep (waits for write-backs in flight, holding no
    /// lock); takes the registry lock exclusively, then the tree lock.
    pub(crate) fn discard(&self, fs: &Arc<FileShared>) -> bool {
        let reg = self.registry.write();
        let done = self.unregister_idle(reg, fs, true);
        if done {
            // A write of a dropped page still in flight (the flusher's,
            // eviction's, a failed close's) started before the removal and
            // would land later, over whatever the file holds by then: a
            // `sync` of the file reopened since would have returned `Ok`
            // for a disk that then changed. Wait for it. No new one can
            // start: every write-back counts itself in `fs.writeback`
            // before it starts (`take_dirty_of` under the tree lock,
            // `start_one` before its RMW), and a start fails on a page
            // `mark_removed` marked (RMWs on one state word order the two).
            self.wait_writeback(fs);
        }
        done
    }

    /// Called by eviction after it wrote back or evicted a page of a file
    /// with no open handle: if nothing dirty is left, the file is released
    /// (its clean pages dropped, its descriptors closed). Context: no
    /// sleep; only *tries* the registry lock (the caller may hold a size
    /// lock, which is below it).
    pub(crate) fn release_idle(&self, fs: &Arc<FileShared>) {
        if let Some(reg) = self.registry.try_write() {
            self.unregister_idle(reg, fs, false);
        }
    }

    /// The files registered under `path` (the path they were first opened
    /// by) with no open handle. Context: takes the registry lock shared.
    pub(crate) fn idle_files(&self, path: &Path) -> Vec<Arc<FileShared>> {
        self.registry
            .read()
            .by_id
            .values()
            // Relaxed: a hint, re-checked under the lock by `discard`.
            .filter(|fs| fs.path == path && fs.handles.load(Ordering::Relaxed) == 0)
            .cloned()
            .collect()
    }

    /// With the registry lock held: if `fs` has no handle (and, unless
    /// `discard`, no dirty page), removes it from the registry, then drops
    /// its pages. Returns whether it did.
    fn unregister_idle(
        &self,
        mut reg: crate::sync::WriteGuard<'_, Registry>,
        fs: &Arc<FileShared>,
        discard: bool,
    ) -> bool {
        // Relaxed: read under the registry lock, which orders it against the
        // only 0 -> 1 transition (`attach`).
        if fs.handles.load(Ordering::Relaxed) != 0 {
            return false; // reopened meanwhile
        }
        // With no handle, pages can be dirtied only by nobody (in a shared
        // cache, other processes may: we keep the file while we see dirty
        // pages, so that eviction here can write them): the check is for
        // write-back races (a failed eviction write-back re-dirties). A
        // page under write-back is clean now but dirty again if the write
        // fails: wait for the writer (the flusher or eviction) to finish;
        // it releases the file then. With no handle nothing new can be
        // dirtied, so once the count is 0 `has_dirty` is the last word.
        // Acquire: pairs with the write-backs' Release decrement.
        if !discard && (fs.writeback_in_flight() != 0 || self.has_dirty(fs)) {
            return false;
        }
        // Only our own entry: a racing open may have registered a new file
        // for the same inode after an earlier detach removed ours.
        if reg
            .by_inode
            .get(&fs.ident)
            .is_some_and(|v| Arc::ptr_eq(v, fs))
        {
            reg.by_inode.remove(&fs.ident);
        }
        let was = reg.by_id.remove(&fs.id).is_some();
        drop(reg);
        // (`forget` of a file another process has open drops nothing: its
        // pages are that process's too.)
        if fs.shared.is_some()
            && (!discard || self.file_table().is_some_and(|t| t.opens(fs.id) > 1))
        {
            // A shared cache keeps the pages of a file no process here has
            // open: others may, and the next opener of the unchanged file
            // finds them (`FileTable::open`); reclaim in any process evicts
            // them. Our open of the slot goes back when `fs` drops.
            return was;
        }
        // Orphaning clears DIRTY: with `discard` that is the point.
        self.remove_pages_from(fs, 0);
        // A discard finds the entry gone when the flusher or eviction
        // released the file in the instant between the last handle's drop
        // and here (nothing dirty, pages dropped): the file is dropped all
        // the same (the model check met that race, made likelier by the
        // flusher's writes for reclaim).
        was || discard
    }

    /// Whether any cached page of `fs` is dirty or under write-back.
    /// Context: no sleep; takes the tree lock.
    fn has_dirty(&self, fs: &FileShared) -> bool {
        let mut all = Vec::new();
        fs.tree.lock().entries_from(&self.nodes, 0, &mut all);
        // Under write-back counts: the write may fail and re-dirty it (the
        // page goes DIRTY -> WRITEBACK -> clean or DIRTY in single RMWs, so
        // a page seen clean here stays clean with no handle open).
        all.iter().any(|&(_, f)| {
            let s = self.desc(f).snapshot();
            s.is_dirty() || s.is_under_writeback()
        })
    }

    /// The open file with id `id`. Context: no sleep; takes the registry
    /// lock shared.
    pub(crate) fn file_by_id(&self, id: u64) -> Option<Arc<FileShared>> {
        self.registry.read().by_id.get(&id).cloned()
    }
}
