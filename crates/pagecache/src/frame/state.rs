//! The frame descriptor and its packed state word.
//!
//! Every frame of the arena has one [`FrameDesc`]. Descriptors are
//! *type-stable*: they live in one array for the whole life of the cache and
//! are never freed, so a stale frame number (read from a recycled index node,
//! or from a slot that was cleared a moment ago) is always safe to
//! dereference. This is the kernel's `struct page` rule, and what makes the
//! speculative pin of protocol 5.1 sound.
//!
//! # The state word
//!
//! ```text
//!  63      41  40    39      38     37     36    35     34     33     32   31              0
//! +----------+-----+-------+------+------+-----+------+------+------+------+----------------+
//! | (unused) |UNEVI|REMOVED| REF  |  WB  |DIRTY| UPTO |DRAIN |WAITER|LOCKED|    refcount    |
//! +----------+-----+-------+------+------+-----+------+------+------+------+----------------+
//! ```
//!
//! * `refcount` (bits 0-31): the cache's own reference (1 while the page is in
//!   its file's index) plus one per pin (`PageRef`, `PageMut`, internal pins of
//!   write-back and eviction). 0 means free or frozen: nobody may take a new
//!   reference (protocol 5.1 step 2 fails and retries from the root).
//! * `LOCKED`: the exclusive latch is claimed (a writer, `PageMut`, the miss
//!   path filling the page, `set_len` zeroing a tail). New pins park until it
//!   clears. The holder also waits for older pins to drain (see `DRAIN`).
//! * `WAITERS`: at least one thread is parked on this frame's wait queue
//!   (key = descriptor address) for `LOCKED` or `WRITEBACK` to clear. Cleared,
//!   with a wake-up, by whoever clears `LOCKED` or `WRITEBACK`.
//! * `DRAIN`: the latch holder is parked (key = address + 1) until the pins
//!   drain; every release wakes it while set.
//! * `UPTODATE`: the bytes hold the page's contents. Never set on a page whose
//!   read failed; such a page is removed before it is unlocked.
//! * `DIRTY`: the bytes differ from the file; write-back clears it *before*
//!   writing and sets it again if the write fails, so no dirty data is lost.
//! * `WRITEBACK`: a write of these bytes to the file is in flight. `set_len`
//!   waits for it on pages it removes, so a stale write cannot land past a new
//!   end of file.
//! * `REFERENCED`: the CLOCK reference bit. Set by the pin compare-and-swap
//!   itself (free: no extra write), and by optimistic readers only when clear.
//! * `REMOVED`: the page was taken out of its file's index while pinned
//!   (truncate, protocol 5.6); the cache's reference is gone and the last
//!   release frees the frame.
//! * `UNEVICTABLE`: replacement must never pick this frame (anonymous pages:
//!   there is nowhere to write them). Like the kernel's unevictable list.
//!
//! Packing the refcount with `LOCKED` makes "pin unless write-locked" a single
//! compare-and-swap, as FreeBSD's `busy_lock` and tokio's task state do.
//!
//! # Identity and the version (seqlock)
//!
//! `owner` (file id) and `index` (page index) say which page the frame holds.
//! They change only while the frame is frozen or free (refcount 0, so no pin
//! can exist) and only with `version` odd. `version` is also odd while the
//! latch holder changes the bytes (protocol 5.5), which lets `read_at` copy
//! bytes with no reference at all (protocol 5.4).
//!
//! Field guards: (A) atomic, changed by RMW from any context; (V) written only
//! with `version` odd by the frame's exclusive owner, read by anyone under the
//! seqlock or while holding a pin.

use crate::sync::{fence, park, unpark_all, wait_timer, AtomicU64, LockClass, Ordering};

/// Mask of the reference count.
pub const REFS: u64 = 0xffff_ffff;
/// Exclusive latch claimed. See the module docs for every bit.
pub const LOCKED: u64 = 1 << 32;
/// Someone is parked waiting for `LOCKED` or `WRITEBACK` to clear.
pub const WAITERS: u64 = 1 << 33;
/// The latch holder is parked waiting for pins to drain.
pub const DRAIN: u64 = 1 << 34;
/// The bytes are valid.
pub const UPTODATE: u64 = 1 << 35;
/// The bytes must be written back.
pub const DIRTY: u64 = 1 << 36;
/// A write-back of the bytes is in flight.
pub const WRITEBACK: u64 = 1 << 37;
/// CLOCK reference bit.
pub const REFERENCED: u64 = 1 << 38;
/// Removed from the index while pinned; the last release frees the frame.
pub const REMOVED: u64 = 1 << 39;
/// Never a candidate for eviction (anonymous pages: there is no swap yet).
pub const UNEVICTABLE: u64 = 1 << 40;

