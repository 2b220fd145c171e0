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

use crate::sync::unmodelled::{AtomicBool, AtomicU64, Ordering};
use std::fs;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

pub(crate) mod engine;
pub use engine::IoEngine;

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

/// How to open a file. Mirrors `std::fs::OpenOptions` (no append: the cache
/// writes at explicit offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) create: bool,
    pub(crate) create_new: bool,
    pub(crate) truncate: bool,
    /// Ask for direct I/O (`O_DIRECT`); set by the cache from
    /// `Config::direct_io`.
    pub(crate) direct: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// All options off (like `std::fs::OpenOptions::new`).
    pub fn new() -> Self {
        OpenOptions {
            read: false,
            write: false,
            create: false,
            create_new: false,
            truncate: false,
            direct: false,
        }
    }
    /// Open for reading.
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    /// Create the file if missing (needs `write`).
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    /// Create the file, failing if it exists (needs `write`).
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    /// Truncate to length 0 on open (needs `write`). Done through the cache,
    /// so pages another handle cached are dropped too.
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    /// Whether writes are allowed.
    pub fn is_write(&self) -> bool {
        self.write
    }
    /// Whether direct I/O (`O_DIRECT`) is asked for: set by the cache from
    /// `Config::direct_io`; a backend that cannot do it ignores it.
    pub fn is_direct(&self) -> bool {
        self.direct
    }
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

/// `pread`/`pwritev` on ordinary file descriptors.
#[derive(Debug, Default, Clone, Copy)]
pub struct PosixBackend;

/// Alignment of offsets, lengths and buffers that `O_DIRECT` gets (the
/// largest logical block size of common devices; frames are page-aligned
/// and whole pages, so page I/O always qualifies).
pub(crate) const DIRECT_ALIGN: usize = 4096;

/// A file opened by [`PosixBackend`]: a buffered descriptor, and with
/// direct I/O a second, `O_DIRECT` one for aligned page reads and writes,
/// so the kernel's cache holds no second copy of the pages. Unaligned I/O
/// (the partial last page of a file, a short read at its end) goes through
/// the buffered one; if the filesystem refuses an `O_DIRECT` transfer
/// (`EINVAL`) the file falls back to buffered I/O for good.
#[derive(Debug)]
pub struct PosixFile {
    file: fs::File,
    direct: Option<fs::File>,
    /// (A) false once the filesystem refused a direct transfer.
    direct_ok: AtomicBool,
    max_len: u64,
    /// (C) direct writes need stable bytes (`BackendFile::stable_writes`).
    stable: bool,
}

fn aligned(x: usize) -> bool {
    x % DIRECT_ALIGN == 0
}

impl PosixFile {
    /// The `O_DIRECT` descriptor, if direct I/O is on.
    fn direct(&self) -> Option<&fs::File> {
        // Relaxed: a one-way switch; a stale `true` costs one EINVAL.
        self.direct
            .as_ref()
            .filter(|_| self.direct_ok.load(Ordering::Relaxed))
    }

