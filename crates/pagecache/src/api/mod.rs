//! Layer 7, api: the handles users hold.

pub use crate::anon::{AnonMut, AnonRef, AnonRegion};
pub use crate::cache::PageLockKind;
use crate::cache::{FileShared, FramePin, Handle, Inner, Readahead, LEAF_PAGES, RUN_MAX};
pub use crate::cache::{StreamChoice, StreamReads};
pub use crate::cache::{WritebackCause, WritebackDecision, WritebackHook, WritebackPage};
pub use crate::frame::alloc::PoolKind;
use crate::io::engine::Engine;
pub use crate::io::IoEngine;
pub use crate::io::{
    Backend, BackendFile, Faults, FaultyBackend, IoPlan, OpenOptions, PosixBackend,
};
pub use crate::reclaim::PolicyKind;
pub use crate::stats::Stats;
pub use asynch::{block_on, PageFuture, PageMutFuture, SyncFuture};
pub use guards::{PageMut, PageRef, PageRun, RawLatch};
#[cfg(not(loom))]
pub use optimistic::FastView;
pub use optimistic::Optimistic;

mod asynch;
mod guards;
mod optimistic;
mod probe;
pub(crate) mod ready;
// `PageCache::shared` and what goes with it.
#[cfg(not(loom))]
mod shared;
use crate::sync::Ordering;
pub use probe::HeldProbe;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// Smallest number of frames a cache may have.
pub const MIN_FRAMES: usize = 4;

