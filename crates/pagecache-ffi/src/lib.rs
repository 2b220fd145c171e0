//! The C ABI of `pagecache`: `libpagecache.so` and `libpagecache.a`, with
//! the header `include/pagecache.h` generated from this file by `cbindgen`
//! (checked in; `tests/header.rs` fails when they differ, and
//! `UPDATE_HEADER=1 cargo test -p pagecache-ffi` rewrites it).
//!
//! Conventions, for every function:
//! * the return value is 0 on success or a negative `errno`: the OS error
//!   where an OS call failed (`-ENOSPC`, `-EIO`, `-ENOENT`, ...), else one
//!   mapped from the error's kind (`pagecache::errno`); results come back
//!   through out-pointers;
//! * on failure, `pc_last_error()` returns the message of the calling
//!   thread's last error (which file, which page, what was wrong);
//! * null pointers, bad sizes and bad flags are `-EINVAL`, never a crash;
//! * no panic crosses the boundary: one is caught and returned as `-EIO`
//!   with its message.
//!
//! Handles: a `pc_cache`, a `pc_file` and a `pc_anon` (an anonymous region)
//! are opaque and may be used from any number of threads at once; a
//! `pc_pin` is a small struct the caller
//! owns (on its stack, say) that holds one pinned (read-only) or latched
//! (writable) page until `pc_pin_release`; a `pc_run` likewise holds up to
//! `PC_RUN_MAX` consecutive pages until `pc_run_release`.
//!
//! Soundness of the handles: a `pc_file` is a `Box` whose address never
//! changes until `pc_file_close`/`pc_file_discard`, and those refuse
//! (`-EBUSY`) while any pin or run taken through it is held; so the
//! `'static` lifetime given to a pin's `PageRef`/`PageMut` or a run's
//! `PageRun` (which borrow the file) is never outlived. A `pc_anon` is the
//! same for its pins (`AnonRef`/`AnonMut`) until `pc_anon_free`.
#![allow(non_camel_case_types)]

mod pin_count;

use pagecache::{
    AnonMut, AnonRef, AnonRegion, Config, File, IoEngine, OpenOptions, PageCache, PageMut, PageRef,
    PageRun, StreamReads, WritebackCause, WritebackDecision, WritebackHook, WritebackPage,
};
use pin_count::PinCount;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The version of this ABI: bumped when a struct's layout or a function's
/// meaning changes, or functions are added (3: `pc_file_run`; 4:
/// `pc_config.populate`; 5: anonymous regions, `pc_anon_*`; 6: optimistic
/// views `pc_page_optimistic`, `pc_optimistic_validate`,
/// `pc_optimistic_upgrade`; `pc_page_new`, `pc_page_try_pin`,
/// `pc_page_try_latch`, `pc_latch_release_clean`; 7:
/// `pc_config.stream_reads`, `pc_cache_stream_choices`; 8:
/// `pc_stats.streamed_pages`; 9: `pc_config_default` sets
/// `stream_reads` to `PC_STREAM_MEASURE`, not `PC_STREAM_DIRECT`; 10:
/// `pc_config.dirty_expire_ms`, `pc_pin.hint` and `pc_optimistic.hint`
/// (and the fields `pc_optimistic_valid` reads), `pc_page_optimistic_hinted`,
/// `pc_file_set_writeback_hook`, and `pc_page_new` of an unwritten hole).
pub const PC_ABI_VERSION: u32 = 10;

/// `pc_file_open` flag: open for reading.
pub const PC_READ: u32 = 1;
/// `pc_file_open` flag: open for writing.
pub const PC_WRITE: u32 = 2;
/// `pc_file_open` flag: create the file if it does not exist (needs
/// `PC_WRITE`).
pub const PC_CREATE: u32 = 4;
/// `pc_file_open` flag: truncate the file to length 0 (needs `PC_WRITE`).
pub const PC_TRUNCATE: u32 = 8;
/// `pc_file_open` flag: fail with `-EEXIST` if the file exists (needs
/// `PC_WRITE`).
pub const PC_CREATE_NEW: u32 = 16;

/// `pc_config.io_engine`: io_uring where the kernel allows it, else the
/// thread pool (the environment variable `PAGECACHE_IO_ENGINE` may choose).
pub const PC_IO_AUTO: u32 = 0;
/// `pc_config.io_engine`: io_uring (`pc_cache_new` fails where refused).
pub const PC_IO_URING: u32 = 1;
/// `pc_config.io_engine`: a pool of I/O threads doing `preadv`/`pwritev`.
pub const PC_IO_THREADS: u32 = 2;

/// `pc_config.stream_reads`: sequential streams read with direct I/O, as
/// every other read (the default before ABI 9).
pub const PC_STREAM_DIRECT: u32 = 0;
/// `pc_config.stream_reads`: through the kernel's buffered path and its
/// readahead, without keeping the kernel's copy (dropped behind the
/// stream).
pub const PC_STREAM_BUFFERED: u32 = 1;
/// `pc_config.stream_reads`: each device's first streams read both ways
/// and measured, the faster kept (`pc_cache_stream_choices`); what
/// `pc_config_default` sets since ABI 9.
pub const PC_STREAM_MEASURE: u32 = 2;

/// A cache's settings. Fill it with `pc_config_default`, then change what
/// you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pc_config {
    /// Memory budget for pages, in bytes (at least 4 pages).
    pub capacity: u64,
    /// Page size: a power of two from 4096 to 2 MiB.
    pub page_size: u32,
    /// Nonzero: read and write with `O_DIRECT` where the filesystem
    /// accepts it (the default), so the kernel keeps no second copy.
    pub direct_io: u32,
    /// One of `PC_IO_AUTO`, `PC_IO_URING`, `PC_IO_THREADS`.
    pub io_engine: u32,
    /// The most threads the thread-pool engine starts.
    pub io_threads: u32,
    /// The largest readahead window in bytes (0: no readahead).
    pub readahead_max: u64,
    /// Percent of the capacity dirty down to which background write-back
    /// writes once the count is past `dirty_limit_percent`.
    pub dirty_background_percent: u32,
    /// Percent of the capacity dirty before writers wait.
    pub dirty_limit_percent: u32,
    /// Nonzero: a writer of a page whose write-back is in flight waits for
    /// that write (stable pages). Zero (the default): it goes ahead and the
    /// page is written again later. Files on btrfs, ZFS or a device asking
    /// for stable writes get stable pages either way. (Added in ABI 2.)
    pub stable_writes: u32,
    /// Nonzero: fault the whole frame arena in at `pc_cache_new` (its
    /// memory is then used from the start), so that no first touch of a
    /// frame during a read or write pays the page fault (with huge pages,
    /// possibly a compaction of memory). Zero (the default): frames are
    /// faulted in on first use. (Added in ABI 4.)
    pub populate: u32,
    /// How sequential streams (readahead windows) are read: one of
    /// `PC_STREAM_DIRECT`, `PC_STREAM_BUFFERED`, `PC_STREAM_MEASURE` (the
    /// default since ABI 9); see `pagecache::StreamReads`. (Added in ABI 7.)
    pub stream_reads: u32,
    /// Milliseconds a page may stay dirty before background write-back
    /// writes it (default 30000; `UINT32_MAX`: never by age). With frames
    /// to spare and the dirty count under the limit, age is the only
    /// reason it writes a page; see `pagecache::Config::dirty_expire`.
    /// (Added in ABI 10.)
    pub dirty_expire_ms: u32,
}

