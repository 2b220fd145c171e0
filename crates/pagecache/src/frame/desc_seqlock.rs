//! A frame's identity and its seqlock version (protocol 5.4): the write
//! sections that change a frame's identity or bytes, the optimistic
//! reader's begin and validate, the frees-path reset, and the write-back
//! age (`dirtied`).

use super::super::state::*;
use super::FrameDesc;
use crate::sync::{fence, Ordering};

impl FrameDesc {
    /// Starts a seqlock write section: the version becomes odd. Caller is the
    /// frame's exclusive owner (latch holder after draining, or refcount 0).
    pub fn begin_change(&self) {
        // Relaxed load: only the exclusive owner writes `version`.
        let v = self.version.load(Ordering::Relaxed);
        if v & 1 == 0 {
            // Relaxed store + Release fence: the odd value is ordered before
            // every following write of identity or bytes (the classic seqlock
            // writer, Boehm 2012); pairs with the reader's Acquire fence.
            self.version.store(v + 1, Ordering::Relaxed);
            fence(Ordering::Release);
        }
    }

    /// Whether this frame ever held a page since its descriptor was made
    /// (its version moved from 1): a hint, for [`super::FrameTable::note_alloc`].
    #[inline]
    pub fn used_before(&self) -> bool {
        // Relaxed: a hint; the frame was just taken from the pool.
        self.version.load(Ordering::Relaxed) != 1
    }

    /// Ends a seqlock write section: the version becomes even.
    pub fn end_change(&self) {
        // Relaxed: only the exclusive owner writes `version`.
        let v = self.version.load(Ordering::Relaxed);
        debug_assert!(v & 1 == 1, "end_change outside a write section");
        // Release: the writes of the section happen-before a reader that
        // loads this even value with Acquire.
        self.version.store(v + 1, Ordering::Release);
    }

    /// Sets the identity. Caller owns the frame exclusively, inside a
    /// `begin_change`/`end_change` section.
    pub fn set_identity(&self, owner: u64, index: u64) {
        // Relaxed: our own earlier store.
        debug_assert!(self.version.load(Ordering::Relaxed) & 1 == 1);
        // Relaxed: inside the seqlock write section (see `begin_change`).
        self.owner.store(owner, Ordering::Relaxed);
        self.index.store(index, Ordering::Relaxed);
    }

    /// Hands a frame the caller owns (refcount 0) to a new page: sets its
    /// identity inside a version section, then publishes `s` (one of
    /// [`State`]'s named starting states). Context: any, no sleep.
    pub fn assign(&self, owner: u64, index: u64, s: State) {
        self.begin_change();
        self.set_identity(owner, index);
        self.end_change();
        // A window (5.15 P6a): a recount of this frame (a stale suspect)
        // must not take the pins below for a dead process's.
        let w = self.window();
        // Release: identity and initial bytes written before are visible to
        // anyone whose pin CAS (Acquire) reads this value.
        self.state.store(s.0, Ordering::Release);
        // The assigner's pins among the references (all but the cache's),
        // counted after the store that made them (5.15 P3).
        if s.refs() > 1 {
            w.count(s.refs() as i32 - 1);
        }
        w.close();
    }

    /// Records when the page went from clean to dirty (see the field).
    /// Context: any, no sleep.
    #[inline]
    pub fn set_dirtied(&self, ms: u64) {
        // Relaxed: a hint (see the field).
        self.dirtied
            .store(ms, crate::sync::unmodelled::Ordering::Relaxed);
    }

    /// When the page last went from clean to dirty (see the field).
    #[inline]
    pub fn dirtied(&self) -> u64 {
        // Relaxed: a hint (see the field).
        self.dirtied
            .load(crate::sync::unmodelled::Ordering::Relaxed)
    }

    /// Protocol 5.4 reader step 1: the version if even.
    #[inline]
    pub fn read_begin(&self) -> Option<u64> {
        // Acquire: pairs with `end_change` (Release) so identity and bytes of
        // that section are visible.
        let v = self.version.load(Ordering::Acquire);
        if v & 1 == 0 {
            Some(v)
        } else {
            None
        }
    }

    /// Protocol 5.4 reader last step (5.8 O6): true if no write section
    /// began since `read_begin` returned `v` and the page was not removed
    /// meanwhile.
    ///
    /// The removal check is for pages truncate cuts off while they are
    /// pinned (5.6 step 4): such a frame keeps its identity and version
    /// until its last release (its pin holders still read it), so the
    /// version alone would validate a view of a page that is no longer the
    /// file's, even after the file grew back over its index. `REMOVED` is
    /// set by one RMW and cleared only by the frame's reset (after the
    /// version went odd) or its next assignment.
    ///
    /// Ordering: the state is loaded first, with Acquire, then the version.
    /// A state that is not `REMOVED` but was stored by a reset or an
    /// assignment comes after a version store that made it odd (and the
    /// Release fence in `begin_change`), so the version load then sees a
    /// value other than `v`: a removal, a reuse and a write are each caught
    /// by one of the two loads. Loading the version first would let a reset
    /// slip between them.
    #[inline]
    pub fn read_validate(&self, v: u64) -> bool {
        // Acquire fence: orders the relaxed data loads before the re-loads
        // below; pairs with the Release fence in `begin_change`.
        fence(Ordering::Acquire);
        // Acquire: orders the version load after it, and pairs with the
        // Release fence that precedes a reset's store of the word (see
        // above). Same cache line as the version: no extra miss.
        let s = self.state.load(Ordering::Acquire);
        s & REMOVED == 0 && self.version.load(Ordering::Relaxed) == v
    }

    /// The addresses of the state word and the version, for a reader that
    /// validates a view itself (the C ABI's inline
    /// `pc_optimistic_valid`): it must load them as
    /// [`FrameDesc::read_validate`] does, in that order.
    #[cfg(not(loom))]
    pub fn validation_words(&self) -> (*const u64, *const u64) {
        (
            self.state.as_ptr().cast_const(),
            self.version.as_ptr().cast_const(),
        )
    }

    /// Frees-path reset: clears identity and state. Caller owns the frame
    /// (refcount 0 after `freeze` or `Released::Last`). Leaves the version odd
    /// until the next owner's `end_change`. In a shared cache the word
    /// keeps the caller's tag in `HOLDER` (5.15 P8a).
    pub fn reset(&self) {
        self.begin_change();
        self.set_identity(NO_OWNER, 0);
        // Relaxed: nobody can change a zero-refcount word except by the
        // owner's next publication; stray pinners only read it and fail.
        self.state.store(self.in_hand_if_last(0), Ordering::Relaxed);
    }
}
