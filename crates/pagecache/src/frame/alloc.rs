//! Layer 2, alloc: free frames.
//!
//! [`FrameAllocator`] is the narrow interface the cache uses; this module's
//! [`GlobalPool`] is the simple, correct implementation (one free list under
//! one lock, last-in first-out so recently freed, cache-warm frames are
//! reused first). The per-CPU caches of `DESIGN.md` layer 2 replace it behind
//! the same trait.
//!
//! Context: free frames have refcount 0, no identity and an odd version
//! (see `FrameDesc::reset`). The allocator never touches descriptors; it only
//! stores frame numbers, so it performs no I/O and wakes nobody under its lock.

use super::FrameNo;
use parking_lot::Mutex;

/// Hands out and takes back free frames.
///
/// Callers MUST only `free` a frame they own exclusively (refcount 0 after a
/// freeze or the last release, descriptor reset), and never free one twice.
pub trait FrameAllocator: Send + Sync + std::fmt::Debug {
    /// A free frame, or `None` if none is free (the caller reclaims).
    fn alloc(&self) -> Option<FrameNo>;
    /// Returns a frame.
    fn free(&self, f: FrameNo);
    /// Number of free frames (a snapshot, for stats and tests).
    fn free_count(&self) -> usize;
}

/// One global LIFO free list under one mutex.
#[derive(Debug)]
pub struct GlobalPool {
    /// (L) the pool lock.
    free: Mutex<Vec<FrameNo>>,
}

impl GlobalPool {
    /// A pool holding frames `0..n`, lowest numbers handed out first.
    pub fn new(n: usize) -> Self {
        GlobalPool {
            free: Mutex::new((0..n as FrameNo).rev().collect()),
        }
    }
}

impl FrameAllocator for GlobalPool {
    fn alloc(&self) -> Option<FrameNo> {
        self.free.lock().pop()
    }

    fn free(&self, f: FrameNo) {
        let mut v = self.free.lock();
        debug_assert!(!v.contains(&f), "double free of frame {f}");
        v.push(f);
    }

    fn free_count(&self) -> usize {
        self.free.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_is_lifo_and_counts() {
        let p = GlobalPool::new(3);
        assert_eq!(p.free_count(), 3);
        let a = p.alloc().unwrap();
        let b = p.alloc().unwrap();
        assert_eq!((a, b), (0, 1));
        p.free(a);
        assert_eq!(p.alloc(), Some(a), "most recently freed first");
        p.alloc().unwrap();
        assert_eq!(p.alloc(), None);
        assert_eq!(p.free_count(), 0);
    }
}