/// What `PC_STREAM_MEASURE` chose for one device
/// (`pc_cache_stream_choices`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pc_stream_choice {
    /// The device (`st_dev` of its files).
    pub device: u64,
    /// Nonzero: its streams are read through the kernel's cache.
    pub buffered: u32,
    /// The rates measured, in bytes per second.
    pub direct_rate: f64,
    /// See `direct_rate`.
    pub buffered_rate: f64,
}

/// The cache's counters (`pc_cache_stats`); see `pagecache::Stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct pc_stats {
    /// Lookups that found the page cached.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Page reads issued to the file system.
    pub reads: u64,
    /// Write calls issued to the file system.
    pub writes: u64,
    /// Pages written back.
    pub writebacks: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Failed page reads.
    pub read_errors: u64,
    /// Failed write-backs.
    pub write_errors: u64,
    /// Reads submitted to the asynchronous engine (one per run of pages).
    pub async_reads: u64,
    /// Pages read ahead of sequential readers.
    pub readahead_pages: u64,
    /// Pages whose read `pc_file_prefetch` started.
    pub prefetch_pages: u64,
    /// Files opened with direct I/O.
    pub direct_files: u64,
    /// Files opened with buffered I/O.
    pub buffered_files: u64,
    /// Dirty pages in the whole cache now.
    pub dirty_pages: u64,
    /// Frames (the capacity in pages).
    pub frames: u64,
    /// Frames free now.
    pub free_frames: u64,
    /// Pages of sequential streams read straight into the reader's
    /// buffer, bypassing the frames (a file larger than the cache, its
    /// device's streams read buffered). (Added in ABI 8.)
    pub streamed_pages: u64,
}

/// A page held by the caller: pinned (`pc_page_pin`: read-only, the page
/// stays cached and unchanged) or latched (`pc_page_latch`: writable by
/// this holder only, marked dirty when released). The caller owns the
/// struct (on its stack, say: no allocation per pin); `data` and `len` are
/// valid until `pc_pin_release`. It may be moved or copied, but only one
/// copy may be released.
#[repr(C)]
#[derive(Debug)]
pub struct pc_pin {
    /// The page's bytes (`len` of them; the page size). Writable only for a
    /// latched page. NULL when no page is held.
    pub data: *mut u8,
    /// The page size in bytes; 0 when no page is held.
    pub len: usize,
    /// The page's index in its file.
    pub index: u64,
    /// The frame the page is in: give it to `pc_page_optimistic_hinted` to
    /// find the page again without the index walk while it stays there
    /// (an index structure keeps it beside its child pointers). 0 for an
    /// anonymous page. (Added in ABI 10.)
    pub hint: u64,
    /// Private: what is held (0 when nothing is: releasing such a pin
    /// again is `-EINVAL`).
    pub held_: u64,
    /// Private to the library: the pin itself.
    pub private_: [u64; PC_PIN_PRIVATE_WORDS],
}

/// The most pages a `pc_run` holds.
pub const PC_RUN_MAX: usize = 16;

/// Words of private storage in a `pc_run`.
pub const PC_RUN_PRIVATE_WORDS: usize = 14;

/// Up to `PC_RUN_MAX` consecutive pages of one file, pinned together by
/// `pc_file_run` (one pin of their index leaf when they are cached) until
/// `pc_run_release`. Caller-owned, like `pc_pin`; only one copy may be
/// released.
#[repr(C)]
#[derive(Debug)]
pub struct pc_run {
    /// `pages[k]` is page `start + k`'s bytes (`page_size` of them,
    /// read-only) for `k < count`; the rest are NULL.
    pub pages: [*const u8; PC_RUN_MAX],
    /// Pages held: 0 only at or past end of file.
    pub count: usize,
    /// The page size in bytes.
    pub page_size: usize,
    /// The first page's index.
    pub start: u64,
    /// 1 if one pin of the index leaf holds the pages (they were cached),
    /// 0 if each has its own pin (some had to be read).
    pub one_pin: u32,
    /// Private: padding.
    pub pad_: u32,
    /// Private: whether a run is held (0 when not: releasing again is
    /// `-EINVAL`).
    pub held_: u64,
    /// Private to the library: the run itself.
    pub private_: [u64; PC_RUN_PRIVATE_WORDS],
}

struct StoredRun {
    #[allow(dead_code)]
    run: PageRun<'static>,
    file: *const pc_file,
}

/// `pc_run::held_` while a run is stored.
const HELD_RUN: u64 = 0x7063_5255_4e5f_5f21; // "pcRUN__!"

const _: () = assert!(
    std::mem::size_of::<StoredRun>() <= PC_RUN_PRIVATE_WORDS * 8
        && std::mem::align_of::<StoredRun>() <= 8
);

/// Words of private storage in a `pc_pin`.
pub const PC_PIN_PRIVATE_WORDS: usize = 10;

/// Words of private storage in a `pc_optimistic`.
pub const PC_OPTIMISTIC_PRIVATE_WORDS: usize = 8;

/// Bytes of readable zeros mapped after a cache's last frame (anonymous
/// regions share the frames): a reader of `pc_optimistic::data` that goes
/// past the page through a torn offset, before its validation fails,
/// reads zeros there instead of faulting (any 16-bit offset plus a small
/// read past the last page lands in them).
pub const PC_ARENA_SLACK: usize = 65536;

const _: () = assert!(PC_ARENA_SLACK == pagecache::ARENA_SLACK);

/// An optimistic view of a cached page (`pc_page_optimistic`): no pin, no
/// shared write. Read the page's bytes through `data` (they may be
/// changing: copy what you need, trust none of it, never follow a value
/// read as a pointer or an unchecked offset), then call
/// `pc_optimistic_validate` (or its inline form, `pc_optimistic_valid`): 1
/// means nothing changed the page since the view was taken, so what you
/// read is a consistent snapshot. A view holds nothing: there is no
/// release. It stays usable (validate, upgrade) until its file is closed;
/// `data` stays readable memory for the cache's life.
#[repr(C)]
#[derive(Debug)]
pub struct pc_optimistic {
    /// The page's bytes (`len` of them), read-only, possibly changing.
    pub data: *const u8,
    /// The page size in bytes.
    pub len: usize,
    /// The page's index in its file.
    pub index: u64,
    /// The frame the page is in (see `pc_pin::hint`). (Added in ABI 10.)
    pub hint: u64,
    /// Private, read by `pc_optimistic_valid`: the frame's state word.
    pub state_: *const u64,
    /// Private, read by `pc_optimistic_valid`: the frame's version.
    pub version_word_: *const u64,
    /// Private, read by `pc_optimistic_valid`: the version the view was
    /// taken at.
    pub version_: u64,
    /// Private: `PC_OPTIMISTIC_HELD` while the struct holds a view.
    pub held_: u64,
    /// Private to the library: the view itself.
    pub private_: [u64; PC_OPTIMISTIC_PRIVATE_WORDS],
}

/// What a `pc_optimistic`'s private words hold.
struct StoredView {
    view: pagecache::Optimistic<'static>,
    file: *const pc_file,
}

/// `pc_optimistic::held_` while a view is stored ("pcVIEW_!").
pub const PC_OPTIMISTIC_HELD: u64 = 0x7063_5649_4557_5f21;

/// The bit of a frame's state word that `pc_optimistic_valid` tests: set
/// while the frame holds a page that truncate or discard removed.
pub const PC_STATE_REMOVED: u64 = 0x0080_0000_0000;

const _: () = assert!(PC_STATE_REMOVED == pagecache::internals::STATE_REMOVED);

const _: () = assert!(
    std::mem::size_of::<StoredView>() <= PC_OPTIMISTIC_PRIVATE_WORDS * 8
        && std::mem::align_of::<StoredView>() <= 8
);

