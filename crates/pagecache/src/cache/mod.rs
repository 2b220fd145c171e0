//! Layer 4, cache: the page protocols over frames, index, allocator, policy
//! and backend. This file holds what every protocol shares: [`Inner`], the
//! pin and latch guards, the common release and free paths, and the lock
//! order. Each protocol lives, with its numbered block, at the top of the
//! file that implements it:
//!
//! | file | protocol |
//! |---|---|
//! | `lookup.rs` | 5.1 lookup (speculative pin) vs 5.2 removal (freeze); gang lookup |
//! | `miss.rs` | 5.3 miss: insert the page latched, then complete the fill with a result |
//! | `batch.rs` | 5.3, asynchronous form: misses in runs, readahead, prefetch |
//! | `rw.rs` | 5.4 optimistic read vs 5.5 write under the latch; `read_at`, `write_at` |
//! | `truncate.rs` | 5.6 truncate (`set_len`) |
//! | `run.rs` | 5.7 runs: a leaf-level pin over consecutive pages, vs writers, eviction, truncate |
//! | `registry.rs` | the file registry: one shared state per (device, inode) |
//! | `file_table.rs` | a shared cache's files: slots by (device, inode) in the segment |
//! | `shared.rs` | a cache shared by processes: `Inner` over a segment's tables |
//! | `words.rs` | the cache-wide counters, on the heap or in a segment |
//! | `deferred.rs` | 5.7 T3/D1's queue of frames kept for runs, one for the whole cache |
//! | `validate.rs` | cache-wide invariants (tests) |
//! | `copy.rs` | per-word atomic copies between frames and buffers |
//! | `pagelock.rs` | the baseline page locks (global, hashed) |
//! | `evict.rs` | eviction (5.2 from the evictor's side) |
//! | `writeback/` | write-back: `sync`, close, eviction's and the flusher's writes; the write-back hook |
//! | `flusher.rs` | background write-back, dirty accounting and throttling |
//!
//! # Locks (`docs/locking.md` has the rules and the guard legend)
//!
//! ```text
//! registry (RwLock, per cache)
//!   └─ size lock (range lock, per file: `size_lock.rs`)
//!        └─ page latch (LATCHED bit, per page)
//!             └─ tree lock (Mutex, per file)
//!                  ├─ replacement shard / pending batch (Mutex, per CPU; never both)
//!                  ├─ baseline LRU lock (StrictLru / SmpLru only)
//!                  └─ pool lock / per-CPU shard (Mutex; never both)
//! baseline page mutexes (Config::page_locks only): a leaf around one RMW
//! ```
//!
//! Nothing waits for a latch while holding a tree lock, and no I/O happens
//! under a tree lock or the registry lock.
//!
//! # Context vocabulary
//!
//! Every function of this layer and of `reclaim` says what it may be called
//! with: *may sleep* (parks on a latch or drain, or does I/O), *no sleep*;
//! which locks it takes or needs held; what the caller must hold (a pin, the
//! latch). "Latch" is the per-page `LATCHED` bit; "page mutex" means the
//! baselines' global or hashed mutexes.

use crate::frame::alloc::{FrameAllocator, Pool};
use crate::frame::state::{FrameDesc, Released};
use crate::frame::{FrameNo, FrameTable};
use crate::index::NodeArena;
use crate::io::engine::Engine;
use crate::io::Backend;
use crate::placed::Placed;
use crate::reclaim::Policy;
use crate::stats::{Counter, Counters};
use crate::sync::{AtomicU64, LockClass, RwLock};
use std::io;
use std::sync::{Arc, Weak};

mod async_frames;
mod asynch;
pub(crate) use asynch::{GetPage, Handoff};
pub(crate) use evict::DeferDirty;
mod batch;
pub(crate) use batch::Readahead;
mod copy;
mod evict;
mod flusher;
mod helpers;
pub(crate) use copy::{atomic_load_copy, atomic_load_small, atomic_store_copy, atomic_zero};
pub(crate) use flusher::{now_ms, Flusher};
mod lookup;
pub(crate) use lookup::PinMiss;
mod miss;
mod pagelock;
pub use pagelock::PageLockKind;
use pagelock::PageLocks;
pub(crate) mod file_table;
mod registry;
pub(crate) use registry::{FileShared, Registry, SizeShared};
mod run;
pub(crate) use run::{LEAF_PAGES, RUN_MAX};
mod streams;
pub(crate) use streams::Streams;
pub use streams::{StreamChoice, StreamReads};
pub(crate) mod deferred;
mod optimistic;
mod rw;
mod shared;
mod truncate;
mod validate;
mod words;
mod write_behind;
use deferred::DeferredQueue;
pub(crate) use shared::SharedPart;
pub(crate) use words::Words;
mod writeback;
pub(crate) use writeback::{Pick, Sweep};
pub use writeback::{WritebackCause, WritebackDecision, WritebackHook, WritebackPage};

