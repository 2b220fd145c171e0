//! Layer 4, cache: the lookup, miss, optimistic-read, write, write-back and
//! truncate protocols over frames, index, allocator, policy and backend.
//!
//! # Protocol 5.1 / 5.2: lookup (speculative pin) vs. removal (freeze)
//!
//! ```text
//!  reader (no lock, no guard)               remover (file's tree lock held)
//!  1. f = tree.lookup(index)                A. freeze: CAS state from exactly
//!     empty -> miss (5.3)                      {refs = cache + remover, clean,
//!  2. CAS state: refs+1 unless refs == 0       unlatched} to 0; failure means
//!     or LOCKED (Acquire on success)           a reader holds it: leave it
//!     refs == 0 -> retry from 1             B. the CAS compared the flags: the
//!     LOCKED    -> park while the frame        page was clean and idle when
//!                  still is (file, index),     frozen (freeze-then-test)
//!                  then retry from 1        C. clear the slot, make the
//!  3. re-check identity (owner, index)         version odd, clear identity,
//!     and !REMOVED; mismatch -> release        hand the frame to its next use
//!     through the common path, retry
//! ```
//!
//! Ordering: 2 and A are RMWs on one word, so they are totally ordered. If 2
//! comes first, A sees the extra reference and fails. If A comes first, 2
//! sees 0 and retries. If the frame was freed and reused before 2, the CAS
//! reads from the new owner's `publish_state` (Release) and so sees the new
//! identity, which step 3 rejects (identity only changes while the refcount
//! is 0, so it is stable while we hold the pin: this is why step 3 checks
//! identity rather than re-loading the slot, which with type-stable index
//! nodes could come from a recycled node). The stray reference is dropped by
//! the common release path, which frees the frame if it was the last.
//!
//! Waiting in step 2 is restricted to the latch of the page being looked up
//! (`FrameDesc::wait_unlocked_as`): gang lookups hold pins of lower pages
//! while they look up the next one, and are deadlock-free with writers only
//! because every such wait is for a higher page of the same file.
//!
//! # Protocol 5.3: miss
//!
//! 1. Allocate a frame (free list, else reclaim: evict a clean page, writing
//!    a dirty one back first) with no lock held.
//! 2. Under the tree lock, re-check the slot (authoritative). Taken: free
//!    our frame, unlock, and go back to 5.1 (which pins theirs or parks on
//!    their latch). Empty: set the identity (version odd/even), publish state
//!    `refs = 2 (cache + caller) | LOCKED`, store the slot (Release).
//! 3. Drop the tree lock, read the page (zero-filling past end of file),
//!    then `unlock(UPTODATE)`, which wakes every waiter: concurrent misses on
//!    one page cause exactly one read. On a read error the page is taken out
//!    of the index before it is unlocked, so waiters retry (and read again)
//!    instead of seeing a page that was never valid.
//!
//! # Protocol 5.4 / 5.5: optimistic read vs. write
//!
//! ```text
//!  reader (read_at hit, no reference)       writer (pin held)
//!  1. f = tree.lookup(index)                1. lock(): set LOCKED (new pins and
//!  2. v = version (Acquire); odd -> retry      readers now park)
//!  3. state has UPTODATE, not REMOVED;      2. wait_drained(): refs down to
//!     identity == (file, index)                cache + own
//!  4. copy bytes with per-word relaxed      3. version odd (store + Release
//!     atomic loads                             fence)
//!  5. Acquire fence; version == v ->        4. write bytes with per-word
//!     done, else retry (3 times, then          relaxed atomic stores
//!     fall back to a pin)                   5. version even (Release)
//!                                           6. unlock(DIRTY) (Release) + wake;
//!                                              tag the index if newly dirty
//! ```
//!
//! The reader's copy is a correct snapshot iff the version did not change:
//! if it saw any byte of a write (4), the Acquire fence (5) orders the
//! version re-load after the writer's Release fence (3), so it sees an odd or
//! newer value. Identity is covered the same way (reassignment makes the
//! version odd, see `FrameDesc::reset`). Same-page readers write nothing
//! shared, which is the will-it-scale `pread2` case. Both sides use atomic
//! word accesses: a plain `memcpy` racing a writer is undefined behaviour.
//! (A `PageMut` holder writes through `&mut [u8]`; the window in which an
//! optimistic reader could overlap it is between the reader's step 3 and its
//! validation, and its result is then discarded.)
//!
//! # Protocol 5.6: truncate
//!
//! Under the size lock (exclusive) and the tree lock: clear every slot past
//! the new end and `orphan()` its frame (REMOVED, DIRTY cleared, the cache's
//! reference dropped in one step); frames nobody pinned are freed at once,
//! pinned ones by their last release. Then, without the tree lock, zero the
//! tail of the new last page under its latch, and shorten the file. No
//! write-back can race: write-back holds the size lock shared.
//!
//! # Locks (see `docs/locking.md`)
//!
//! registry (RwLock) -> size lock (per file, RwLock) -> page latch (bit) ->
//! tree lock (per file, mutex) -> pool lock / node free list (leaf locks).
//! Nothing waits for a latch while holding a tree lock, and no I/O happens
//! under a tree lock or the registry lock.

use crate::frame::alloc::{FrameAllocator, Pool, PoolKind};
use crate::frame::state::{
    refs, FrameDesc, PinFail, PinKind, Released, DIRTY, LOCKED, REFERENCED, REMOVED, UPTODATE,
};
use crate::frame::{FrameNo, FrameTable};
use crate::index::{NodeArena, Tree};
use crate::io::{read_full, write_full, Backend, BackendFile};
use crate::reclaim::{Policy, PolicyKind, ReplacementPolicy};
use crate::stats::{Counter, Counters};
use crate::sync::{LockClass, RwLock};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

mod copy;
pub(crate) use copy::{atomic_load_copy, atomic_store_copy, atomic_zero};
mod pagelock;
pub use pagelock::PageLockKind;
use pagelock::PageLocks;

/// `Inner::hooks` bit: the policy wants every hit ([`Policy::wants_hits`]).
const HOOK_HITS: u8 = 1;
/// `Inner::hooks` bit: pins and releases take a baseline page lock.
const HOOK_PAGE_LOCKS: u8 = 2;