/// A cache: a memory budget of page frames shared by its files.
#[derive(Debug)]
pub struct pc_cache {
    cache: PageCache,
}

/// An open file of a cache.
#[derive(Debug)]
pub struct pc_file {
    file: File,
    /// Pins and latches held through this handle: close refuses while any
    /// is held.
    pins: PinCount,
}

/// An anonymous region: pages of a cache's budget that belong to no file,
/// zero-filled on first touch, written nowhere (`pc_anon_new`).
#[derive(Debug)]
pub struct pc_anon {
    region: AnonRegion,
    /// Pins and latches held in it: `pc_anon_free` refuses while any is.
    pins: PinCount,
}

/// What a `pc_pin`'s private words hold, in place.
enum Held {
    Pin(PageRef<'static>),
    Latch(PageMut<'static>),
    AnonPin(AnonRef<'static>),
    AnonLatch(AnonMut<'static>),
}

struct Stored {
    held: Held,
    /// The count of the handle (`pc_file` or `pc_anon`) it was taken
    /// through.
    pins: *const PinCount,
}

/// `pc_pin::held_` values: a pin or a latch is stored (anything else, 0
/// included, is not a held page).
const HELD_PIN: u64 = 0x7063_5049_4e5f_5245; // "pcPIN_RE"
const HELD_LATCH: u64 = 0x7063_4c41_5443_4821; // "pcLATCH!"

// The stored pin fits the private words and their alignment.
const _: () = assert!(
    std::mem::size_of::<Stored>() <= PC_PIN_PRIVATE_WORDS * 8
        && std::mem::align_of::<Stored>() <= 8
);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// An error: its message for `pc_last_error`, its number returned negated.
fn fail(e: &io::Error) -> c_int {
    set_last_error(e.to_string());
    -pagecache::errno(e)
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Runs `f`, turning its error or panic into a negative errno.
fn guard(what: &str, f: impl FnOnce() -> io::Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => fail(&e),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("{what}: internal error (panic): {msg}"));
            -libc::EIO
        }
    }
}

/// `p` as a reference, or `EINVAL` naming the argument.
///
/// # Safety
/// `p` is null or points to a live `T` (the caller's contract).
unsafe fn arg<'a, T>(p: *const T, what: &str, name: &str) -> io::Result<&'a T> {
    // SAFETY: the caller's contract: null or valid.
    unsafe { p.as_ref() }.ok_or_else(|| invalid(format!("{what}: {name} is NULL")))
}

fn out<T>(p: *mut T, what: &str, name: &str) -> io::Result<*mut T> {
    if p.is_null() {
        Err(invalid(format!("{what}: {name} is NULL")))
    } else {
        Ok(p)
    }
}

/// The message of the calling thread's last error: a NUL-terminated string
/// valid until this thread's next failing call (empty if none failed).
/// Never NULL.
#[no_mangle]
pub extern "C" fn pc_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// The `PC_ABI_VERSION` this library was built with: compare it with the
/// header's to catch a stale library.
#[no_mangle]
pub extern "C" fn pc_abi_version() -> u32 {
    PC_ABI_VERSION
}

/// Fills `*config` with the defaults (256 MiB, 4 KiB pages, direct I/O,
/// automatic engine, 2 MiB readahead, dirty thresholds 10% and 30%).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_config_default(config: *mut pc_config) -> c_int {
    guard("pc_config_default", || {
        let d = Config::default();
        let c = out(config, "pc_config_default", "config")?;
        // SAFETY: non-null, and the caller's contract: it points to a
        // writable pc_config.
        unsafe {
            c.write(pc_config {
                capacity: d.capacity as u64,
                page_size: d.page_size as u32,
                direct_io: d.direct_io as u32,
                io_engine: PC_IO_AUTO,
                io_threads: d.io_threads as u32,
                readahead_max: d.readahead_max as u64,
                dirty_background_percent: d.dirty_background_percent,
                dirty_limit_percent: d.dirty_limit_percent,
                stable_writes: d.stable_writes as u32,
                populate: d.populate as u32,
                stream_reads: match d.stream_reads {
                    StreamReads::Direct => PC_STREAM_DIRECT,
                    StreamReads::Buffered => PC_STREAM_BUFFERED,
                    StreamReads::Measure => PC_STREAM_MEASURE,
                },
                dirty_expire_ms: u32::try_from(d.dirty_expire.as_millis()).unwrap_or(u32::MAX),
            })
        };
        Ok(())
    })
}

fn to_config(c: &pc_config) -> io::Result<Config> {
    let size = |v: u64, name: &str| {
        usize::try_from(v).map_err(|_| invalid(format!("pc_cache_new: {name} {v} is too large")))
    };
    Ok(Config {
        capacity: size(c.capacity, "capacity")?,
        page_size: c.page_size as usize,
        direct_io: c.direct_io != 0,
        io_engine: match c.io_engine {
            PC_IO_AUTO => IoEngine::Auto,
            PC_IO_URING => IoEngine::Uring,
            PC_IO_THREADS => IoEngine::Threads,
            n => {
                return Err(invalid(format!(
                    "pc_cache_new: io_engine {n} is not a PC_IO_* value"
                )))
            }
        },
        io_threads: c.io_threads as usize,
        readahead_max: size(c.readahead_max, "readahead_max")?,
        dirty_background_percent: c.dirty_background_percent,
        dirty_limit_percent: c.dirty_limit_percent,
        dirty_expire: match c.dirty_expire_ms {
            u32::MAX => std::time::Duration::MAX,
            ms => std::time::Duration::from_millis(ms.into()),
        },
        stable_writes: c.stable_writes != 0,
        populate: c.populate != 0,
        stream_reads: match c.stream_reads {
            PC_STREAM_DIRECT => StreamReads::Direct,
            PC_STREAM_BUFFERED => StreamReads::Buffered,
            PC_STREAM_MEASURE => StreamReads::Measure,
            n => {
                return Err(invalid(format!(
                    "pc_cache_new: stream_reads {n} is not a PC_STREAM_* value"
                )))
            }
        },
        ..Config::default()
    })
}

/// Creates a cache (`config` NULL: the defaults) and stores it in `*out`.
/// Allocates the whole budget's address space up front (memory is touched
/// as pages are used). `-EINVAL` for a bad configuration, with the reason.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_new(
    config: *const pc_config,
    out_cache: *mut *mut pc_cache,
) -> c_int {
    guard("pc_cache_new", || {
        let o = out(out_cache, "pc_cache_new", "out")?;
        // SAFETY: null or a valid pc_config (the caller's contract).
        let cfg = match unsafe { config.as_ref() } {
            Some(c) => to_config(c)?,
            None => Config::default(),
        };
        let cache = PageCache::new(cfg)?;
        // SAFETY: non-null; the caller's contract: writable.
        unsafe { o.write(Box::into_raw(Box::new(pc_cache { cache }))) };
        Ok(())
    })
}

/// Frees a cache handle (NULL: nothing). Files still open keep working,
/// and the cache's memory and threads go when the last of them closes.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_free(cache: *mut pc_cache) -> c_int {
    guard("pc_cache_free", || {
        if !cache.is_null() {
            // SAFETY: from pc_cache_new, not freed before (the contract).
            drop(unsafe { Box::from_raw(cache) });
        }
        Ok(())
    })
}

