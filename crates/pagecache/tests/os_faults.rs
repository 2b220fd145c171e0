//! Real faults from the OS, not the injecting backend: a full filesystem
//! (a small tmpfs mounted for the test). Needs root to mount; skipped with
//! a message elsewhere.
mod common;
use common::*;
use pagecache::{os_error, OpenOptions};
use std::ffi::CString;
use std::io::ErrorKind;
use std::path::Path;

/// A tmpfs of `kib` KiB mounted on `dir`, unmounted when dropped; `None`
/// (with a message) where mounting is not allowed.
struct Tmpfs(CString);

impl Tmpfs {
    fn mount(dir: &Path, kib: u64) -> Option<Tmpfs> {
        let target = CString::new(dir.to_str()?).ok()?;
        let opts = CString::new(format!("size={kib}k,mode=0700")).unwrap();
        let fstype = CString::new("tmpfs").unwrap();
        // SAFETY: valid NUL-terminated strings; the result is checked.
        let r = unsafe {
            libc::mount(
                fstype.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                0,
                opts.as_ptr().cast(),
            )
        };
        if r != 0 {
            eprintln!(
                "skipped: cannot mount a tmpfs here ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        Some(Tmpfs(target))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // SAFETY: the path we mounted; lazy so open descriptors cannot block it.
        unsafe { libc::umount2(self.0.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn a_full_tmpfs_is_storage_full_nothing_is_lost_and_sync_recovers() {
    let d = TempDir::new("osfaults");
    let Some(_fs) = Tmpfs::mount(&d.0, 256) else {
        return;
    };
    // Something to delete later, to make room.
    std::fs::write(d.path("ballast"), vec![1u8; 128 << 10]).unwrap();
    let c = cache(256);
    let p = d.path("f");
    let f = c
        .open_with(&p, OpenOptions::new().read(true).write(true).create(true))
        .unwrap();
    // tmpfs takes O_DIRECT since Linux 6.6 and refuses it before; either
    // way the file is counted once, as what it got.
    let st = c.stats();
    assert_eq!(st.direct_files + st.buffered_files, 1);
    assert_eq!(st.direct_files == 1, f.direct_io());
    let data: Vec<u8> = (0..(200u64 << 10)).map(pattern).collect();
    // Only dirties pages (fits in the cache). The flusher may write some
    // of them first (50 of 256 pages are past its threshold): what is
    // asserted below holds either way (the ballast leaves too little room
    // for all of them, whoever writes).
    f.write_at(&data, 0).unwrap();
    let e = f.sync().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull, "{e}");
    assert_eq!(os_error(&e), Some(libc::ENOSPC));
    assert!(e.to_string().contains("f"), "{e}");
    assert!(f.dirty_pages() > 0, "what could not be written stays dirty");
    let mut back = vec![0u8; data.len()];
    f.read_at(&mut back, 0).unwrap();
    assert!(back == data, "the cache still has every byte");
    // Room again: the next sync writes what is left.
    std::fs::remove_file(d.path("ballast")).unwrap();
    f.sync().unwrap();
    assert_eq!(f.dirty_pages(), 0);
    assert!(std::fs::read(&p).unwrap() == data, "all of it on disk");
    drop(f);
    c.validate();
}

/// A minimal FUSE filesystem served from this process (the raw protocol on
/// `/dev/fuse`, mounted with mount(2) as root): one file, `data`, held in
/// memory, whose reads of a chosen page and whose writes fail with EIO on
/// demand. Only what the cache and std need is answered; everything else is
/// ENOSYS.
mod fuse {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    pub struct Faults {
        /// Reads touching this page fail with EIO (u64::MAX: none).
        pub fail_read_page: AtomicU64,
        /// Writes fail with EIO.
        pub fail_writes: AtomicBool,
        /// Refuse `O_DIRECT` with EINVAL: 1 at open, 2 at each transfer.
        pub refuse_direct: std::sync::atomic::AtomicU8,
    }

    pub struct Fs {
        pub data: Mutex<Vec<u8>>,
        pub faults: Faults,
    }

    pub struct Mount {
        dir: std::ffi::CString,
    }

    impl Drop for Mount {
        fn drop(&mut self) {
            // SAFETY: the path we mounted; lazy, so nothing blocks it.
            unsafe { libc::umount2(self.dir.as_ptr(), libc::MNT_DETACH) };
        }
    }

    const ROOT: u64 = 1;
    const FILE: u64 = 2;
    const PS: u64 = 4096;

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], o: usize) -> u64 {
        u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
    }

    /// `struct fuse_attr` (88 bytes).
    fn attr(out: &mut Vec<u8>, ino: u64, size: u64) {
        let mode: u32 = if ino == ROOT {
            libc::S_IFDIR | 0o755
        } else {
            libc::S_IFREG | 0o644
        };
        for v in [ino, size, size.div_ceil(512), 0, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0u32, 0, 0, mode, 1, 0, 0, 0, 4096, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Mounts the filesystem on `dir` and serves it on a thread; `None`
    /// (with a message) where that is not possible.
    pub fn mount(dir: &std::path::Path, fs: Arc<Fs>) -> Option<Mount> {
        let dev = std::ffi::CString::new("/dev/fuse").unwrap();
        // SAFETY: a valid path; the result is checked.
        let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            eprintln!(
                "skipped: no /dev/fuse ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        // SAFETY: just opened, ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let target = std::ffi::CString::new(dir.to_str()?).ok()?;
        let opts = std::ffi::CString::new(format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            fd.as_raw_fd()
        ))
        .unwrap();
        let kind = std::ffi::CString::new("fuse").unwrap();
        let src = std::ffi::CString::new("pagecache-test").unwrap();
        // SAFETY: valid NUL-terminated strings; the result is checked.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                kind.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                opts.as_ptr().cast(),
            )
        };
        if r != 0 {
            eprintln!(
                "skipped: cannot mount FUSE here ({})",
                std::io::Error::last_os_error()
            );
            return None;
        }
        std::thread::spawn(move || serve(fd, fs));
        Some(Mount { dir: target })
    }

    fn serve(fd: OwnedFd, fs: Arc<Fs>) {
        let mut buf = vec![0u8; (1 << 20) + 4096];
        loop {
            // SAFETY: reading into our own buffer from our own descriptor.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) || e.raw_os_error() == Some(libc::ENOENT) {
                    continue;
                }
                return; // ENODEV: unmounted
            }
            let req = &buf[..n as usize];
            let (opcode, unique, node) = (u32_at(req, 4), u64_at(req, 8), u64_at(req, 16));
            let arg = &req[40..];
            // Never leave a request unanswered (the caller would wait in
            // the kernel forever): a bug here answers EIO.
            let reply = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                handle(&fs, opcode, node, arg)
            }))
            .unwrap_or(Some((libc::EIO, Vec::new())));
            let Some((errno, body)) = reply else { continue }; // no reply (FORGET, INTERRUPT)
            let mut out = Vec::with_capacity(16 + body.len());
            out.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
            out.extend_from_slice(&(-errno).to_le_bytes());
            out.extend_from_slice(&unique.to_le_bytes());
            out.extend_from_slice(&body);
            // SAFETY: writing our own buffer to our own descriptor.
            unsafe { libc::write(fd.as_raw_fd(), out.as_ptr().cast(), out.len()) };
        }
    }

    /// A read or write (`fuse_read_in`/`fuse_write_in`: the open flags at
    /// offset 32) through an `O_DIRECT` descriptor, while refusing those.
    fn refused(fs: &Fs, arg: &[u8]) -> bool {
        fs.faults.refuse_direct.load(Ordering::SeqCst) == 2
            && u32_at(arg, 32) as i32 & libc::O_DIRECT != 0
    }

    fn handle(fs: &Fs, opcode: u32, node: u64, arg: &[u8]) -> Option<(i32, Vec<u8>)> {
        let ok = |b: Vec<u8>| Some((0, b));
        let size = || fs.data.lock().unwrap().len() as u64;
        match opcode {
            26 => {
                // INIT: protocol 7.31, no special features.
                let mut b = Vec::new();
                for v in [7u32, 31, 0, 0] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&16u16.to_le_bytes()); // max_background
                b.extend_from_slice(&16u16.to_le_bytes()); // congestion_threshold
                b.extend_from_slice(&(1u32 << 20).to_le_bytes()); // max_write
                b.extend_from_slice(&1u32.to_le_bytes()); // time_gran
                b.extend_from_slice(&256u16.to_le_bytes()); // max_pages
                b.extend_from_slice(&0u16.to_le_bytes());
                b.resize(64, 0);
                ok(b)
            }
            1 => {
                // LOOKUP
                let name = arg.split(|&c| c == 0).next().unwrap_or(&[]);
                if node != ROOT || name != b"data" {
                    return Some((libc::ENOENT, Vec::new()));
                }
                let mut b = Vec::new();
                for v in [FILE, 0, 0, 0] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.extend_from_slice(&[0u8; 8]);
                attr(&mut b, FILE, size());
                ok(b)
            }
            3 | 4 => {
                // GETATTR, SETATTR (size only)
                if opcode == 4 && u32_at(arg, 0) & (1 << 3) != 0 && node == FILE {
                    fs.data.lock().unwrap().resize(u64_at(arg, 16) as usize, 0);
                }
                let mut b = vec![0u8; 16];
                attr(&mut b, node, if node == FILE { size() } else { 0 });
                ok(b)
            }
            14 => {
                if fs.faults.refuse_direct.load(Ordering::SeqCst) == 1
                    && u32_at(arg, 0) as i32 & libc::O_DIRECT != 0
                {
                    return Some((libc::EINVAL, Vec::new()));
                }
                // OPEN: direct I/O, so every read and write reaches us.
                let mut b = vec![0u8; 16];
                b[8..12].copy_from_slice(&1u32.to_le_bytes()); // FOPEN_DIRECT_IO
                ok(b)
            }
            15 => {
                // READ
                if refused(fs, arg) {
                    return Some((libc::EINVAL, Vec::new()));
                }
                let (off, n) = (u64_at(arg, 8), u32_at(arg, 16) as u64);
                let bad = fs.faults.fail_read_page.load(Ordering::SeqCst);
                if bad != u64::MAX && off / PS <= bad && bad <= (off + n.max(1) - 1) / PS {
                    return Some((libc::EIO, Vec::new()));
                }
                let d = fs.data.lock().unwrap();
                let s = (off as usize).min(d.len());
                let e = ((off + n) as usize).min(d.len());
                ok(d[s..e].to_vec())
            }
            16 => {
                // WRITE
                if refused(fs, arg) {
                    return Some((libc::EINVAL, Vec::new()));
                }
                if fs.faults.fail_writes.load(Ordering::SeqCst) {
                    return Some((libc::EIO, Vec::new()));
                }
                let (off, n) = (u64_at(arg, 8) as usize, u32_at(arg, 16) as usize);
                let data = &arg[40..40 + n];
                let mut d = fs.data.lock().unwrap();
                if d.len() < off + n {
                    d.resize(off + n, 0);
                }
                d[off..off + n].copy_from_slice(data);
                let mut b = (n as u32).to_le_bytes().to_vec();
                b.extend_from_slice(&[0u8; 4]);
                ok(b)
            }
            17 => {
                // STATFS
                let mut b = Vec::new();
                for v in [1u64 << 20, 1 << 19, 1 << 19, 16, 14] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                for v in [4096u32, 255, 4096, 0] {
                    b.extend_from_slice(&v.to_le_bytes());
                }
                b.resize(80, 0);
                ok(b)
            }
            18 | 20 | 25 | 34 | 38 => ok(Vec::new()), // RELEASE, FSYNC, FLUSH, ACCESS, DESTROY
            2 | 36 | 42 => None,                      // FORGET, INTERRUPT, BATCH_FORGET
            _ => Some((libc::ENOSYS, Vec::new())),
        }
    }
}

