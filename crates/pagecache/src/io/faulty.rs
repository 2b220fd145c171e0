//! [`FaultyBackend`]: wraps any backend and injects the failures switched
//! on in [`Faults`], for tests: fail the Nth read or write with a chosen
//! errno, short reads, ENOSPC past a size, failing `fdatasync` and
//! `ftruncate`, a slow device.

use super::{Backend, BackendFile, IoPlan, OpenOptions, PosixBackend};
use crate::sync::unmodelled::{AtomicU64, Ordering};
use std::io::{self, IoSlice, IoSliceMut};
use std::path::Path;
use std::sync::Arc;

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
    write_log: crate::sync::unmodelled::Mutex<Option<Vec<(std::path::PathBuf, u64, u64)>>>,
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
    /// (the path it was opened by), where and how many bytes, in the order
    /// they were made.
    pub fn log_writes(&self) {
        *self.write_log.lock() = Some(Vec::new());
    }
    /// The writes logged since [`Faults::log_writes`].
    pub fn logged_writes(&self) -> Vec<(std::path::PathBuf, u64, u64)> {
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

    /// One read's faults: fails it (`read_fault`) or delays it, and
    /// returns how much of a `len`-byte buffer it may fill (short reads).
    fn read_len(&self, len: usize) -> io::Result<usize> {
        self.read_fault()?;
        self.delay();
        let max = self.faults.short_read_max.load(Ordering::SeqCst) as usize;
        Ok(if max > 0 { len.min(max) } else { len })
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
            log.push((self.path.clone(), offset, len));
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

    fn change_stamp(&self) -> io::Result<(u64, u64)> {
        self.inner.change_stamp()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let len = self.read_len(buf.len())?;
        self.inner.read_at(&mut buf[..len], offset)
    }

    fn read_stream_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let len = self.read_len(buf.len())?;
        self.inner.read_stream_at(&mut buf[..len], offset)
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
    use super::super::{read_full, write_full};
    use super::*;
    use std::fs;

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