/// Owner id of a frame that holds no page.
pub const NO_OWNER: u64 = 0;

/// Pins above this count are refused (refcount overflow guard, cf. Linux's
/// `folio_ref_zero_or_close_to_overflow`).
pub const MAX_PINS: u64 = REFS - 1024;

/// Why a pin could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinFail {
    /// Refcount was zero: the frame is free or frozen for removal. Retry from
    /// the root (protocol 5.1 step 2).
    Free,
    /// The exclusive latch is claimed: park with [`FrameDesc::wait_unlocked`]
    /// and retry from the root.
    Locked,
    /// Too many pins on one page.
    Overflow,
}

/// Who is pinning, which decides how a claimed latch and the CLOCK bit are
/// treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinKind {
    /// A user lookup: sets `REFERENCED`, stops at any claimed latch.
    User,
    /// Write-back: does not age the page and passes a latch holder that is
    /// still waiting for pins to drain (see [`FrameDesc::try_pin`]).
    Writeback,
    /// The evictor: does not age the page, stops at any latch.
    Evict,
}

/// Result of dropping a reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "the last reference must free the frame"]
pub enum Released {
    /// Other references remain.
    Alive,
    /// That was the last reference: the caller now owns the frame and must
    /// send it to the common free path.
    Last,
}

/// Extracts the reference count.
#[inline]
pub fn refs(s: u64) -> u64 {
    s & REFS
}

/// References a latch holder must wait for before it has the page alone:
/// its own, plus the cache's unless the page was removed.
#[inline]
pub fn latch_base(s: u64) -> u64 {
    if s & REMOVED != 0 {
        1
    } else {
        2
    }
}

/// One frame's descriptor. 64-byte aligned so that pins of neighbouring
/// frames by different threads never bounce one cache line.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct FrameDesc {
    /// (A) The packed state word described in the module docs.
    pub(crate) state: AtomicU64,
    /// (A) Seqlock version: odd while identity or bytes change.
    pub(crate) version: AtomicU64,
    /// (V) Id of the file that owns the page, [`NO_OWNER`] when free.
    pub(crate) owner: AtomicU64,
    /// (V) Page index within the owner.
    pub(crate) index: AtomicU64,
}

impl Default for FrameDesc {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameDesc {
    /// A free frame: refcount 0, no identity, version odd (free frames are
    /// "being changed" until the next owner publishes an identity).
    pub fn new() -> Self {
        FrameDesc {
            state: AtomicU64::new(0),
            version: AtomicU64::new(1),
            owner: AtomicU64::new(NO_OWNER),
            index: AtomicU64::new(0),
        }
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    fn drain_key(&self) -> usize {
        self.key() + 1
    }

    /// Current state word (a snapshot; Acquire so that a set `UPTODATE` makes
    /// the bytes written before it visible).
    #[inline]
    pub fn load(&self) -> u64 {
        // Acquire: pairs with the Release in `unlock` that publishes UPTODATE
        // and the bytes written under the latch.
        self.state.load(Ordering::Acquire)
    }

    /// Page identity `(owner, index)`. Stable while the caller holds a pin.
    #[inline]
    pub fn identity(&self) -> (u64, u64) {
        // Relaxed: identity only changes with refcount 0; a pin holder's
        // Acquire CAS on `state` ordered these after the last change. Readers
        // without a pin validate through the version (protocol 5.4).
        (
            self.owner.load(Ordering::Relaxed),
            self.index.load(Ordering::Relaxed),
        )
    }

    /// Protocol 5.1 step 2: take a reference unless the refcount is zero or
    /// the latch is claimed, setting the CLOCK reference bit in the same CAS.
    ///
    /// With [`PinKind::Writeback`], a claimed latch whose holder is still
    /// waiting for older pins to drain does not stop the pin (used by
    /// write-back, so that `sync` cannot deadlock behind a writer that waits
    /// for the syncing thread's own `PageRef`). This cannot starve a latch
    /// holder past the moment it has drained: once `refs == latch_base` with
    /// `LOCKED` set, no kind of pin succeeds until unlock.
    ///
    /// Context: any; the frame may be free or recycled (descriptors are
    /// type-stable), the caller re-checks identity after success.
    #[inline(always)]
    pub fn try_pin(&self, kind: PinKind) -> Result<u64, PinFail> {
        let pass_pending_writer = kind == PinKind::Writeback;
        let mark = if kind == PinKind::User { REFERENCED } else { 0 };
        // Relaxed: the value only seeds the CAS, which re-validates it.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let r = refs(s);
            if r == 0 {
                return Err(PinFail::Free);
            }
            if s & LOCKED != 0 && !(pass_pending_writer && r > latch_base(s)) {
                return Err(PinFail::Locked);
            }
            if r >= MAX_PINS {
                return Err(PinFail::Overflow);
            }
            let new = (s + 1) | mark;
            // Acquire on success: pairs with the Release of the frame's
            // publication (slot store / unlock) so that identity and bytes
            // read after the pin are those of the page we pinned, and orders
            // the identity re-check (5.1 step 3) after the increment.
            // Failure is Relaxed: a failed CAS gives no ordering (kernel rule
            // (c)), so we only loop on the fresh value.
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return Ok(new),
                Err(cur) => s = cur,
            }
        }
    }