#[test]
fn eio_from_a_fuse_filesystem_reaches_the_caller_and_nothing_is_lost() {
    use std::sync::atomic::Ordering;
    let d = TempDir::new("fuse");
    let fs = std::sync::Arc::new(fuse::Fs {
        data: std::sync::Mutex::new((0..16 * PS as u64).map(pattern).collect()),
        faults: fuse::Faults {
            fail_read_page: u64::MAX.into(),
            fail_writes: false.into(),
            refuse_direct: 0.into(),
        },
    });
    let Some(mount) = fuse::mount(&d.0, fs.clone()) else {
        return;
    };
    let p = d.path("data");
    {
        // No flusher: the sync below must be the first to write the three
        // pages, while the filesystem fails writes.
        let c = cache_without_flusher(32);
        let f = c.open(&p).unwrap();
        assert_eq!(f.len(), 16 * PS as u64);
        assert_eq!(f.page(3).unwrap()[7], pattern(3 * PS as u64 + 7));
        // A read the filesystem fails: EIO, naming the page; not cached.
        fs.faults.fail_read_page.store(5, Ordering::SeqCst);
        let e = f.page(5).unwrap_err();
        assert_eq!(os_error(&e), Some(libc::EIO), "{e}");
        assert!(e.to_string().contains("page 5"), "{e}");
        let mut b = [0u8; 8];
        assert_eq!(
            os_error(&f.read_at(&mut b, 5 * PS as u64).unwrap_err()),
            Some(libc::EIO)
        );
        fs.faults.fail_read_page.store(u64::MAX, Ordering::SeqCst);
        assert_eq!(f.page(5).unwrap()[0], pattern(5 * PS as u64), "read again");
        // Writes the filesystem fails: sync reports EIO, pages stay dirty.
        f.write_at(&[0xAB; 3 * PS], PS as u64).unwrap();
        fs.faults.fail_writes.store(true, Ordering::SeqCst);
        let e = f.sync().unwrap_err();
        assert_eq!(os_error(&e), Some(libc::EIO), "{e}");
        assert_eq!(f.dirty_pages(), 3);
        fs.faults.fail_writes.store(false, Ordering::SeqCst);
        f.sync().unwrap();
        assert_eq!(f.dirty_pages(), 0);
        let data = fs.data.lock().unwrap();
        assert!(
            data[PS..4 * PS].iter().all(|&b| b == 0xAB),
            "written after all"
        );
        assert_eq!(data[4 * PS], pattern(4 * PS as u64));
        drop(data);
        f.close().unwrap();
        c.validate();
    }
    drop(mount);
}

