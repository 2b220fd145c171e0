//! The futures' waits on a frame's state word (protocol 5.9,
//! `cache/asynch.rs`): the twins of `FrameDesc::wait_unlatched_as` and
//! `FrameDesc::wait_drained` that leave a waker where a thread would park.

use super::super::state::*;
use super::FrameDesc;
use crate::sync::waitq::{self, Registration};
use crate::sync::Ordering;
use std::task::Waker;

impl FrameDesc {
    /// Protocol 5.9 A1-A3 for a future that found page `(owner, index)`
    /// latched in this frame: advertises a waiting future (`AWAITERS`),
    /// then leaves `waker` in the frame's queue if, under the queue's lock,
    /// the latch is still held, the bit still set and the frame still
    /// holds that page. Returns true if it did (the caller returns
    /// `Pending`; the unlatch wakes it), false if the latch is gone or the
    /// frame recycled (the caller retries its lookup). A registration
    /// `reg` left elsewhere is moved here. Context: no sleep (the queue's
    /// leaf lock); the caller holds no pin of this page.
    pub fn poll_unlatched_as(
        &self,
        owner: u64,
        index: u64,
        reg: &mut Registration,
        waker: &Waker,
    ) -> bool {
        // Relaxed identity loads: as in `wait_clear` (a hint re-checked
        // under the queue's lock; a wrong answer costs a retry).
        let same = || self.identity() == (owner, index);
        loop {
            // A1. Acquire: if the latch is gone, the caller's retry reads
            // what its holder published.
            let s = self.state.load(Ordering::Acquire);
            if s & LATCHED == 0 || !same() {
                waitq::cancel(reg);
                return false;
            }
            // A2. Relaxed: only advertises the future to the unlatch (an
            // RMW of this word, so the two are ordered); what the caller
            // acts on is re-read under the queue's lock in A3.
            if s & AWAITERS == 0
                && self
                    .state
                    .compare_exchange(s, s | AWAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            // A3. Relaxed: under the queue's lock; an unlatch that cleared
            // the bit before we took the lock is seen (it cleared it before
            // taking the same lock to wake: lock order), a later one finds
            // our waker.
            return waitq::register(reg, self.key(), waker, || {
                let s = self.state.load(Ordering::Relaxed);
                s & LATCHED != 0 && s & AWAITERS != 0 && same()
            });
        }
    }

    /// Protocol 5.9 for a future holding the latch (5.5 step 2 without
    /// sleeping): true once only the holder's own and the base references
    /// remain (`DRAIN` cleared); else `DRAIN` is set, `waker` is left in
    /// the drain queue if the pins are still there under its lock, and the
    /// result is false (the caller returns `Pending` and polls this again
    /// when woken; a false with nothing registered means "look again").
    /// Context: no sleep; the caller holds the latch and no other pin of
    /// this page.
    pub(crate) fn poll_drained(&self, reg: &mut Registration, waker: &Waker) -> bool {
        loop {
            // Acquire: as `wait_drained`.
            let s = State(self.state.load(Ordering::Acquire));
            debug_assert!(s.is_latched(), "poll_drained without the latch");
            if s.refs() <= s.latch_base() {
                if s.is_draining() {
                    // Relaxed: a private flag of the latch holder.
                    self.state.fetch_and(!DRAIN, Ordering::Relaxed);
                }
                waitq::cancel(reg);
                return true;
            }
            if !s.is_draining()
                && self
                    .state
                    // Relaxed: as in `wait_drained`.
                    .compare_exchange(s.0, s.0 | DRAIN, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            // Relaxed: under the queue's lock; releasers drop the count
            // before they take it to wake (`wake_drainer`).
            if waitq::register(reg, self.drain_key(), waker, || {
                let s = State(self.state.load(Ordering::Relaxed));
                s.is_draining() && s.refs() > s.latch_base()
            }) {
                return false;
            }
        }
    }
}
