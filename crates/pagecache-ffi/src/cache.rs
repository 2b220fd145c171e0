//! `pc_cache`: a cache's creation, statistics, stream choices and teardown.

use crate::config::{pc_config, to_config};
use crate::error::{arg, guard, invalid, out};
use pagecache::{Config, PageCache, PolicyKind, SharedOptions};
use std::ffi::{c_char, c_int, CStr};
use std::os::unix::ffi::OsStrExt;

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

/// A cache: a memory budget of page frames shared by its files.
#[derive(Debug)]
pub struct pc_cache {
    pub(crate) cache: PageCache,
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

/// Creates or attaches to the cache shared by processes under `name` (a
/// NUL-terminated name of letters, digits, `-`, `_` and `.`), with its
/// segment in `dir` (NULL: `/dev/shm`), and stores it in `*out`. Created
/// as `config` says (NULL: the defaults) if no process has made it yet,
/// readable and writable by this user only; else attached to, and then
/// `config`'s capacity and page size must be its creator's (`-EINVAL`
/// naming both otherwise). Every process that opens the same file
/// through it shares one copy of the file's pages. Shared caches use the
/// CLOCK policy. Free it with `pc_cache_free` as any cache (the segment
/// stays for other processes; `pc_cache_remove_shared` removes it once
/// none is attached). (Added in ABI 15.)
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`, but `config` and `dir`) or valid
/// as described above.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_open_shared(
    name: *const c_char,
    dir: *const c_char,
    config: *const pc_config,
    out_cache: *mut *mut pc_cache,
) -> c_int {
    guard("pc_cache_open_shared", || {
        let o = out(out_cache, "pc_cache_open_shared", "out")?;
        // SAFETY: null or NUL-terminated (the contract).
        let (name, dir) = unsafe { name_and_dir(name, dir, "pc_cache_open_shared") }?;
        // SAFETY: null or a valid pc_config (the caller's contract).
        let cfg = match unsafe { config.as_ref() } {
            Some(c) => to_config(c)?,
            None => Config::default(),
        };
        let cfg = Config {
            policy: PolicyKind::Clock,
            ..cfg
        };
        let cache = PageCache::shared_with(&name, cfg, &SharedOptions { dir, group: None })?;
        // SAFETY: non-null; the caller's contract: writable.
        unsafe { o.write(Box::into_raw(Box::new(pc_cache { cache }))) };
        Ok(())
    })
}

/// Removes the shared cache `name` from `dir` (NULL: `/dev/shm`) if no
/// live process is attached to it (`-EBUSY` naming them otherwise,
/// `-ENOENT` if there is none). (Added in ABI 15.)
///
/// # Safety
/// `name` is NUL-terminated (NULL: `-EINVAL`); `dir` NULL or
/// NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn pc_cache_remove_shared(name: *const c_char, dir: *const c_char) -> c_int {
    guard("pc_cache_remove_shared", || {
        // SAFETY: null or NUL-terminated (the contract).
        let (name, dir) = unsafe { name_and_dir(name, dir, "pc_cache_remove_shared") }?;
        PageCache::remove_shared(&name, dir.as_deref())
    })
}

/// A shared cache's name and directory from C strings.
///
/// # Safety
/// Each is null or NUL-terminated.
unsafe fn name_and_dir(
    name: *const c_char,
    dir: *const c_char,
    what: &str,
) -> std::io::Result<(String, Option<std::path::PathBuf>)> {
    if name.is_null() {
        return Err(invalid(format!("{what}: name is NULL")));
    }
    // SAFETY: non-null and NUL-terminated (the contract).
    let name = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| invalid(format!("{what}: name is not UTF-8")))?
        .to_owned();
    let dir = (!dir.is_null()).then(|| {
        // SAFETY: non-null and NUL-terminated (the contract).
        let d = unsafe { CStr::from_ptr(dir) };
        std::path::PathBuf::from(std::ffi::OsStr::from_bytes(d.to_bytes()))
    });
    Ok((name, dir))
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
