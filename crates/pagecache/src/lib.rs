//! `pagecache`: a user-space page cache for many-core machines.
//!
//! An application opens files through a [`PageCache`] and reads, writes,
//! pins and syncs fixed-size pages held in a memory budget it sets. Lookups
//! of cached pages take no lock and write no shared cache line except the
//! page's own reference count (and `read_at` hits and [`Optimistic`] views,
//! which index structures descend with, not even that).
//!
//! ```no_run
//! use pagecache::{Config, OpenOptions, PageCache};
//! # fn main() -> std::io::Result<()> {
//! let cache = PageCache::new(Config { capacity: 64 << 20, ..Config::default() })?;
//! let file = cache.open_with("data.bin", OpenOptions::new().read(true).write(true).create(true))?;
//! file.write_at(b"hello", 0)?;
//! let mut buf = [0u8; 5];
//! assert_eq!(file.read_at(&mut buf, 0)?, 5);
//! {
//!     let page = file.page(0)?;            // pinned: bytes cannot change
//!     assert_eq!(&page[..5], b"hello");
//! }
//! file.page_mut(0)?[0] = b'j';            // latched, dirty on drop
//! file.sync()?;                           // write back, persist length, fdatasync
//! println!("{}", cache.stats());
//! # Ok(()) }
//! ```
//!
//! # Layers
//!
//! Each module uses only those listed above it (no import circles):
//!
//! | module (private) | layer (`docs/design.md`) | what it holds |
//! |---|---|---|
//! | `sync/`, `error.rs`, `stats/` | | atomics, locks, parking and the futures' wait queues (std or loom), lock profiling; the error type; counters |
//! | `frame/` | 1 frames, 2 alloc | arena, type-stable descriptors and their state word, free frames |
//! | `io/` | 6 io | backend trait, `pread`/`pwritev`, the I/O engines, fault injection |
//! | `index/` | 3 index | per-file 64-way radix tree, lock-free reads, dirty tags, run pins |
//! | `reclaim/` | 5 reclaim | replacement policies (one file each), the flusher's passes |
//! | `size_lock.rs` | 4 cache | the per-file size lock over page ranges |
//! | `cache/` | 4 cache, 5 reclaim | one protocol per file: lookup, miss, read/write, truncate, runs, asynchronous waits, registry; eviction, write-back, the flusher |
//! | `anon.rs` | 4 cache | anonymous regions: zero-filled pages in the same budget |
//! | `api/` | 7 api | [`PageCache`], [`File`], [`PageRef`], [`PageMut`], [`PageRun`], [`Optimistic`], the futures ([`PageFuture`], ...), [`WritebackHook`], [`Config`] |
//!
//! The public surface is what users need: those types (with the hook's
//! [`WritebackPage`], [`WritebackCause`], [`WritebackDecision`]), [`AnonRegion`],
//! [`Stats`], [`OpenOptions`], the baseline selectors ([`PolicyKind`],
//! [`PoolKind`], [`PageLockKind`]), the lock profile ([`lockstat`]) and the
//! I/O backend trait with its fault-injecting backend for tests
//! ([`FaultyBackend`]).
//!
//! # Memory overhead
//!
//! Per frame: 64 bytes of descriptor. Per cached page: its share of index
//! nodes (640 bytes per 64 consecutive pages, so 10 bytes a page for dense
//! files). Counters: 128 stripes of 128 bytes per cache.
//!
//! # Semantics users must know
//!
//! * **Pins are latches.** While a [`PageRef`] of a page lives, its bytes do
//!   not change: `write_at` and `page_mut` of that page wait until every pin
//!   is dropped, and new pins wait behind a waiting writer so writers do not
//!   starve. Like `std::sync::RwLock`, a thread that writes (or `page_mut`s,
//!   or `set_len`s over) a page while it still holds a `PageRef` of that page
//!   waits for itself forever; so does a thread that pins a page again while
//!   it already pins it and another thread waits to write it (recursive read
//!   locking with writer preference). Likewise `sync` while the same thread
//!   holds a [`PageMut`] of a dirty page of that file, and `set_len` to a
//!   length whose last page it pins or holds as a `PageMut`. Other threads'
//!   `set_len` never keeps a pin holder from writing or syncing other
//!   pages (it waits for no page under the size lock). Take several pins
//!   or `PageMut`s of one file in ascending page order (as
//!   [`File::pages`] does). `docs/locking.md` lists every rule.
//! * **Futures.** [`File::page_async`] and its siblings are plain
//!   `std` futures: no runtime is assumed. They never sleep for a page (a
//!   latch, a drain, a read in flight: protocol 5.9) and are cancel-safe at
//!   every await point. A page a future returns is pinned like any other:
//!   a task that holds one across an `.await` while another task of the
//!   same thread calls a *blocking* writer of that page blocks the thread
//!   (use the `_async` writers); and a runtime whose tasks hold N pages at
//!   once needs more than N frames, as N threads would. No poll blocks its
//!   thread: the dirty throttle, runs over a written page, a write's size
//!   lock and reclaim's need of a clean frame are waits of the future too
//!   (`docs/locking.md`, rule 15); debug builds panic on a blocking wait
//!   inside a poll.
//! * **Coherence.** The cache assumes it is the only writer of the files it
//!   opens, as a database buffer pool does. Changes made to a file behind its
//!   back (another process, `std::fs`) are not seen for pages already cached,
//!   and may be overwritten by write-back.
//! * **Errors.** Every error is an `io::Error` with the file, page and
//!   operation in its message and the kind users match on; [`os_error`]
//!   gives the OS error number behind it (`ENOSPC`, `EIO`, `EFBIG`, ...).
//!   A write-back error met by eviction goes to the thread that needed the
//!   frame, if no frame could be had (a full disk is not "out of memory");
//!   the pages stay dirty. What `sync` returns is the truth about
//!   durability when it returns: `Ok` exactly when every page dirty at the
//!   call, and the length, are on disk; an earlier error whose pages it has
//!   now written is not reported again.
//!   [`File::discard`] and [`PageCache::forget`] drop a file's pages
//!   without writing them back.
//! * **Durability.** `write_at` and `PageMut` only dirty pages. `sync` writes
//!   every dirty page, persists the length and calls `fdatasync`; if a write
//!   fails the pages stay dirty and a later `sync` retries them. Dropping the
//!   last handle writes back (best effort; [`File::close`] reports errors);
//!   if that fails the pages stay cached: reopening the file and calling
//!   `sync` retries, eviction writes them back when it can (then the file is
//!   released), and [`PageCache::forget`] drops them.

