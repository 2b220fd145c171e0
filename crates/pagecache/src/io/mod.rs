//! Layer 6, io: how pages reach the file.
//!
//! [`Backend`] opens files; [`BackendFile`] reads and writes one of them at
//! byte offsets. The cache calls them only on the slow paths (a miss, a
//! write-back, `sync`, `set_len`), never while holding a tree lock or any
//! other shared lock: I/O happens under a page's latch or pin only.
//!
//! [`PosixBackend`] is `pread`/`pwritev`/`ftruncate`/`fdatasync` on an
//! ordinary file descriptor. [`FaultyBackend`] wraps any backend and injects
//! failures for tests: fail the Nth read or write with a chosen errno, make
//! reads short, report ENOSPC past a size.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::Arc;

pub(crate) mod engine;
mod faulty;
mod options;
mod posix;
pub use engine::IoEngine;
pub use faulty::{Faults, FaultyBackend};
pub use options::OpenOptions;
pub use posix::PosixBackend;
pub(crate) use posix::DIRECT_ALIGN;

/// How an asynchronous engine should do one transfer of a file
/// ([`BackendFile::io_plan`]).
#[derive(Debug)]
pub enum IoPlan {
    /// Submit it to the kernel on this descriptor (valid while the file is).
    Fd(RawFd),
    /// Call [`BackendFile::read_vectored_at`] / [`BackendFile::write_at`]
    /// on an I/O thread.
    Call,
    /// Fail it at once with this error.
    Fail(io::Error),
}

/// Opens files for the cache.
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// Opens `path`. `opts.truncate` is handled by the cache, not here.
    fn open(&self, path: &Path, opts: &OpenOptions) -> io::Result<Arc<dyn BackendFile>>;
}

/// One open file. Offsets are bytes; calls may be made from many threads at
/// once, for different pages.
#[allow(clippy::len_without_is_empty)] // a file length, not a collection
pub trait BackendFile: Send + Sync + std::fmt::Debug {
    /// `(device, inode)`: handles with the same identity share cached pages.
    fn identity(&self) -> io::Result<(u64, u64)>;
    /// What changes whenever the file's contents change: the inode's
    /// change time in nanoseconds and the length. A shared cache keeps the
    /// pages of a file no process has open and serves them to the next
    /// opener only if this is what it was at the last close. The default,
    /// `(0, len)`, sees only length changes: backends whose files others
    /// may change without a length change should override it.
    fn change_stamp(&self) -> io::Result<(u64, u64)> {
        Ok((0, self.len()?))
    }
    /// One positioned read (`pread`); may be short, 0 at end of file.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// One positioned scattered read (`preadv`); may be short, 0 at end of
    /// file. The default reads into the first non-empty buffer only.
    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        match bufs.iter_mut().find(|b| !b.is_empty()) {
            Some(b) => self.read_at(b, offset),
            None => Ok(0),
        }
    }
    /// How an asynchronous engine should do a read (`write`: false) or
    /// write of `len` bytes at `offset`; `aligned` says whether offset,
    /// lengths and buffers suit direct I/O. The default: [`IoPlan::Call`].
    fn io_plan(&self, write: bool, offset: u64, len: usize, aligned: bool) -> IoPlan {
        let _ = (write, offset, len, aligned);
        IoPlan::Call
    }
    /// [`BackendFile::io_plan`] for a read of a sequential stream (a
    /// readahead window, with `Config::stream_reads`): a backend whose
    /// buffered path reads streams faster than its direct one may name a
    /// buffered descriptor here, and then drops the kernel's copy behind
    /// the stream in [`BackendFile::drop_behind`]. The default: as any read.
    fn io_plan_stream(&self, offset: u64, len: usize, aligned: bool) -> IoPlan {
        self.io_plan(false, offset, len, aligned)
    }
    /// One positioned read of a sequential stream straight into a caller's
    /// buffer (the frames bypassed: [`BackendFile::io_plan_stream`] named a
    /// buffered path and the file is larger than the cache), through the
    /// same path as the stream's windows; may be short, 0 at end of file.
    /// The default: [`BackendFile::read_at`].
    fn read_stream_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at(buf, offset)
    }
    /// The stream has consumed `[offset, offset + len)`: a backend that
    /// read it through the kernel's cache drops it from there
    /// (`POSIX_FADV_DONTNEED`). A hint; the default: nothing.
    fn drop_behind(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
    /// One positioned gathered write (`pwritev`); may be short.
    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize>;
    /// One positioned gathered write from raw buffers; may be short.
    /// Write-back writes through this, never through `write_at`: without
    /// stable pages a writer may change a frame while its write is in
    /// flight, so the cache makes no `&[u8]` of the frames it writes (that
    /// would assert bytes nobody changes); the kernel copies whatever they
    /// hold. The default builds `IoSlice`s and calls `write_at`, sound only
    /// while nobody changes the bytes: a backend that keeps it must keep
    /// the default [`BackendFile::stable_writes`] (true), under which the
    /// cache's writers wait for the write.
    ///
    /// # Safety
    /// Each iovec is valid for reads of `iov_len` bytes until the call
    /// returns.
    unsafe fn write_raw(&self, iov: &[libc::iovec], offset: u64) -> io::Result<usize> {
        let bufs: Vec<IoSlice<'_>> = iov
            .iter()
            // SAFETY: valid for reads (the caller's contract) and unchanged
            // for the call (stable pages: the default `stable_writes`).
            .map(|v| IoSlice::new(unsafe { raw_bytes(v) }))
            .collect();
        self.write_at(&bufs, offset)
    }
    /// Length of the file on disk.
    fn len(&self) -> io::Result<u64>;
    /// `ftruncate`.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Makes the file at least `len` bytes long without ever shrinking it,
    /// even if a concurrent write extends it meanwhile (`sync` persists the
    /// length this way while write-back may be running).
    fn grow_to(&self, len: u64) -> io::Result<()>;
    /// `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
    /// A hint before write-back writes up to `len` bytes: allocate the
    /// file's blocks and length up to there now, so that the writes that
    /// follow are overwrites (ext4 runs direct-I/O writes that extend the
    /// file, or fill holes, one at a time under the inode lock, and
    /// io_uring then serializes them in a worker). Never shrinks the file;
    /// errors are ignored (the writes report theirs). The default: nothing.
    fn allocate_to(&self, len: u64) {
        let _ = len;
    }
    /// The largest length this file may have (the filesystem's maximum
    /// file size); lengths past it are refused with `EFBIG` before any page
    /// is dirtied. The default knows no limit below `i64::MAX`.
    fn max_len(&self) -> u64 {
        i64::MAX as u64
    }
    /// Whether page reads and writes bypass the kernel's page cache
    /// (`O_DIRECT`) right now. The default: no.
    fn is_direct(&self) -> bool {
        false
    }
    /// Whether a write's bytes must not change until it completes: direct
    /// writes to a filesystem that checksums data as it goes (btrfs, ZFS)
    /// or to a device that says so (`queue/stable_writes`: integrity
    /// metadata, data digests), or a backend that writes through `&[u8]`
    /// (the default [`BackendFile::write_raw`]). Write-back then keeps
    /// writers of those pages waiting (see `Config::stable_writes`). The
    /// default: yes; a backend that implements `write_raw` with raw
    /// buffers says when it needs them.
    fn stable_writes(&self) -> bool {
        true
    }
}

