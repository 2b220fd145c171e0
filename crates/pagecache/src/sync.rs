//! The one place atomics, fences and parking come from.
//!
//! Building with `RUSTFLAGS="--cfg loom"` swaps in loom's atomics so that the
//! protocol cores (`frame::state`) can be model-checked by `tests/loom.rs`.
//! Parking maps to `parking_lot_core` (hashed wait queues keyed by address, the
//! user-space form of the kernel's `page_waitqueue()` hash); under loom it
//! becomes a yield so that loom explores the interleavings of the re-checks.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Sleeps on the wait queue hashed from `key` while `still_blocked()` holds.
///
/// `still_blocked` is evaluated under the wait-queue bucket lock, and every
/// waker calls [`unpark_all`] on the same key *after* changing the state the
/// predicate reads, so a wake-up cannot be lost between the check and the
/// sleep. Spurious returns are allowed: callers loop and re-check.
#[cfg(not(loom))]
pub(crate) fn park(key: usize, still_blocked: impl Fn() -> bool) {
    // SAFETY: `park` requires that the validate/before_sleep/timed_out
    // callbacks do not panic and do not call into parking_lot_core; ours only
    // load an atomic word.
    unsafe {
        parking_lot_core::park(
            key,
            still_blocked,
            || {},
            |_, _| {},
            parking_lot_core::DEFAULT_PARK_TOKEN,
            None,
        );
    }
}

/// Wakes every thread parked on `key`.
#[cfg(not(loom))]
pub(crate) fn unpark_all(key: usize) {
    // SAFETY: `unpark_all` is safe to call with any key; the unsafe marker only
    // reflects that keys are raw addresses shared with `park`.
    unsafe {
        parking_lot_core::unpark_all(key, parking_lot_core::DEFAULT_UNPARK_TOKEN);
    }
}

/// A mutex whose `lock` returns the guard directly: `parking_lot` normally,
/// loom's (modelled) mutex under `--cfg loom`.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(v: T) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(v),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(v),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().unwrap();
    }
}

#[cfg(loom)]
pub(crate) fn park(_key: usize, still_blocked: impl Fn() -> bool) {
    if still_blocked() {
        loom::thread::yield_now();
    }
}

#[cfg(loom)]
pub(crate) fn unpark_all(_key: usize) {}