/// `Inner::hooks` bit: the policy wants every hit ([`Policy::wants_hits`]).
const HOOK_HITS: u8 = 1;
/// `Inner::hooks` bit: pins and releases take a baseline page mutex.
const HOOK_PAGE_LOCKS: u8 = 2;

/// The cache proper, shared by every handle. Field guards as in
/// `docs/locking.md`.
#[derive(Debug)]
pub(crate) struct Inner {
    /// (C) the arena and its type-stable descriptors.
    pub(crate) frames: FrameTable,
    /// (C) baseline hooks on the hit and release paths (`HOOK_*`); 0 in the
    /// default build, where each path pays one test of this byte. Kept as
    /// a byte next to `frames` so the hit path tests a line it reads anyway.
    pub(crate) hooks: u8,
    /// (C) baseline page mutexes (`None` with per-page bits, the default).
    page_locks: Option<PageLocks>,
    /// (C) the index nodes of every file (each node: see `index`).
    pub(crate) nodes: NodeArena,
    /// (C) free frames (its own locks, leaves of the order).
    pub(crate) alloc: Pool,
    /// (C) the replacement policy (its own locks, leaves of the order).
    pub(crate) policy: Policy,
    /// (C) file I/O.
    pub(crate) backend: Arc<dyn Backend>,
    /// (A) per-thread counter stripes.
    pub(crate) counters: Counters,
    /// (R) open files by inode and by id: the registry lock.
    pub(crate) registry: RwLock<Registry>,
    /// (A) next file id.
    pub(crate) next_id: AtomicU64,
    /// (Q) frames of truncated pages a run may still read (`run.rs` T3,
    /// `deferred.rs`): this process's heap, or a shared cache's segment.
    pub(crate) deferred: DeferredQueue,
    /// (C) page size in bytes, a power of two.
    pub(crate) page_size: usize,
    /// (C) log2 of `page_size`.
    pub(crate) shift: u32,
    /// (C) the asynchronous I/O engine (its own locks, leaves of the order).
    pub(crate) engine: Engine,
    /// (A) the cache-wide counters (`words.rs`): on this process's heap,
    /// or in a shared cache's segment.
    pub(crate) words: Placed<Words>,
    /// (C) dirty pages down to which the flusher writes once the count is
    /// past the limit (W3, `flusher.rs`).
    pub(crate) dirty_background: usize,
    /// (C) dirty pages past which writers wait for the flusher.
    pub(crate) dirty_limit: usize,
    /// (C) how long a page may stay dirty before the flusher writes it.
    pub(crate) dirty_expire: std::time::Duration,
    /// (C) the background flusher (its own leaf mutex).
    pub(crate) flusher: Flusher,
    /// (C) the largest readahead window, in pages (0: no readahead), with
    /// the bounds of `Inner::new` applied.
    pub(crate) readahead_max: u64,
    /// How streams are read (`Config::stream_reads`).
    pub(crate) streams: Streams,
    /// (C) `Config::stable_writes`: every write-back keeps its bytes stable.
    pub(crate) stable_writes: bool,
    /// (C) `Config::drop_behind_writes` (`write_behind.rs`).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) drop_behind_writes: bool,
    /// (C) this cache, for completions that outlive the call that
    /// submitted them (set once at creation).
    pub(crate) me: std::sync::OnceLock<Weak<Inner>>,
    /// (A) frame events for futures that found no frame (5.9 F1).
    pub(crate) async_frames: async_frames::FrameEvents,
    /// Helper threads for futures' work with no asynchronous form
    /// (`sync_async`; a leaf mutex).
    pub(crate) helpers: helpers::Helpers,
    /// A shared cache's segment and file table (`shared.rs`); `None` for a
    /// private cache. Last: the tables above may live in the segment, which
    /// is unmapped when this drops.
    pub(crate) shared: Option<Arc<SharedPart>>,
}

/// The tables a cache is made of: this process's own, or a shared cache's
/// placed in its segment (`shared.rs`).
pub(crate) struct Tables {
    frames: FrameTable,
    nodes: NodeArena,
    alloc: Pool,
    policy: Policy,
    words: Placed<Words>,
    deferred: DeferredQueue,
    shared: Option<Arc<SharedPart>>,
}