    /// A direct transfer failed: `EINVAL` means the filesystem refuses
    /// `O_DIRECT` here; switch to buffered I/O for good. Returns whether to
    /// retry buffered.
    fn refused(&self, e: &io::Error) -> bool {
        if e.raw_os_error() == Some(libc::EINVAL) {
            // Relaxed: see `direct`.
            self.direct_ok.store(false, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// The magic number of the filesystem holding `file` (`fstatfs`'s
/// `f_type`), if it can be had.
fn fs_magic(file: &fs::File) -> Option<i64> {
    // SAFETY: `statfs` is plain old data; fstatfs fills it or fails.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: our own descriptor and a valid out pointer.
    (unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } == 0).then_some(st.f_type as i64)
}

/// Whether `file` lives on procfs or sysfs, whose files report a size of
/// 0 (or 4096) whatever they hold.
fn is_pseudo_fs(file: &fs::File) -> bool {
    const PROC_SUPER_MAGIC: i64 = 0x9fa0;
    const SYSFS_MAGIC: i64 = 0x6265_6572;
    matches!(fs_magic(file), Some(PROC_SUPER_MAGIC | SYSFS_MAGIC))
}

/// Whether direct writes to `file` (on device `dev`) need bytes that do not
/// change in flight: the filesystem checksums data (btrfs, ZFS) or the
/// block device asks for stable pages (`/sys/dev/block/M:m/queue/
/// stable_writes`, or the partition's parent disk's). Unknown (no sysfs,
/// an unreadable attribute) is no, like the kernel's default.
fn needs_stable_writes(file: &fs::File, dev: u64) -> bool {
    const BTRFS_SUPER_MAGIC: i64 = 0x9123_683e;
    const ZFS_SUPER_MAGIC: i64 = 0x2fc1_2fc1;
    if matches!(fs_magic(file), Some(BTRFS_SUPER_MAGIC | ZFS_SUPER_MAGIC)) {
        return true;
    }
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    [
        format!("{base}/queue/stable_writes"),
        format!("{base}/../queue/stable_writes"),
    ]
    .iter()
    .find_map(|p| fs::read_to_string(p).ok())
    .is_some_and(|v| v.trim() == "1")
}

/// The largest file the filesystem holding `dir` allows (its `s_maxbytes`),
/// found once per device: `fallocate` checks it before anything else
/// (`EFBIG`), so punching one byte of a hole at `len - 1` in an unnamed
/// temporary file (`O_TMPFILE`, no data to harm) tells whether `len` is
/// allowed; a binary search finds the limit in 63 calls. `i64::MAX` where
/// the probe cannot run (no `O_TMPFILE` there, directory not writable).
fn fs_max_len(dir: &Path, dev: u64) -> u64 {
    use std::collections::HashMap;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    static KNOWN: crate::sync::unmodelled::Mutex<Option<HashMap<u64, u64>>> =
        crate::sync::unmodelled::Mutex::new(None);
    if let Some(&m) = KNOWN.lock().as_ref().and_then(|k| k.get(&dev)) {
        return m;
    }
    let Ok(cdir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return i64::MAX as u64;
    };
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            cdir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return i64::MAX as u64;
    }
    // SAFETY: `fd` is a descriptor we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let allowed = |len: u64| {
        // SAFETY: a syscall on our own unnamed file.
        let r = unsafe {
            libc::fallocate(
                fd.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (len - 1) as libc::off_t,
                1,
            )
        };
        r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EFBIG)
    };
    // Largest allowed length in [1, i64::MAX].
    let (mut lo, mut hi) = (1u64, i64::MAX as u64);
    if !allowed(lo) {
        return i64::MAX as u64; // no answer: do not guess
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if allowed(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    KNOWN
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(dev, lo);
    lo
}

impl Backend for PosixBackend {
    fn open(&self, path: &Path, opts: &OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(opts.write)
            .create(opts.create)
            .create_new(opts.create_new)
            // Non-blocking so that opening a FIFO cannot hang; it is
            // refused below, and regular files ignore the flag.
            .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)?;
        let meta = file.metadata()?;
        let refuse = |why: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, why.to_string()));
        if meta.is_dir() {
            return refuse("is a directory");
        }
        if !meta.is_file() {
            return refuse(
                "not a regular file (a device, FIFO or socket): the cache serves regular files",
            );
        }
        if is_pseudo_fs(&file) {
            return refuse(
                "a procfs or sysfs file: its size is not its content, so it cannot be cached",
            );
        }
        // A regular file: back to blocking mode (io_uring would otherwise
        // fail reads with EAGAIN instead of waiting for the device).
        clear_nonblock(&file)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let max_len = fs_max_len(dir.unwrap_or(Path::new(".")), meta.dev());
        // The same file again with O_DIRECT; filesystems that refuse it at
        // open (tmpfs: EINVAL) get buffered I/O. Checked to be the same
        // inode (the path could have been replaced in between).
        let direct = opts
            .direct
            .then(|| {
                fs::OpenOptions::new()
                    .read(true)
                    .write(opts.write)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_DIRECT)
                    .open(path)
                    .ok()
            })
            .flatten()
            .filter(|d| {
                d.metadata()
                    .is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
                    && clear_nonblock(d).is_ok()
            });
        let stable = direct.is_some() && needs_stable_writes(&file, meta.dev());
        Ok(Arc::new(PosixFile {
            file,
            direct_ok: AtomicBool::new(direct.is_some()),
            direct,
            max_len,
            stable,
        }))
    }
}

