//! The frames a process holds with no reference (protocol 5.15 P8,
//! numbered as in `docs/design.md`): in a cache shared by processes, a
//! frame out of every stack of the free pool with a count of zero names
//! in its state word's `HOLDER` field the process whose thread holds it
//! (taken from the pool, freed by a last release or an eviction, on its
//! way to an index, a region's slot or the pool), so that the recovery of
//! a dead one can find and free it (`PerCpuPool::census`).
//!
//! * P8a. Every RMW that drops a frame's last reference (a release, an
//!   unlatch that drops the holder's pin, an orphan, an eviction's
//!   freeze, a recovery's drop of a dead process's pins) writes the
//!   caller's tag in `HOLDER` in the same RMW; `reset` keeps it.
//! * P8b. The pool writes the taker's tag in a frame's word under the
//!   stack's lock before a pop is committed (the stack's length), and 0
//!   after a push is committed; a batch moves between two stacks under
//!   both their locks, its source's length committed first.
//! * P8c. So, outside the pool's locks, a frame with no reference is in a
//!   stack or names its holder in `HOLDER`; a frame with no reference, in
//!   no stack and naming no one is a batch a process died moving between
//!   two stacks. A census holding every stack's lock (no live process is
//!   then inside the pool) takes as lost every frame in no stack with no
//!   reference whose `HOLDER` is 0 or the dead process's tag, marks it
//!   with its own tag, and frees it after (one still linked in its index
//!   is an eviction's freeze whose thread had no table to record it, P5:
//!   the caller takes it out as P5 does instead). A frame in a stack
//!   whose word a dead process left half-written (a pop or push not
//!   finished) is set back to 0.
//!
//! Where nothing is shared (a private cache, loom), `HOLDER` stays 0
//! outside latches, as before.

use super::super::state::*;
use super::{FrameDesc, Released};
use crate::sync::Ordering;

impl FrameDesc {
    /// Drops the cache's own reference of a page taken out of its index
    /// (truncate, a torn page dropped, a deferred free): [`FrameDesc::release`]
    /// of a reference no holder counts (5.15). Context: as `release`.
    #[inline(always)]
    pub fn release_base(&self) -> Released {
        if self.in_shared() {
            return self.drop_ref_shared();
        }
        self.drop_ref()
    }

    /// `release_base` in a cache shared by processes: the last reference
    /// leaves the caller's tag in `HOLDER`, in the same RMW (P8a).
    #[inline(always)]
    pub(super) fn drop_ref_shared(&self) -> Released {
        // Release: as `drop_ref`.
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                debug_assert!(State(s).refs() > 0, "release of a frame with no reference");
                Some(self.in_hand_if_last(s - 1))
            })
            .unwrap_or_else(|s| s);
        self.after_drop_ref(State(old))
    }

    /// `new`, a word an RMW is about to write: with the caller's tag in
    /// `HOLDER` if it holds no reference and the cache is shared (P8a).
    #[inline(always)]
    pub(super) fn in_hand_if_last(&self, new: u64) -> u64 {
        if new & REFS == 0 && self.in_shared() {
            new | self.holder()
        } else {
            new
        }
    }

    /// P8b: the frame leaves a stack of the pool for the process whose
    /// tag `holder` is (in place); also a census's mark of a frame it
    /// found lost (P8c). Context: under the stack's lock, before the pop
    /// is committed; the frame holds no reference.
    #[inline]
    pub fn unpooled(&self, holder: u64) {
        // Relaxed: what counts is read under the pool's locks (a census's
        // second look), whose acquisition orders it; its first look, with
        // no lock, only picks suspects, and a dead process's frames no
        // longer change.
        self.state.store(holder, Ordering::Relaxed);
    }

    /// P8b: the frame is back in a stack. Context: under the stack's
    /// lock, after the push is committed.
    #[inline]
    pub(crate) fn pooled(&self) {
        // Relaxed: as `unpooled`.
        self.state.store(0, Ordering::Relaxed);
    }

    /// P8c, for a frame found in a stack under its lock: its word set
    /// back to 0 if a dead process left its pop or push half-done there
    /// (its tag in `HOLDER`). Context: under the stack's lock.
    pub(crate) fn settle_pooled(&self) {
        // Relaxed: as `unpooled`.
        if self.state.load(Ordering::Relaxed) & HOLDER != 0 {
            self.pooled();
        }
    }

    /// P8c: whether this frame, if a census holding every stack's lock
    /// finds it in no stack, is lost: held with no reference by the dead
    /// process tagged `tag`, or by no one (a batch between two stacks).
    /// Context: any (a census asks with no lock held to pick its
    /// suspects, then again under the locks).
    pub fn lost_in_hand(&self, tag: u32) -> bool {
        // Acquire: the last RMW of the word (a dead holder's) and what it
        // published.
        let s = State(self.state.load(Ordering::Acquire));
        s.refs() == 0 && (s.0 & HOLDER == 0 || s.latch_holder() == tag)
    }
}
