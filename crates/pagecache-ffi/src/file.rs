//! `pc_file`: opening, reading and writing by offset, length, sync,
//! prefetch, close and discard.

use crate::cache::pc_cache;
use crate::error::{arg, guard, invalid, out};
use crate::pin_count::PinCount;
use crate::pins::{refuse_if_pinned, Pinned};
use pagecache::{File, OpenOptions};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::io;
use std::os::unix::ffi::OsStrExt;

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

/// An open file of a cache.
#[derive(Debug)]
pub struct pc_file {
    pub(crate) file: File,
    /// Pins and latches held through this handle: close refuses while any
    /// is held.
    pub(crate) pins: PinCount,
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
pub(crate) unsafe fn file<'a>(f: *const pc_file, what: &str) -> io::Result<&'a pc_file> {
    // SAFETY: forwarded contract.
    unsafe { arg(f, what, "file") }
}

/// `buf`/`len` as a slice; a NULL `buf` is allowed only with `len` 0.
pub(crate) fn slice_len(buf: *const c_void, len: usize, what: &str) -> io::Result<()> {
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
pub(crate) unsafe fn take_file(f: *mut pc_file, what: &str) -> io::Result<Box<pc_file>> {
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

impl Pinned for pc_file {
    fn pins(&self) -> &PinCount {
        &self.pins
    }
}

/// `-EAGAIN`'s error: `what` of page `index` of `f` would have waited.
pub(crate) fn would_wait(what: &str, f: &pc_file, index: u64, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("{what}: {}: page {index} {why}", f.file.path().display()),
    )
}