/// Reads a whole page at `offset`: loops over short reads, retries EINTR,
/// stops at end of file. Returns the bytes read (the rest is untouched).
pub fn read_full(f: &dyn BackendFile, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Reads into all of `bufs` from `offset`: loops over short reads,
/// retries EINTR, stops at end of file. Returns the bytes read.
pub fn read_vectored_full(
    f: &dyn BackendFile,
    bufs: &mut [IoSliceMut<'_>],
    offset: u64,
) -> io::Result<usize> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut done = 0usize;
    let mut bufs = bufs;
    while done < total {
        match f.read_vectored_at(bufs, offset + done as u64) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                IoSliceMut::advance_slices(&mut bufs, n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The bytes an iovec points at.
///
/// # Safety
/// `v` is valid for reads of `iov_len` bytes, and nothing changes them
/// while the slice lives.
unsafe fn raw_bytes<'a>(v: &libc::iovec) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) }
}

/// The buffers of `iov` from byte `skip` on (pointers only: nothing is
/// read).
pub(crate) fn iov_after(iov: &[libc::iovec], mut skip: usize) -> Vec<libc::iovec> {
    let mut rest = Vec::with_capacity(iov.len());
    for v in iov {
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        rest.push(libc::iovec {
            // `wrapping_add` stays within the buffer (`skip < iov_len`)
            // without asserting anything about the pointer.
            iov_base: v.iov_base.cast::<u8>().wrapping_add(skip).cast(),
            iov_len: v.iov_len - skip,
        });
        skip = 0;
    }
    rest
}

/// Writes all of `iov` at `offset` through [`BackendFile::write_raw`]:
/// loops over short writes, retries EINTR. A write that makes no progress
/// is `WriteZero`. Raw buffers, so that write-back makes no `&[u8]` of
/// frames a writer may be changing (see `write_raw`).
///
/// # Safety
/// Each iovec is valid for reads of `iov_len` bytes until this returns.
pub unsafe fn write_full(f: &dyn BackendFile, iov: &[libc::iovec], offset: u64) -> io::Result<()> {
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    let mut done = 0usize;
    while done < total {
        // SAFETY: sub-ranges of the caller's valid buffers.
        match unsafe { f.write_raw(&iov_after(iov, done), offset + done as u64) } {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "write returned 0 bytes",
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
