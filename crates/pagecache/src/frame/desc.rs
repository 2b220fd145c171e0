//! [`FrameDesc`]: a frame's descriptor, and every transition of its state
//! word (pins, the latch, write-back, removal, the accessed bit; identity
//! and the seqlock version in `desc_seqlock.rs`, write-back in
//! `desc_writeback.rs`). The word's layout and
//! its [`State`] snapshot are in `state.rs`.

use super::state::*;
use crate::sync::waitq;
use crate::sync::{fence, park, unpark_all, wait_timer, AtomicU64, LockClass, Ordering, Witness};

// The futures' waits (protocol 5.9): `poll_unlatched_as`, `poll_drained`.
#[path = "desc_async.rs"]
mod asynch;

// Identity, the seqlock version (5.4) and the write-back age.
#[path = "desc_seqlock.rs"]
mod seqlock;

// Write-back's two steps and its wait.
#[path = "desc_writeback.rs"]
mod writeback;

// What a cache shared by processes records of a latch's or a write-back's
// process, and the recovery of a dead one's (5.14).
#[path = "desc_death.rs"]
mod death;
// The frames a process holds with no reference (5.15 P8).
#[path = "desc_hand.rs"]
mod hand;
pub use death::Held;

/// Rounds of `wait_unlatched_spin_as`'s spin before it parks: a pause
/// each, about 1 µs in all where a pause takes ~140 cycles (Intel since
/// Skylake), less where it is shorter. In TPC-C at two threads 97% of the
/// waits end within it (`docs/design.md`, optimistic access).
#[cfg(not(loom))]
const LATCH_SPINS: u32 = 20;

/// One frame's descriptor. 64-byte aligned so that pins of neighbouring
/// frames by different threads never bounce one cache line.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct FrameDesc {
    /// (A) The packed state word described in the module docs.
    state: AtomicU64,
    /// (A) Seqlock version: odd while identity or bytes change.
    version: AtomicU64,
    /// (V) Id of the file that owns the page, [`NO_OWNER`] when free.
    owner: AtomicU64,
    /// (V) Page index within the owner.
    index: AtomicU64,
    /// (A) When the page last went from clean to dirty, in milliseconds of
    /// the coarse monotonic clock (`cache::flusher::now_ms`): which pages
    /// background write-back judges old enough to write. A hint: a stale
    /// value only moves a page's write earlier or later.
    dirtied: crate::sync::unmodelled::AtomicU64,
    /// (A) In a cache shared by processes, the tag of the process whose
    /// write-back of the page is starting or in flight (0: none), claimed
    /// before `WRITEBACK` is set and cleared after it is cleared, so that a
    /// write-back whose process died can be ended (5.14 W1-W3).
    wb_owner: std::sync::atomic::AtomicU32,
    /// The frame's bytes as loom sees them (loom only; see `sync::Witness`).
    #[cfg(loom)]
    bytes: Witness,
}

/// A descriptor's size in `u64` words, for readers outside the crate that
/// load its first words themselves (the C ABI's inline hinted view): the
/// state word is word 0, the version word 1, the owner (the file's id)
/// word 2, the page index word 3.
#[cfg(not(loom))]
pub const DESC_WORDS: usize = std::mem::size_of::<FrameDesc>() / 8;