/// Cache configuration. Every field is public; build one with
/// `Config { capacity, ..Config::default() }`.
///
/// ```
/// use pagecache::{Config, PolicyKind};
///
/// let config = Config { capacity: 64 << 20, ..Config::default() };
/// assert_eq!(config.frames().unwrap(), (64 << 20) / 4096);
/// assert_eq!(config.policy, PolicyKind::S3Fifo);
///
/// // Too small (fewer than four frames) or a bad page size: InvalidInput.
/// let tiny = Config { capacity: 8192, ..Config::default() };
/// assert_eq!(tiny.frames().unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Memory budget for page frames, in bytes (rounded down to whole pages;
    /// at least [`MIN_FRAMES`] pages).
    pub capacity: usize,
    /// Page size in bytes: a power of two from 4 KiB to 2 MiB.
    pub page_size: usize,
    /// Free-frame allocator: per-CPU caches (default) or the one-lock
    /// baseline the lab compares against.
    pub pool: PoolKind,
    /// Replacement policy: sharded S3-FIFO (default), or a baseline: CLOCK,
    /// strict LRU under one lock, seed 004's SMP list.
    pub policy: PolicyKind,
    /// Page pins and releases: per-page state bits (default), or a baseline
    /// global page mutex / hashed page-lock array around each.
    pub page_locks: PageLockKind,
    /// Read and write pages with direct I/O (`O_DIRECT`), so the kernel's
    /// page cache holds no second copy of them (default: on). Files on
    /// filesystems that refuse it (tmpfs, some FUSE and network
    /// filesystems) fall back to buffered I/O on their own;
    /// [`File::direct_io`] and [`Stats::direct_files`] tell which.
    pub direct_io: bool,
    /// The asynchronous I/O engine for batched misses, readahead and
    /// prefetch: io_uring where the kernel allows it, else a pool of I/O
    /// threads (default [`IoEngine::Auto`]; the environment variable
    /// `PAGECACHE_IO_ENGINE=uring|threads` overrides `Auto`).
    pub io_engine: IoEngine,
    /// The most I/O threads the thread-pool engine starts (started on
    /// demand; each is one more read in flight).
    pub io_threads: usize,
    /// The largest readahead window in bytes (rounded down to whole pages;
    /// 0 turns readahead off). A sequential reader's window starts small
    /// and doubles up to this, but never past a 32nd of the cache or a
    /// quarter of what the replacement policy keeps of pages not yet used
    /// (S3-FIFO: one CPU shard's probationary queue, a tenth of the shard;
    /// 3.2 MiB of a 256 MiB cache on 2 CPUs), so read-ahead pages are not
    /// evicted before the reader gets to them.
    pub readahead_max: usize,
    /// Percentage of the capacity that may be dirty before the background
    /// flusher starts writing dirty pages back (default 10).
    pub dirty_background_percent: u32,
    /// Percentage of the capacity that may be dirty before `write_at`
    /// waits for the flusher (dirty throttling; default 30). At least
    /// `dirty_background_percent`, at most 100.
    pub dirty_limit_percent: u32,
    /// How long a page may stay dirty before background write-back writes
    /// it, whatever else it does (the kernel's `dirty_expire_centisecs`;
    /// default 30 s; `Duration::MAX`: never by age). With frames to spare
    /// and the dirty count under `dirty_limit_percent`, age is the only
    /// reason background write-back writes a page: a page rewritten again
    /// and again is written once per this bound, not at every rewrite (see
    /// [`PageCache::dirty_pages`] and `docs/design.md`, "Which dirty pages
    /// background write-back writes"). `sync` writes every dirty page
    /// whatever its age.
    pub dirty_expire: std::time::Duration,
    /// Stable pages under write-back: a writer of a page whose write to the
    /// file is in flight waits for that write to end (default: off). Off,
    /// the writer goes ahead at once, as the kernel's writers do: the page
    /// is dirty again and written again later, so everything a completed
    /// `sync` covered is on disk either way; only the on-disk copy of bytes
    /// no sync has covered may mix the two writes until the next one. Files
    /// whose direct writes must not change in flight (a filesystem that
    /// checksums data, btrfs or ZFS, or a device whose
    /// `queue/stable_writes` is 1), and files of a custom [`Backend`] that
    /// keeps the default [`BackendFile::write_raw`], get stable pages
    /// whatever this says.
    pub stable_writes: bool,
    /// Fault the whole frame arena in when the cache is created (default:
    /// off). Off, a frame's memory is faulted in around the time the frame
    /// is first used, and with transparent huge pages (the arena asks for
    /// them) such a fault may compact memory first: on a machine whose
    /// memory is fragmented, or in a VM that returns free memory to its
    /// host, a few milliseconds per 2 MiB. A helper thread faults the arena
    /// in ahead of the frames in use (a sixteenth of the arena, at most 64
    /// MiB, further), so that this mostly happens off the threads that
    /// read and write; one that gets ahead of it pays the fault. On, the
    /// cache uses its whole budget from the start and its creation takes
    /// that time instead (tens to hundreds of milliseconds for 256 MiB), as
    /// a database's preallocated buffer pool does.
    pub populate: bool,
    /// How sequential streams (readahead windows) are read (default:
    /// [`StreamReads::Measure`]: each device's first streams pick the
    /// faster of direct and buffered reads). Reads that are not part of a stream, and
    /// [`File::prefetch`](crate::File::prefetch), are direct whatever
    /// this says. Only the io_uring engine reads streams buffered (the
    /// thread pool reads them direct). A file read buffered anyway
    /// (`direct_io` off, or refused) keeps its reads; buffered stream
    /// modes add the drop-behind, so the kernel holds no second copy of
    /// what the stream passed.
    pub stream_reads: StreamReads,
    /// Drop-behind of long sequential write streams (default: on). Once
    /// a file is written in order (`write_at`s each starting where the
    /// handle's last ended) past an eighth of the cache (4 to 32 MiB), and
    /// while the cache's dirty pages are past `dirty_background_percent`,
    /// the stream's pages past that point are written back as it goes and
    /// each is evicted once written (unless someone holds it), as the
    /// kernel's `RWF_DONTCACHE` asks per write and PostgreSQL's bulk-write
    /// ring does: a log, a bulk load or a copy does not push the cache's
    /// hot pages out, nor make the cache touch its whole budget of memory
    /// for pages held only until written, and its writer goes at the
    /// device's pace. Such a page read back later is read from the file.
    /// Off: a stream's pages stay cached as any written page, and are
    /// written by age, by need or past the dirty limit.
    pub drop_behind_writes: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            capacity: 256 << 20,
            page_size: 4096,
            pool: PoolKind::PerCpu,
            policy: PolicyKind::S3Fifo,
            page_locks: PageLockKind::Bits,
            direct_io: true,
            io_engine: IoEngine::Auto,
            io_threads: 16,
            readahead_max: 2 << 20,
            dirty_background_percent: 10,
            dirty_limit_percent: 30,
            dirty_expire: std::time::Duration::from_secs(30),
            stable_writes: false,
            populate: false,
            stream_reads: StreamReads::Measure,
            drop_behind_writes: true,
        }
    }
}