/// What every user-facing handle (`PageCache`, `File`, `AnonRegion`) holds:
/// the cache, plus the duty to stop its I/O engine when the last of them
/// drops. Completions of reads in flight hold the `Inner` alone, so the
/// engine never drops the cache on one of its own threads.
#[derive(Debug)]
pub(crate) struct Handle {
    inner: Arc<Inner>,
}

impl Handle {
    pub(crate) fn new(inner: Inner) -> Arc<Handle> {
        let inner = Arc::new(inner);
        let _ = inner.me.set(Arc::downgrade(&inner));
        #[cfg(not(loom))]
        inner.watch_deaths();
        Arc::new(Handle { inner })
    }
}

impl std::ops::Deref for Handle {
    type Target = Inner;
    #[inline]
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // A shared cache's recoveries of dead processes first: each holds
        // the cache (the process stays attached until they end), and may
        // write through the engine. Then the flusher (it submits to the
        // engine); then every I/O in flight completes (its frame is
        // written by the kernel until then); the threads and the ring go
        // away.
        #[cfg(not(loom))]
        self.inner.end_recoveries();
        self.inner.stop_flusher();
        self.inner.engine.shutdown();
    }
}

impl Inner {
    /// A cache as `config` says, over `backend`, doing asynchronous I/O
    /// with `engine`. Context: any.
    pub(crate) fn new(
        config: &crate::Config,
        backend: Arc<dyn Backend>,
        engine: Engine,
    ) -> io::Result<Inner> {
        let nframes = config.frames()?;
        config.page_locks.check()?;
        let mut frames = FrameTable::new(nframes, config.page_size)?;
        if config.populate {
            frames.populate()?;
        }
        frames.fault_ahead(config.populate);
        let max_nodes = NodeArena::max_nodes(nframes, config.page_size)?;
        let tables = Tables {
            frames,
            nodes: NodeArena::new(max_nodes)?,
            alloc: Pool::new(config.pool, nframes),
            policy: config.policy.build(nframes),
            words: Placed::new(Words::new()),
            deferred: DeferredQueue::new(nframes),
            shared: None,
        };
        Self::build(config, backend, engine, tables)
    }

    /// A cache as `config` says over `tables` (this process's, or a shared
    /// cache's segment's). Context: any.
    fn build(
        config: &crate::Config,
        backend: Arc<dyn Backend>,
        engine: Engine,
        tables: Tables,
    ) -> io::Result<Inner> {
        let Tables {
            frames,
            nodes,
            alloc,
            policy,
            words,
            deferred,
            shared,
        } = tables;
        let nframes = frames.len();
        let page_size = config.page_size;
        let page_locks = config.page_locks;
        let shift = page_size.trailing_zeros();
        // Readahead's largest window in pages: what the user asked for,
        // at most a 32nd of the cache, and at most a quarter of the new
        // pages the policy keeps unreferenced (two windows are in flight,
        // the one being read and the next; the rest is room for others):
        // a window past that is evicted before the reader gets there and
        // read twice (8 MiB windows on a 256 MiB cache with 2 CPUs did).
        let readahead_max = ((config.readahead_max / page_size) as u64)
            .min(nframes as u64 / 32)
            .min(policy.readahead_room().map_or(u64::MAX, |r| r as u64 / 4));
        let page_locks = PageLocks::new(page_locks);
        let hooks = if policy.wants_hits() { HOOK_HITS } else { 0 }
            | if page_locks.is_some() {
                HOOK_PAGE_LOCKS
            } else {
                0
            };
        // The thread pool reads streams direct: nothing to choose.
        let stream_reads = if engine.kind() == crate::io::IoEngine::Uring {
            config.stream_reads
        } else {
            StreamReads::Direct
        };
        // A shared cache measures each device once for all its processes.
        let streams = match &shared {
            Some(_) => {
                // SAFETY: the board is in the words, which live as long as
                // the cache (in its segment, or on its heap).
                let board = unsafe { Placed::at(std::ptr::NonNull::from(&*words.streams)) };
                Streams::with_board(stream_reads, readahead_max << shift, board)
            }
            None => Streams::new(stream_reads, readahead_max << shift),
        };
        Ok(Inner {
            frames,
            hooks,
            page_locks,
            nodes,
            alloc,
            policy,
            backend,
            counters: Counters::default(),
            registry: RwLock::with_classes(
                Registry::default(),
                LockClass::Registry,
                LockClass::Registry,
            ),
            next_id: AtomicU64::new(1),
            deferred,
            page_size,
            shift,
            engine,
            words,
            dirty_background: (nframes * config.dirty_background_percent as usize / 100).max(1),
            dirty_limit: (nframes * config.dirty_limit_percent as usize / 100).max(1),
            dirty_expire: config.dirty_expire,
            flusher: Default::default(),
            readahead_max,
            streams,
            stable_writes: config.stable_writes,
            drop_behind_writes: config.drop_behind_writes,
            me: std::sync::OnceLock::new(),
            async_frames: Default::default(),
            helpers: Default::default(),
            shared,
        })
    }