#![warn(missing_docs)]

mod size_lock;
pub(crate) mod sync;

mod frame;
mod placed;
mod reclaim;
#[cfg(not(loom))]
mod segment;
mod stats;

mod anon;
mod api;
mod cache;
mod error;
mod index;
mod io;

pub use api::*;
pub use error::{errno, os_error, PageError};
pub use frame::ARENA_SLACK;
pub use sync::lockstat;

/// Internals for the project's own tests, benchmarks, loom models and lab.
/// Not part of the API: no semver promise, hidden from the docs.
#[doc(hidden)]
pub mod internals {
    pub use crate::api::ready::{ReadyList, SlotWaker};
    pub use crate::frame::{alloc, state, FrameNo};
    pub use crate::reclaim::{passes, s3fifo, smp_list};

    /// The wait buckets every blocking wait sleeps in (`sync/futex.rs`,
    /// protocol 5.10): a table placed in memory that processes share and
    /// registered over it makes the waits on objects in that memory (frame
    /// descriptors) work between the processes.
    pub mod wait {
        #[cfg(not(loom))]
        pub use crate::sync::futex::{
            register_region, unregister_region, untagged_long_sleeps, FutexMutex, Member,
        };
        pub use crate::sync::futex::{WaitTable, BUCKETS};
        /// A future's place in the wait queues (`FrameDesc::poll_unlatched_as`).
        pub use crate::sync::waitq::Registration as FutureWait;

