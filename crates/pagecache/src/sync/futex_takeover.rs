//! [`FutexMutex`]'s holder looked at, and a lock taken over from a dead
//! holder without a wait (5.14 R1-R3, `futex.rs`).

use super::{member_at, FutexMutex, Ordering, NO_TAG, TOOK_OVER};

impl FutexMutex {
    /// The tag of the lock's holder (R1), if it is held. Context: any.
    pub(crate) fn holder(&self) -> Option<u32> {
        // Relaxed: a look (the recovery's, at a dead process's holds).
        let w = self.word.load(Ordering::Relaxed);
        (w != 0).then_some(w >> 1)
    }

    /// L1, or, if the lock is held by a process that is gone, R3 at once
    /// (R2's question asked now, not after a `HOLDER_CHECK` of waiting):
    /// for a caller that skips a lock it finds held (the flusher's try of
    /// a file's flush lock), which would otherwise skip one whose holder
    /// died for ever. Whether the lock is ours; [`took_over`] says how.
    /// Context: no sleep.
    pub(crate) fn try_lock_or_take_over(&self) -> bool {
        let tag = self.tag();
        // Acquire: as L1.
        if self
            .word
            .compare_exchange(0, tag << 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return true;
        }
        let Some((base, m)) = member_at(self.word.as_ptr() as usize) else {
            return false;
        };
        // Relaxed: R3's CAS decides.
        let w = self.word.load(Ordering::Relaxed);
        let holder = w >> 1;
        if w == 0 || holder == NO_TAG || holder == tag || !(m.gone)(base, holder) {
            return false;
        }
        // R3, keeping `c`: sleepers (a `sync` in another process waiting
        // for the same holder) are woken by our unlock. Acquire: as R3.
        let taken = self
            .word
            .compare_exchange(w, tag << 1 | (w & 1), Ordering::Acquire, Ordering::Relaxed)
            .is_ok();
        if taken {
            TOOK_OVER.with(|t| t.set(true));
        }
        taken
    }
}
