//! The side table of frame hints: where each node was last found, by page
//! number (L2 of the protocol in `lib.rs` tries a pointer's own hint,
//! then this table's, then the cache's index walk).

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

/// Frame hints by page (`File::optimistic_hinted`): the frame each node
/// was cached in when last visited, so that a descent finds a cached child
/// without the cache's index walk. Two levels, chunks allocated on first
/// use; a hint is only a guess, checked by the cache, so races between
/// threads updating one are harmless.
pub(crate) struct Hints {
    top: Box<[AtomicPtr<AtomicU32>]>,
}

pub(crate) const HINT_BITS: u32 = 16;

pub(crate) const HINT_CHUNK: usize = 1 << HINT_BITS;

pub(crate) const NO_HINT: u32 = u32::MAX;

impl Hints {
    pub(crate) fn new() -> Hints {
        Hints {
            top: (0..HINT_CHUNK)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    #[inline]
    pub(crate) fn get(&self, pid: u64) -> u32 {
        let Some(c) = self.top.get((pid >> HINT_BITS) as usize) else {
            return NO_HINT;
        };
        // Acquire: pairs with the publishing CAS, so the chunk's
        // initialisation is visible.
        let c = c.load(Ordering::Acquire);
        if c.is_null() {
            return NO_HINT;
        }
        // SAFETY: a published chunk has HINT_CHUNK entries and lives until
        // the table drops; the index is masked below HINT_CHUNK.
        unsafe { &*c.add(pid as usize & (HINT_CHUNK - 1)) }.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self, pid: u64, frame: u32) {
        let Some(slot) = self.top.get((pid >> HINT_BITS) as usize) else {
            return; // past 2^32 pages: no hints
        };
        let mut c = slot.load(Ordering::Acquire);
        if c.is_null() {
            let fresh: Box<[AtomicU32]> =
                (0..HINT_CHUNK).map(|_| AtomicU32::new(NO_HINT)).collect();
            let fresh = Box::into_raw(fresh) as *mut AtomicU32;
            // AcqRel: publishes the chunk (Release), or reads the winner's
            // (Acquire).
            match slot.compare_exchange(
                std::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => c = fresh,
                Err(winner) => {
                    // SAFETY: ours, never published: rebuilt from the raw
                    // parts `into_raw` gave.
                    drop(unsafe {
                        Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, HINT_CHUNK))
                    });
                    c = winner;
                }
            }
        }
        // SAFETY: as in `get`.
        unsafe { &*c.add(pid as usize & (HINT_CHUNK - 1)) }.store(frame, Ordering::Relaxed);
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        for c in self.top.iter() {
            let c = c.load(Ordering::Acquire);
            if !c.is_null() {
                // SAFETY: published chunks came from `Box::into_raw` of a
                // HINT_CHUNK-long slice; nobody else holds the table now.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(c, HINT_CHUNK)) });
            }
        }
    }
}

impl std::fmt::Debug for Hints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hints")
    }
}