impl BackendFile for PosixFile {
    fn identity(&self) -> io::Result<(u64, u64)> {
        let m = self.file.metadata()?;
        Ok((m.dev(), m.ino()))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if let Some(d) = self.direct() {
            if aligned(offset as usize) && aligned(buf.len()) && aligned(buf.as_ptr() as usize) {
                match FileExt::read_at(d, buf, offset) {
                    Err(e) if self.refused(&e) => {}
                    r => return r,
                }
            }
        }
        FileExt::read_at(&self.file, buf, offset)
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        if let Some(d) = self.direct() {
            if aligned(offset as usize)
                && bufs
                    .iter()
                    .all(|b| aligned(b.len()) && aligned(b.as_ptr() as usize))
            {
                match preadv(d, bufs, offset) {
                    Err(e) if self.refused(&e) => {}
                    r => return r,
                }
            }
        }
        preadv(&self.file, bufs, offset)
    }

    fn io_plan(&self, _write: bool, _offset: u64, _len: usize, aligned: bool) -> IoPlan {
        match self.direct() {
            Some(d) if aligned => IoPlan::Fd(d.as_raw_fd()),
            // Unaligned I/O with direct I/O on: the blocking path splits
            // it (whole pages direct, the rest buffered).
            Some(_) => IoPlan::Call,
            None => IoPlan::Fd(self.file.as_raw_fd()),
        }
    }

    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std
        // guarantees it), and borrowed slices are valid for the call.
        unsafe {
            self.write_raw(
                std::slice::from_raw_parts(bufs.as_ptr().cast(), bufs.len()),
                offset,
            )
        }
    }

    unsafe fn write_raw(&self, iov: &[libc::iovec], offset: u64) -> io::Result<usize> {
        // The aligned whole pages at the front go direct; the rest (a
        // partial last page) buffered, by the caller's next call.
        if let Some(d) = self.direct() {
            let k = iov
                .iter()
                .take_while(|v| aligned(v.iov_len) && aligned(v.iov_base as usize))
                .count();
            if k > 0 && aligned(offset as usize) {
                // SAFETY: the caller's contract.
                match unsafe { pwritev(d, &iov[..k], offset) } {
                    Err(e) if self.refused(&e) => {}
                    r => return r,
                }
            }
        }
        // SAFETY: the caller's contract.
        unsafe { pwritev(&self.file, iov, offset) }
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn is_direct(&self) -> bool {
        self.direct().is_some()
    }

    fn stable_writes(&self) -> bool {
        // Raw buffers (`write_raw`): only the filesystem or device asks,
        // and only of direct writes (a buffered write's bytes are copied
        // into the kernel's cache during the call).
        self.stable && self.is_direct()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn grow_to(&self, len: u64) -> io::Result<()> {
        grow_to(&self.file, len)
    }

    fn allocate_to(&self, len: u64) {
        let Ok(now) = self.file.metadata().map(|m| m.len()) else {
            return;
        };
        if now >= len {
            return;
        }
        // fallocate mode 0: allocates (unwritten extents, read as zeros)
        // and extends the length to `len`; never shrinks, never touches
        // bytes already written (a racing extending write is safe).
        // SAFETY: plain syscall on our own descriptor.
        let _ = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                0,
                now as libc::off_t,
                (len - now) as libc::off_t,
            )
        };
    }

    fn sync_data(&self) -> io::Result<()> {
        // One inode: flushes what either descriptor wrote.
        self.file.sync_data()
    }

    fn max_len(&self) -> u64 {
        self.max_len
    }
}

