//! What a frame's descriptor records, in a cache shared by processes, of
//! the process that holds its latch (the state word's `HOLDER` field) or
//! runs its write-back (`wb_owner`), and the recovery's side of a dead
//! one's (protocol 5.14 L1-L4, W1-W3: `segment/death.rs`).

use super::super::state::*;
use super::FrameDesc;
use crate::sync::Ordering;

impl FrameDesc {
    /// This process's tag, for a frame of a cache shared by processes; 0
    /// otherwise (5.14 L1, W1).
    #[inline(always)]
    pub(super) fn my_tag(&self) -> u32 {
        #[cfg(not(loom))]
        return crate::sync::futex::member_at(self.key()).map_or(0, |(_, m)| m.tag);
        #[cfg(loom)]
        0
    }

    /// Counts `delta` pins of this frame as the calling thread's, in a
    /// cache shared by processes (5.15 P3: after the RMW that took a pin,
    /// before the one that drops it); nothing otherwise.
    #[inline(always)]
    pub(super) fn counted(&self, delta: i32) {
        #[cfg(not(loom))]
        crate::frame::ledger::count(self.key(), delta);
        #[cfg(loom)]
        let _ = delta;
    }

    /// In a cache shared by processes, records that the calling thread's
    /// eviction is about to freeze this frame (`on`), or has taken it out
    /// of its index or given up (5.15 P5); nothing otherwise.
    #[inline(always)]
    pub fn intend_evict(&self, on: bool) {
        #[cfg(not(loom))]
        crate::frame::ledger::intend_evict(self.key(), on);
        #[cfg(loom)]
        let _ = on;
    }

    /// Drops a pin of a dead process (5.15 P4): as `release_base`, but
    /// `None` (and nothing done) if the frame holds no reference at all,
    /// which a sound count never meets. Context: any, no sleep.
    pub fn release_dead(&self) -> Option<Released> {
        // Release: as `release`.
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                (State(s).refs() > 0).then(|| s - 1)
            })
            .ok()?;
        Some(self.after_drop_ref(State(old)))
    }

    /// [`FrameDesc::my_tag`] in place in the state word (`HOLDER`).
    #[inline(always)]
    pub(super) fn holder(&self) -> u64 {
        (self.my_tag() as u64) << HOLDER_SHIFT
    }

    /// Takes over the latch if the process tagged `tag` (dead: the
    /// watcher's recovery, 5.14 D5) holds it: true if it did (the caller
    /// holds the latch, no pin, and drops the page: `Inner::drop_torn`).
    /// Context: any, no sleep.
    pub fn take_dead_latch(&self, tag: u32) -> bool {
        let mine = self.holder();
        // Relaxed: seeds the CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            if s & LATCHED == 0 || State(s).latch_holder() != tag || mine == 0 {
                return false;
            }
            // Acquire: whatever the dead holder wrote (L3).
            match self.state.compare_exchange_weak(
                s,
                (s & !HOLDER) | mine,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(cur) => s = cur,
            }
        }
    }

    /// `s`, a latched state about to be stored (a page inserted latched),
    /// with this process's latch holder tag (5.14 L1).
    #[inline]
    pub fn with_holder(&self, s: State) -> State {
        debug_assert!(s.is_latched());
        State(s.0 | self.holder())
    }

    /// The tag of the process whose write-back of this page is starting
    /// or in flight (0: none, or a private cache).
    pub fn writeback_owner(&self) -> u32 {
        // Relaxed: read by a recovery after the owner died (its writes
        // are all done), or as a hint.
        self.wb_owner.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Clears the write-back owner word if it still holds `tag` (W3: the
    /// owner died).
    pub fn clear_writeback_owner(&self, tag: u32) {
        let _ = self.wb_owner.compare_exchange(
            tag,
            0,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}
