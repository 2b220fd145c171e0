//! A frame's write-back: its start (`DIRTY` becomes `WRITEBACK`, with the
//! owner's tag in a shared cache, 5.14 W1), its end (W2) and the wait for
//! it.

use super::super::state::*;
use super::FrameDesc;
use crate::sync::Ordering;

impl FrameDesc {
    /// Write-back step 1: clears `DIRTY` and sets `WRITEBACK` (and, with
    /// `stable`, `STABLE`) unless the page was removed or a write of it is
    /// in flight already. Returns whether the caller must write the page.
    /// The caller holds a pin, which it keeps until after `end_writeback`:
    /// from here on that pin stands for the write-back (see `latch_base`),
    /// so a writer draining pins is woken to count again.
    /// Context: any, no sleep.
    #[must_use = "true means the caller owns the write-back and must end it"]
    pub fn start_writeback(&self, stable: bool) -> bool {
        let mark = if stable {
            WRITEBACK | STABLE
        } else {
            WRITEBACK
        };
        // W1: in a shared cache, claim the write-back's owner word first
        // (a dead process's claim is cleared by its recovery, W3).
        let me = self.my_tag();
        if me != 0
            && self
                .wb_owner
                // Relaxed: the word is read by the owner's own W2 and by a
                // recovery after the owner died (it saw the death through
                // the kernel: the dead process's stores are all done).
                .compare_exchange(
                    0,
                    me,
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        // AcqRel: orders against truncate setting REMOVED (both RMW on this
        // word) and against the dirty tag clear that preceded it.
        let r = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s & (DIRTY | REMOVED | WRITEBACK) == DIRTY {
                    Some((s & !DIRTY) | mark)
                } else {
                    None
                }
            });
        match r {
            Ok(old) => {
                // A latch holder parked for our pin may go now: the same
                // handshake as `release` (it re-checks after its park's
                // fence, 5.10).
                if !stable && State(old).is_draining() {
                    self.wake_drainer();
                }
                true
            }
            Err(_) => {
                if me != 0 {
                    // Relaxed: as the claim.
                    self.wb_owner.store(0, std::sync::atomic::Ordering::Relaxed);
                }
                false
            }
        }
    }

    /// Write-back step 2: the write finished; on failure the page is dirty
    /// again so a later `sync` retries it. Returns the state before (a page
    /// rewritten during the write is dirty already). The caller still holds
    /// the write-back's pin. Context: any, no sleep.
    pub fn end_writeback(&self, failed: bool) -> State {
        let set = if failed { DIRTY } else { 0 };
        let old = self.update(set, WRITEBACK | STABLE);
        // W2: the owner word after the bit (Relaxed: only the owner, or
        // its recovery, writes a nonzero word back to 0).
        if self.wb_owner.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            self.wb_owner.store(0, std::sync::atomic::Ordering::Relaxed);
        }
        old
    }

    /// Parks until no write of page `(owner, index)` is in flight (or the
    /// frame holds another page). Context: may sleep; no pin of this page
    /// held: the write's end needs no lock and waits for nothing.
    pub fn wait_writeback_as(&self, owner: u64, index: u64) {
        let _ = self.wait_clear(WRITEBACK, Some((owner, index)), false, false);
    }

    /// [`FrameDesc::wait_unlatched_as`] for a write-back pin: also ends
    /// once the holder holds more references than `latch_base`, which a
    /// write-back pin passes (a writer draining, or waiting for a run in
    /// W3, lock rule 7: that run's holder may be the one syncing). Context
    /// and result: as `wait_unlatched_as`.
    #[must_use = "true: the caller holds a dead process's latch and must drop the page"]
    pub fn wait_latch_passable_as(&self, owner: u64, index: u64) -> bool {
        self.wait_clear(LATCHED, Some((owner, index)), true, true)
    }

    /// Wakes the threads and futures waiting on this frame's latch without
    /// releasing it, so that a write-back waiting to pass it looks again
    /// (`wait_latch_passable_as`): after the holder took the reference
    /// that lets write-back pins pass (W3). Context: no sleep; the caller
    /// holds the latch.
    pub fn wake_latch_waiters(&self) {
        // SeqCst: 5.10's K1 (the reference taken before, by an RMW, then
        // the look at the waiter bits), against a waiter's P1-P3.
        crate::sync::fence(Ordering::SeqCst);
        // Relaxed: after the fence.
        let s = self.state.load(Ordering::Relaxed);
        if s & WAITERS != 0 {
            crate::sync::unpark_all(self.key());
        }
        if s & AWAITERS != 0 {
            self.wake_futures();
        }
    }
}