    /// Adds a reference to a frame the caller already holds a reference to
    /// (cloning a `PageRef`). Never waits: the page's bytes cannot change
    /// while the caller's own pin lives.
    #[inline]
    pub fn pin_more(&self) {
        // Relaxed: the caller's existing reference already orders its reads
        // (same reasoning as `Arc::clone`).
        let old = self.state.fetch_add(1, Ordering::Relaxed);
        debug_assert!(refs(old) > 0 && refs(old) < MAX_PINS);
    }

    /// The one common release path: drops one reference.
    ///
    /// Returns [`Released::Last`] when it was the last one, in which case the
    /// caller owns the frame and must free it (this is why any frame must be
    /// freeable by a plain release: a speculative pin on a recycled frame can
    /// end up holding the last reference, kernel invariant (a)).
    #[inline(always)]
    pub fn release(&self) -> Released {
        // Release: our reads of the page's bytes happen-before whoever sees
        // the count drop (a latch holder draining pins, or a remover's
        // freeze CAS).
        let old = self.state.fetch_sub(1, Ordering::Release);
        debug_assert!(refs(old) > 0, "release of a frame with no reference");
        if old & DRAIN != 0 {
            self.wake_drainer();
        }
        if refs(old) == 1 {
            // Acquire: pairs with every other releaser's Release so that the
            // new owner's writes cannot overtake their reads.
            fence(Ordering::Acquire);
            Released::Last
        } else {
            Released::Alive
        }
    }

    #[cold]
    fn wake_drainer(&self) {
        unpark_all(self.drain_key());
    }

    /// Parks until the latch is released. Returns at once if it is not
    /// claimed. Context: the caller holds a pin (so the frame's identity is
    /// stable). For a frame found without a pin, use
    /// [`FrameDesc::wait_unlocked_as`].
    pub fn wait_unlocked(&self) {
        self.wait_clear(LOCKED, None);
    }

    /// Parks until the latch is released, but only while the frame still
    /// holds page `(owner, index)`: checked before parking and again under
    /// the wait-queue lock. The caller found the frame without a pin, so it
    /// may since have been recycled for another page; parking on *that*
    /// page's latch could make a gang lookup, which holds pins of lower
    /// pages, wait out of page order and deadlock with writers (found by
    /// `tests/stress.rs`). Identity cannot change while `LOCKED` stays set:
    /// reuse needs the refcount at zero, which needs an unlock first, and
    /// the unlock wakes every waiter. The caller retries from the root.
    pub fn wait_unlocked_as(&self, owner: u64, index: u64) {
        self.wait_clear(LOCKED, Some((owner, index)));
    }