impl Config {
    /// Checks the configuration; returns the number of frames.
    pub fn frames(&self) -> io::Result<usize> {
        self.page_locks.check()?;
        let ps = self.page_size;
        if !ps.is_power_of_two() || !(4096..=2 << 20).contains(&ps) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("page_size {ps} is not a power of two from 4096 to 2097152"),
            ));
        }
        let (bg, limit) = (self.dirty_background_percent, self.dirty_limit_percent);
        if !(bg > 0 && bg <= limit && limit <= 100) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "dirty_background_percent {bg} and dirty_limit_percent {limit}: \
                     need 0 < background <= limit <= 100"
                ),
            ));
        }
        let n = self.capacity / ps;
        if n < MIN_FRAMES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "capacity {} holds {n} pages of {ps} bytes; at least {MIN_FRAMES} are needed",
                    self.capacity
                ),
            ));
        }
        Ok(n)
    }
}

/// Where a shared cache lives and who else may attach to it
/// ([`PageCache::shared_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedOptions {
    /// The directory of the segment file (`None`: `/dev/shm`). A hugetlbfs
    /// or a tmpfs mounted with `huge=always` gives the frames huge pages.
    pub dir: Option<std::path::PathBuf>,
    /// A group whose members may attach too (the segment's mode is then
    /// 0660 and its group this one); `None`: this user only (0600).
    pub group: Option<u32>,
}

/// A page cache: a fixed budget of frames shared by every file opened
/// through it. Cheap to clone (a reference-counted handle).
///
/// ```
/// use pagecache::{Config, OpenOptions, PageCache};
/// # fn main() -> std::io::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("pagecache-doc-cache-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let cache = PageCache::new(Config { capacity: 16 << 20, ..Config::default() })?;
/// let file = cache.open_with(
///     dir.join("cache.bin"),
///     OpenOptions::new().read(true).write(true).create(true),
/// )?;
/// file.write_at(b"hello", 0)?;
/// assert_eq!(cache.stats().hits + cache.stats().misses, 1);
/// assert_eq!(cache.frames(), (16 << 20) / 4096);
/// # drop(file); std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PageCache {
    pub(crate) inner: Arc<Handle>,
    /// (C) `Config::direct_io`.
    direct_io: bool,
}

impl PageCache {
    /// A cache over ordinary files (`pread`/`pwritev`).
    pub fn new(config: Config) -> io::Result<PageCache> {
        Self::with_backend(config, PosixBackend)
    }

    /// A cache whose file I/O goes through `backend` (tests use
    /// [`FaultyBackend`]).
    pub fn with_backend(config: Config, backend: impl Backend) -> io::Result<PageCache> {
        // Checked here too (Inner::new checks it again) so that a bad
        // configuration starts no engine thread.
        config.frames()?;
        let engine = Engine::new(config.io_engine, config.io_threads)?;
        Ok(PageCache {
            inner: Handle::new(Inner::new(&config, Arc::new(backend), engine)?),
            direct_io: config.direct_io,
        })
    }