/// Fills `*stats` with a snapshot of the cache's counters.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_stats(cache: *const pc_cache, stats: *mut pc_stats) -> c_int {
    guard("pc_cache_stats", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_cache_stats", "cache") }?.cache;
        let o = out(stats, "pc_cache_stats", "stats")?;
        let s = c.stats();
        // SAFETY: non-null, writable (the contract).
        unsafe {
            o.write(pc_stats {
                hits: s.hits,
                misses: s.misses,
                reads: s.reads,
                writes: s.writes,
                writebacks: s.writebacks,
                evictions: s.evictions,
                read_errors: s.read_errors,
                write_errors: s.write_errors,
                async_reads: s.async_reads,
                readahead_pages: s.readahead_pages,
                prefetch_pages: s.prefetch_pages,
                direct_files: s.direct_files,
                buffered_files: s.buffered_files,
                dirty_pages: c.dirty_pages() as u64,
                frames: c.frames() as u64,
                free_frames: c.free_frames() as u64,
                streamed_pages: s.streamed_pages,
            })
        };
        Ok(())
    })
}

/// Stores in `out[0..n]` what `PC_STREAM_MEASURE` chose so far (one entry
/// per device whose measurement is complete, by device number) and in
/// `*count` how many there are (may be more than `n`: call again with a
/// larger array). `out` may be NULL when `n` is 0.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// `out` has room for `n` entries; handles come from this library and are
/// not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_stream_choices(
    cache: *const pc_cache,
    out_choices: *mut pc_stream_choice,
    n: usize,
    count: *mut usize,
) -> c_int {
    guard("pc_cache_stream_choices", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_cache_stream_choices", "cache") }?.cache;
        let cnt = out(count, "pc_cache_stream_choices", "count")?;
        let choices = c.stream_choices();
        if n > 0 {
            let o = out(out_choices, "pc_cache_stream_choices", "out")?;
            for (i, ch) in choices.iter().take(n).enumerate() {
                // SAFETY: `out` has room for `n` entries (the contract).
                unsafe {
                    o.add(i).write(pc_stream_choice {
                        device: ch.device,
                        buffered: ch.buffered as u32,
                        direct_rate: ch.direct_rate,
                        buffered_rate: ch.buffered_rate,
                    })
                };
            }
        }
        // SAFETY: non-null, writable (the contract).
        unsafe { cnt.write(choices.len()) };
        Ok(())
    })
}

/// Drops the cached pages of files at `path` that no handle has open
/// (kept because their last close failed to write them back), without
/// writing them, and closes their descriptors; stores how many files in
/// `*forgotten` (may be NULL). For a temporary file, or one deleted since.
/// Blocks until no write-back of a dropped page is in flight.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_forget(
    cache: *const pc_cache,
    path: *const c_char,
    forgotten: *mut usize,
) -> c_int {
    guard("pc_cache_forget", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_cache_forget", "cache") }?.cache;
        if path.is_null() {
            return Err(invalid("pc_cache_forget: path is NULL"));
        }
        // SAFETY: non-null and NUL-terminated (the contract).
        let p = std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes());
        let n = c.forget(p);
        if !forgotten.is_null() {
            // SAFETY: non-null, writable (the contract).
            unsafe { forgotten.write(n) };
        }
        Ok(())
    })
}

/// Stores the cache's page size in `*page_size`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_page_size(
    cache: *const pc_cache,
    page_size: *mut usize,
) -> c_int {
    guard("pc_cache_page_size", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_cache_page_size", "cache") }?.cache;
        let o = out(page_size, "pc_cache_page_size", "page_size")?;
        // SAFETY: non-null, writable (the contract).
        unsafe { o.write(c.page_size()) };
        Ok(())
    })
}

/// Opens `path` (NUL-terminated) through the cache with `flags` (`PC_READ`,
/// `PC_WRITE`, `PC_CREATE`, `PC_TRUNCATE`, `PC_CREATE_NEW`) and stores the
/// handle in `*out`. Handles of one file share its cached pages. May block
/// (opens the file).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_open(
    cache: *const pc_cache,
    path: *const c_char,
    flags: u32,
    out_file: *mut *mut pc_file,
) -> c_int {
    guard("pc_file_open", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_file_open", "cache") }?.cache;
        let o = out(out_file, "pc_file_open", "out")?;
        if path.is_null() {
            return Err(invalid("pc_file_open: path is NULL"));
        }
        let all = PC_READ | PC_WRITE | PC_CREATE | PC_TRUNCATE | PC_CREATE_NEW;
        if flags & !all != 0 {
            return Err(invalid(format!(
                "pc_file_open: unknown flags {:#x}",
                flags & !all
            )));
        }
        // SAFETY: non-null and NUL-terminated (the contract).
        let p = std::ffi::OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes());
        let file = c.open_with(
            p,
            OpenOptions::new()
                .read(flags & PC_READ != 0)
                .write(flags & PC_WRITE != 0)
                .create(flags & PC_CREATE != 0)
                .truncate(flags & PC_TRUNCATE != 0)
                .create_new(flags & PC_CREATE_NEW != 0),
        )?;
        let f = Box::new(pc_file {
            file,
            pins: PinCount::default(),
        });
        // SAFETY: non-null, writable (the contract).
        unsafe { o.write(Box::into_raw(f)) };
        Ok(())
    })
}

/// The file behind a handle, or `EINVAL`.
///
/// # Safety
/// `f` is null or from `pc_file_open`, not closed (the caller's contract).
unsafe fn file<'a>(f: *const pc_file, what: &str) -> io::Result<&'a pc_file> {
    // SAFETY: forwarded contract.
    unsafe { arg(f, what, "file") }
}

/// `buf`/`len` as a slice; a NULL `buf` is allowed only with `len` 0.
fn slice_len(buf: *const c_void, len: usize, what: &str) -> io::Result<()> {
    if buf.is_null() && len != 0 {
        return Err(invalid(format!("{what}: buf is NULL with len {len}")));
    }
    if len > isize::MAX as usize {
        return Err(invalid(format!("{what}: len {len} is too large")));
    }
    Ok(())
}

/// Reads up to `len` bytes at `offset` into `buf` and stores how many in
/// `*nread` (fewer than `len` only at end of file). Blocks on a miss (the
/// page's read) and while a writer holds a page it needs.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_read_at(
    file_: *const pc_file,
    buf: *mut c_void,
    len: usize,
    offset: u64,
    nread: *mut usize,
) -> c_int {
    guard("pc_file_read_at", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_read_at") }?;
        let o = out(nread, "pc_file_read_at", "nread")?;
        slice_len(buf, len, "pc_file_read_at")?;
        let b: &mut [u8] = if len == 0 {
            &mut []
        } else {
            // SAFETY: non-null, `len` writable bytes (the contract), at most
            // isize::MAX (checked).
            unsafe { std::slice::from_raw_parts_mut(buf.cast(), len) }
        };
        let n = f.file.read_at(b, offset)?;
        // SAFETY: non-null, writable (the contract).
        unsafe { o.write(n) };
        Ok(())
    })
}

/// Writes `len` bytes from `buf` at `offset`, all or an error (the file
/// grows if needed). Blocks on a partial page's read, while a holder has a
/// page it writes, and when too much of the cache is dirty (throttled).
/// The bytes reach the disk by `pc_file_sync`, background write-back or
/// eviction.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_write_at(
    file_: *const pc_file,
    buf: *const c_void,
    len: usize,
    offset: u64,
) -> c_int {
    guard("pc_file_write_at", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_write_at") }?;
        slice_len(buf, len, "pc_file_write_at")?;
        let b: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: non-null, `len` readable bytes (the contract).
            unsafe { std::slice::from_raw_parts(buf.cast(), len) }
        };
        f.file.write_at(b, offset)
    })
}

