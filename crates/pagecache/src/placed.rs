//! [`Placed`]: a value either owned on this process's heap (a private
//! cache) or living in memory other processes map too (a table of a
//! shared cache's segment, `segment/`), reached the same way in both.

use std::ptr::NonNull;

/// A `T` on the heap (dropped with the `Placed`) or placed at an address
/// whose memory someone else owns (never dropped here). Dereferences to
/// the `T` either way: one pointer load, as a `Box`.
pub(crate) struct Placed<T> {
    ptr: NonNull<T>,
    owned: bool,
}

impl<T> Placed<T> {
    /// `v` on the heap.
    pub(crate) fn new(v: T) -> Placed<T> {
        Placed {
            ptr: NonNull::from(Box::leak(Box::new(v))),
            owned: true,
        }
    }

    /// The `T` at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` points to an initialised `T`, suitably aligned, that stays
    /// valid (mapped, not dropped or rewritten) while the result lives, and
    /// is shared only through `&T` (its fields are atomics and locks).
    pub(crate) unsafe fn at(ptr: NonNull<T>) -> Placed<T> {
        Placed { ptr, owned: false }
    }
}

impl<T> std::ops::Deref for Placed<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: `new`'s box, alive until drop, or `at`'s contract.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Drop for Placed<T> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the box leaked in `new`, dropped once.
            drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Placed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

// SAFETY: a `Placed<T>` is a `Box<T>` or a shared reference to a `T` that
// lives as long: sending it sends the one or the other.
unsafe impl<T: Send + Sync> Send for Placed<T> {}
// SAFETY: shared access is `&T` only.
unsafe impl<T: Sync> Sync for Placed<T> {}