    /// Opens an existing file for reading and writing.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        self.open_with(path, OpenOptions::new().read(true).write(true))
    }

    /// Opens a file with the given options.
    pub fn open_with(&self, path: impl AsRef<Path>, opts: &OpenOptions) -> io::Result<File> {
        let path = path.as_ref();
        let ctx = |e: io::Error| crate::error::context(e, format!("opening {}", path.display()));
        if (opts.create || opts.create_new || opts.truncate) && !opts.write {
            return Err(ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                "create and truncate need write access",
            )));
        }
        if !opts.read && !opts.write {
            return Err(ctx(io::Error::new(
                io::ErrorKind::InvalidInput,
                "neither read nor write access asked for",
            )));
        }
        let mut opts = *opts;
        opts.direct = self.direct_io;
        let fd = self.inner.backend.open(path, &opts).map_err(ctx)?;
        let shared = self.inner.attach(path, fd, opts.write).map_err(ctx)?;
        let file = File {
            cache: self.inner.clone(),
            shared,
            writable: opts.write,
            ra: Readahead::default(),
        };
        if opts.truncate {
            file.set_len(0)?;
        }
        Ok(file)
    }

    /// An anonymous region of `len` bytes: zero-filled pages taken from the
    /// cache's budget on first touch and returned when freed or dropped. Not
    /// evictable; `OutOfMemory` when no file page can be evicted for it.
    pub fn anon(&self, len: u64) -> io::Result<crate::anon::AnonRegion> {
        crate::anon::AnonRegion::new(self.inner.clone(), len)
    }

    /// Drops the cached pages of files opened by `path` that have no open
    /// handle left, dirty or not, without writing them back, and closes
    /// their descriptors. Such
    /// files exist when the last handle's write-back failed (the cache
    /// keeps their dirty pages rather than lose them): use this for a
    /// temporary file or one deleted since. Returns how many files were
    /// forgotten, once no write of their pages is in flight (a write-back
    /// that had started lands before this returns, never after). See also
    /// [`File::discard`].
    pub fn forget(&self, path: impl AsRef<Path>) -> usize {
        self.inner
            .idle_files(path.as_ref())
            .iter()
            .filter(|fs| self.inner.discard(fs))
            .count()
    }

    /// Lock profile per lock class, sorted by total wait (cargo feature
    /// `lockstat`; empty without it). Process-wide: counts every cache in the
    /// process. Format it with [`crate::sync::lockstat::format`].
    pub fn lock_profile(&self) -> Vec<crate::sync::lockstat::LockProfile> {
        crate::sync::lockstat::snapshot()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.inner.counters.snapshot()
    }

    /// Page size in bytes.
    pub fn page_size(&self) -> usize {
        self.inner.page_size
    }

    /// Number of frames (the capacity in pages).
    pub fn frames(&self) -> usize {
        self.inner.frames.len()
    }

    /// The I/O engine in use: [`IoEngine::Uring`] or
    /// [`IoEngine::Threads`] (what `Auto` resolved to).
    pub fn io_engine(&self) -> IoEngine {
        self.inner.engine.kind()
    }

    /// What [`StreamReads::Measure`] chose so far, one entry per device
    /// whose measurement is complete, by device number (empty in the
    /// other modes).
    pub fn stream_choices(&self) -> Vec<StreamChoice> {
        self.inner.streams.choices()
    }

    /// Dirty pages in the whole cache (a snapshot of the count the flusher
    /// and dirty throttling go by).
    pub fn dirty_pages(&self) -> usize {
        self.inner.dirty_pages()
    }

    /// Frames currently free (a snapshot).
    pub fn free_frames(&self) -> usize {
        self.inner.free_frames()
    }

    /// Checks the cache's internal invariants and panics if one is broken.
    /// Meant for tests: call it while no other thread uses the cache and no
    /// page is pinned. Of a cache shared by processes it checks that no
    /// process holds or counts a pin (call it while none does).
    pub fn validate(&self) {
        self.inner.validate();
    }
}