/// Stores the file's length in `*len`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_len(file_: *const pc_file, len: *mut u64) -> c_int {
    guard("pc_file_len", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_len") }?;
        let o = out(len, "pc_file_len", "len")?;
        // SAFETY: non-null, writable (the contract).
        unsafe { o.write(f.file.len()) };
        Ok(())
    })
}

/// Sets the file's length (cached pages past it are dropped; growing reads
/// as zeros). Blocks while pages past the new end are held.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_set_len(file_: *const pc_file, len: u64) -> c_int {
    guard("pc_file_set_len", || {
        // SAFETY: the contract.
        unsafe { file(file_, "pc_file_set_len") }?.file.set_len(len)
    })
}

/// Writes every dirty page of the file back, persists its length and
/// calls `fdatasync`. Returns 0 exactly when every page dirty at the call,
/// and the length, are on disk; an earlier write-back failure whose pages
/// this call wrote is not reported again (it went to the call that met
/// it, or to the statistics). Blocks for the I/O.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_sync(file_: *const pc_file) -> c_int {
    guard("pc_file_sync", || {
        // SAFETY: the contract.
        unsafe { file(file_, "pc_file_sync") }?.file.sync()
    })
}

/// `pc_writeback_fn` cause: eviction needs the page's frame (or the
/// flusher writes pages reclaim passed over).
pub const PC_WB_EVICTION: u32 = 0;
/// `pc_writeback_fn` cause: the background flusher (the page's age, or
/// the dirty count past its limit).
pub const PC_WB_BACKGROUND: u32 = 1;
/// `pc_writeback_fn` cause: `pc_file_sync` or `pc_file_close`.
pub const PC_WB_SYNC: u32 = 2;
/// `pc_writeback_fn` answer: write the page.
pub const PC_WB_WRITE: c_int = 0;
/// `pc_writeback_fn` answer: not now (the page stays dirty: eviction takes
/// another page, the flusher tries it later, a sync fails with `-EAGAIN`
/// naming it).
pub const PC_WB_DEFER: c_int = 1;

/// A write-back hook (`pc_file_set_writeback_hook`): called with the
/// registered `ctx` before every write-back of a page of the file, by
/// eviction, the flusher and sync alike, on the thread doing it, with
/// page `index`'s `len` bytes (unchanging until the write ends) and why
/// (`PC_WB_EVICTION`, `PC_WB_BACKGROUND`, `PC_WB_SYNC`). Returns
/// `PC_WB_WRITE` or `PC_WB_DEFER`; any other value defers. It must not
/// wait for a page of the same cache (a latch, or a pin of a page being
/// written) and must not call into the cache: it may run on a thread that
/// evicts for a write. Typically it reads the page's LSN from its bytes
/// and makes the log durable up to it.
pub type pc_writeback_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        index: u64,
        bytes: *const u8,
        len: usize,
        cause: u32,
    ) -> c_int,
>;

/// The context pointer of a C hook, passed back to it on any thread (the
/// caller's contract makes that sound).
struct HookCtx(*mut c_void);

impl HookCtx {
    /// The pointer (a method, so that closures capture the whole struct,
    /// not its non-`Send` field).
    fn get(&self) -> *mut c_void {
        self.0
    }
}
// SAFETY: `pc_file_set_writeback_hook`'s contract: `ctx` may be used from
// any thread while the hook is registered.
unsafe impl Send for HookCtx {}
// SAFETY: as above.
unsafe impl Sync for HookCtx {}

/// Registers `hook` with `ctx` as the file's write-back hook (for every
/// handle of the file), or removes it (`hook` NULL). While one is set,
/// write-back keeps the file's pages stable (a writer of a page waits for
/// its write in flight), so the bytes the hook approved are the bytes
/// written. (Added in ABI 10.)
///
/// # Safety
/// `file_` is NULL (`-EINVAL`) or a live handle of this library. `hook`,
/// if not NULL, may be called from any thread with `ctx` until it is
/// removed or replaced and, if the file then has dirty pages, until they
/// are written (or the cache is freed): `ctx` must stay valid that long.
#[no_mangle]
pub unsafe extern "C" fn pc_file_set_writeback_hook(
    file_: *const pc_file,
    hook: pc_writeback_fn,
    ctx: *mut c_void,
) -> c_int {
    guard("pc_file_set_writeback_hook", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_set_writeback_hook") }?;
        let h = hook.map(|h| {
            let ctx = HookCtx(ctx);
            WritebackHook::new(move |p: &WritebackPage<'_>| {
                let cause = match p.cause {
                    WritebackCause::Eviction => PC_WB_EVICTION,
                    WritebackCause::Background => PC_WB_BACKGROUND,
                    WritebackCause::Sync => PC_WB_SYNC,
                };
                // SAFETY: the caller's contract for `hook` and `ctx`; the
                // bytes are valid for the call.
                let r = unsafe { h(ctx.get(), p.index, p.bytes.as_ptr(), p.bytes.len(), cause) };
                if r == PC_WB_WRITE {
                    WritebackDecision::Write
                } else {
                    WritebackDecision::Defer
                }
            })
        });
        f.file.set_writeback_hook(h);
        Ok(())
    })
}

/// Starts reading the missing pages of `len` bytes at `offset` and returns
/// without waiting (errors surface when the pages are read).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_prefetch(file_: *const pc_file, offset: u64, len: u64) -> c_int {
    guard("pc_file_prefetch", || {
        // SAFETY: the contract.
        unsafe { file(file_, "pc_file_prefetch") }?
            .file
            .prefetch(offset, len)
    })
}

/// The handle back from a raw pointer when no pin is held through it.
///
/// # Safety
/// `f` is null or from `pc_file_open` and not closed.
unsafe fn take_file(f: *mut pc_file, what: &str) -> io::Result<Box<pc_file>> {
    // SAFETY: forwarded contract.
    let r = unsafe { file(f, what) }?;
    refuse_if_pinned(&r.pins, |n| {
        format!(
            "{what}: {}: {n} pinned or latched page(s) or run(s) still held through this handle: release them first",
            r.file.path().display()
        )
    })?;
    // SAFETY: from pc_file_open (the contract), and no pin borrows it.
    Ok(unsafe { Box::from_raw(f) })
}

/// Closes the handle: writes the file's dirty pages back (if it was the
/// last handle of the file) and reports a write-back error. The handle is
/// freed whatever the result, except for `-EBUSY` (pins, latches or runs
/// held through it, nothing done) and `-EINVAL`. Blocks for the I/O.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_close(file_: *mut pc_file) -> c_int {
    guard("pc_file_close", || {
        // SAFETY: the contract.
        let f = unsafe { take_file(file_, "pc_file_close") }?;
        f.file.close()
    })
}

/// Closes the handle without writing anything back: if it was the file's
/// last handle, every cached page of the file is dropped, dirty or not
/// (for temporary or deleted files). Stores in `*dropped` (may be NULL)
/// whether that happened. Blocks until no write-back of a dropped page is
/// in flight (none lands after it returns). `-EBUSY` while pins, latches
/// or runs are held through it.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_discard(file_: *mut pc_file, dropped: *mut c_int) -> c_int {
    guard("pc_file_discard", || {
        // SAFETY: the contract.
        let f = unsafe { take_file(file_, "pc_file_discard") }?;
        let d = f.file.discard();
        if !dropped.is_null() {
            // SAFETY: non-null, writable (the contract).
            unsafe { dropped.write(d as c_int) };
        }
        Ok(())
    })
}

/// A handle pins are taken through (`pc_file`, `pc_anon`): its count.
trait Pinned: 'static {
    fn pins(&self) -> &PinCount;
}