/// Per-page copies of at least this many bytes use a pin instead of the
/// optimistic path (see `read_at`).
const OPTIMISTIC_MAX: usize = 1024;
/// Retries of an optimistic read before falling back to a pin.
const OPTIMISTIC_TRIES: usize = 3;
/// Frozen-frame retries before waiting on the tree lock instead of spinning
/// (a remover preempted between freeze and slot clear must not make readers
/// burn their time slice).
const SPIN_RETRIES: usize = 4;

/// An error with the file, page and operation it came from; the OS error is
/// kept as the source and its kind is the error's kind.
#[derive(Debug)]
pub struct PageError {
    msg: String,
    source: io::Error,
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.msg, self.source)
    }
}

impl std::error::Error for PageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

pub(crate) fn context(e: io::Error, msg: impl Into<String>) -> io::Error {
    io::Error::new(
        e.kind(),
        PageError {
            msg: msg.into(),
            source: e,
        },
    )
}

/// Size-lock state: a shrink whose `ftruncate` failed must be retried before
/// the file grows again, or stale bytes past the old end would reappear.
#[derive(Debug, Default)]
pub(crate) struct SizeState {
    pub(crate) pending_truncate: Option<u64>,
}

/// State shared by every handle of one file (same device and inode).
#[derive(Debug)]
pub(crate) struct FileShared {
    /// (C) unique id, the `owner` of this file's frames.
    pub(crate) id: u64,
    /// (C) path given at first open, for error messages.
    pub(crate) path: PathBuf,
    /// (C) `(device, inode)`, the registry key.
    ident: (u64, u64),
    /// The index; its lock is the tree lock.
    pub(crate) tree: Tree,
    /// (A) logical length in bytes; grows by `fetch_max` per written page,
    /// shrinks only under the size lock held exclusively.
    pub(crate) len: AtomicU64,
    /// Size lock: shared by `write_at`, write-back and `sync`'s page writes;
    /// exclusive for `set_len` and `sync`'s length step.
    pub(crate) size: RwLock<SizeState>,
    /// (C) descriptor used for reads.
    pub(crate) read_fd: Arc<dyn BackendFile>,
    /// (C once set) descriptor used for writes, set by the first writable
    /// open.
    pub(crate) write_fd: OnceLock<Arc<dyn BackendFile>>,
    /// (A) open handles; 0 means only the registry keeps it (dirty pages
    /// whose write-back failed).
    pub(crate) handles: AtomicUsize,
    /// Write-back error from eviction, reported by the next `sync`.
    pub(crate) wb_error: Mutex<Option<io::Error>>,
}

#[derive(Debug, Default)]
struct Registry {
    by_inode: HashMap<(u64, u64), Arc<FileShared>>,
    by_id: HashMap<u64, Arc<FileShared>>,
}

/// The cache proper, shared by every handle.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) frames: FrameTable,
    /// (C) baseline hooks on the hit and release paths (`HOOK_*`); 0 in the
    /// default build, where each path pays one test of this byte.
    hooks: u8,
    /// (C) baseline page locks (`None` with per-page bits, the default).
    page_locks: Option<PageLocks>,
    pub(crate) nodes: NodeArena,
    alloc: Pool,
    policy: Policy,
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) counters: Counters,
    registry: RwLock<Registry>,
    next_id: AtomicU64,
    /// (A) reclaimers holding eviction candidates right now: frames in their
    /// hands are in no policy queue, so an empty queue means "wait", not
    /// "out of memory", while this is non-zero.
    reclaiming: CachePadded<AtomicUsize>,
    pub(crate) page_size: usize,
    pub(crate) shift: u32,
}

/// A pin on one frame, held for the guard's life: dereferences to the
/// frame's bytes (which cannot change while pinned), clones by taking one
/// more reference, and drops through the common release path. The one
/// guard behind `PageRef` and `AnonRef`.
#[derive(Debug)]
pub(crate) struct FramePin<'a> {
    cache: &'a Inner,
    frame: FrameNo,
}

impl<'a> FramePin<'a> {
    /// Wraps a pin the caller holds on `frame` (ownership of the reference
    /// moves into the guard).
    #[inline]
    pub(crate) fn new(cache: &'a Inner, frame: FrameNo) -> Self {
        FramePin { cache, frame }
    }
}

impl std::ops::Deref for FramePin<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: we hold a pin on `frame` for our whole life.
        unsafe { self.cache.frames.bytes(self.frame) }
    }
}

impl Clone for FramePin<'_> {
    fn clone(&self) -> Self {
        self.cache.desc(self.frame).pin_more();
        FramePin {
            cache: self.cache,
            frame: self.frame,
        }
    }
}

impl Drop for FramePin<'_> {
    #[inline]
    fn drop(&mut self) {
        self.cache.release(self.frame);
    }
}

/// Outcome of an optimistic read (protocol 5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Optimistic {
    /// The bytes were copied and validated.
    Copied,
    /// Not cached: the full path reads it.
    Miss,
    /// Cached but busy (being written, filled, removed) or the version kept
    /// changing: the full path pins it.
    Fallback,
}

/// Why [`Inner::pin_as`] did not return a pinned page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PinMiss {
    /// The pin itself failed (frame free/frozen, latched, or overflow).
    Fail(PinFail),
    /// Pinned, but the frame holds another page (or a removed one), or the
    /// frame number was out of range; the reference was dropped.
    Stale,
}

/// Outcome of pinning a tagged page for write-back.
enum WbPin {
    /// Pinned, write-back started.
    Pinned,
    /// Not this file's dirty page any more.
    Skip,
    /// Latched by a writer; retry with no pins held.
    Busy,
}

/// Where a page's frame came from.
enum Got {
    /// Found cached and pinned.
    Hit(FrameNo),
    /// Inserted by us: pinned, latched, drained, not yet up to date.
    Inserted(FrameNo),
}