/// An open file. Handles to the same file (same device and inode) share one
/// set of cached pages. Clone it to share it between threads.
///
/// ```
/// use pagecache::{Config, OpenOptions, PageCache};
/// # fn main() -> std::io::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("pagecache-doc-file-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("file.bin");
/// let cache = PageCache::new(Config::default())?;
/// let file = cache.open_with(&path, OpenOptions::new().read(true).write(true).create(true))?;
/// file.write_at(&[7u8; 10_000], 0)?; // three pages, the last one partial
/// assert_eq!(file.len(), 10_000);
///
/// let mut buf = [0u8; 4];
/// assert_eq!(file.read_at(&mut buf, 9_998)?, 2); // short only at end of file
///
/// file.sync()?; // write back, persist the length, fdatasync
/// assert_eq!(std::fs::read(&path)?.len(), 10_000);
/// file.close()?; // reports a failed write-back, unlike drop
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct File {
    cache: Arc<Handle>,
    shared: Arc<FileShared>,
    writable: bool,
    /// This handle's sequential-read detection (each handle, and each
    /// clone, has its own, as each `open` of a file has in the kernel).
    ra: Readahead,
}

impl Clone for File {
    fn clone(&self) -> Self {
        // Relaxed: we hold a handle, so the count cannot reach 0 meanwhile.
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        File {
            cache: self.cache.clone(),
            shared: self.shared.clone(),
            writable: self.writable,
            ra: Readahead::default(),
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        // AcqRel: the last dropper sees every other handle's effects.
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            let _ = self.cache.detach(&self.shared);
        }
    }
}

impl File {
    fn inner(&self) -> &Inner {
        &self.cache
    }