#[test]
fn a_filesystem_refusing_direct_io_gets_buffered_io_at_open_or_at_the_first_transfer() {
    use std::sync::atomic::Ordering;
    for mode in [1u8, 2] {
        let d = TempDir::new("fuse-direct");
        let fs = std::sync::Arc::new(fuse::Fs {
            data: std::sync::Mutex::new((0..8 * PS as u64).map(pattern).collect()),
            faults: fuse::Faults {
                fail_read_page: u64::MAX.into(),
                fail_writes: false.into(),
                refuse_direct: mode.into(),
            },
        });
        let Some(mount) = fuse::mount(&d.0, fs.clone()) else {
            return;
        };
        {
            let c = cache(16);
            let f = c.open(d.path("data")).unwrap();
            // Refused at open: buffered from the start. Refused at the
            // first transfer: the read falls back and the file stays
            // buffered.
            assert_eq!(f.direct_io(), mode == 2, "mode {mode}");
            assert_eq!(f.page(2).unwrap()[9], pattern(2 * PS as u64 + 9));
            assert!(!f.direct_io(), "mode {mode}: buffered now");
            f.write_at(&[3u8; PS], 4 * PS as u64).unwrap();
            f.sync().unwrap();
            assert!(fs.data.lock().unwrap()[4 * PS..5 * PS]
                .iter()
                .all(|&b| b == 3));
            assert_eq!(c.stats().buffered_files + c.stats().direct_files, 1);
            assert_eq!(fs.faults.refuse_direct.load(Ordering::SeqCst), mode);
            f.close().unwrap();
        }
        drop(mount);
    }
}