/// Clears `O_NONBLOCK` (set at open so that a FIFO cannot hang it).
fn clear_nonblock(file: &fs::File) -> io::Result<()> {
    // SAFETY: fcntl on our own descriptor.
    let fl = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK) } < 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One `preadv` into `bufs` at `offset` on `file`.
fn preadv(file: &fs::File, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
    let cnt = bufs.len().min(libc::UIO_MAXIOV as usize);
    // SAFETY: `IoSliceMut` is ABI-compatible with `iovec` on Unix (std
    // guarantees it); `cnt` entries are valid for writes for the call.
    let n = unsafe {
        libc::preadv(
            file.as_raw_fd(),
            bufs.as_mut_ptr().cast(),
            cnt as libc::c_int,
            offset as libc::off_t,
        )
    };
    syscall_len(n)
}

/// A byte count from a system call, or its error.
fn syscall_len(n: isize) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One `pwritev` of `bufs` at `offset` on `file`.
/// `pwritev` of the first `UIO_MAXIOV` buffers of `iov`.
///
/// # Safety
/// Each iovec is valid for reads of `iov_len` bytes for the call.
unsafe fn pwritev(file: &fs::File, iov: &[libc::iovec], offset: u64) -> io::Result<usize> {
    let cnt = iov.len().min(libc::UIO_MAXIOV as usize);
    // SAFETY: `cnt` entries, valid for reads for the call (the caller's
    // contract); the kernel reads them outside Rust's abstract machine.
    let n = unsafe {
        libc::pwritev(
            file.as_raw_fd(),
            iov.as_ptr(),
            cnt as libc::c_int,
            offset as libc::off_t,
        )
    };
    syscall_len(n)
}

/// Makes `file` at least `len` bytes long without ever shrinking it.
fn grow_to(file: &fs::File, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    // fallocate mode 0 on the last byte: extends the size to `len` if it
    // is shorter and never shrinks it (unlike ftruncate).
    // SAFETY: plain syscall on our own descriptor.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, (len - 1) as libc::off_t, 1) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        // Filesystems without fallocate: check, then extend. This can
        // race with a concurrent extending write; such filesystems are
        // documented as unsupported for concurrent sync + eviction.
        if file.metadata()?.len() < len {
            return file.set_len(len);
        }
        return Ok(());
    }
    Err(e)
}

/// Shared switches of a [`FaultyBackend`]; tests keep an `Arc` to flip them
/// while the cache runs.
#[derive(Debug, Default)]
pub struct Faults {
    reads: AtomicU64,
    writes: AtomicU64,
    /// Fail the read whose 1-based number equals this (0 = never).
    fail_read_nth: AtomicU64,
    fail_read_errno: AtomicU64,
    /// Fail every write from the Nth on (0 = never) until cleared.
    fail_write_from: AtomicU64,
    fail_write_errno: AtomicU64,
    /// Largest single read returned (0 = unlimited): forces short reads.
    short_read_max: AtomicU64,
    /// Writes ending past this offset fail with ENOSPC (0 = unlimited).
    enospc_past: AtomicU64,
    syncs: AtomicU64,
    fail_sync_errno: AtomicU64,
    /// `ftruncate` fails with this errno (0 = never) until cleared.
    fail_set_len_errno: AtomicU64,
    /// Every read and write sleeps this long first (µs, 0 = off): a slow
    /// or saturated device.
    delay_us: AtomicU64,
    /// Calls in their delay right now, and the most there ever were.
    delayed_now: AtomicU64,
    delayed_max: AtomicU64,
    /// `(path, offset)` of every write issued, in order, while logging.
    write_log: crate::sync::unmodelled::Mutex<Option<Vec<(std::path::PathBuf, u64)>>>,
}