    /// The descriptor of frame `f`. Context: any (descriptors are
    /// type-stable).
    #[inline]
    pub(crate) fn desc(&self, f: FrameNo) -> &FrameDesc {
        self.frames.desc(f)
    }

    /// Counts one event on the calling thread's stripe. Context: any.
    #[inline]
    pub(crate) fn count(&self, c: Counter) {
        self.counters.add(c, 1);
    }

    /// Free frames right now (a snapshot). Context: any; takes the pool's
    /// locks in turn.
    pub(crate) fn free_frames(&self) -> usize {
        self.alloc.free_count()
    }

    /// The common free path: the caller owns `f` (refcount 0). Context: no
    /// sleep; takes the policy's and the pool's leaf locks, one after the
    /// other.
    #[cold]
    pub(crate) fn free_frame(&self, f: FrameNo) {
        let d = self.desc(f);
        debug_assert_eq!(d.snapshot().refs(), 0);
        d.reset();
        self.policy.removed(&self.frames, f);
        self.alloc.free(f);
    }

    /// Drops one reference; frees the frame if it was the last. Context: no
    /// sleep; any locks may be held except a policy or pool lock (the free
    /// takes them).
    #[inline(always)]
    pub(crate) fn release(&self, f: FrameNo) {
        if self.hooks & HOOK_PAGE_LOCKS != 0 {
            return self.release_locked(f);
        }
        if self.desc(f).release() == Released::Last {
            self.free_frame(f);
        }
    }

    /// [`Inner::release`] in a page-mutex baseline build: the release under
    /// the page's mutex, the free (if last) after it.
    /// Context: as [`Inner::release`]; takes the page mutex (a leaf).
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
    /// (strict LRU). One flag test in the default build. Context: no sleep.
    #[inline(always)]
    pub(crate) fn hit_hook(&self, f: FrameNo) {
        if self.hooks & HOOK_HITS != 0 {
            self.policy.hit(f);
        }
    }

    /// An anonymous page was just faulted into frame `f` (pinned by the
    /// caller): the list baselines list it. Context: no sleep.
    pub(crate) fn anon_inserted(&self, f: FrameNo) {
        self.policy.anon_inserted(&self.frames, f);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.flush_all();
    }
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

