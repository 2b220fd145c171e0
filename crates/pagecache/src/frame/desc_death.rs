//! What a frame's descriptor records, in a cache shared by processes, of
//! the process that holds its latch (the state word's `HOLDER` field) or
//! runs its write-back (`wb_owner`), and the recovery's side of a dead
//! one's (protocol 5.14 L1-L4, W1-W3: `segment/death.rs`).

use super::super::state::*;
use super::FrameDesc;
use crate::sync::Ordering;

#[cfg(not(loom))]
pub(super) use crate::frame::ledger::Window;

/// No counts under loom (the ledger is in a segment).
#[cfg(loom)]
pub(super) struct Window;

/// The references of a frame that are held beyond the pins counted
/// (5.15 P6d-e), for [`FrameDesc::drop_uncounted`].
#[derive(Debug, Clone, Copy)]
pub enum Held {
    /// A page in its index: the cache's reference.
    Indexed,
    /// A page taken out of its index (`REMOVED`), looked at under the
    /// file's tree lock and the deferred-free queue's lock.
    Removed {
        /// Its identity (owner, index).
        page: (u64, u64),
        /// 1 if the deferred-free queue keeps its cache reference, else 0.
        base: u64,
    },
}

#[cfg(loom)]
impl Window {
    #[inline(always)]
    pub(super) fn count(&self, _delta: i32) {}
    #[inline(always)]
    pub(super) fn close(self) {}
}

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

    /// Whether this frame is in a cache shared by processes (its pins are
    /// counted, 5.15): two loads of words nobody writes.
    #[inline(always)]
    pub(super) fn in_shared(&self) -> bool {
        #[cfg(not(loom))]
        return crate::frame::ledger::in_shared(self.key());
        #[cfg(loom)]
        false
    }

    /// `rmw`, which takes a counted pin (if `took` says so of its result),
    /// in a cache shared by processes: counted after it, in a window (5.15
    /// P3, P6a). The shared path of `pin_cas` and `pin_more`.
    #[inline(never)]
    pub(super) fn counted_shared<T>(
        &self,
        rmw: impl FnOnce() -> T,
        took: impl FnOnce(&T) -> bool,
    ) -> T {
        let w = self.shared_window();
        let r = rmw();
        if took(&r) {
            w.count(1);
        }
        w.close();
        r
    }

    /// `rmw`, which drops a counted pin (unless `kept` says of its result
    /// that the pin stayed), in a cache shared by processes: uncounted
    /// before it (and counted again after it if kept), in a window (5.15
    /// P3, P6a). The shared path of `release` and of the unlatches that
    /// drop the holder's pin.
    #[inline(never)]
    pub(super) fn uncounted_shared<T>(
        &self,
        rmw: impl FnOnce() -> T,
        kept: impl FnOnce(&T) -> bool,
    ) -> T {
        let w = self.shared_window();
        w.count(-1);
        let r = rmw();
        if kept(&r) {
            w.count(1);
        }
        w.close();
        r
    }

    /// [`FrameDesc::window`] of a frame known to be in a shared cache.
    #[inline(always)]
    fn shared_window(&self) -> Window {
        #[cfg(not(loom))]
        return crate::frame::ledger::Window::open_shared(self.key());
        #[cfg(loom)]
        Window
    }

    /// Opens a pin count's window on this frame (5.15 P6a): before the RMW
    /// that takes or drops a counted pin. Nothing in a private cache.
    #[inline(always)]
    pub(super) fn window(&self) -> Window {
        #[cfg(not(loom))]
        return crate::frame::ledger::Window::open(self.key());
        #[cfg(loom)]
        Window
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
                (State(s).refs() > 0).then(|| self.in_hand_if_last(s - 1))
            })
            .ok()?;
        Some(self.after_drop_ref(State(old)))
    }

    /// 5.15 P6d-e: drops the references of this frame that nobody holds
    /// (a dead process's pins taken inside a window, or the cache's
    /// reference of a removed page a dead remover had in hand), `counted`
    /// giving the pins counted in every table and row
    /// (`ledger::Area::counted_pins`), looked at after the mark, and
    /// `held` the references held beyond those. `Some((n, last))`: `n`
    /// dropped (0: there were none, or the frame is not what `held`
    /// describes: free, or in its index where `held` says removed, or the
    /// other way), `last` if the count is now zero (the caller frees the
    /// frame); `None`: not now (a pin taken or released meanwhile, or a
    /// count under way). Context: no sleep.
    pub fn drop_uncounted(
        &self,
        held: Held,
        counted: impl FnOnce() -> Option<i64>,
    ) -> Option<(u64, bool)> {
        // Acquire: every window whose RMW came before this one is seen,
        // its intent or its count (P6b).
        let w0 = self.state.fetch_or(MARK, Ordering::Acquire) | MARK;
        let s = State(w0);
        let base = match held {
            Held::Indexed if !s.is_removed() => 1,
            // Identity is stable while the count is not zero, which the
            // CAS below checks (5.4).
            Held::Removed { page, base } if s.is_removed() && self.identity() == page => base,
            _ => return Some((0, false)),
        };
        if s.refs() == 0 {
            return Some((0, false));
        }
        let c = counted()?;
        let extra = s.refs() as i64 - base as i64 - c;
        if extra < 0 {
            return None;
        }
        // AcqRel: as a release (Release; and Acquire for the one that
        // frees) and as the RMW whose value the look above described.
        // Fails if any pin was taken or released since `w0` (P6b): the look
        // then described no moment (also when it found nothing to drop).
        self.state
            .compare_exchange(
                w0,
                self.in_hand_if_last((w0 - extra as u64) & !MARK),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .ok()?;
        if extra > 0 && s.is_draining() {
            self.wake_drainer();
        }
        Some((extra as u64, s.refs() == extra as u64))
    }

    /// Tests of 5.15 P6: takes a pin of this frame inside a window and
    /// kills this process before the pin is counted (what a process
    /// killed there leaves: its intent, and a reference nobody counts).
    #[cfg(not(loom))]
    pub fn die_in_pin_window(&self) -> ! {
        // (Never closed: the process dies inside.)
        let _w = self.window();
        // AcqRel: as `pin_cas`.
        self.state.fetch_add(1, Ordering::AcqRel);
        crate::segment::kill_self()
    }

    /// [`FrameDesc::my_tag`] in place in the state word (`HOLDER`): a
    /// latch's holder, and what a shared cache's pool writes in the
    /// frames it hands out (5.15 P8b). 0 where nothing is shared.
    #[inline(always)]
    pub(crate) fn holder(&self) -> u64 {
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
