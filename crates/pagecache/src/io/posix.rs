//! [`PosixBackend`]: `pread`/`pwritev`/`ftruncate`/`fdatasync` on an
//! ordinary file descriptor, `O_DIRECT` where the filesystem takes it.

use super::{Backend, BackendFile, IoPlan, OpenOptions};
use crate::sync::unmodelled::{AtomicBool, Ordering};
use std::fs;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

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

    fn change_stamp(&self) -> io::Result<(u64, u64)> {
        let m = self.file.metadata()?;
        let ns = (m.ctime() as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(m.ctime_nsec() as u64);
        Ok((ns, m.len()))
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

    fn io_plan_stream(&self, _offset: u64, _len: usize, _aligned: bool) -> IoPlan {
        // The buffered descriptor, whether or not direct I/O is on: the
        // kernel's readahead keeps megabytes in flight, and `drop_behind`
        // frees its copy.
        IoPlan::Fd(self.file.as_raw_fd())
    }

    fn read_stream_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        // The buffered descriptor, as `io_plan_stream`: the kernel's
        // readahead on it keeps the device busy ahead of the reader.
        FileExt::read_at(&self.file, buf, offset)
    }

    fn drop_behind(&self, offset: u64, len: u64) {
        // SAFETY: advice on our own descriptor; no memory is passed.
        unsafe {
            libc::posix_fadvise(
                self.file.as_raw_fd(),
                offset as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_DONTNEED,
            );
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