        /// The cache's mutex (a futex word, 5.10) around a `T`: all zeros
        /// is an unlocked mutex around a zeroed `T`.
        #[cfg(not(loom))]
        pub type SharedMutex<T> = lock_api::Mutex<FutexMutex, T>;
    }

    /// The shared segment a cache shared by processes lives in
    /// (`segment/`, protocol 5.11): creation, attachment, its checks.
    #[cfg(not(loom))]
    pub mod segment {
        pub use crate::segment::*;
    }

    /// The index node arena (`index/arena.rs`): its free list (protocol
    /// 5.12), for its loom model and for placing it in a segment; and its
    /// nodes, whose run pins (5.7, 5.15 P7) have a loom model too.
    pub mod nodes {
        pub use crate::index::{Node, NodeArena};
    }

    /// The per-file size lock (`size_lock.rs`), for its loom model.
    pub mod size_lock {
        pub use crate::size_lock::{SizeExclusive, SizeLock, SizeShared, ALL_PAGES};
    }

    /// The state word's bit that a removed page's frame carries until it is
    /// reset (`Optimistic::validation_words`).
    pub const STATE_REMOVED: u64 = crate::frame::state::REMOVED;

    /// The state word's latch bit: a writer holds the page
    /// ([`crate::File::fast_view`]; a view of a latched page waits).
    pub const STATE_LATCHED: u64 = crate::frame::state::LATCHED;

    /// The state word's bit of a frame whose bytes hold its page
    /// ([`crate::File::fast_view`]).
    pub const STATE_UPTODATE: u64 = crate::frame::state::UPTODATE;

    /// The state word's accessed bit (the replacement policy's; a hit
    /// sets it when clear, [`crate::File::fast_view`]).
    pub const STATE_ACCESSED: u64 = crate::frame::state::ACCESSED;

    /// The words of a frame's descriptor, in `u64`s, and where its state
    /// word, version, owner (the file's id) and page index sit among them
    /// ([`crate::File::fast_view`]).
    #[cfg(not(loom))]
    pub const DESC_WORDS: usize = crate::frame::state::DESC_WORDS;

    /// One background write-back pass over `file`, as the flusher runs it
    /// (tests and loom models, where no flusher thread runs): every dirty
    /// page written, except those latched or with an older write in
    /// flight, whose tags are put back. Errors are returned (and counted
    /// in `Stats`); failed pages stay dirty.
    pub fn background_pass(file: &crate::File) -> std::io::Result<()> {
        file.background_pass()
    }

    /// Loom models only: reads and writes of the cache's I/O engine wait
    /// for [`run_deferred_io`] (on a thread of the model's choosing, as the
    /// reaper would run them) instead of completing on their submitter.
    #[cfg(loom)]
    pub fn defer_io(cache: &crate::PageCache, defer: bool) {
        cache.inner.engine.defer(defer);
    }

    /// Loom models only: completes the I/O waiting (see [`defer_io`]) on
    /// this thread; returns how many ops ran.
    #[cfg(loom)]
    pub fn run_deferred_io(cache: &crate::PageCache) -> usize {
        cache.inner.engine.run_deferred()
    }

    /// Pages of `path` resident in the kernel's page cache: `mincore` over
    /// a fresh read-only mapping (the tests' and the lab's check that
    /// direct I/O leaves no second copy there).
    pub fn kernel_cached_pages(path: &std::path::Path) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        let f = std::fs::File::open(path)?;
        let len = f.metadata()?.len() as usize;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: a shared read-only mapping of the whole file, checked
        // against MAP_FAILED and unmapped below; nothing reads through it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: sysconf has no preconditions.
        let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut v = vec![0u8; len.div_ceil(ps)];
        // SAFETY: `p` maps `len` bytes; `v` has one byte per page of them.
        let r = unsafe { libc::mincore(p, len, v.as_mut_ptr()) };
        let err = std::io::Error::last_os_error();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, len) };
        if r != 0 {
            return Err(err);
        }
        Ok(v.iter().filter(|&&b| b & 1 != 0).count())
    }
}