    /// The pinned frame.
    #[inline]
    pub(crate) fn frame(&self) -> FrameNo {
        self.frame
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

/// An exclusive latch on one frame (protocol 5.5 steps 3-6): the holder
/// owns the bytes (pins drained, version odd) until the guard drops, which
/// makes the version even, releases the latch (setting `DIRTY` and
/// `UPTODATE` for a file page, and tagging the index if the page just
/// became dirty), wakes waiters and drops the holder's pin. The one guard
/// behind `write_at`, `PageMut`, `AnonMut` and `set_len`'s tail zeroing, so
/// the latch is released on every path, unwinding included.
#[derive(Debug)]
pub(crate) struct FrameLatch<'a> {
    cache: &'a Inner,
    frame: FrameNo,
    /// The file page to mark dirty on release (`None`: anonymous pages,
    /// which are never written back, and truncate's zeroing past EOF).
    dirty: Option<(&'a FileShared, u64)>,
    /// The holder changed nothing: a file page is released up to date
    /// without `DIRTY` (`PageMut` that was never written through).
    clean: bool,
}

impl<'a> FrameLatch<'a> {
    /// Takes over a latch the caller holds on `frame`, pinned and drained
    /// (`Inner::latch_pinned` succeeded, or the miss path inserted it), and
    /// starts the write section (version odd).
    #[inline]
    pub(crate) fn new(
        cache: &'a Inner,
        frame: FrameNo,
        dirty: Option<(&'a FileShared, u64)>,
    ) -> Self {
        cache.desc(frame).begin_change();
        Self::adopt(cache, frame, dirty)
    }

    /// A latch the caller holds on `frame` in its write section (a
    /// `FrameLatch` of the same arguments was forgotten, `PageMut::into_raw`):
    /// the guard again, nothing changed in the frame.
    #[inline]
    pub(crate) fn adopt(
        cache: &'a Inner,
        frame: FrameNo,
        dirty: Option<(&'a FileShared, u64)>,
    ) -> Self {
        FrameLatch {
            cache,
            frame,
            dirty,
            clean: false,
        }
    }

    /// The latched frame.
    #[inline]
    pub(crate) fn frame(&self) -> FrameNo {
        self.frame
    }

    /// The holder changed nothing: release without `DIRTY`.
    #[inline]
    pub(crate) fn keep_clean(&mut self) {
        self.clean = true;
    }

    /// The frame's bytes for a caller that tracks its own writes (a
    /// `PageMut` handed to C). Valid while the latch is held.
    #[inline]
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.cache.frames.ptr(self.frame)
    }

    /// Copies `src` into the page at `off` with atomic stores (stale
    /// optimistic readers may still be copying, see `copy`).
    ///
    /// # Safety
    /// `off + src.len()` must not exceed the page size.
    pub(crate) unsafe fn write(&self, off: usize, src: &[u8]) {
        // SAFETY: latched and drained, version odd; in bounds (caller).
        unsafe {
            atomic_store_copy(
                self.cache.desc(self.frame).witness(),
                self.cache.frames.ptr(self.frame).add(off),
                src,
            )
        }
    }

    /// Zeroes `n` bytes of the page at `off` with atomic stores.
    ///
    /// # Safety
    /// `off + n` must not exceed the page size.
    pub(crate) unsafe fn zero(&self, off: usize, n: usize) {
        // SAFETY: latched and drained, version odd; in bounds (caller).
        unsafe {
            atomic_zero(
                self.cache.desc(self.frame).witness(),
                self.cache.frames.ptr(self.frame).add(off),
                n,
            )
        }
    }
}

impl std::ops::Deref for FrameLatch<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: latched and drained: nobody else reads through a pin.
        unsafe { self.cache.frames.bytes(self.frame) }
    }
}

impl std::ops::DerefMut for FrameLatch<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        // A writer of the bytes, to loom's models (`crate::sync::Witness`).
        self.cache.desc(self.frame).witness().touch();
        // SAFETY: latched and drained with the version odd: exclusive (the
        // `&mut self` borrow keeps a second slice from existing).
        unsafe { self.cache.frames.bytes_mut(self.frame) }
    }
}

impl Drop for FrameLatch<'_> {
    fn drop(&mut self) {
        let d = self.cache.desc(self.frame);
        // 5.5 step 5: version even.
        d.end_change();
        // The page that just became dirty, to tag (D2) under our pin.
        let tag = match self.dirty {
            // An unchanged file page: up to date (a fill may have just read
            // it), dirty only if it was before. The latch and the pin go in
            // one RMW (not in the page-mutex baselines, which release under
            // the mutex).
            Some(_) if self.clean && self.cache.hooks & HOOK_PAGE_LOCKS == 0 => {
                if d.unlatch_uptodate_release() == Released::Last {
                    self.cache.free_frame(self.frame);
                }
                return;
            }
            Some(_) if self.clean => {
                d.unlatch_uptodate();
                None
            }
            // 6: DIRTY + unlatch (Release) + wake; a page dirty already
            // has nothing to tag, so the pin goes in the same RMW (not in
            // the page-mutex baselines, which release under the mutex).
            Some((fs, index)) if self.cache.hooks & HOOK_PAGE_LOCKS == 0 => {
                let (old, released) = d.unlatch_dirty_release();
                match released {
                    Some(Released::Last) => return self.cache.free_frame(self.frame),
                    Some(Released::Alive) => return,
                    None => (!old.is_removed()).then_some((fs, index)),
                }
            }
            Some((fs, index)) => {
                let old = d.unlatch_dirty();
                (!old.is_dirty() && !old.is_removed()).then_some((fs, index))
            }
            None => {
                d.unlatch();
                None
            }
        };
        if let Some((fs, index)) = tag {
            // Before the tag: the flusher that takes it reads the time.
            d.set_dirtied(now_ms());
            fs.tree.tag_dirty(&self.cache.nodes, index);
            self.cache.dirtied();
            self.cache.file_dirtied(fs);
        }
        self.cache.release(self.frame);
    }
}
