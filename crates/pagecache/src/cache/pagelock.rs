//! Baseline page locks (`docs/contract.md` 3; seed 003): instead of the pin CAS on
//! the page's own state word alone, every pin and release of a page first
//! takes a mutex: one global mutex (the design before FreeBSD's hashed
//! locks), or one of a hashed array of cache-line padded mutexes (FreeBSD's
//! `pa_lock`, hashed by frame number). The default build uses neither
//! (`PageLockKind::Bits`): the cache tests one flag (`Inner::hooks`) on its
//! pin and release paths and never touches this module.

use crate::frame::FrameNo;
use crate::sync::{LockClass, Mutex, MutexGuard};
use crossbeam_utils::CachePadded;
use std::io;

/// How page pins and releases are serialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageLockKind {
    /// Per-page bits in the state word, no lock (the default).
    #[default]
    Bits,
    /// One global page mutex (a baseline).
    Global,
    /// A hashed array of this many cache-line padded mutexes, a power of
    /// two (a baseline; FreeBSD used 256 in seed 003's era).
    Hashed(usize),
}

impl PageLockKind {
    /// Checks the lock count.
    pub fn check(self) -> io::Result<()> {
        match self {
            PageLockKind::Hashed(n) if !n.is_power_of_two() || n > 1 << 20 => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("page_locks: Hashed({n}): the count must be a power of two up to 2^20"),
            )),
            _ => Ok(()),
        }
    }
}

/// The lock array of a `Global` or `Hashed` build.
#[derive(Debug)]
pub(crate) struct PageLocks {
    locks: Box<[CachePadded<Mutex<()>>]>,
    mask: usize,
}

impl PageLocks {
    /// `None` for [`PageLockKind::Bits`].
    pub(crate) fn new(kind: PageLockKind) -> Option<PageLocks> {
        let (n, class) = match kind {
            PageLockKind::Bits => return None,
            PageLockKind::Global => (1, LockClass::PageMutex),
            PageLockKind::Hashed(n) => (n, LockClass::PageLockHash),
        };
        Some(PageLocks {
            locks: (0..n)
                .map(|_| CachePadded::new(Mutex::with_class((), class)))
                .collect(),
            mask: n - 1,
        })
    }

    /// The lock of frame `f`.
    /// Context: no sleep beyond the mutex itself, a leaf: hold it around one state-word RMW only.
    #[inline]
    pub(crate) fn lock(&self, f: FrameNo) -> MutexGuard<'_, ()> {
        // Fibonacci hashing spreads neighbouring frames over the array.
        let h = (f as usize).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize) >> 20;
        self.locks[h & self.mask].lock()
    }
}