impl Pinned for pc_file {
    fn pins(&self) -> &PinCount {
        &self.pins
    }
}

impl Pinned for pc_anon {
    fn pins(&self) -> &PinCount {
        &self.pins
    }
}

/// Takes page `index` of the handle `h` (named `name` in errors) with
/// `get` into `*pin`, counted on the handle until `pc_pin_release`.
#[inline(always)]
fn hold<H: Pinned>(
    h: *const H,
    index: u64,
    pin: *mut pc_pin,
    what: &str,
    name: &str,
    get: impl FnOnce(&'static H) -> io::Result<Held>,
) -> io::Result<()> {
    // SAFETY: the contract: null or a live handle of this library.
    let r = unsafe { arg(h, what, name) }?;
    let p = out(pin, what, "pin")?;
    // SAFETY: the handle lives until its close or free, which refuses
    // while this pin is counted (module docs), so 'static is never
    // outlived.
    let held = get(unsafe { &*(r as *const H) })?;
    r.pins().add();
    store_pin(p, held, index, r.pins());
    Ok(())
}

/// `pc_file_close`'s, `pc_file_discard`'s and `pc_anon_free`'s check:
/// `-EBUSY` with `msg(n)` while `n` pins are held through the handle.
fn refuse_if_pinned(pins: &PinCount, msg: impl FnOnce(isize) -> String) -> io::Result<()> {
    // (Acquire inside: pairs with each release's decrement, so every
    // pin's drop happened before the caller frees the handle.)
    match pins.outstanding() {
        0 => Ok(()),
        n => Err(io::Error::new(io::ErrorKind::ResourceBusy, msg(n))),
    }
}

impl Held {
    /// The page's bytes (writable only through a latch).
    fn bytes(&mut self) -> (*mut u8, usize) {
        let ro = |b: &[u8]| (b.as_ptr() as *mut u8, b.len());
        match self {
            Held::Pin(r) => ro(r),
            Held::AnonPin(r) => ro(r),
            Held::Latch(m) => (m.as_mut_ptr(), m.len()),
            Held::AnonLatch(m) => (m.as_mut_ptr(), m.len()),
        }
    }
}

/// Writes a held page into `*p` (the caller counted it in `pins`).
#[inline(always)]
fn store_pin(p: *mut pc_pin, mut held: Held, index: u64, pins: &PinCount) {
    let (data, len) = held.bytes();
    let tag = match held {
        Held::Pin(_) | Held::AnonPin(_) => HELD_PIN,
        Held::Latch(_) | Held::AnonLatch(_) => HELD_LATCH,
    };
    let hint = match &held {
        Held::Pin(r) => r.frame_hint().into(),
        Held::Latch(m) => m.frame_hint().into(),
        Held::AnonPin(_) | Held::AnonLatch(_) => 0,
    };
    // Field by field into the caller's struct: no copy of it on the way
    // (the private words are left as they are past the `Stored`).
    // SAFETY: non-null, writable (the caller's contract); the private
    // words are large and aligned enough (asserted at compile time);
    // `pc_pin_release` reads the value back exactly once (it clears
    // `held_`). The page's bytes stay at `data` while it is held (frames
    // never move).
    unsafe {
        let p = &raw mut *p;
        (&raw mut (*p).data).write(data);
        (&raw mut (*p).len).write(len);
        (&raw mut (*p).index).write(index);
        (&raw mut (*p).hint).write(hint);
        (&raw mut (*p).held_).write(tag);
        (&raw mut (*p).private_)
            .cast::<Stored>()
            .write(Stored { held, pins });
    }
}

/// Pins page `index` of the file into `*pin`: `pin->data` points to its
/// `pin->len` bytes, read-only, unchanged and cached until
/// `pc_pin_release`. Bytes past the end of file read as zero. Blocks on a
/// miss and while a writer holds the page. `-ENXIO` past the last page.
/// A pin delays writers of the page and `pc_file_set_len` cutting it;
/// holding one while waiting for such a writer deadlocks.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_pin(file_: *const pc_file, index: u64, pin: *mut pc_pin) -> c_int {
    guard("pc_page_pin", || {
        hold(file_, index, pin, "pc_page_pin", "file", |f| {
            Ok(Held::Pin(f.file.page(index)?))
        })
    })
}

/// Latches page `index` for writing into `*pin`: `pin->data` is writable
/// by this holder alone until `pc_pin_release`, which marks the page
/// dirty. Waits until no one else pins or latches the page; others wait
/// for this latch. `-EACCES` through a read-only handle.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_latch(
    file_: *const pc_file,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_page_latch", || {
        hold(file_, index, pin, "pc_page_latch", "file", |f| {
            Ok(Held::Latch(f.file.page_mut(index)?))
        })
    })
}

/// Pins page `index` into `*pin` as `pc_page_pin` does, but never waits
/// for another holder: `-EAGAIN` (and `*pin` untouched) if a writer holds
/// the page or is reading it in. A miss is read (waits for the read
/// only). For index structures that hold other pages and must back off.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_try_pin(
    file_: *const pc_file,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_page_try_pin", || {
        hold(file_, index, pin, "pc_page_try_pin", "file", |f| {
            match f.file.try_pin(index)? {
                Some(p) => Ok(Held::Pin(p)),
                None => Err(would_wait(
                    "pc_page_try_pin",
                    f,
                    index,
                    "latched by another holder",
                )),
            }
        })
    })
}

/// Latches page `index` into `*pin` as `pc_page_latch` does, but never
/// waits for another holder: `-EAGAIN` (and `*pin` untouched) if another
/// thread latches or pins the page, or a run holds it. A miss is read.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_try_latch(
    file_: *const pc_file,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_page_try_latch", || {
        hold(
            file_,
            index,
            pin,
            "pc_page_try_latch",
            "file",
            |f| match f.file.try_latch(index)? {
                Some(m) => Ok(Held::Latch(m)),
                None => Err(would_wait(
                    "pc_page_try_latch",
                    f,
                    index,
                    "pinned or latched by another holder",
                )),
            },
        )
    })
}

/// Latches a new page at `index` that nobody has written into `*pin`: at
/// or past the end of file, or in a hole past every byte that may be on
/// disk and not cached (another thread's `pc_page_new` of a later page, or
/// `pc_file_set_len`, grew the file over it; since ABI 10). Zeroed,
/// writable, dirty when released (even by `pc_latch_release_clean`); the
/// file grows to cover it at once, with no read and no system call.
/// `-EEXIST` if the page is cached (another thread created it first) or
/// its bytes may be on disk (below the file's length when it was opened,
/// or written back since), `-EACCES` through a read-only handle.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_new(file_: *const pc_file, index: u64, pin: *mut pc_pin) -> c_int {
    guard("pc_page_new", || {
        hold(file_, index, pin, "pc_page_new", "file", |f| {
            Ok(Held::Latch(f.file.page_new(index)?))
        })
    })
}

/// The `pc_optimistic` of view `o` of page `index`, taken through `r`.
fn view_out(o: pagecache::Optimistic<'static>, index: u64, r: *const pc_file) -> pc_optimistic {
    let (state, version_word, version) = o.validation_words();
    let mut out = pc_optimistic {
        data: o.as_ptr(),
        len: o.len(),
        index,
        hint: o.frame_hint().into(),
        state_: state,
        version_word_: version_word,
        version_: version,
        held_: PC_OPTIMISTIC_HELD,
        private_: [0; PC_OPTIMISTIC_PRIVATE_WORDS],
    };
    // SAFETY: large and aligned enough (asserted at compile time). A view
    // has no destructor, so copies and overwrites leak nothing.
    unsafe {
        out.private_
            .as_mut_ptr()
            .cast::<StoredView>()
            .write(StoredView { view: o, file: r })
    };
    out
}