impl Faults {
    /// New switches, all off.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    /// The `n`th read from now on fails with `errno` (once).
    pub fn fail_nth_read(&self, n: u64, errno: i32) {
        let base = self.reads.load(Ordering::SeqCst);
        self.fail_read_errno.store(errno as u64, Ordering::SeqCst);
        self.fail_read_nth.store(base + n, Ordering::SeqCst);
    }
    /// Every write from the `n`th from now on fails with `errno`, until
    /// [`Faults::clear`].
    pub fn fail_writes_from(&self, n: u64, errno: i32) {
        let base = self.writes.load(Ordering::SeqCst);
        self.fail_write_errno.store(errno as u64, Ordering::SeqCst);
        self.fail_write_from.store(base + n, Ordering::SeqCst);
    }
    /// Reads return at most `max` bytes each (0 = off).
    pub fn short_reads(&self, max: u64) {
        self.short_read_max.store(max, Ordering::SeqCst);
    }
    /// Writes that would end past `len` fail with ENOSPC (0 = off).
    pub fn enospc_past(&self, len: u64) {
        self.enospc_past.store(len, Ordering::SeqCst);
    }
    /// `fdatasync` fails with `errno` until cleared (0 = off).
    pub fn fail_syncs(&self, errno: i32) {
        self.fail_sync_errno.store(errno as u64, Ordering::SeqCst);
    }
    /// `ftruncate` (`set_len`) fails with `errno` until cleared (0 = off).
    pub fn fail_set_len(&self, errno: i32) {
        self.fail_set_len_errno
            .store(errno as u64, Ordering::SeqCst);
    }
    /// Every read and write takes at least `d` (a slow device); zero
    /// turns it off. Not cleared by [`Faults::clear`].
    pub fn delay_io(&self, d: std::time::Duration) {
        self.delay_us
            .store(d.as_micros().min(u64::MAX as u128) as u64, Ordering::SeqCst);
    }
    /// Turns every fault off.
    pub fn clear(&self) {
        self.fail_set_len_errno.store(0, Ordering::SeqCst);
        self.fail_read_nth.store(0, Ordering::SeqCst);
        self.fail_write_from.store(0, Ordering::SeqCst);
        self.short_read_max.store(0, Ordering::SeqCst);
        self.enospc_past.store(0, Ordering::SeqCst);
        self.fail_sync_errno.store(0, Ordering::SeqCst);
    }
    /// Reads issued so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }
    /// Writes issued so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }
    /// The most reads and writes that were in their [`Faults::delay_io`]
    /// delay at the same time (how many I/Os a caller had in flight at
    /// once on the slow device).
    pub fn max_concurrent(&self) -> u64 {
        self.delayed_max.load(Ordering::SeqCst)
    }
    /// Starts (or restarts, empty) a log of the writes issued: which file
    /// (the path it was opened by) and where, in the order they were made.
    pub fn log_writes(&self) {
        *self.write_log.lock() = Some(Vec::new());
    }
    /// The writes logged since [`Faults::log_writes`].
    pub fn logged_writes(&self) -> Vec<(std::path::PathBuf, u64)> {
        self.write_log.lock().clone().unwrap_or_default()
    }
    /// `fdatasync` calls so far.
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }
}

/// Wraps a backend and injects the failures switched on in [`Faults`].
#[derive(Debug)]
pub struct FaultyBackend<B = PosixBackend> {
    inner: B,
    faults: Arc<Faults>,
}

impl<B: Backend> FaultyBackend<B> {
    /// Wraps `inner`; flip switches through `faults`.
    pub fn new(inner: B, faults: Arc<Faults>) -> Self {
        FaultyBackend { inner, faults }
    }
}