    fn wait_clear(&self, bit: u64, expect: Option<(u64, u64)>) {
        // Relaxed identity loads: a hint re-validated under the queue lock;
        // a wrong answer only costs a retry from the root.
        let same = || expect.is_none_or(|e| self.identity() == e);
        loop {
            // Acquire: if the bit is already clear we return and the caller
            // reads state published by the clearing `unlock` (Release).
            let s = self.state.load(Ordering::Acquire);
            if s & bit == 0 || !same() {
                return;
            }
            if s & WAITERS == 0
                && self
                    .state
                    // Relaxed: see the comment below the CAS.
                    .compare_exchange(s, s | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                // Relaxed: the CAS only advertises a sleeper; the state the
                // caller acts on is re-read with Acquire at the loop head.
                continue;
            }
            let _timer = wait_timer(LockClass::PageLatchWait);
            park(self.key(), || {
                // Relaxed: evaluated under the queue lock; the waker clears
                // the bit before taking the same lock to unpark.
                let s = self.state.load(Ordering::Relaxed);
                s & bit != 0 && s & WAITERS != 0 && same()
            });
        }
    }

    /// Tries to claim the exclusive latch (protocol 5.5 step 1). The caller
    /// holds a pin. On success new pins park; call
    /// [`FrameDesc::wait_drained`] before touching the bytes.
    ///
    /// There is deliberately no blocking `lock`: a pin holder that waited for
    /// another latch holder would deadlock with it, since that holder waits
    /// for the pins to drain. On failure the caller drops its pin, parks with
    /// [`FrameDesc::wait_unlocked_as`] and retries its lookup.
    #[must_use = "on failure the caller must drop its pin before waiting"]
    pub fn try_lock(&self) -> bool {
        // Relaxed: seeds the CAS below.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            debug_assert!(refs(s) > 0, "try_lock without a pin");
            if s & LOCKED != 0 {
                return false;
            }
            // Acquire: pairs with the previous holder's `unlock` (Release),
            // so its byte writes happen-before ours.
            match self.state.compare_exchange_weak(
                s,
                s | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(cur) => s = cur,
            }
        }
    }

    /// Waits until the only references left are the latch holder's own and
    /// the cache's (protocol 5.5 step 2). Caller holds the latch.
    pub fn wait_drained(&self) {
        loop {
            // Acquire: pairs with the Release in `release`, so readers that
            // pinned before us finished reading the bytes we will change.
            let s = self.state.load(Ordering::Acquire);
            debug_assert!(s & LOCKED != 0, "wait_drained without the latch");
            if refs(s) <= latch_base(s) {
                if s & DRAIN != 0 {
                    // Relaxed: a private flag of the latch holder.
                    self.state.fetch_and(!DRAIN, Ordering::Relaxed);
                }
                return;
            }
            if s & DRAIN == 0
                && self
                    .state
                    // Relaxed: only advertises the sleeper to releasers; the
                    // count we act on is re-read with Acquire at the loop head.
                    .compare_exchange(s, s | DRAIN, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            let _timer = wait_timer(LockClass::PageDrainWait);
            park(self.drain_key(), || {
                // Relaxed: evaluated under the queue lock; releasers drop the
                // count before unparking on the same key.
                let s = self.state.load(Ordering::Relaxed);
                s & DRAIN != 0 && refs(s) > latch_base(s)
            });
        }
    }

    /// Releases the latch, setting `set` and clearing `clear` in the same
    /// atomic step, and wakes parked waiters. Returns the previous state.
    pub fn unlock(&self, set: u64, clear: u64) -> u64 {
        self.update(set, clear | LOCKED)
    }

    /// Atomically sets `set` and clears `clear | WAITERS`, waking parked
    /// waiters if there were any. Used for `unlock` and for clearing
    /// `WRITEBACK`. Returns the previous state.
    pub fn update(&self, set: u64, clear: u64) -> u64 {
        let clear = clear | WAITERS;
        // Release: publishes the bytes written under the latch (and
        // UPTODATE) to the Acquire loads of pinners and waiters.
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                Some((s | set) & !clear)
            })
            .unwrap_or_else(|s| s);
        if old & WAITERS != 0 {
            unpark_all(self.key());
        }
        old
    }

    /// Write-back step 1: clears `DIRTY` and sets `WRITEBACK` unless the page
    /// was removed. Returns whether the caller must write the page. The caller
    /// holds a pin, so the bytes cannot change until it releases it.
    pub fn start_writeback(&self) -> bool {
        // AcqRel: orders against `set_len` setting REMOVED (both RMW on this
        // word) and against the dirty tag clear that preceded it.
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s & (DIRTY | REMOVED | WRITEBACK) == DIRTY {
                    Some((s & !DIRTY) | WRITEBACK)
                } else {
                    None
                }
            })
            .is_ok()
    }

    /// Write-back step 2: the write finished; on failure the page is dirty
    /// again so a later `sync` retries it.
    pub fn end_writeback(&self, failed: bool) {
        let set = if failed { DIRTY } else { 0 };
        let _ = self.update(set, WRITEBACK);
    }

    /// Protocol 5.2 step A: freezes the refcount from exactly
    /// `expected_refs` to zero, provided the page is clean, unlatched and not
    /// under write-back. On success the caller owns the frame; the returned
    /// word is the state that was frozen (step B reads it: the CAS compared
    /// every flag, so nothing can have changed between test and freeze).
    pub fn freeze(&self, expected_refs: u64) -> Result<u64, u64> {
        // Relaxed: seeds the CAS.
        let s = self.state.load(Ordering::Relaxed);
        if refs(s) != expected_refs || s & (LOCKED | DIRTY | WRITEBACK | REMOVED | UNEVICTABLE) != 0
        {
            return Err(s);
        }
        // Acquire: the page's last users released with Release; after the
        // freeze we reuse the bytes, which must not overtake their reads.
        self.state
            .compare_exchange(s, 0, Ordering::Acquire, Ordering::Relaxed)
    }

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

    /// Publishes a state word on a frame the caller owns exclusively
    /// (refcount 0 before): used when a frame is handed to a new page.
    pub fn publish_state(&self, s: u64) {
        // Release: identity and initial bytes written before are visible to
        // anyone whose pin CAS (Acquire) reads this value.
        self.state.store(s, Ordering::Release);
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

    /// Protocol 5.4 reader last step: true if no write section began since
    /// `read_begin` returned `v`.
    #[inline]
    pub fn read_validate(&self, v: u64) -> bool {
        // Acquire fence: orders the relaxed data loads before the re-load of
        // the version; pairs with the Release fence in `begin_change`.
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == v
    }

    /// Frees-path reset: clears identity and state. Caller owns the frame
    /// (refcount 0 after `freeze` or `Released::Last`). Leaves the version odd
    /// until the next owner's `end_change`.
    pub fn reset(&self) {
        self.begin_change();
        self.set_identity(NO_OWNER, 0);
        // Relaxed: nobody can change a zero-refcount word except by the
        // owner's next publication; stray pinners only read it and fail.
        self.state.store(0, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn descriptor_layout_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<FrameDesc>(), 64);
        assert_eq!(std::mem::align_of::<FrameDesc>(), 64);
    }

    #[test]
    fn bits_do_not_overlap_the_refcount() {
        for bit in [
            LOCKED,
            WAITERS,
            DRAIN,
            UPTODATE,
            DIRTY,
            WRITEBACK,
            REFERENCED,
            REMOVED,
            UNEVICTABLE,
        ] {
            assert_eq!(bit & REFS, 0);
            assert_eq!(bit.count_ones(), 1);
        }
    }

    fn cached_frame() -> FrameDesc {
        let f = FrameDesc::new();
        f.begin_change();
        f.set_identity(7, 3);
        f.end_change();
        f.publish_state(1 | UPTODATE);
        f
    }

    #[test]
    fn pin_sets_referenced_and_counts() {
        let f = cached_frame();
        let s = f.try_pin(PinKind::User).unwrap();
        assert_eq!(refs(s), 2);
        assert_ne!(s & REFERENCED, 0);
        assert_eq!(f.release(), Released::Alive);
        assert_eq!(refs(f.load()), 1);
    }

    #[test]
    fn pin_fails_on_free_and_locked_frames() {
        let free = FrameDesc::new();
        assert_eq!(free.try_pin(PinKind::User), Err(PinFail::Free));
        let f = cached_frame();
        f.try_pin(PinKind::User).unwrap();
        assert!(f.try_lock());
        assert!(!f.try_lock(), "a second claim fails instead of waiting");
        assert_eq!(f.try_pin(PinKind::User), Err(PinFail::Locked));
        // Write-back may pass a latch holder that still waits for pins (here
        // none other than ours exist, so it must not).
        assert_eq!(f.try_pin(PinKind::Writeback), Err(PinFail::Locked));
        f.unlock(0, 0);
        assert!(f.try_pin(PinKind::User).is_ok());
    }

    #[test]
    fn pending_writer_lets_writeback_pin_only_until_drained() {
        let f = cached_frame();
        f.try_pin(PinKind::User).unwrap(); // a reader
        f.try_pin(PinKind::User).unwrap(); // the writer
        assert!(f.try_lock());
        assert_eq!(refs(f.load()), 3);
        assert!(
            f.try_pin(PinKind::Writeback).is_ok(),
            "reader still pinned: not drained"
        );
        assert_eq!(f.release(), Released::Alive);
        assert_eq!(f.release(), Released::Alive); // the reader leaves
        assert_eq!(f.try_pin(PinKind::Writeback), Err(PinFail::Locked));
        f.wait_drained();
        f.unlock(DIRTY, 0);
        assert_ne!(f.load() & DIRTY, 0);
    }

    #[test]
    fn freeze_requires_exact_refs_and_clean_page() {
        let f = cached_frame();
        assert!(f.freeze(2).is_err());
        let _ = f.update(DIRTY, 0);
        assert!(f.freeze(1).is_err());
        f.update(0, DIRTY);
        let frozen = f.freeze(1).unwrap();
        assert_eq!(refs(frozen), 1);
        assert_eq!(f.try_pin(PinKind::User), Err(PinFail::Free));
    }

    #[test]
    fn last_release_of_removed_page_reports_last() {
        let f = cached_frame();
        f.try_pin(PinKind::User).unwrap();
        // truncate: mark removed and drop the cache's reference
        f.state.fetch_add(REMOVED, Ordering::Relaxed);
        assert_eq!(f.release(), Released::Alive);
        assert_eq!(f.release(), Released::Last);
    }

    #[test]
    fn writeback_clears_dirty_and_failure_restores_it() {
        let f = cached_frame();
        let _ = f.update(DIRTY, 0);
        assert!(f.start_writeback());
        assert_eq!(f.load() & (DIRTY | WRITEBACK), WRITEBACK);
        assert!(
            !f.start_writeback(),
            "no second write-back while one is in flight"
        );
        f.end_writeback(true);
        assert_eq!(f.load() & (DIRTY | WRITEBACK), DIRTY);
        assert!(f.start_writeback());
        f.end_writeback(false);
        assert_eq!(f.load() & (DIRTY | WRITEBACK), 0);
    }

    #[test]
    fn version_is_odd_inside_a_change() {
        let f = cached_frame();
        let v = f.read_begin().unwrap();
        f.begin_change();
        assert!(f.read_begin().is_none());
        assert!(!f.read_validate(v));
        f.end_change();
        assert!(f.read_begin().unwrap() > v);
    }

    #[test]
    fn waiters_are_woken_by_unlock() {
        let f = std::sync::Arc::new(cached_frame());
        f.try_pin(PinKind::User).unwrap();
        assert!(f.try_lock());
        let g = f.clone();
        let t = std::thread::spawn(move || {
            g.wait_unlocked();
            g.load() & DIRTY != 0
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        f.unlock(DIRTY, 0);
        assert!(
            t.join().unwrap(),
            "waiter saw the state published by unlock"
        );
    }
}

impl FrameDesc {
    /// Sets the reference bit for a reader that took no pin (an optimistic
    /// read); callers only do so when they saw it clear.
    pub fn mark_referenced(&self) {
        // Relaxed: a hint for replacement only; no data is published.
        self.state.fetch_or(REFERENCED, Ordering::Relaxed);
    }

    /// Clears the CLOCK reference bit (aging by a replacement policy).
    pub fn state_clear_referenced(&self) {
        // Relaxed: a hint for replacement only; no data is published.
        self.state.fetch_and(!REFERENCED, Ordering::Relaxed);
    }
}

impl FrameDesc {
    /// Protocol 5.6 step for a page past the new end of file: marks it
    /// `REMOVED`, clears `DIRTY` (its bytes no longer belong to the file) and
    /// drops the cache's reference, all in one atomic step. Caller holds the
    /// tree lock and has just cleared the page's slot. Pinned pages stay
    /// alive until their last release frees them.
    pub fn orphan(&self) -> Released {
        // Release: like `release`, our accesses happen-before the freer's.
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                debug_assert!(refs(s) > 0 && s & REMOVED == 0);
                Some(((s | REMOVED) & !DIRTY) - 1)
            })
            .unwrap_or_else(|s| s);
        if old & DRAIN != 0 {
            unpark_all(self.drain_key());
        }
        if refs(old) == 1 {
            // Acquire: see `release`.
            fence(Ordering::Acquire);
            Released::Last
        } else {
            Released::Alive
        }
    }
}