/// As `pc_page_optimistic`, first trying frame `hint` (a `pc_pin::hint` or
/// `pc_optimistic::hint` of the same page from earlier): while the page is
/// still in that frame the view is taken without the index walk (two
/// dependent loads fewer); otherwise, or for a hint that is no frame, as
/// `pc_page_optimistic`. A wrong hint costs a look, never a wrong page.
/// (Added in ABI 10.)
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_optimistic_hinted(
    file_: *const pc_file,
    index: u64,
    hint: u64,
    view: *mut pc_optimistic,
) -> c_int {
    guard("pc_page_optimistic_hinted", || {
        // SAFETY: the contract.
        unsafe { take_view(file_, index, Some(hint), view, "pc_page_optimistic_hinted") }
    })
}

/// `pc_page_optimistic` and `pc_page_optimistic_hinted`: a view of page
/// `index` into `*view`, first through frame `hint` if given.
///
/// # Safety
/// As theirs.
unsafe fn take_view(
    file_: *const pc_file,
    index: u64,
    hint: Option<u64>,
    view: *mut pc_optimistic,
    what: &str,
) -> io::Result<()> {
    // SAFETY: the contract: null or a live handle of this library.
    let r = unsafe { arg(file_, what, "file") }?;
    let v = out(view, what, "view")?;
    // SAFETY: the view borrows the handle, which the caller must not close
    // while it uses the view (`pc_optimistic`'s contract).
    let f: &'static pc_file = unsafe { &*(r as *const pc_file) };
    let hinted = hint
        .and_then(|h| u32::try_from(h).ok())
        .and_then(|h| f.file.optimistic_hinted(index, h));
    let o = match hinted {
        Some(o) => o,
        None => f.file.optimistic(index)?,
    };
    let out = view_out(o, index, r);
    // SAFETY: non-null, writable (the contract).
    unsafe { v.write(out) };
    Ok(())
}

/// Takes an optimistic view of page `index` into `*view` (see
/// `pc_optimistic`): on a cached page no pin and no shared write (the
/// page's accessed bit only when clear); a miss reads the page in first,
/// and a page being written is waited for. `-ENXIO` past the last page.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_optimistic(
    file_: *const pc_file,
    index: u64,
    view: *mut pc_optimistic,
) -> c_int {
    guard("pc_page_optimistic", || {
        // SAFETY: the contract.
        unsafe { take_view(file_, index, None, view, "pc_page_optimistic") }
    })
}

/// The view stored in `*view`, or `-EINVAL`.
///
/// # Safety
/// `view` is NULL or points to a `pc_optimistic`.
unsafe fn stored_view<'a>(view: *const pc_optimistic, what: &str) -> io::Result<&'a StoredView> {
    // SAFETY: the caller's contract.
    let v = unsafe { arg(view, what, "view") }?;
    if v.held_ != PC_OPTIMISTIC_HELD {
        return Err(invalid(format!(
            "{what}: not a view taken by pc_page_optimistic"
        )));
    }
    // SAFETY: `held_` says `pc_page_optimistic` stored a `StoredView`.
    Ok(unsafe { &*v.private_.as_ptr().cast::<StoredView>() })
}

/// 1 if nothing changed the page since `*view` was taken (what the caller
/// read through `view->data` before this call is a consistent snapshot),
/// 0 if something did (restart): a writer, the frame's reuse, or a
/// truncate that cut the page off (even one the file has since grown back
/// over), `-EINVAL` for NULL or a struct that holds
/// no view. Writes nothing shared. Reads must come before the call: the
/// call orders them (an acquire fence) before its re-check.
///
/// # Safety
/// `view` is NULL or points to a `pc_optimistic`; the view's file is not
/// closed.
#[no_mangle]
pub unsafe extern "C" fn pc_optimistic_validate(view: *const pc_optimistic) -> c_int {
    // SAFETY: the contract.
    match unsafe { stored_view(view, "pc_optimistic_validate") } {
        Ok(s) => s.view.validate() as c_int,
        Err(e) => fail(&e),
    }
}

/// Latches the viewed page into `*pin` (as `pc_page_latch`) if and only if
/// nothing changed it since `*view` was taken; else `-EAGAIN`: restart. Of
/// two upgrades racing, at most one succeeds; waits for pins of the page
/// to drain, never for another latch holder. `-EACCES` through a read-only
/// handle. The view stays in `*view` (it will no longer validate once the
/// page is changed).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above; the
/// view's file is not closed.
#[no_mangle]
pub unsafe extern "C" fn pc_optimistic_upgrade(
    view: *const pc_optimistic,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_optimistic_upgrade", || {
        // SAFETY: the contract.
        let s = unsafe { stored_view(view, "pc_optimistic_upgrade") }?;
        let index = s.view.index();
        let o = s.view.clone();
        hold(s.file, index, pin, "pc_optimistic_upgrade", "file", |f| {
            o.upgrade().map(Held::Latch).map_err(|e| {
                if e.kind() == io::ErrorKind::Interrupted {
                    would_wait(
                        "pc_optimistic_upgrade",
                        f,
                        index,
                        "changed since the view was taken: restart",
                    )
                } else {
                    e
                }
            })
        })
    })
}

/// `-EAGAIN`'s error: `what` of page `index` of `f` would have waited.
fn would_wait(what: &str, f: &pc_file, index: u64, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("{what}: {}: page {index} {why}", f.file.path().display()),
    )
}

/// Releases a pinned or latched page and clears `*pin` (`data` NULL). A
/// latched page is marked dirty (see `pc_latch_release_clean`).
/// Releasing a cleared pin again is `-EINVAL` (a copy of the struct
/// released twice cannot be detected: don't).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_pin_release(pin: *mut pc_pin) -> c_int {
    guard("pc_pin_release", || {
        release_held(pin, "pc_pin_release", true)
    })
}

/// Releases a latch whose bytes the holder did not change: the page is
/// not marked dirty (it stays clean if it was). Also releases a pin, as
/// `pc_pin_release` does. Writing through `pin->data` and then releasing
/// with this call loses the write at the page's eviction: don't.
///
/// # Safety
/// As `pc_pin_release`.
#[no_mangle]
pub unsafe extern "C" fn pc_latch_release_clean(pin: *mut pc_pin) -> c_int {
    guard("pc_latch_release_clean", || {
        release_held(pin, "pc_latch_release_clean", false)
    })
}

/// `pc_pin_release` and `pc_latch_release_clean`: `dirty` marks a latched
/// file page dirty.
#[inline(always)]
fn release_held(pin: *mut pc_pin, what: &str, dirty: bool) -> io::Result<()> {
    let p = out(pin, what, "pin")?;
    // SAFETY: non-null, a pc_pin (the contract).
    let pin = unsafe { &mut *p };
    if pin.held_ != HELD_PIN && pin.held_ != HELD_LATCH {
        return Err(invalid(format!(
            "{what}: no page held (page {} released already, or never pinned)",
            pin.index
        )));
    }
    // SAFETY: `held_` says `hold` stored a `Stored` there, and it is
    // cleared below, so this is its only read.
    let mut stored = unsafe { pin.private_.as_ptr().cast::<Stored>().read() };
    pin.held_ = 0;
    pin.data = std::ptr::null_mut();
    pin.len = 0;
    let pins = stored.pins;
    if let (Held::Latch(m), true) = (&mut stored.held, dirty) {
        m.mark_dirty();
    }
    drop(stored.held);
    // SAFETY: the handle is alive: its close or free refuses while
    // this pin counts.
    unsafe { &*pins }.sub();
    Ok(())
}