#[derive(Debug)]
struct FaultyFile {
    inner: Arc<dyn BackendFile>,
    faults: Arc<Faults>,
    path: std::path::PathBuf,
}

impl FaultyFile {
    /// Sleeps for the injected device latency, if any.
    fn delay(&self) {
        let f = &self.faults;
        let us = f.delay_us.load(Ordering::SeqCst);
        if us > 0 {
            let now = f.delayed_now.fetch_add(1, Ordering::SeqCst) + 1;
            f.delayed_max.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_micros(us));
            f.delayed_now.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Counts a read; the injected failure if it is the chosen one.
    fn read_fault(&self) -> io::Result<()> {
        let f = &self.faults;
        let n = f.reads.fetch_add(1, Ordering::SeqCst) + 1;
        if n == f.fail_read_nth.load(Ordering::SeqCst) {
            let errno = f.fail_read_errno.load(Ordering::SeqCst) as i32;
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(())
    }

    /// Counts a write of `len` bytes at `offset`; the injected failure if
    /// writes are failing or it ends past the ENOSPC limit.
    fn write_fault(&self, offset: u64, len: u64) -> io::Result<()> {
        let f = &self.faults;
        if let Some(log) = f.write_log.lock().as_mut() {
            log.push((self.path.clone(), offset));
        }
        let n = f.writes.fetch_add(1, Ordering::SeqCst) + 1;
        let from = f.fail_write_from.load(Ordering::SeqCst);
        if from != 0 && n >= from {
            let errno = f.fail_write_errno.load(Ordering::SeqCst) as i32;
            return Err(io::Error::from_raw_os_error(errno));
        }
        let past = f.enospc_past.load(Ordering::SeqCst);
        if past != 0 && offset + len > past {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        Ok(())
    }
}

impl<B: Backend> Backend for FaultyBackend<B> {
    fn open(&self, path: &Path, opts: &OpenOptions) -> io::Result<Arc<dyn BackendFile>> {
        Ok(Arc::new(FaultyFile {
            inner: self.inner.open(path, opts)?,
            faults: self.faults.clone(),
            path: path.to_path_buf(),
        }))
    }
}

impl BackendFile for FaultyFile {
    fn identity(&self) -> io::Result<(u64, u64)> {
        self.inner.identity()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let f = &self.faults;
        self.read_fault()?;
        self.delay();
        let max = f.short_read_max.load(Ordering::SeqCst) as usize;
        let len = if max > 0 {
            buf.len().min(max)
        } else {
            buf.len()
        };
        self.inner.read_at(&mut buf[..len], offset)
    }

    fn read_vectored_at(&self, bufs: &mut [IoSliceMut<'_>], offset: u64) -> io::Result<usize> {
        self.read_fault()?;
        self.delay();
        let max = self.faults.short_read_max.load(Ordering::SeqCst) as usize;
        if max > 0 {
            // One short read into the first buffer.
            let Some(b) = bufs.iter_mut().find(|b| !b.is_empty()) else {
                return Ok(0);
            };
            let len = b.len().min(max);
            return self.inner.read_at(&mut b[..len], offset);
        }
        self.inner.read_vectored_at(bufs, offset)
    }

    fn io_plan(&self, write: bool, offset: u64, len: usize, aligned: bool) -> IoPlan {
        if self.faults.delay_us.load(Ordering::SeqCst) > 0 {
            // Delays are made by the calls (which also inject the faults).
            return IoPlan::Call;
        }
        let fault = if write {
            self.write_fault(offset, len as u64)
        } else if self.faults.short_read_max.load(Ordering::SeqCst) > 0 {
            return IoPlan::Call; // short reads are made by `read_vectored_at`
        } else {
            self.read_fault()
        };
        match fault {
            Err(e) => IoPlan::Fail(e),
            Ok(()) => self.inner.io_plan(write, offset, len, aligned),
        }
    }

    fn write_at(&self, bufs: &[IoSlice<'_>], offset: u64) -> io::Result<usize> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.write_fault(offset, total)?;
        self.delay();
        self.inner.write_at(bufs, offset)
    }

    unsafe fn write_raw(&self, iov: &[libc::iovec], offset: u64) -> io::Result<usize> {
        let total: u64 = iov.iter().map(|v| v.iov_len as u64).sum();
        self.write_fault(offset, total)?;
        self.delay();
        // SAFETY: the caller's contract, passed on.
        unsafe { self.inner.write_raw(iov, offset) }
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let errno = self.faults.fail_set_len_errno.load(Ordering::SeqCst);
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno as i32));
        }
        self.inner.set_len(len)
    }

    fn grow_to(&self, len: u64) -> io::Result<()> {
        self.inner.grow_to(len)
    }

    fn allocate_to(&self, len: u64) {
        self.inner.allocate_to(len)
    }

    fn max_len(&self) -> u64 {
        self.inner.max_len()
    }

    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }

    fn stable_writes(&self) -> bool {
        self.inner.stable_writes()
    }

    fn sync_data(&self) -> io::Result<()> {
        let f = &self.faults;
        f.syncs.fetch_add(1, Ordering::SeqCst);
        let errno = f.fail_sync_errno.load(Ordering::SeqCst);
        if errno != 0 {
            return Err(io::Error::from_raw_os_error(errno as i32));
        }
        self.inner.sync_data()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn tmpfile(name: &str, data: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("pc-io-{}-{name}", std::process::id()));
        fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn read_full_loops_over_short_reads() {
        let p = tmpfile("short", &[7u8; 10000]);
        let faults = Faults::new();
        faults.short_reads(100);
        let b = FaultyBackend::new(PosixBackend, faults.clone());
        let f = b.open(&p, OpenOptions::new().read(true)).unwrap();
        let mut buf = vec![0u8; 4096];
        assert_eq!(read_full(&*f, &mut buf, 8192).unwrap(), 10000 - 8192);
        assert!(buf[..1808].iter().all(|&b| b == 7));
        assert!(faults.reads() >= 19);
        fs::remove_file(p).unwrap();
    }

    #[test]
    fn nth_read_fails_once_with_chosen_errno() {
        let p = tmpfile("nth", &[1u8; 4096]);
        let faults = Faults::new();
        let b = FaultyBackend::new(PosixBackend, faults.clone());
        let f = b.open(&p, OpenOptions::new().read(true)).unwrap();
        faults.fail_nth_read(2, libc::EIO);
        let mut buf = [0u8; 16];
        assert!(f.read_at(&mut buf, 0).is_ok());
        assert_eq!(
            f.read_at(&mut buf, 0).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        assert!(f.read_at(&mut buf, 0).is_ok());
        fs::remove_file(p).unwrap();
    }

    #[test]
    fn write_full_handles_gathered_writes_and_enospc() {
        let p = tmpfile("w", b"");
        let faults = Faults::new();
        let b = FaultyBackend::new(PosixBackend, faults.clone());
        let f = b
            .open(&p, OpenOptions::new().read(true).write(true))
            .unwrap();
        let iov = |bufs: &[&[u8]]| -> Vec<libc::iovec> {
            bufs.iter()
                .map(|b| libc::iovec {
                    iov_base: b.as_ptr() as *mut _,
                    iov_len: b.len(),
                })
                .collect()
        };
        // SAFETY: iovecs of live byte strings.
        unsafe { write_full(&*f, &iov(&[b"abc", b"def"]), 2) }.unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"\0\0abcdef");
        faults.enospc_past(5);
        // SAFETY: as above.
        let e = unsafe { write_full(&*f, &iov(&[b"xyz"]), 4) }.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        fs::remove_file(p).unwrap();
    }
}
