//! The count of pins held through one handle (`pc_file`, `pc_anon`), which
//! `pc_file_close`, `pc_file_discard` and `pc_anon_free` check.
//!
//! A pin of the core writes only its page's state word; the count must not
//! add a shared line, nor a locked instruction, to every pin and release.
//! It is split into stripes, one per thread: each thread gets a stripe
//! number from a process-wide pool the first time it pins through any
//! handle and gives it back when it exits (as the core's statistics
//! counters do). While a thread owns its number no other thread writes
//! that stripe of any count, so an add or a subtract is a plain load and
//! store. Threads beyond the pool share the last stripe with atomic
//! read-modify-writes. A pin released on another thread than the one that
//! took it leaves one stripe positive and another negative: only the sum
//! means anything.

use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;

/// Stripes per count; the last one is shared by threads past the others.
const STRIPES: usize = 32;
const SHARED: usize = STRIPES - 1;

/// Pins held through one handle.
#[derive(Debug, Default)]
pub(crate) struct PinCount {
    stripes: [CachePadded<AtomicIsize>; STRIPES],
}

impl PinCount {
    /// Counts a pin just taken.
    #[inline]
    pub(crate) fn add(&self) {
        let id = stripe();
        let s = &self.stripes[id];
        if id == SHARED {
            // Relaxed: only `outstanding`'s Acquire reads of releases
            // matter.
            s.fetch_add(1, Ordering::Relaxed);
        } else {
            // Relaxed load and store: only this thread writes this stripe.
            s.store(s.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }

    /// Counts a pin just released. Release: the pin's drop, before this,
    /// happens-before an `outstanding` that reads it.
    #[inline]
    pub(crate) fn sub(&self) {
        let id = stripe();
        let s = &self.stripes[id];
        if id == SHARED {
            s.fetch_sub(1, Ordering::Release);
        } else {
            // Relaxed load: only this thread writes this stripe.
            s.store(s.load(Ordering::Relaxed) - 1, Ordering::Release);
        }
    }

    /// Pins held now. Exact when no pin is being taken meanwhile (close's
    /// contract: no call through the handle races its close); a release
    /// racing it makes it count high (close says -EBUSY), never low: every
    /// increment happened before this call, so the sum reaches 0 only when
    /// it has seen every matching decrement, and with them (Acquire) each
    /// pin's drop.
    pub(crate) fn outstanding(&self) -> isize {
        self.stripes
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .fold(0isize, |a, b| a.wrapping_add(b))
    }
}

/// Stripe numbers not owned by a live thread, and the next never used.
static FREE: Mutex<(usize, Vec<usize>)> = Mutex::new((0, Vec::new()));

/// Owns the thread's stripe number and gives it back at thread exit.
struct Owned(usize);

impl Owned {
    fn acquire() -> Owned {
        let mut g = FREE.lock().unwrap_or_else(|e| e.into_inner());
        let id = if let Some(id) = g.1.pop() {
            id
        } else if g.0 < SHARED {
            g.0 += 1;
            g.0 - 1
        } else {
            SHARED
        };
        Owned(id)
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // Releases from this thread's later TLS destructors go to the
        // shared stripe: the number is about to belong to another thread.
        let _ = ID.try_with(|c| c.set(SHARED));
        if self.0 != SHARED {
            // The mutex orders this thread's last stores to the stripe
            // before its next owner's first load of it.
            FREE.lock()
                .unwrap_or_else(|e| e.into_inner())
                .1
                .push(self.0);
        }
    }
}

const UNSET: usize = usize::MAX;

thread_local! {
    /// The thread's stripe (UNSET before its first pin): one TLS load.
    static ID: Cell<usize> = const { Cell::new(UNSET) };
    /// Owns the number; returns it at thread exit.
    static OWNED: Owned = Owned::acquire();
}

/// The calling thread's stripe.
#[inline]
fn stripe() -> usize {
    match ID.try_with(Cell::get) {
        Ok(UNSET) => first_stripe(),
        Ok(id) => id,
        // The thread is being torn down: the shared stripe is always right.
        Err(_) => SHARED,
    }
}

#[cold]
fn first_stripe() -> usize {
    // If the thread is being torn down, OWNED is gone: the shared stripe.
    let id = OWNED.try_with(|o| o.0).unwrap_or(SHARED);
    let _ = ID.try_with(|c| c.set(id));
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Pins taken on some threads and released on others, with more
    /// threads than stripes (the shared stripe's atomic path), sum to
    /// zero once every thread has finished.
    #[test]
    fn pins_moved_between_threads_sum_to_what_is_held() {
        let count = Arc::new(PinCount::default());
        let threads = STRIPES * 2;
        let per = 1000;
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(Mutex::new(rx));
        std::thread::scope(|s| {
            for t in 0..threads {
                let (count, tx, rx) = (&count, tx.clone(), rx.clone());
                s.spawn(move || {
                    for _ in 0..per {
                        if t % 2 == 0 {
                            count.add();
                            tx.send(()).unwrap();
                        } else {
                            rx.lock().unwrap().recv().unwrap();
                            count.sub();
                        }
                    }
                });
            }
        });
        assert_eq!(count.outstanding(), 0);
        count.add();
        count.add();
        count.sub();
        assert_eq!(count.outstanding(), 1);
    }
}