/// Pins up to `max` consecutive pages from `start` (at most `PC_RUN_MAX`)
/// into `*run`: `run->pages[k]` points to page `start + k`, read-only,
/// unchanged and cached until `pc_run_release`. Cached pages are held by
/// one pin of their index leaf (two atomic operations for the whole run,
/// `run->one_pin` is 1); the run then ends at the first page not cached
/// and idle. When `start` is not cached, the pages up to `max` are read
/// and each pinned (`one_pin` 0). A run never crosses a multiple of 64
/// pages, and `count` is 0 only at or past end of file (release it all the
/// same). Like pins, a run delays writers of its pages: holding one while
/// waiting for such a writer deadlocks.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_run(
    file_: *const pc_file,
    start: u64,
    max: usize,
    run: *mut pc_run,
) -> c_int {
    guard("pc_file_run", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_run") }?;
        let out = out(run, "pc_file_run", "run")?;
        // SAFETY: the handle lives until close, and close refuses while
        // this run is counted (module docs), so 'static is never outlived.
        let fs: &'static pc_file = unsafe { &*(f as *const pc_file) };
        let r = fs.file.run(start, max.min(PC_RUN_MAX))?;
        f.pins.add();
        let mut v = pc_run {
            pages: [std::ptr::null(); PC_RUN_MAX],
            count: r.len(),
            page_size: fs.file.page_size(),
            start,
            one_pin: r.one_pin() as u32,
            pad_: 0,
            held_: HELD_RUN,
            private_: [0; PC_RUN_PRIVATE_WORDS],
        };
        for (k, p) in r.iter().enumerate() {
            v.pages[k] = p.as_ptr();
        }
        // SAFETY: the private words are large and aligned enough (asserted
        // at compile time); `pc_run_release` reads the value back exactly
        // once (it clears `held_`). Frames never move, so `pages` stay
        // valid while the run is held.
        unsafe {
            v.private_
                .as_mut_ptr()
                .cast::<StoredRun>()
                .write(StoredRun { run: r, file: f })
        };
        // SAFETY: non-null, writable (the contract).
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Releases a run and clears `*run` (`count` 0, `pages` NULL). Releasing a
/// cleared run again is `-EINVAL`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_run_release(run: *mut pc_run) -> c_int {
    guard("pc_run_release", || {
        let p = out(run, "pc_run_release", "run")?;
        // SAFETY: non-null, a pc_run (the contract).
        let run = unsafe { &mut *p };
        if run.held_ != HELD_RUN {
            return Err(invalid(format!(
                "pc_run_release: no run held (run from page {} released already, or never taken)",
                run.start
            )));
        }
        // SAFETY: `held_` says `pc_file_run` stored a `StoredRun` there,
        // and it is cleared below, so this is its only read.
        let stored = unsafe { run.private_.as_ptr().cast::<StoredRun>().read() };
        run.held_ = 0;
        run.count = 0;
        run.pages = [std::ptr::null(); PC_RUN_MAX];
        let f = stored.file;
        drop(stored.run);
        // SAFETY: the file is alive: close refuses while this run counts.
        unsafe { &*f }.pins.sub();
        Ok(())
    })
}

/// Creates an anonymous region of `len` bytes (spanning whole pages) from
/// the cache's budget into `*region`: pages that belong to no file,
/// zero-filled on first touch, never written anywhere (scratch memory, a
/// hash table's buckets). Touched pages count against the capacity until
/// freed; they are never evicted. `-ENOMEM` when a first touch finds every
/// frame pinned, latched or anonymous.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_new(
    cache: *const pc_cache,
    len: u64,
    region: *mut *mut pc_anon,
) -> c_int {
    guard("pc_anon_new", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_anon_new", "cache") }?.cache;
        let out = out(region, "pc_anon_new", "region")?;
        let r = Box::new(pc_anon {
            region: c.anon(len)?,
            pins: PinCount::default(),
        });
        // SAFETY: non-null, writable (the contract).
        unsafe { out.write(Box::into_raw(r)) };
        Ok(())
    })
}

/// Frees the region and returns its frames to the cache. `-EBUSY` (and
/// nothing done) while pages of it are pinned or latched.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_free(region: *mut pc_anon) -> c_int {
    guard("pc_anon_free", || {
        // SAFETY: the contract: null or from pc_anon_new.
        let r = unsafe { arg(region, "pc_anon_free", "region") }?;
        refuse_if_pinned(&r.pins, |n| {
            format!("pc_anon_free: {n} page(s) of the region still pinned or latched: release them first")
        })?;
        // SAFETY: from pc_anon_new (the contract), and no pin borrows it.
        drop(unsafe { Box::from_raw(region) });
        Ok(())
    })
}

/// Stores the region's length in bytes (as created) in `*len`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_len(region: *const pc_anon, len: *mut u64) -> c_int {
    guard("pc_anon_len", || {
        // SAFETY: the contract.
        let r = unsafe { arg(region, "pc_anon_len", "region") }?;
        let out = out(len, "pc_anon_len", "len")?;
        // SAFETY: non-null, writable (the contract).
        unsafe { out.write(r.region.len()) };
        Ok(())
    })
}

/// Pins page `index` of the region into `*pin` (read-only; zeros if never
/// written) until `pc_pin_release`. Blocks while a latch holder has it.
/// `-ENXIO` past the region's end.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_pin(
    region: *const pc_anon,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_anon_pin", || {
        hold(region, index, pin, "pc_anon_pin", "region", |r| {
            Ok(Held::AnonPin(r.region.page(index)?))
        })
    })
}

/// Latches page `index` of the region for writing into `*pin` (writable by
/// this holder alone until `pc_pin_release`). Waits until no one else pins
/// or latches the page.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_latch(
    region: *const pc_anon,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_anon_latch", || {
        hold(region, index, pin, "pc_anon_latch", "region", |r| {
            Ok(Held::AnonLatch(r.region.page_mut(index)?))
        })
    })
}

/// Frees pages `start..end` of the region (clamped to it): their frames go
/// back to the cache now, or when their last pin is released; they read
/// as zeros when touched again. Never blocks.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_release_pages(
    region: *const pc_anon,
    start: u64,
    end: u64,
) -> c_int {
    guard("pc_anon_release_pages", || {
        // SAFETY: the contract.
        let r = unsafe { arg(region, "pc_anon_release_pages", "region") }?;
        r.region.free(start..end);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_returned_as_eio_with_its_message() {
        let rc = guard("pc_test", || panic!("boom at page 7"));
        assert_eq!(rc, -libc::EIO);
        // SAFETY: pc_last_error never returns NULL, and the string lives
        // until this thread's next failure.
        let msg = unsafe { CStr::from_ptr(pc_last_error()) }.to_str().unwrap();
        assert!(
            msg.contains("pc_test") && msg.contains("boom at page 7"),
            "{msg}"
        );
    }

    #[test]
    fn an_error_is_its_negated_errno_with_its_message() {
        let rc = guard("pc_test", || {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        });
        assert_eq!(rc, -libc::ENOSPC);
        let rc = guard("pc_test", || {
            Err(io::Error::new(io::ErrorKind::InvalidInput, "bad\0nul"))
        });
        assert_eq!(rc, -libc::EINVAL);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(pc_last_error()) }.to_str().unwrap();
        assert_eq!(msg, "bad nul"); // an interior NUL cannot cut the message
    }
}