#[cfg(not(loom))]
const _: () = assert!(
    std::mem::offset_of!(FrameDesc, state) == 0
        && std::mem::offset_of!(FrameDesc, version) == 8
        && std::mem::offset_of!(FrameDesc, owner) == 16
        && std::mem::offset_of!(FrameDesc, index) == 24
        && std::mem::size_of::<FrameDesc>() % 8 == 0
);

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
            dirtied: crate::sync::unmodelled::AtomicU64::new(0),
            wb_owner: std::sync::atomic::AtomicU32::new(0),
            #[cfg(loom)]
            bytes: Witness::default(),
        }
    }

    /// The witness every copy of this frame's bytes passes (a zero-sized
    /// value without loom; see `sync::Witness`).
    #[inline(always)]
    pub(crate) fn witness(&self) -> &Witness {
        #[cfg(loom)]
        return &self.bytes;
        #[cfg(not(loom))]
        return &Witness::NONE;
    }

    fn key(&self) -> usize {
        self as *const Self as usize
    }

    fn drain_key(&self) -> usize {
        self.key() + 1
    }

    // ----- reading ---------------------------------------------------------

    /// Current state (a snapshot; Acquire so that a set `UPTODATE` makes the
    /// bytes written before it visible). Context: any.
    #[inline]
    pub fn snapshot(&self) -> State {
        // Acquire: pairs with the Release in `unlatch*` that publishes
        // UPTODATE and the bytes written under the latch.
        State(self.state.load(Ordering::Acquire))
    }

    /// The latest state, by a read-modify-write that changes nothing (an
    /// RMW reads the last value in the word's modification order; a load
    /// may return an older one). For decisions that must not rest on an old
    /// value, such as declaring every frame busy. Context: any; it writes
    /// the line, so keep it off hot paths.
    pub fn snapshot_latest(&self) -> State {
        // Acquire: as `snapshot`.
        State(self.state.fetch_add(0, Ordering::Acquire))
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

    // ----- pins (5.1) --------------------------------------------------------

    /// Protocol 5.1 step 2: take a reference unless the refcount is zero or
    /// the latch is claimed, setting the accessed bit in the same CAS.
    ///
    /// With [`PinKind::Writeback`], a claimed latch whose holder is still
    /// waiting for older pins to drain does not stop the pin (used by
    /// write-back, so that `sync` cannot deadlock behind a writer that waits
    /// for the syncing thread's own `PageRef`). This cannot starve a latch
    /// holder past the moment it has drained: once `refs == latch_base` with
    /// `LATCHED` set, no kind of pin succeeds until unlatch. One exception,
    /// harmless: between a non-stable write-back's `end_writeback` and the
    /// release of its pin, `latch_base` no longer counts that pin, so a
    /// write-back pin may pass a holder that already drained. Write-back
    /// pins never read the bytes in Rust (see `cache/writeback/`): such
    /// a write-back merely starts on a page being rewritten, which a
    /// non-stable page allows anyway.
    ///
    /// Context: any, no sleep; the frame may be free or recycled
    /// (descriptors are type-stable), the caller re-checks identity after
    /// success.
    #[inline(always)]
    pub fn try_pin(&self, kind: PinKind) -> Result<State, PinFail> {
        self.pin_cas(kind, false)
    }

    /// `try_pin`'s CAS; with `latch`, the latch claimed in the same CAS
    /// (a user pin that never passes a claimed latch). In a cache shared
    /// by processes, counted, in a window (5.15 P3, P6a); a private cache's
    /// pays the check only.
    #[inline(always)]
    fn pin_cas(&self, kind: PinKind, latch: bool) -> Result<State, PinFail> {
        if self.in_shared() {
            return self.counted_shared(|| self.pin_cas_loop(kind, latch), Result::is_ok);
        }
        self.pin_cas_loop(kind, latch)
    }

    /// `pin_cas`'s RMW.
    #[inline(always)]
    fn pin_cas_loop(&self, kind: PinKind, latch: bool) -> Result<State, PinFail> {
        let pass_pending_writer = kind == PinKind::Writeback && !latch;
        let mark = if kind == PinKind::User { ACCESSED } else { 0 }
            | if latch { LATCHED | self.holder() } else { 0 };
        // Relaxed: the value only seeds the CAS, which re-validates it.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            let st = State(s);
            let r = st.refs();
            if r == 0 {
                break Err(PinFail::Free);
            }
            if st.is_latched() && !(pass_pending_writer && r > st.latch_base()) {
                break Err(PinFail::Latched);
            }
            if r >= MAX_PINS {
                break Err(PinFail::Overflow);
            }
            // MARK cleared: a recount's CAS fails after this pin (P6b).
            let new = ((s + 1) | mark) & !MARK;
            // Acquire on success: pairs with the Release of the frame's
            // publication (slot store / unlatch) so that identity and bytes
            // read after the pin are those of the page we pinned, and orders
            // the identity re-check (5.1 step 3) after the increment; with
            // `latch`, also the previous holder's unlatch (as `try_latch`).
            // Release: the window's intent before a recount that reads this
            // word (5.15 P6b). Failure is Relaxed: a failed CAS gives no
            // ordering (kernel rule (c)), so we only loop on the fresh value.
            match self
                .state
                .compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break Ok(State(new)),
                Err(cur) => s = cur,
            }
        }
    }

    /// Adds a reference to a frame the caller already holds a reference to
    /// (cloning a `PageRef`). Never waits: the page's bytes cannot change
    /// while the caller's own pin lives. Context: any, no sleep.
    #[inline]
    pub fn pin_more(&self) {
        // In a shared cache, counted after the RMW, in a window (5.15 P3,
        // P6a); a private cache's pays the check only.
        if self.in_shared() {
            return self.counted_shared(|| self.pin_more_rmw(), |_| true);
        }
        self.pin_more_rmw()
    }

    /// `pin_more`'s RMW.
    #[inline(always)]
    fn pin_more_rmw(&self) {
        // A CAS, not an add: it clears MARK as `pin_cas` does (5.15 P6b).
        // Relaxed: seeds the CAS.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            debug_assert!(State(s).refs() > 0 && State(s).refs() < MAX_PINS);
            // AcqRel: Relaxed would do for the reads (the caller's existing
            // reference already orders them, as for `Arc::clone`); Release
            // orders the window's intent before the RMW (P6b).
            match self.state.compare_exchange_weak(
                s,
                (s + 1) & !MARK,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(cur) => s = cur,
            }
        }
    }

    /// The one common release path: drops one reference.
    ///
    /// Returns [`Released::Last`] when it was the last one, in which case the
    /// caller owns the frame and must free it (this is why any frame must be
    /// freeable by a plain release: a speculative pin on a recycled frame can
    /// end up holding the last reference, kernel invariant (a)).
    /// Context: any, no sleep (wakes a draining latch holder).
    #[inline(always)]
    pub fn release(&self) -> Released {
        if self.in_shared() {
            return self.uncounted_shared(|| self.drop_ref_shared(), |_| false);
        }
        self.drop_ref()
    }

    /// `release` in a private cache.
    #[inline(always)]
    fn drop_ref(&self) -> Released {
        // Release: our reads of the page's bytes happen-before whoever sees
        // the count drop (a latch holder draining pins, or a remover's
        // freeze CAS).
        let old = State(self.state.fetch_sub(1, Ordering::Release));
        debug_assert!(old.refs() > 0, "release of a frame with no reference");
        self.after_drop_ref(old)
    }

    /// Wakes a draining latch holder and reports whether `old` held the
    /// last reference; shared by `release` and `orphan`.
    #[inline(always)]
    fn after_drop_ref(&self, old: State) -> Released {
        if old.is_draining() {
            self.wake_drainer();
        }
        if old.refs() == 1 {
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
        // A future may hold the latch and wait for the drain (5.9): it
        // uses the same bit (drains are rare; one more look at a queue).
        waitq::wake_all(self.drain_key());
    }

    // ----- the latch (5.5) --------------------------------------------------

    /// Parks until the latch is released. Returns at once if it is not
    /// claimed. Context: may sleep; the caller holds a pin (so the frame's
    /// identity is stable) but not this page's latch; the page is not in a
    /// cache shared by processes (the latch is never taken over here). For
    /// a frame found without a pin, use [`FrameDesc::wait_unlatched_as`].
    pub fn wait_unlatched(&self) {
        let torn = self.wait_clear(LATCHED, None, false, false);
        debug_assert!(!torn);
    }

    /// Parks until the latch is released, but only while the frame still
    /// holds page `(owner, index)`: checked before parking and again in the
    /// park's re-check (5.10 P3). The caller found the frame without a pin, so it
    /// may since have been recycled for another page; parking on *that*
    /// page's latch could make a gang lookup, which holds pins of lower
    /// pages, wait out of page order and deadlock with writers (found by
    /// `tests/stress.rs`). Identity cannot change while `LATCHED` stays set:
    /// reuse needs the refcount at zero, which needs an unlatch first, and
    /// the unlatch wakes every waiter. The caller retries from the root.
    ///
    /// In a cache shared by processes, a latch whose holder's process died
    /// is taken over (5.14 L2-L3): then this returns true, the caller holds
    /// the latch (no pin) of a page that may be torn, and must drop it
    /// (`Inner::drop_torn`). Context: may sleep; no pin of this page held
    /// (lock rule 3).
    #[must_use = "true: the caller holds a dead process's latch and must drop the page"]
    pub fn wait_unlatched_as(&self, owner: u64, index: u64) -> bool {
        self.wait_clear(LATCHED, Some((owner, index)), true, false)
    }

    /// [`FrameDesc::wait_unlatched_as`] after a short spin: a holder
    /// running on another CPU releases within the spin (a latch is held
    /// for a page's change, hundreds of nanoseconds), where parking would
    /// cost two futex calls; one that was preempted is slept through.
    /// Context and result: as `wait_unlatched_as`.
    #[must_use = "true: the caller holds a dead process's latch and must drop the page"]
    pub fn wait_unlatched_spin_as(&self, owner: u64, index: u64) -> bool {
        // (Under loom, no spin: the models take the park path at once.)
        #[cfg(not(loom))]
        for _ in 0..LATCH_SPINS {
            // Relaxed: a hint; `wait_clear` re-reads with Acquire.
            if self.state.load(Ordering::Relaxed) & LATCHED == 0 {
                break;
            }
            std::hint::spin_loop();
        }
        self.wait_clear(LATCHED, Some((owner, index)), true, false)
    }

    /// Waits for `bit` to clear (while the frame holds `expect`); with
    /// `take`, in a cache shared by processes, takes over a latch whose
    /// holder's process is gone (returns true: 5.14 L2-L3); with `pass`,
    /// also ends while the latch holder holds more than `latch_base`.
    fn wait_clear(&self, bit: u64, expect: Option<(u64, u64)>, take: bool, pass: bool) -> bool {
        let passable = |s: u64| pass && State(s).refs() > State(s).latch_base();
        // Relaxed identity loads: a hint re-validated in the park's
        // re-check; a wrong answer only costs a retry from the root.
        let same = || expect.is_none_or(|e| self.identity() == e);
        // (Under loom no region exists: nothing is taken over.)
        #[cfg(loom)]
        let _ = take;
        #[cfg(not(loom))]
        let member = if take && bit == LATCHED {
            crate::sync::futex::member_at(self.key())
        } else {
            None
        };
        #[cfg(not(loom))]
        let mut watch = crate::sync::futex::HolderWatch::default();
        loop {
            // Acquire: if the bit is already clear we return and the caller
            // reads state published by the clearing unlatch (Release).
            let s = self.state.load(Ordering::Acquire);
            if s & bit == 0 || passable(s) || !same() {
                return false;
            }
            // L2: the same holder for HOLDER_CHECK; is its process gone?
            #[cfg(not(loom))]
            if let Some((base, m)) = &member {
                let holder = State(s).latch_holder();
                if holder != 0 && watch.gone(m, *base, holder) {
                    // L3. Acquire: whatever the dead holder wrote. The
                    // latch is ours, its pin stays.
                    let mine = (s & !HOLDER) | (m.tag as u64) << HOLDER_SHIFT;
                    if self
                        .state
                        .compare_exchange(s, mine, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        return true;
                    }
                    continue;
                }
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
            let blocked = || {
                // Relaxed: evaluated after the park's SeqCst fence (5.10
                // P1-P3); the waker clears the bit before its own fence
                // and unpark (K1), so one of the two sees the other.
                let s = self.state.load(Ordering::Relaxed);
                s & bit != 0 && s & WAITERS != 0 && !passable(s) && same()
            };
            #[cfg(not(loom))]
            if member.is_some() {
                crate::sync::futex::park_for(self.key(), crate::sync::futex::HOLDER_CHECK, blocked);
                continue;
            }
            park(self.key(), blocked);
        }
    }

    /// Tries to claim the exclusive latch (protocol 5.5 step 1). The caller
    /// holds a pin. On success new pins park; call
    /// [`FrameDesc::wait_drained`] before touching the bytes.
    ///
    /// There is deliberately no blocking `latch`: a pin holder that waited
    /// for another latch holder would deadlock with it, since that holder
    /// waits for the pins to drain. On failure the caller drops its pin,
    /// parks with [`FrameDesc::wait_unlatched_as`] and retries its lookup.
    /// Context: any, no sleep.
    #[must_use = "on failure the caller must drop its pin before waiting"]
    pub fn try_latch(&self) -> bool {
        let holder = self.holder();
        // Relaxed: seeds the CAS below.
        let mut s = self.state.load(Ordering::Relaxed);
        loop {
            debug_assert!(State(s).refs() > 0, "try_latch without a pin");
            if State(s).is_latched() {
                return false;
            }
            // Acquire: pairs with the previous holder's unlatch (Release),
            // so its byte writes happen-before ours.
            match self.state.compare_exchange_weak(
                s,
                s | LATCHED | holder,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(cur) => s = cur,
            }
        }
    }

    /// [`FrameDesc::try_pin`] (a user pin) and [`FrameDesc::try_latch`]
    /// in one CAS: a reference and the latch, unless the refcount is zero
    /// or the latch is claimed. For an upgrade (5.8 U1-U3), which would
    /// take the latch right after its pin anyway. Like `try_pin`, the frame
    /// may be free or recycled: the caller re-checks identity and, if it is
    /// not its page, unlatches and releases (a holder of that page meets a
    /// claimed latch for that moment, as it meets a stray pin). Context:
    /// any, no sleep.
    #[inline(always)]
    pub fn try_pin_latch(&self) -> Result<State, PinFail> {
        self.pin_cas(PinKind::User, true)
    }

    /// Waits until the only references left are the latch holder's own and
    /// the cache's (protocol 5.5 step 2). Context: may sleep; the caller
    /// holds the latch and no other pin of this page.
    pub fn wait_drained(&self) {
        loop {
            // Acquire: pairs with the Release in `release`, so readers that
            // pinned before us finished reading the bytes we will change.
            let s = State(self.state.load(Ordering::Acquire));
            debug_assert!(s.is_latched(), "wait_drained without the latch");
            if s.refs() <= s.latch_base() {
                if s.is_draining() {
                    // Relaxed: a private flag of the latch holder.
                    self.state.fetch_and(!DRAIN, Ordering::Relaxed);
                }
                return;
            }
            if !s.is_draining()
                && self
                    .state
                    // Relaxed: only advertises the sleeper to releasers; the
                    // count we act on is re-read with Acquire at the loop head.
                    .compare_exchange(s.0, s.0 | DRAIN, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            let _timer = wait_timer(LockClass::PageDrainWait);
            park(self.drain_key(), || {
                // Relaxed: evaluated after the park's SeqCst fence (5.10
                // P1-P3); releasers drop the count before their own fence
                // and unpark (K1) on the same key.
                let s = State(self.state.load(Ordering::Relaxed));
                s.is_draining() && s.refs() > s.latch_base()
            });
        }
    }

    /// Releases the latch without changing the page's flags (anonymous
    /// pages, truncate's tail zeroing, an abandoned fill), waking waiters.
    /// Context: no sleep; the caller holds the latch.
    pub fn unlatch(&self) {
        let _ = self.update(0, LATCHED);
    }

    /// Completes a fill (5.3 step 3): sets `UPTODATE` and releases the
    /// latch, waking waiters. Context: no sleep; the caller holds the latch.
    pub fn unlatch_uptodate(&self) {
        let _ = self.update(UPTODATE, LATCHED);
    }

    /// Ends a write (5.5 step 6): sets `DIRTY` and `UPTODATE` and releases
    /// the latch, waking waiters. Returns the state before, so the caller
    /// tags the index when the page just became dirty (the dirty-tag
    /// protocol's D1). Context: no sleep; the caller holds the latch.
    #[must_use = "a page that just became dirty must be tagged in its index"]
    pub fn unlatch_dirty(&self) -> State {
        self.update(DIRTY | UPTODATE, LATCHED)
    }

    /// Ends a write and drops the holder's pin in one RMW when the page
    /// is dirty already (the common case of a page written again: nothing
    /// to tag, so the pin the tag needs is not kept). Otherwise the same
    /// as [`FrameDesc::unlatch_dirty`], the pin kept. Returns the state
    /// before and, when the pin was dropped, what its release reports
    /// (`Released::Last` for a removed page's last reference: the caller
    /// frees the frame). Context: no sleep; the caller holds the latch and
    /// its pin.
    #[inline]
    pub fn unlatch_dirty_release(&self) -> (State, Option<Released>) {
        // Release: as `update` (the bytes written under the latch) and as
        // `release` (our reads happen-before whoever sees the count drop).
        let rmw = || {
            State(
                self.state
                    .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                        let new = (s | DIRTY | UPTODATE) & !(LATCHED | HOLDER | WAITERS | AWAITERS);
                        Some(self.in_hand_if_last(new - u64::from(s & DIRTY != 0)))
                    })
                    .unwrap_or_else(|s| s),
            )
        };
        // In a shared cache, uncounted first and counted again if the pin
        // stays, in a window (5.15 P3, P6a).
        let old = if self.in_shared() {
            self.uncounted_shared(rmw, |old| !old.is_dirty())
        } else {
            rmw()
        };
        self.wake_waiters(old.0);
        if !old.is_dirty() {
            return (old, None);
        }
        debug_assert!(old.refs() > 0, "release of a frame with no reference");
        (old, Some(self.after_drop_ref(old)))
    }

    /// Releases the latch and drops the holder's pin in one RMW, the
    /// page's flags unchanged: a latch taken and abandoned (a recycled
    /// frame, a page others still pin). Returns what the release reports
    /// (`Released::Last`: the caller frees the frame). Context: no sleep;
    /// the caller holds the latch and its pin.
    #[inline]
    pub fn unlatch_release(&self) -> Released {
        self.unlatch_and_release(0)
    }

    /// Ends a latch under which nothing changed (5.5 W6 of a clean
    /// holder): sets `UPTODATE` (a fill may have just read the page),
    /// releases the latch and drops the holder's pin in one RMW. Returns
    /// what the release reports. Context: no sleep; the caller holds the
    /// latch and its pin.
    #[inline]
    pub fn unlatch_uptodate_release(&self) -> Released {
        self.unlatch_and_release(UPTODATE)
    }

    #[inline(always)]
    fn unlatch_and_release(&self, set: u64) -> Released {
        // Release: as `update` (the latch section's writes, UPTODATE) and
        // as `release` (our reads happen-before whoever sees the count
        // drop). The holder's pin keeps the count above zero until here.
        let rmw = || {
            State(
                self.state
                    .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                        // DRAIN too: a holder that gives the latch up while
                        // waiting for the drain (a future dropped, 5.9).
                        let new =
                            ((s | set) & !(LATCHED | HOLDER | WAITERS | AWAITERS | DRAIN)) - 1;
                        Some(self.in_hand_if_last(new))
                    })
                    .unwrap_or_else(|s| s),
            )
        };
        // In a shared cache, uncounted first, in a window (5.15 P3, P6a).
        let old = if self.in_shared() {
            self.uncounted_shared(rmw, |_| false)
        } else {
            rmw()
        };
        debug_assert!(old.is_latched(), "unlatch without the latch");
        debug_assert!(old.refs() > 0, "release of a frame with no reference");
        self.wake_waiters(old.0);
        self.after_drop_ref(old)
    }

    /// Atomically sets `set` and clears `clear | WAITERS | AWAITERS`,
    /// waking parked waiters if there were any. Returns the previous state.
    fn update(&self, set: u64, clear: u64) -> State {
        // The latch's holder tag goes with the latch (5.14 L1).
        let clear = clear | WAITERS | AWAITERS | if clear & LATCHED != 0 { HOLDER } else { 0 };
        // Release: publishes the bytes written under the latch (and
        // UPTODATE) to the Acquire loads of pinners and waiters.
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                Some((s | set) & !clear)
            })
            .unwrap_or_else(|s| s);
        self.wake_waiters(old);
        State(old)
    }

    /// After an RMW that cleared `WAITERS` and `AWAITERS` (`old` is the
    /// word before it): wakes the threads parked on this frame and the
    /// futures waiting on it, whichever there were.
    #[inline(always)]
    fn wake_waiters(&self, old: u64) {
        if old & WAITERS != 0 {
            unpark_all(self.key());
        }
        if old & AWAITERS != 0 {
            self.wake_futures();
        }
    }

    #[cold]
    fn wake_futures(&self) {
        waitq::wake_all(self.key());
    }

    // ----- removal (5.2, 5.6) ----------------------------------------------------

    /// Protocol 5.2 step A: freezes the refcount from exactly
    /// `expected_refs` to zero, provided the page is clean, unlatched, not
    /// under write-back and evictable. On success the caller owns the frame;
    /// the returned state is the one that was frozen (step B reads it: the
    /// CAS compared every flag, so nothing can have changed between test and
    /// freeze). Context: any, no sleep; callers hold the tree lock.
    pub fn freeze(&self, expected_refs: u64) -> Result<State, State> {
        // Relaxed: seeds the CAS.
        let s = self.state.load(Ordering::Relaxed);
        if State(s).refs() != expected_refs
            || s & (LATCHED | DIRTY | WRITEBACK | REMOVED | UNEVICTABLE) != 0
        {
            return Err(State(s));
        }
        // The caller's pins among the frozen references (all but the
        // cache's), uncounted first and counted again on failure (5.15).
        let mine = expected_refs as i32 - 1;
        self.counted(-mine);
        let to = self.in_hand_if_last(0);
        // Acquire: the page's last users released with Release; after the
        // freeze we reuse the bytes, which must not overtake their reads.
        let r = self
            .state
            .compare_exchange(s, to, Ordering::Acquire, Ordering::Relaxed)
            .map(State)
            .map_err(State);
        if r.is_err() {
            self.counted(mine);
        }
        r
    }

    /// Protocol 5.7 E3: undoes a [`FrameDesc::freeze`] that found the page
    /// pinned by a run: restores the frozen state (`frozen`, what `freeze`
    /// returned). Nobody else changes a frozen word except to set
    /// `ACCESSED` (an optimistic reader), which the OR keeps, and `MARK` (a
    /// recount, 5.15 P6, which finds nothing to do on a frozen word).
    /// Context: no sleep; the caller froze it (or, the evictor's process
    /// dead, took it over: 5.15 P5) and holds the tree lock.
    pub fn unfreeze(&self, frozen: State) {
        // Release: as the freeze never happened; the refcount is back.
        // MARK left out: a recount's CAS must fail across the freeze
        // (5.15 P6b). HOLDER cleared: the freeze's hand ends (P8).
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                Some((s & !HOLDER) | (frozen.0 & !MARK))
            });
        debug_assert!(
            old.is_ok_and(|w| w & !(ACCESSED | MARK | HOLDER) == 0),
            "unfreeze of a changed word"
        );
        self.counted(frozen.refs() as i32 - 1);
    }

    /// Protocol 5.6/5.7 T1: marks a page past the new end of file
    /// `REMOVED` and clears `DIRTY`, keeping the cache's reference (the
    /// caller drops it, or keeps it for a run that still reads the page).
    /// Returns the state before: `REMOVED` already in it only where a
    /// remover of a shared cache died between its T1 and the page's unlink
    /// (5.14), which the caller checks. Context: no sleep; under the tree
    /// lock.
    pub fn mark_removed(&self) -> State {
        // AcqRel RMW: T1 of protocol 5.7 (the SeqCst fence follows), and
        // ordered with write-back's `start_writeback` as `orphan` is.
        let old = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |s| {
                debug_assert!(State(s).refs() > 0);
                Some((s | REMOVED) & !DIRTY)
            })
            .unwrap_or_else(|s| s);
        State(old)
    }

    /// Takes a page out of use for good: marks it `REMOVED`, clears `DIRTY`
    /// and drops the cache's reference, in one atomic step. The caller has
    /// just taken the page out of its index (a fill that failed, under the
    /// tree lock; an anonymous page's slot swap), or lost the race to put
    /// it in. Pinned pages stay alive until their last release frees them.
    /// No run (5.7) can hold such a page: runs are of file pages, and a
    /// file page leaves here only while latched (never up to date). Truncate,
    /// whose pages runs may hold, splits the step: `mark_removed`, then
    /// the release or the deferral. Context: no sleep.
    pub fn orphan(&self) -> Released {
        // Release: like `release`, our accesses happen-before the freer's.
        let old = self
            .state
            .fetch_update(Ordering::Release, Ordering::Relaxed, |s| {
                debug_assert!(State(s).refs() > 0 && s & REMOVED == 0);
                Some(self.in_hand_if_last(((s | REMOVED) & !DIRTY) - 1))
            })
            .unwrap_or_else(|s| s);
        self.after_drop_ref(State(old))
    }

    // ----- replacement ------------------------------------------------------------

    /// Sets the accessed bit for a reader that took no pin (an optimistic
    /// read), which saw the word as `seen` with the bit clear: a
    /// compare-and-swap from exactly that value, so a frame that changed
    /// meanwhile (freed, frozen, reassigned: its word was stored, not
    /// updated) is left alone, and a reader that lost the race to another
    /// change merely gives up a hint. (An unconditional `fetch_or` would be
    /// as correct on hardware; loom, whose RMWs can be split by a plain
    /// store, tokio-rs/loom#254, turned it into a lost reassignment.)
    /// Context: any.
    pub fn mark_accessed(&self, seen: State) {
        // Relaxed: a hint for replacement only; no data is published.
        let _ = self.state.compare_exchange(
            seen.0,
            seen.0 | ACCESSED,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Clears the accessed bit (aging by a replacement policy). Context: any.
    pub fn clear_accessed(&self) {
        // Relaxed: a hint for replacement only; no data is published.
        self.state.fetch_and(!ACCESSED, Ordering::Relaxed);
    }
}

#[cfg(all(test, not(loom)))]
#[path = "desc_tests.rs"]
mod tests;