impl Inner {
    pub(crate) fn new(
        nframes: usize,
        page_size: usize,
        pool: PoolKind,
        policy: PolicyKind,
        page_locks: PageLockKind,
        backend: Arc<dyn Backend>,
    ) -> io::Result<Inner> {
        page_locks.check()?;
        let frames = FrameTable::new(nframes, page_size)?;
        let shift = page_size.trailing_zeros();
        // Live nodes are bounded by pages in the index times the height
        // needed for the largest page index (see `index`), plus slack.
        let height = (64 - shift).div_ceil(crate::index::SHIFT);
        let max_nodes = nframes
            .checked_mul(height as usize)
            .and_then(|n| n.checked_add(64))
            .filter(|&n| n < u32::MAX as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "capacity too large"))?;
        let policy = Policy::new(policy, nframes);
        let page_locks = PageLocks::new(page_locks);
        let hooks = if policy.wants_hits() { HOOK_HITS } else { 0 }
            | if page_locks.is_some() {
                HOOK_PAGE_LOCKS
            } else {
                0
            };
        Ok(Inner {
            frames,
            hooks,
            page_locks,
            nodes: NodeArena::new(max_nodes as u32)?,
            alloc: Pool::new(pool, nframes),
            policy,
            backend,
            counters: Counters::default(),
            registry: RwLock::with_classes(
                Registry::default(),
                LockClass::Registry,
                LockClass::Registry,
            ),
            next_id: AtomicU64::new(1),
            reclaiming: CachePadded::new(AtomicUsize::new(0)),
            page_size,
            shift,
        })
    }

    #[inline]
    pub(crate) fn desc(&self, f: FrameNo) -> &FrameDesc {
        self.frames.desc(f)
    }

    #[inline]
    fn count(&self, c: Counter) {
        self.counters.add(c, 1);
    }

    pub(crate) fn free_frames(&self) -> usize {
        self.alloc.free_count()
    }

    // ----- files ---------------------------------------------------------

    /// Finds or registers the shared state of the file behind `fd`, and
    /// counts one more handle.
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
            }
            // Relaxed: 0 -> 1 happens only here, under the registry lock that
            // `detach` re-checks under; other changes come from live handles.
            fs.handles.fetch_add(1, Ordering::Relaxed);
            return Ok(fs.clone());
        }
        let len = fd.len()?;
        // Relaxed: a unique number, published with the file under the lock.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let write_fd = OnceLock::new();
        if writable {
            let _ = write_fd.set(fd.clone());
        }
        let fs = Arc::new(FileShared {
            id,
            path: path.to_path_buf(),
            ident,
            tree: Tree::default(),
            len: AtomicU64::new(len),
            size: RwLock::with_classes(
                SizeState::default(),
                LockClass::SizeLock,
                LockClass::SizeLock,
            ),
            read_fd: fd,
            write_fd,
            handles: AtomicUsize::new(1),
            wb_error: Mutex::new(None),
        });
        reg.by_inode.insert(ident, fs.clone());
        reg.by_id.insert(id, fs.clone());
        Ok(fs)
    }

    /// The last handle of `fs` went away: write its dirty pages back, then
    /// drop its pages and forget it. If write-back fails the file stays
    /// registered with its dirty pages (no dirty data is dropped), so a later
    /// open of the same file and `sync` can retry.
    pub(crate) fn detach(&self, fs: &Arc<FileShared>) -> io::Result<()> {
        let res = self.flush(fs, false);
        let mut reg = self.registry.write();
        // Relaxed: read under the registry lock, which orders it against the
        // only 0 -> 1 transition (`attach`).
        if fs.handles.load(Ordering::Relaxed) != 0 || res.is_err() {
            return res; // reopened meanwhile, or dirty pages must stay
        }
        // Pages may have been dirtied after our flush only through a handle,
        // and there is none: the check below is for write-back races.
        if self.has_dirty(fs) {
            return res;
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
        reg.by_id.remove(&fs.id);
        drop(reg);
        self.remove_pages_from(fs, 0);
        res
    }

    fn has_dirty(&self, fs: &FileShared) -> bool {
        let mut all = Vec::new();
        fs.tree.lock().entries_from(&self.nodes, 0, &mut all);
        all.iter().any(|&(_, f)| self.desc(f).load() & DIRTY != 0)
    }

    fn file_by_id(&self, id: u64) -> Option<Arc<FileShared>> {
        self.registry.read().by_id.get(&id).cloned()
    }

    /// Best-effort write-back of every registered file (cache teardown).
    fn flush_all(&self) {
        let files: Vec<_> = self.registry.read().by_id.values().cloned().collect();
        for fs in files {
            let _ = self.flush(&fs, false);
        }
    }

    // ----- frames --------------------------------------------------------

    /// The common free path: the caller owns `f` (refcount 0).
    #[cold]
    pub(crate) fn free_frame(&self, f: FrameNo) {
        let d = self.desc(f);
        debug_assert_eq!(refs(d.load()), 0);
        d.reset();
        self.policy.removed(&self.frames, f);
        self.alloc.free(f);
    }

    /// Drops one reference; frees the frame if it was the last.
    #[inline(always)]
    pub(crate) fn release(&self, f: FrameNo) {
        if self.hooks & HOOK_PAGE_LOCKS != 0 {
            return self.release_locked(f);
        }
        if self.desc(f).release() == Released::Last {
            self.free_frame(f);
        }
    }

    /// [`Inner::release`] in a page-lock baseline build: the release under
    /// the page's lock, the free (if last) after it.
    #[cold]
    #[inline(never)]
    fn release_locked(&self, f: FrameNo) {
        let last = {
            let _g = self.page_locks.as_ref().map(|l| l.lock(f));
            self.desc(f).release()
        };
        if last == Released::Last {
            self.free_frame(f);
        }
    }

    /// A hit on frame `f`, reported to a policy that wants every hit
    /// (strict LRU). One flag test in the default build.
    #[inline(always)]
    fn hit_hook(&self, f: FrameNo) {
        if self.hooks & HOOK_HITS != 0 {
            self.policy.hit(f);
        }
    }

    /// A free frame (refcount 0, no identity), reclaiming if none is free.
    pub(crate) fn alloc_frame(&self) -> io::Result<FrameNo> {
        if let Some(f) = self.alloc.alloc() {
            return Ok(f);
        }
        self.reclaim()
    }

    /// Evicts one page and returns its frame. `OutOfMemory` once two full
    /// sweeps of the clock found nothing evictable (every frame pinned,
    /// latched, or dirty with failing write-back).
    fn reclaim(&self) -> io::Result<FrameNo> {
        const WANT: usize = 16; // evicted per round: a batch per policy lock
        let mut cands = Vec::with_capacity(WANT);
        let mut scanned = 0;
        let mut empty_rounds = 0;
        let mut waits = 0;
        loop {
            // A concurrent free may have refilled the pool.
            if let Some(f) = self.alloc.alloc() {
                return Ok(f);
            }
            // A full pass found nothing: take referenced pages too; a
            // second, urgent pass that also finds nothing means every frame
            // is pinned, latched or unevictable.
            let pass = self.policy.pass_len(&self.frames) + crate::reclaim::CLAIM;
            let urgent = scanned >= pass;
            if (scanned >= 2 * pass || empty_rounds >= 2)
                // Relaxed: a hint. Frames in other reclaimers' batches are in
                // no queue; while any reclaimer holds some, wait for it (it
                // may be preempted mid-batch) instead of failing.
                && self.reclaiming.load(Ordering::Relaxed) > 0
                && waits < 10_000
            {
                waits += 1;
                scanned = 0;
                empty_rounds = 0;
                std::thread::yield_now();
                continue;
            }
            if scanned >= 2 * pass || empty_rounds >= 2 {
                return Err(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    format!(
                        "no evictable frame: all {} frames are pinned, latched or dirty \
                         with failing write-back (examined {scanned} policy entries of \
                         {} queued, {empty_rounds} empty rounds)",
                        self.frames.len(),
                        self.policy.pass_len(&self.frames),
                    ),
                ));
            }
            cands.clear();
            // Relaxed: a hint for the wait above; the candidates themselves
            // are re-validated by try_evict.
            self.reclaiming.fetch_add(1, Ordering::Relaxed);
            let examined = self
                .policy
                .candidates(&self.frames, &mut cands, WANT, urgent);
            scanned += examined;
            let mut got = None;
            for &f in &cands {
                match self.try_evict(f) {
                    // The rest of the batch refills the allocator.
                    Some(f) => {
                        self.policy.removed(&self.frames, f);
                        if got.is_none() {
                            got = Some(f);
                        } else {
                            self.alloc.free(f);
                        }
                    }
                    None => self.policy.not_evicted(&self.frames, f),
                }
            }
            self.reclaiming.fetch_sub(1, Ordering::Relaxed);
            // Nothing queued at all (every frame pinned, latched, anonymous,
            // or in another reclaimer's batch): see the checks at the top.
            empty_rounds = if examined == 0 && got.is_none() {
                empty_rounds + 1
            } else {
                0
            };
            if let Some(f) = got {
                return Ok(f);
            }
        }
    }

    /// Protocol 5.2 from the evictor's side. Returns the frame, owned by the
    /// caller, if the page could be evicted.
    fn try_evict(&self, f: FrameNo) -> Option<FrameNo> {
        let d = self.desc(f);
        let s = d.try_pin(PinKind::Evict).ok()?;
        if s & REMOVED != 0 || s & UPTODATE == 0 {
            return self.drop_evict_pin(f);
        }
        let (owner, index) = d.identity();
        if owner & crate::anon::ANON_BIT != 0 {
            return self.drop_evict_pin(f); // anonymous pages are not evictable
        }
        let Some(fs) = self.file_by_id(owner) else {
            return self.drop_evict_pin(f);
        };
        if s & DIRTY != 0 {
            // Write back first; the size lock (shared, never waited for
            // here) keeps `set_len` from running under the write.
            let Some(_size) = fs.size.try_read_recursive() else {
                return self.drop_evict_pin(f);
            };
            if let Err(e) = self.writeback_run(&fs, &[(index, f)]) {
                *fs.wb_error.lock() = Some(e);
                return self.drop_evict_pin(f);
            }
        }
        let mut g = fs.tree.lock();
        // A. freeze from exactly {cache + our pin}, clean and idle.
        if d.freeze(2).is_err() {
            drop(g);
            return self.drop_evict_pin(f);
        }
        // C. clear the slot (identity was stable under our pin, so it is
        // ours unless something is badly wrong).
        let removed = g.remove(&self.nodes, index, f);
        drop(g);
        debug_assert!(
            removed,
            "frozen page {index} of file {owner} not in its index"
        );
        d.reset();
        self.count(Counter::Evictions);
        Some(f)
    }

    fn drop_evict_pin(&self, f: FrameNo) -> Option<FrameNo> {
        if self.desc(f).release() == Released::Last {
            // The page was truncated while we looked: it is ours now.
            self.desc(f).reset();
            return Some(f);
        }
        None
    }

    // ----- lookup (5.1) and miss (5.3) -------------------------------------

    /// Protocol 5.1 steps 2-3 on frame `f`, read from a slot without a
    /// pin: take a reference unless free or latched, then re-check that the
    /// frame still holds page `(owner, index)` and was not removed. The one
    /// place these steps are written; every lookup (file pages, gang,
    /// anonymous pages) goes through it. Baseline builds take a page lock
    /// around the pin CAS and report the hit to strict LRU; the default
    /// build tests `hooks` twice (one byte, already in a register for the
    /// second test) and calls neither.
    #[inline(always)]
    pub(crate) fn pin_as(&self, f: FrameNo, owner: u64, index: u64) -> Result<FrameNo, PinMiss> {
        if f as usize >= self.frames.len() {
            return Err(PinMiss::Stale); // garbage from a recycled index node
        }
        let d = self.desc(f);
        let s = if self.hooks & HOOK_PAGE_LOCKS == 0 {
            d.try_pin(PinKind::User)
        } else {
            self.try_pin_locked(f)
        }
        .map_err(PinMiss::Fail)?;
        if s & REMOVED == 0 && d.identity() == (owner, index) {
            debug_assert!(s & UPTODATE != 0, "unlatched page not up to date");
            self.hit_hook(f);
            return Ok(f);
        }
        self.release(f);
        Err(PinMiss::Stale)
    }

    /// The pin CAS of [`Inner::pin_as`] under the page's baseline lock.
    #[cold]
    #[inline(never)]
    fn try_pin_locked(&self, f: FrameNo) -> Result<u64, PinFail> {
        let _g = self.page_locks.as_ref().map(|l| l.lock(f));
        self.desc(f).try_pin(PinKind::User)
    }

    /// An anonymous page was just faulted into frame `f` (pinned by the
    /// caller): the list baselines list it.
    pub(crate) fn anon_inserted(&self, f: FrameNo) {
        self.policy.anon_inserted(&self.frames, f);
    }

    /// Protocol 5.1, first attempt only, inlined into the hit paths. `None`
    /// means "take the full path" ([`Inner::find_get`]), which also decides
    /// misses authoritatively.
    #[inline(always)]
    fn find_get_fast(&self, fs: &FileShared, index: u64) -> Option<FrameNo> {
        let f = fs.tree.lookup(&self.nodes, index)?;
        self.pin_as(f, fs.id, index).ok()
    }

    /// Protocol 5.1. Returns the pinned frame of `(fs, index)` if cached.
    #[inline(never)]
    pub(crate) fn find_get(&self, fs: &FileShared, index: u64) -> io::Result<Option<FrameNo>> {
        let mut retries = 0;
        loop {
            // 1. load the slot
            let Some(f) = fs.tree.lookup(&self.nodes, index) else {
                return Ok(None);
            };
            // 2-3. pin unless free/frozen or latched; re-check identity
            match self.pin_as(f, fs.id, index) {
                Ok(f) => return Ok(Some(f)),
                Err(PinMiss::Stale) if f as usize >= self.frames.len() => {
                    return Ok(None); // garbage from a recycled node: locked path decides
                }
                Err(PinMiss::Stale) => {}
                Err(PinMiss::Fail(PinFail::Free)) => {
                    if retries >= SPIN_RETRIES {
                        // Wait for the remover (it holds the tree lock until
                        // the slot is cleared) instead of spinning.
                        drop(fs.tree.lock());
                    }
                }
                // Only this page's latch: see `wait_unlocked_as`.
                Err(PinMiss::Fail(PinFail::Locked)) => self.desc(f).wait_unlocked_as(fs.id, index),
                Err(PinMiss::Fail(PinFail::Overflow)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{}: page {index}: too many pins on one page",
                            fs.path.display()
                        ),
                    ))
                }
            }
            retries += 1;
            self.count(Counter::LookupRetries);
        }
    }

    /// Gang-lookup step: protocol 5.1 steps 2-3 on a frame read from a leaf
    /// slot. `None` on any failure (the caller takes the full path).
    #[inline(always)]
    pub(crate) fn pin_in_leaf(&self, fs: &FileShared, index: u64, f: FrameNo) -> Option<FrameNo> {
        let f = self.pin_as(f, fs.id, index).ok()?;
        self.count(Counter::Hits);
        Some(f)
    }

    /// Lookup, else protocol 5.3. On `Got::Inserted` the caller holds the
    /// latch of a page that is not up to date and must fill it.
    fn get_or_insert(&self, fs: &FileShared, index: u64) -> io::Result<Got> {
        loop {
            if let Some(f) = self.find_get(fs, index)? {
                return Ok(Got::Hit(f));
            }
            // 1. a frame, with no lock held
            let f = self
                .alloc_frame()
                .map_err(|e| context(e, format!("{}: page {index}", fs.path.display())))?;
            let d = self.desc(f);
            // 2. insert under the tree lock, re-checking the slot
            let mut g = fs.tree.lock();
            if g.get(&self.nodes, index).is_some() {
                drop(g);
                self.alloc.free(f);
                continue; // theirs: pin it or wait on its latch
            }
            d.begin_change();
            d.set_identity(fs.id, index);
            d.end_change();
            d.publish_state(2 | LOCKED);
            match g.insert(&self.nodes, index, f) {
                Ok(Ok(())) => {}
                Ok(Err(_)) => unreachable!("slot checked empty under the lock"),
                Err(e) => {
                    drop(g);
                    d.reset();
                    self.alloc.free(f);
                    return Err(context(e, format!("{}: page {index}", fs.path.display())));
                }
            }
            drop(g);
            self.policy.inserted(&self.frames, f);
            self.count(Counter::Misses);
            return Ok(Got::Inserted(f));
        }
    }

    /// Fills a just-inserted page from the file (5.3 step 3), zero-filling
    /// past the end of file. On error takes the page out of the index,
    /// unlocks, drops the caller's pin and returns the error.
    fn fill(&self, fs: &FileShared, index: u64, f: FrameNo) -> io::Result<()> {
        let ps = self.page_size as u64;
        let start = index << self.shift;
        // SAFETY: we hold the latch of an unpublished-content page (LOCKED,
        // refs = cache + us); optimistic readers see !UPTODATE and back off.
        let buf = unsafe { self.frames.bytes_mut(f) };
        // Acquire: pairs with writers' `fetch_max` (AcqRel) and `set_len`'s
        // Release store, so a length we see covers bytes already written.
        let len = fs.len.load(Ordering::Acquire);
        let res = if start >= len {
            Ok(0)
        } else {
            self.count(Counter::Reads);
            read_full(&*fs.read_fd, buf, start)
        };
        match res {
            Ok(n) => {
                // Bytes past what the file holds, and past the logical end,
                // are zero (never stale bytes of a previous frame user).
                // Atomic stores: a stale optimistic reader of the frame's
                // previous page may still be copying (and will discard it).
                let valid = (n as u64).min(len.saturating_sub(start)).min(ps) as usize;
                // SAFETY: we hold the latch of the unpublished page; the
                // range ends at the end of the frame.
                unsafe { atomic_zero(self.frames.ptr(f).add(valid), self.page_size - valid) };
                Ok(())
            }
            Err(e) => {
                self.count(Counter::ReadErrors);
                self.abandon(fs, index, f);
                Err(context(
                    e,
                    format!("{}: reading page {index}", fs.path.display()),
                ))
            }
        }
    }

    /// Takes a latched page that never became valid out of the index,
    /// unlocks it (waking waiters, who retry) and drops the caller's pin.
    fn abandon(&self, fs: &FileShared, index: u64, f: FrameNo) {
        let d = self.desc(f);
        let mut g = fs.tree.lock();
        let orphaned = if g.remove(&self.nodes, index, f) {
            Some(d.orphan())
        } else {
            None // truncate already orphaned it
        };
        drop(g);
        debug_assert!(orphaned != Some(Released::Last), "caller still holds a pin");
        let _ = d.unlock(0, 0);
        self.release(f);
    }

    /// A pinned, up-to-date page (hit, or miss filled by us).
    #[inline(always)]
    pub(crate) fn get_page(&self, fs: &FileShared, index: u64) -> io::Result<FrameNo> {
        if let Some(f) = self.find_get_fast(fs, index) {
            self.count(Counter::Hits);
            return Ok(f);
        }
        self.get_page_slow(fs, index)
    }

    #[cold]
    #[inline(never)]
    fn get_page_slow(&self, fs: &FileShared, index: u64) -> io::Result<FrameNo> {
        match self.get_or_insert(fs, index)? {
            Got::Hit(f) => {
                self.count(Counter::Hits);
                Ok(f)
            }
            Got::Inserted(f) => {
                self.fill(fs, index, f)?;
                let _ = self.desc(f).unlock(UPTODATE, 0);
                Ok(f)
            }
        }
    }

    /// A pinned page with the latch held and older pins drained (5.5 steps
    /// 1-2). With `overwrite`, a missing page is not read (the caller
    /// replaces every byte). The page is up to date unless `overwrite`.
    pub(crate) fn get_page_locked(
        &self,
        fs: &FileShared,
        index: u64,
        overwrite: bool,
    ) -> io::Result<FrameNo> {
        loop {
            match self.get_or_insert(fs, index)? {
                Got::Hit(f) => {
                    self.count(Counter::Hits);
                    if self.latch_pinned(f, fs.id, index) {
                        return Ok(f);
                    }
                }
                Got::Inserted(f) => {
                    if !overwrite {
                        self.fill(fs, index, f)?;
                    }
                    return Ok(f);
                }
            }
        }
    }

    /// Protocol 5.5 steps 1-2 on a page the caller pinned as `(owner,
    /// index)`: claim the latch and wait for older pins to drain. Returns
    /// false if that was not possible — another latch holder (which may be
    /// waiting for our pin: never wait for a latch while pinned, see
    /// `try_lock`), or the page was removed meanwhile. Then the caller's pin
    /// has been dropped, the holder (if any) waited for, and the caller
    /// retries its lookup. The one place this is written.
    pub(crate) fn latch_pinned(&self, f: FrameNo, owner: u64, index: u64) -> bool {
        let d = self.desc(f);
        if !d.try_lock() {
            self.release(f);
            d.wait_unlocked_as(owner, index);
            return false;
        }
        if d.load() & REMOVED != 0 {
            let _ = d.unlock(0, 0);
            self.release(f);
            return false;
        }
        d.wait_drained();
        true
    }

    /// Ends a write section on a latched page: version even, `DIRTY` and
    /// `UPTODATE` set, latch released, index tagged if the page just became
    /// dirty, pin dropped.
    pub(crate) fn finish_write(&self, fs: &FileShared, index: u64, f: FrameNo) {
        let d = self.desc(f);
        d.end_change();
        let old = d.unlock(DIRTY | UPTODATE, 0);
        if old & DIRTY == 0 && old & REMOVED == 0 {
            fs.tree.tag_dirty(&self.nodes, index);
        }
        self.release(f);
    }

    // ----- read_at / write_at ---------------------------------------------

    /// Protocol 5.4: copies `dst.len()` bytes from offset `off` of page
    /// `index` with no reference.
    #[inline]
    fn read_optimistic(
        &self,
        fs: &FileShared,
        index: u64,
        off: usize,
        dst: &mut [u8],
    ) -> Optimistic {
        for _ in 0..OPTIMISTIC_TRIES {
            // 1.
            let Some(f) = fs.tree.lookup(&self.nodes, index) else {
                return Optimistic::Miss;
            };
            if f as usize >= self.frames.len() {
                return Optimistic::Miss;
            }
            let d = self.desc(f);
            // 2.
            let Some(v) = d.read_begin() else {
                continue;
            };
            // 3.
            let s = d.load();
            if s & (UPTODATE | REMOVED) != UPTODATE || d.identity() != (fs.id, index) {
                return Optimistic::Fallback;
            }
            // 4.
            // SAFETY: `ptr(f) + off .. + dst.len()` is inside frame f
            // (off + len <= page size, checked by the caller); atomic word
            // loads race soundly with writers and are validated below.
            unsafe { atomic_load_copy(dst, self.frames.ptr(f).add(off)) };
            // 5.
            if d.read_validate(v) {
                if s & REFERENCED == 0 {
                    d.mark_referenced();
                }
                self.hit_hook(f);
                return Optimistic::Copied;
            }
        }
        Optimistic::Fallback
    }

    pub(crate) fn read_at(
        &self,
        fs: &FileShared,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        // Acquire: pairs with the Release `fetch_max` of writers, so pages
        // written before the length grew are visible.
        let len = fs.len.load(Ordering::Acquire);
        if offset >= len || buf.is_empty() {
            return Ok(0);
        }
        let end = len.min(offset.saturating_add(buf.len() as u64));
        let total = (end - offset) as usize;
        let ps = self.page_size;
        let mut done = 0;
        let mut optimistic = 0;
        while done < total {
            let pos = offset + done as u64;
            let index = pos >> self.shift;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(total - done);
            let dst = &mut buf[done..done + n];
            // Large copies go through a pin so they can use the vectorised
            // memcpy (word-by-word atomic loads cost 2x on a 4 KiB page); the
            // one refcount RMW pair is small next to such a copy.
            let tried = if n < OPTIMISTIC_MAX {
                self.read_optimistic(fs, index, off, dst)
            } else {
                Optimistic::Miss
            };
            if tried == Optimistic::Copied {
                optimistic += 1;
            } else {
                if tried == Optimistic::Fallback {
                    self.count(Counter::OptimisticFallbacks);
                }
                let f = self.get_page(fs, index)?;
                // SAFETY: pinned, so the bytes do not change.
                let src = unsafe { self.frames.bytes(f) };
                dst.copy_from_slice(&src[off..off + n]);
                self.release(f);
            }
            done += n;
        }
        if optimistic > 0 {
            // Counted as hits by the snapshot (one add on the hot path).
            self.counters.add(Counter::OptimisticReads, optimistic);
        }
        Ok(total)
    }

    pub(crate) fn write_at(&self, fs: &FileShared, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: write of {} bytes at offset {offset} overflows the file size",
                        fs.path.display(),
                        buf.len()
                    ),
                )
            })?;
        let mut size = fs.size.read_recursive();
        // Acquire: see `fill`.
        if size.pending_truncate.is_some() && end > fs.len.load(Ordering::Acquire) {
            drop(size);
            self.retry_truncate(fs)?;
            size = fs.size.read_recursive();
        }
        let ps = self.page_size;
        let mut done = 0;
        while done < buf.len() {
            let pos = offset + done as u64;
            let index = pos >> self.shift;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(buf.len() - done);
            // Only a whole-page write skips reading the page; a partial page
            // past the end is zero-filled by `fill`, which re-reads the
            // length after inserting (a stale length here could otherwise
            // skip bytes another writer just put there).
            let f = self.get_page_locked(fs, index, n == ps)?;
            let d = self.desc(f);
            // 5.5 step 3: version odd; 4: write
            d.begin_change();
            // SAFETY: latched and drained, version odd; off + n <= ps.
            unsafe { atomic_store_copy(self.frames.ptr(f).add(off), &buf[done..done + n]) };
            // Grow the length to cover this page's bytes before the page is
            // unlatched (so a write-back of it sees them inside the file).
            // AcqRel: Release publishes this page's bytes to readers that load
            // the new length with Acquire (`read_at`); Acquire orders us after
            // earlier growers.
            fs.len.fetch_max(pos + n as u64, Ordering::AcqRel);
            // 5-6: version even, DIRTY, unlock, tag, unpin.
            self.finish_write(fs, index, f);
            done += n;
        }
        drop(size);
        Ok(())
    }

    // ----- write-back -------------------------------------------------------

    /// Writes back a run of consecutive pages `(index, frame)` that the
    /// caller has pinned, `start_writeback()` succeeded on, and (for sync)
    /// ordered. Caller holds the size lock shared. Ends write-back on each
    /// page (dirty again on failure, re-tagged) but keeps the pins.
    fn write_pages(&self, fs: &FileShared, run: &[(u64, FrameNo)]) -> io::Result<()> {
        let ps = self.page_size as u64;
        // Acquire: read after pinning the run, so a shrink that began later
        // (it latches the last page, waiting for our pin) cannot be missed;
        // pairs with `set_len`'s Release store.
        let len = fs.len.load(Ordering::Acquire);
        let first = run[0].0;
        let mut slices: Vec<&[u8]> = Vec::with_capacity(run.len());
        for &(index, f) in run {
            let start = index << self.shift;
            let n = len.saturating_sub(start).min(ps) as usize;
            if n == 0 {
                break;
            }
            // SAFETY: pinned by the caller, so the bytes do not change.
            slices.push(unsafe { &self.frames.bytes(f)[..n] });
        }
        let res = match fs.write_fd.get() {
            _ if slices.is_empty() => Ok(()),
            Some(w) => {
                self.count(Counter::Writes);
                write_full(&**w, &slices, first << self.shift)
            }
            None => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "dirty pages but no writable descriptor",
            )),
        };
        let failed = res.is_err();
        for &(index, f) in run {
            let d = self.desc(f);
            d.end_writeback(failed);
            if failed && d.load() & REMOVED == 0 {
                fs.tree.tag_dirty(&self.nodes, index);
            }
        }
        match res {
            Ok(()) => {
                self.counters.add(Counter::Writebacks, run.len() as u64);
                Ok(())
            }
            Err(e) => {
                self.count(Counter::WriteErrors);
                let last = run[run.len() - 1].0;
                Err(context(
                    e,
                    format!("{}: writing back pages {first}..={last}", fs.path.display()),
                ))
            }
        }
    }

    /// Write-back of pages the caller has pinned; starts write-back on each
    /// and writes those still dirty. Used by eviction (one page).
    fn writeback_run(&self, fs: &FileShared, pages: &[(u64, FrameNo)]) -> io::Result<()> {
        let run: Vec<_> = pages
            .iter()
            .copied()
            .filter(|&(_, f)| self.desc(f).start_writeback())
            .collect();
        if run.is_empty() {
            return Ok(());
        }
        self.write_pages(fs, &run)
    }

    /// Writes every dirty page of `fs` back; with `durable`, also persists
    /// the length and calls `fdatasync`. Reports a write-back error recorded
    /// by eviction since the last call, even if the retry succeeded.
    pub(crate) fn flush(&self, fs: &FileShared, durable: bool) -> io::Result<()> {
        const RUN: usize = 64;
        let mut first_err: Option<io::Error> = None;
        // Shared for the whole sync: excludes only `set_len`. Writers and
        // eviction's write-back run concurrently.
        let size = fs.size.read_recursive();
        {
            let mut dirty = Vec::new();
            fs.tree.lock().take_dirty(&self.nodes, &mut dirty);
            let mut i = 0;
            while i < dirty.len() {
                // Gather a run of consecutive dirty pages, pinned. Never wait
                // for a latch while holding pins (the latch holder may be
                // waiting, through a pending writer, for one of them).
                let mut run: Vec<(u64, FrameNo)> = Vec::with_capacity(RUN);
                while i < dirty.len() && run.len() < RUN {
                    let (index, f) = dirty[i];
                    if run.last().is_some_and(|&(li, _)| index != li + 1) {
                        break;
                    }
                    match self.pin_for_writeback(fs, index, f, run.is_empty()) {
                        WbPin::Pinned => {
                            run.push((index, f));
                            i += 1;
                        }
                        WbPin::Skip => {
                            i += 1;
                            break;
                        }
                        WbPin::Busy => break, // retried with no pins held
                    }
                }
                if !run.is_empty() {
                    if let Err(e) = self.write_pages(fs, &run) {
                        first_err.get_or_insert(e);
                    }
                    for &(_, f) in &run {
                        self.release(f);
                    }
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        // Acquire: pairs with the writers' AcqRel `fetch_max`.
        let len = fs.len.load(Ordering::Acquire);
        if durable && size.pending_truncate.is_none() {
            if let Some(w) = fs.write_fd.get() {
                // Never shrinks the file: a concurrent eviction may have
                // written past `len` already (see `grow_to`).
                w.grow_to(len).map_err(|e| {
                    context(e, format!("{}: persisting length {len}", fs.path.display()))
                })?;
            }
        }
        drop(size);
        if durable {
            if let Some(w) = fs.write_fd.get() {
                w.sync_data().map_err(|e| {
                    context(
                        e,
                        format!("{}: fdatasync (length {len})", fs.path.display()),
                    )
                })?;
            }
        }
        if let Some(e) = fs.wb_error.lock().take() {
            return Err(context(e, "earlier write-back failed during eviction"));
        }
        Ok(())
    }

    /// Pins `f` for write-back if it still holds page `index` of `fs` and is
    /// dirty, and starts write-back on it. Waits for a latch only if `wait`.
    fn pin_for_writeback(&self, fs: &FileShared, index: u64, f: FrameNo, wait: bool) -> WbPin {
        let d = self.desc(f);
        loop {
            match d.try_pin(PinKind::Writeback) {
                Ok(s) => {
                    if s & REMOVED != 0 || d.identity() != (fs.id, index) || !d.start_writeback() {
                        self.release(f);
                        return WbPin::Skip;
                    }
                    return WbPin::Pinned;
                }
                Err(PinFail::Locked) if wait => d.wait_unlocked_as(fs.id, index),
                Err(PinFail::Locked) => return WbPin::Busy,
                // Freed or frozen: the page was written back and evicted.
                Err(_) => return WbPin::Skip,
            }
        }
    }

    // ----- set_len (5.6) ------------------------------------------------------

    fn retry_truncate(&self, fs: &FileShared) -> io::Result<()> {
        let mut size = fs.size.write();
        if let Some(t) = size.pending_truncate {
            let w = fs.write_fd.get().ok_or_else(|| {
                io::Error::new(io::ErrorKind::PermissionDenied, "no writable descriptor")
            })?;
            w.set_len(t)
                .map_err(|e| context(e, format!("{}: truncating to {t}", fs.path.display())))?;
            size.pending_truncate = None;
        }
        Ok(())
    }

    /// Removes every page at index >= `first` (orphaning pinned ones).
    fn remove_pages_from(&self, fs: &FileShared, first: u64) {
        let mut victims = Vec::new();
        let mut to_free = Vec::new();
        {
            let mut g = fs.tree.lock();
            g.entries_from(&self.nodes, first, &mut victims);
            for &(index, f) in &victims {
                if g.remove(&self.nodes, index, f) && self.desc(f).orphan() == Released::Last {
                    to_free.push(f);
                }
            }
        }
        for f in to_free {
            self.free_frame(f);
        }
    }

    pub(crate) fn set_len(&self, fs: &FileShared, new_len: u64) -> io::Result<()> {
        if new_len > i64::MAX as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: length {new_len} too large", fs.path.display()),
            ));
        }
        let w = fs.write_fd.get().cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: set_len through a read-only handle", fs.path.display()),
            )
        })?;
        let mut size = fs.size.write();
        // Acquire: exclusive size lock; pairs with writers' `fetch_max`.
        let old = fs.len.load(Ordering::Acquire);
        if let Some(t) = size.pending_truncate {
            w.set_len(t)
                .map_err(|e| context(e, format!("{}: truncating to {t}", fs.path.display())))?;
            size.pending_truncate = None;
        }
        if new_len >= old {
            w.set_len(new_len).map_err(|e| {
                context(e, format!("{}: extending to {new_len}", fs.path.display()))
            })?;
            // Release: readers that see the new length see the extension
            // (the file bytes are zero; no cached page covers them).
            fs.len.store(new_len, Ordering::Release);
            return Ok(());
        }
        // Shrink: the length first, so no write-back after this point writes
        // past the new end (write-backs read the length under their pin).
        // Release: pairs with the Acquire loads of write-back and `fill`.
        fs.len.store(new_len, Ordering::Release);
        let ps = self.page_size as u64;
        let first_gone = new_len.div_ceil(ps);
        self.remove_pages_from(fs, first_gone);
        // Zero the tail of the new last page if it is cached.
        if new_len % ps != 0 {
            let last = new_len / ps;
            while let Some(f) = self.find_get(fs, last)? {
                if !self.latch_pinned(f, fs.id, last) {
                    continue;
                }
                let d = self.desc(f);
                d.begin_change();
                let tail = (new_len % ps) as usize;
                // SAFETY: latched, drained, version odd: exclusive; the range
                // ends at the end of the frame.
                unsafe { atomic_zero(self.frames.ptr(f).add(tail), self.page_size - tail) };
                d.end_change();
                let _ = d.unlock(0, 0);
                self.release(f);
                break;
            }
        }
        if let Err(e) = w.set_len(new_len) {
            size.pending_truncate = Some(new_len);
            return Err(context(
                e,
                format!("{}: truncating to {new_len}", fs.path.display()),
            ));
        }
        Ok(())
    }

    // ----- checks -------------------------------------------------------------

    /// Checks cache-wide invariants (tests). Call with no operation running.
    pub(crate) fn validate(&self) {
        let reg = self.registry.read();
        let mut in_index = vec![false; self.frames.len()];
        for fs in reg.by_id.values() {
            let g = fs.tree.lock();
            g.validate(&self.nodes, |index, f, tagged| {
                let d = self.desc(f);
                let s = d.load();
                assert!(!in_index[f as usize], "frame {f} in two slots");
                in_index[f as usize] = true;
                assert_eq!(d.identity(), (fs.id, index), "frame {f} identity");
                assert!(
                    refs(s) >= 1,
                    "cached frame {f} without the cache's reference"
                );
                assert_eq!(
                    s & (LOCKED | REMOVED),
                    0,
                    "idle frame {f} latched or removed"
                );
                assert_ne!(s & UPTODATE, 0, "cached frame {f} not up to date");
                if s & DIRTY != 0 {
                    assert!(
                        tagged,
                        "dirty page {index} of {} not tagged",
                        fs.path.display()
                    );
                }
            });
        }
        let free = self.alloc.free_count();
        let cached = in_index.iter().filter(|&&b| b).count();
        let is_anon: Vec<bool> = (0..self.frames.len() as FrameNo)
            .map(|f| {
                let d = self.desc(f);
                d.identity().0 & crate::anon::ANON_BIT != 0 && refs(d.load()) > 0
            })
            .collect();
        let anon = is_anon.iter().filter(|&&b| b).count();
        // With no pins held, every frame is cached, anonymous, or free.
        assert_eq!(
            free + cached + anon,
            self.frames.len(),
            "frames leaked or double-counted ({free} free, {cached} cached, {anon} anonymous)"
        );
        // List baselines: exactly the cached and anonymous frames listed.
        if let Some(listed) = self.policy.listed() {
            let want: Vec<FrameNo> = (0..self.frames.len() as FrameNo)
                .filter(|&f| in_index[f as usize] || is_anon[f as usize])
                .collect();
            let mut listed = listed.unwrap_or_else(|e| panic!("replacement list broken: {e}"));
            listed.sort_unstable();
            assert_eq!(listed, want, "replacement list vs cached frames");
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.flush_all();
    }
}