    /// The cache and the file's shared part (the crate's unit tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn parts(&self) -> (&Inner, &FileShared) {
        (&self.cache, &self.shared)
    }

    /// See [`crate::internals::background_pass`].
    pub(crate) fn background_pass(&self) -> io::Result<()> {
        self.inner().write_dirty_file(
            &self.shared,
            crate::cache::Sweep {
                pick: crate::cache::Pick::Any,
                goal: 0,
            },
        )
    }

    #[inline]
    fn check_writable(&self, what: &str) -> io::Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(self.read_only(what))
        }
    }

    #[cold]
    fn read_only(&self, what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: {what} through a read-only handle",
                self.shared.path.display()
            ),
        )
    }

    #[inline]
    fn npages(&self) -> u64 {
        // A shift, not a division: this is on every page() call.
        let mask = self.cache.page_size as u64 - 1;
        (self.len() + mask) >> self.cache.shift
    }

    #[inline]
    fn check_page(&self, index: u64) -> io::Result<()> {
        let pages = self.npages();
        if index >= pages {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: page {index} is past the end of file ({pages} pages)",
                    self.shared.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Whether this file's pages are read and written with direct I/O
    /// (`O_DIRECT`, no second copy in the kernel's page cache) rather than
    /// buffered: `Config::direct_io`, unless the filesystem refused it.
    pub fn direct_io(&self) -> bool {
        self.shared.read_fd.is_direct()
    }

    /// The path this file was first opened by.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Length in bytes (including writes not yet written back).
    #[inline]
    pub fn len(&self) -> u64 {
        // Acquire: pairs with writers' AcqRel `fetch_max` and `set_len`'s
        // Release store (bytes below the length are visible).
        self.shared.len.load(Ordering::Acquire)
    }

    /// Whether the length is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Page size of the cache.
    pub fn page_size(&self) -> usize {
        self.cache.page_size
    }

    /// Reads up to `buf.len()` bytes at `offset`, like
    /// `std::os::unix::fs::FileExt::read_at`: short only at end of file.
    /// Each page is read atomically (never torn by a concurrent write).
    #[inline]
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner()
            .read_at(&self.shared, Some(&self.ra), buf, offset)
    }

    /// Reads exactly `buf.len()` bytes at `offset` or fails with
    /// `UnexpectedEof`.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = self.read_at(buf, offset)?;
        if n < buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: read of {} bytes at {offset} ends past the end of file",
                    self.shared.path.display(),
                    buf.len()
                ),
            ));
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`, extending the file if needed. Only
    /// dirties pages; see [`File::sync`].
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable("write")?;
        self.inner().write_at(&self.shared, buf, offset)?;
        self.inner().note_write(&self.shared, offset, buf.len());
        Ok(())
    }

    /// Registers (or with `None` removes) the write-back hook of this file
    /// (for every handle of it): see [`WritebackHook`]. While one is set,
    /// write-back keeps the file's pages stable (a writer of a page waits
    /// for its write in flight), so the bytes the hook approved are the
    /// bytes written.
    pub fn set_writeback_hook(&self, hook: Option<WritebackHook>) {
        let mut h = self.shared.hook.write();
        // Relaxed: read by write-back as a hint before it takes the lock.
        self.shared
            .hooked
            .store(hook.is_some(), std::sync::atomic::Ordering::Relaxed);
        *h = hook;
    }

    /// Pins page `index`. `UnexpectedEof` at or past the last page. Bytes of
    /// the last page past the end of file read as zero.
    #[inline]
    pub fn page(&self, index: u64) -> io::Result<PageRef<'_>> {
        self.check_page(index)?;
        let frame = self.inner().get_page(&self.shared, index)?;
        Ok(PageRef {
            pin: FramePin::new(&self.cache, frame),
            index,
        })
    }

    /// Latches page `index` for writing: waits until every pin of it is
    /// dropped; readers and writers of the page wait for the `PageMut`.
    /// The page is marked dirty when the `PageMut` is dropped. Past the
    /// cache's dirty limit, waits first (no latch held) for write-back to
    /// bring the count under it, as `write_at` does.
    pub fn page_mut(&self, index: u64) -> io::Result<PageMut<'_>> {
        self.check_writable("page_mut")?;
        self.check_page(index)?;
        self.inner().balance_dirty();
        let frame = self.inner().get_page_latched(&self.shared, index, false)?;
        Ok(self.latched(frame, index, false))
    }

    /// Gang lookup: clears `out`, then pins up to `max` consecutive pages
    /// from `start`, reading the missing ones. Returns how many it pinned,
    /// fewer than `max` only at end of file.
    pub fn pages<'a>(
        &'a self,
        start: u64,
        out: &mut Vec<PageRef<'a>>,
        max: usize,
    ) -> io::Result<usize> {
        out.clear();
        let npages = self.npages();
        let end = npages.min(start.saturating_add(max as u64));
        self.inner()
            .gang(&self.shared, start, end, |index, frame| {
                out.push(PageRef {
                    pin: FramePin::new(&self.cache, frame),
                    index,
                })
            })?;
        Ok(out.len())
    }

    /// A run: pins up to `max` consecutive pages from `start` with one pin
    /// of their index leaf (protocol 5.7), so a scan of cached pages costs
    /// two atomic operations per run instead of two per page. `max` is
    /// capped at [`File::RUN_MAX`]. The run ends early at end of file, at
    /// the end of `start`'s aligned group of [`File::RUN_GROUP`] pages (one
    /// index leaf), and, when `start` is cached, at
    /// the first page that is not cached and idle (reading it could wait);
    /// when `start` itself is not cached and idle, the pages up to `max`
    /// are read as [`File::pages`] reads them, each pinned on its own. So a
    /// run is empty only at or past end of file. Writers of the run's pages
    /// wait until it is dropped.
    ///
    /// While the run lives, its thread must not wait for its pages through
    /// other calls (`page_mut`, `write_at`, `set_len` of them): as with a
    /// [`PageRef`], that waits for the run itself.
    #[inline]
    pub fn run(&self, start: u64, max: usize) -> io::Result<PageRun<'_>> {
        let mut run = PageRun {
            file: self,
            start,
            len: 0,
            leaf: None,
            frames: [0; RUN_MAX],
        };
        let npages = self.npages();
        if start >= npages || max == 0 {
            return Ok(run);
        }
        let group_end = (start | (LEAF_PAGES - 1)).saturating_add(1);
        let end = npages
            .min(start.saturating_add(max.min(RUN_MAX) as u64))
            .min(group_end);
        let n = (end - start) as usize;
        if let Some((leaf, k)) = self
            .inner()
            .run_pin(&self.shared, start, n, &mut run.frames)
        {
            run.len = k;
            run.leaf = Some(leaf);
            return Ok(run);
        }
        // Per-page pins (a miss is read with the rest of its run). `len`
        // counts each pin as it is taken, so an error releases them.
        let PageRun { frames, len, .. } = &mut run;
        self.inner().gang(&self.shared, start, end, |_, f| {
            frames[*len] = f;
            *len += 1;
        })?;
        Ok(run)
    }

    /// The most pages a [`File::run`] holds.
    pub const RUN_MAX: usize = RUN_MAX;
    /// A run never crosses a multiple of this many pages (an index leaf).
    pub const RUN_GROUP: u64 = LEAF_PAGES;

    /// Starts reading the pages of `len` bytes from `offset` that are not
    /// cached, and returns without waiting: the reads run in the I/O engine,
    /// many at once, and a later `read_at` or `page` of those pages finds
    /// them cached (or waits for the read in flight). Bytes past end of
    /// file are ignored. An error of such a read is not reported here: the
    /// page is dropped, and a later read of it reads it again and reports
    /// what happens then. A hint: it starts fewer reads when the cache is
    /// short of frames (at most a quarter of them in one call).
    pub fn prefetch(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner().prefetch(&self.shared, offset, len);
        Ok(())
    }

    /// Sets the length. Shrinking drops cached pages past the end (pinned
    /// ones are freed by their last release) and zeroes the tail of the last
    /// page; growing reads as zeros. Takes effect on disk at once.
    pub fn set_len(&self, len: u64) -> io::Result<()> {
        self.check_writable("set_len")?;
        self.inner().set_len(&self.shared, len)
    }

    /// Writes every dirty page back, persists the length and calls
    /// `fdatasync`. Returns the truth about durability now: `Ok` exactly
    /// when every page dirty at the call, and the length, are on disk. On
    /// error the pages that failed stay dirty, and a later `sync` retries
    /// them. An earlier failure (eviction's, reported to the call that
    /// needed a frame; the background flusher's, counted in
    /// [`Stats`](crate::Stats)) left its pages dirty: this writes them, and
    /// does not report that earlier error again.
    pub fn sync(&self) -> io::Result<()> {
        self.inner().flush(&self.shared, true)
    }

    /// Closes this handle, writing the file's dirty pages back and reporting
    /// any error (dropping a handle does the same silently).
    pub fn close(self) -> io::Result<()> {
        let res = self.inner().flush(&self.shared, false);
        drop(self);
        res
    }

    /// Closes this handle without writing anything back. If it was the
    /// file's last handle, every cached page of the file is dropped, dirty
    /// or not, and its descriptors are closed: for temporary files, and
    /// files deleted or about to be. Returns whether that happened; if other handles of the
    /// file are open, they keep its pages and this returns false. It
    /// returns only once no write of the dropped pages is in flight: a
    /// background write-back that had started lands before, never after
    /// (may wait for that I/O).
    pub fn discard(self) -> bool {
        let (cache, shared) = (self.cache.clone(), self.shared.clone());
        // Relaxed: we hold a handle. Count a stand-in for ours, so that
        // dropping `self` is never the last handle's drop (which would
        // write back); then drop the stand-in.
        shared.handles.fetch_add(1, Ordering::Relaxed);
        drop(self);
        // AcqRel: as `File::drop`.
        shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 && cache.discard(&shared)
    }

    /// Number of this file's pages whose bytes are not known to be in the
    /// file: dirty, or being written back right now (a snapshot; tests).
    pub fn dirty_pages(&self) -> usize {
        let mut n = 0;
        for i in 0..self.npages() {
            if let Some(f) = self.shared.tree.lookup(&self.cache.nodes, i) {
                let s = self.cache.desc(f).snapshot();
                if self.cache.desc(f).identity() == (self.shared.id, i)
                    && (s.is_dirty() || s.is_under_writeback())
                {
                    n += 1;
                }
            }
        }
        n
    }
}
