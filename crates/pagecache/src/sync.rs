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
/// loom's (modelled) mutex under `--cfg loom`. With the `lockstat` feature it
/// counts acquisitions, contention, wait and hold times per [`LockClass`];
/// without it the class is not even stored.
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: parking_lot::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(all(feature = "lockstat", not(loom)))]
    class: Class,
}

#[cfg(not(loom))]
pub(crate) use crate::stats::lockstat::LockClass;
/// Lock classes (only names under loom).
#[cfg(loom)]
#[derive(Debug, Clone, Copy)]
pub(crate) enum LockClass {
    Pool,
    PcpShard,
    Replacement,
    ReplacementBatch,
    PageLatchWait,
    PageDrainWait,
}

#[cfg(all(feature = "lockstat", not(loom)))]
#[derive(Debug, Clone, Copy)]
struct Class(LockClass);

#[cfg(all(not(feature = "lockstat"), not(loom)))]
pub(crate) type MutexGuard<'a, T> = parking_lot::MutexGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

/// A guard that records the hold time when dropped (`lockstat` only).
#[cfg(all(feature = "lockstat", not(loom)))]
pub(crate) struct MutexGuard<'a, T> {
    g: parking_lot::MutexGuard<'a, T>,
    class: LockClass,
    since: std::time::Instant,
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<T> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.g
    }
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.g
    }
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        crate::stats::lockstat::released(self.class, self.since);
    }
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<T> std::fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MutexGuard")
    }
}

impl<T> Mutex<T> {
    /// A mutex profiled as `class` (with `lockstat`).
    #[allow(unused_variables)] // `class` is only kept with lockstat
    pub(crate) fn with_class(v: T, class: LockClass) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: parking_lot::Mutex::new(v),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(v),
            #[cfg(all(feature = "lockstat", not(loom)))]
            class: Class(class),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(all(feature = "lockstat", not(loom)))]
        {
            let class = self.class.0;
            let g = match self.inner.try_lock() {
                Some(g) => {
                    crate::stats::lockstat::acquired(class, None);
                    g
                }
                None => {
                    let t = std::time::Instant::now();
                    let g = self.inner.lock();
                    crate::stats::lockstat::acquired(class, Some(t));
                    g
                }
            };
            MutexGuard {
                g,
                class,
                since: std::time::Instant::now(),
            }
        }
        #[cfg(all(not(feature = "lockstat"), not(loom)))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().unwrap();
    }
}

/// Times a wait of `class` (page latches) when `lockstat` is on; the
/// returned token records it when dropped. Free otherwise.
#[inline]
#[allow(unused_variables)]
pub(crate) fn wait_timer(class: LockClass) -> WaitTimer {
    WaitTimer {
        #[cfg(all(feature = "lockstat", not(loom)))]
        t: (class, std::time::Instant::now()),
    }
}

/// See [`wait_timer`].
pub(crate) struct WaitTimer {
    #[cfg(all(feature = "lockstat", not(loom)))]
    t: (LockClass, std::time::Instant),
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl Drop for WaitTimer {
    fn drop(&mut self) {
        crate::stats::lockstat::waited(self.t.0, self.t.1);
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
