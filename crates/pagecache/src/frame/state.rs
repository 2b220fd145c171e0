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
//!  63    43  42   41   40    39      38     37     36    35     34     33     32    31   30            0
//! +--------+----+----+-----+-------+------+------+-----+------+------+------+------+-----+-------------+
//! | HOLDER |AWAI|STBL|UNEVI|REMOVED| ACC  |  WB  |DIRTY| UPTO |DRAIN |WAITER|LATCH |MARK |  refcount   |
//! +--------+----+----+-----+-------+------+------+-----+------+------+------+------+-----+-------------+
//! ```
//!
//! * `HOLDER` (bits 43-63): in a cache shared by processes, the tag of the
//!   process whose thread holds `LATCHED` (set and cleared with it in the
//!   same RMW; 0 in a private cache), so that a waiter can tell a holder
//!   whose process died (protocol 5.14 L1-L3); on a frame with no
//!   reference out of the free pool, the tag of the process that holds
//!   it (written by the RMW that dropped its last reference, or by the
//!   pool's pop), so that a dead one's recovery finds it (5.15 P8).
//!
//! * `MARK` (bit 31): in a cache shared by processes, set by a recount of
//!   the frame's pins (5.15 P6) and cleared by every pin's RMW in the same
//!   RMW, so that the recount's final compare-and-swap fails if any pin was
//!   taken after it looked (never set in a private cache).
//! * `refcount` (bits 0-30): the cache's own reference (1 while the page is in
//!   its file's index) plus one per pin (`PageRef`, `PageMut`, internal pins of
//!   write-back and eviction). 0 means free or frozen: nobody may take a new
//!   reference (protocol 5.1 step 2 fails and retries from the root).
//! * `LATCHED`: the exclusive latch is claimed (a writer, `PageMut`, the miss
//!   path filling the page, `set_len` zeroing a tail). New pins park until it
//!   clears. The holder also waits for older pins to drain (see `DRAIN`).
//! * `WAITERS`: at least one thread is parked on this frame's wait queue
//!   (key = descriptor address) for `LATCHED` or `WRITEBACK` to clear. Cleared,
//!   with a wake-up, by whoever clears `LATCHED` or `WRITEBACK`.
//! * `AWAITERS`: at least one future left its waker in the asynchronous
//!   wait queue of this frame (same key; `sync/waitq.rs`) for `LATCHED` to
//!   clear (protocol 5.9). Cleared, with a wake-up of that queue, by
//!   whoever clears `WAITERS`; a separate bit so that a blocking path with
//!   no future waiting never looks at the futures' queues.
//! * `DRAIN`: the latch holder is parked (key = address + 1) until the pins
//!   drain; every release wakes it while set.
//! * `UPTODATE`: the bytes hold the page's contents. Never set on a page whose
//!   read failed; such a page is removed before it is unlatched.
//! * `DIRTY`: the bytes differ from the file; write-back clears it *before*
//!   writing and sets it again if the write fails, so no dirty data is lost.
//! * `WRITEBACK`: a write of these bytes to the file is in flight. The
//!   write-back holds one pin of the page from before it sets the bit until
//!   after it clears it. That pin does not keep a latch holder waiting
//!   (`latch_base` counts it), so a writer rewrites a page under write-back
//!   at once, as the kernel's writers do where the device does not need
//!   stable pages: the page is dirty again and written again later; only the
//!   on-disk copy of bytes no sync has covered yet may mix the two writes.
//!   The pin still keeps the frame from being freed or reused under the I/O.
//! * `STABLE`: set with `WRITEBACK` when the write needs its bytes unchanged
//!   until it completes (the file's device or filesystem checksums data in
//!   flight, or `Config::stable_writes`): then the write-back's pin counts
//!   like any other and writers wait for the write (the kernel's
//!   `folio_wait_stable`).
//! * `ACCESSED`: the replacement policy's accessed bit (S3-FIFO's one-bit
//!   frequency, CLOCK's reference bit). Set by the pin compare-and-swap
//!   itself (free: no extra write), and by optimistic readers only when
//!   clear; cleared by the policy as it ages the page.
//! * `REMOVED`: the page was taken out of its file's index while pinned
//!   (truncate, protocol 5.6); the cache's reference is gone and the last
//!   release frees the frame.
//! * `UNEVICTABLE`: replacement must never pick this frame (anonymous pages:
//!   there is nowhere to write them). Like the kernel's unevictable list.
//!
//! Packing the refcount with `LATCHED` makes "pin unless latched" a single
//! compare-and-swap, as FreeBSD's `busy_lock` and tokio's task state do.
//! Callers never see the bits: they read a [`State`] snapshot through its
//! named predicates and change the word only through the named transitions
//! of [`FrameDesc`] (in the shape of tokio's task `State`/`Snapshot`).
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

#[cfg(not(loom))]
pub use super::desc::DESC_WORDS;
pub use super::desc::{FrameDesc, Held};

pub(super) const REFS: u64 = 0x7fff_ffff;
pub(super) const MARK: u64 = 1 << 31;
pub(crate) const LATCHED: u64 = 1 << 32;
pub(super) const WAITERS: u64 = 1 << 33;
pub(super) const DRAIN: u64 = 1 << 34;
pub(crate) const UPTODATE: u64 = 1 << 35;
pub(super) const DIRTY: u64 = 1 << 36;
pub(super) const WRITEBACK: u64 = 1 << 37;
pub(crate) const ACCESSED: u64 = 1 << 38;
pub(crate) const REMOVED: u64 = 1 << 39;
pub(super) const UNEVICTABLE: u64 = 1 << 40;
pub(super) const STABLE: u64 = 1 << 41;
pub(super) const AWAITERS: u64 = 1 << 42;
/// Where a latch holder's process tag sits (see the module docs).
pub const HOLDER_SHIFT: u32 = 43;
/// Bits of the latch holder's tag.
pub(crate) const HOLDER_BITS: u32 = 21;
pub(super) const HOLDER: u64 = ((1 << HOLDER_BITS) - 1) << HOLDER_SHIFT;

/// Owner id of a frame that holds no page.
pub const NO_OWNER: u64 = 0;

/// Pins above this count are refused (refcount overflow guard, cf. Linux's
/// `folio_ref_zero_or_close_to_overflow`).
pub(super) const MAX_PINS: u64 = REFS - 1024;

/// A snapshot of a frame's state word: what a load or a transition saw.
/// Read it through the predicates; it cannot change the frame.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct State(pub(super) u64);

impl State {
    /// A frame just inserted by the miss path (5.3 step 2): latched, not up
    /// to date, referenced by the cache and by the inserting thread.
    pub const INSERTED_LATCHED: State = State(2 | LATCHED);
    /// An anonymous page just faulted in: up to date, unevictable,
    /// referenced by its region and by the faulting thread.
    pub const ANON_FAULTED: State = State(2 | UPTODATE | UNEVICTABLE);

    /// A cached, up-to-date, clean page with `refs` references (tests and
    /// models build frames with it).
    pub const fn cached(refs: u64) -> State {
        State((refs & REFS) | UPTODATE)
    }

    /// References: the cache's own (while indexed) plus one per pin.
    #[inline]
    pub const fn refs(self) -> u64 {
        self.0 & REFS
    }
    /// The exclusive latch is claimed.
    #[inline]
    pub const fn is_latched(self) -> bool {
        self.0 & LATCHED != 0
    }
    /// The process tag of the latch's holder (0: none recorded, a private
    /// cache's).
    #[inline]
    pub const fn latch_holder(self) -> u32 {
        (self.0 >> HOLDER_SHIFT) as u32
    }
    /// The latch holder is waiting for pins to drain.
    #[inline]
    pub const fn is_draining(self) -> bool {
        self.0 & DRAIN != 0
    }
    /// The bytes hold the page's contents.
    #[inline]
    pub const fn is_uptodate(self) -> bool {
        self.0 & UPTODATE != 0
    }
    /// The bytes must be written back.
    #[inline]
    pub const fn is_dirty(self) -> bool {
        self.0 & DIRTY != 0
    }
    /// A write-back of the bytes is in flight.
    #[inline]
    pub const fn is_under_writeback(self) -> bool {
        self.0 & WRITEBACK != 0
    }
    /// The replacement policy's accessed bit is set.
    #[inline]
    pub const fn is_accessed(self) -> bool {
        self.0 & ACCESSED != 0
    }
    /// Taken out of its index while pinned; the last release frees it.
    #[inline]
    pub const fn is_removed(self) -> bool {
        self.0 & REMOVED != 0
    }
    /// Never an eviction candidate (anonymous pages).
    #[inline]
    pub const fn is_unevictable(self) -> bool {
        self.0 & UNEVICTABLE != 0
    }
    /// A pinned page a lookup may use: in its index and valid.
    #[inline]
    pub const fn is_live(self) -> bool {
        self.0 & (UPTODATE | REMOVED) == UPTODATE
    }
    /// Only the cache holds it, idle (not latched, not under write-back),
    /// valid, in its index and evictable: what eviction may take.
    #[inline]
    pub const fn is_evictable(self) -> bool {
        self.refs() == 1
            && self.0 & (LATCHED | WRITEBACK | REMOVED | UNEVICTABLE) == 0
            && self.is_uptodate()
    }
    /// An indexed page nobody uses: the state every cached frame is in
    /// when no operation runs (checked by `validate`).
    #[inline]
    pub const fn is_idle(self) -> bool {
        self.refs() >= 1 && self.0 & (LATCHED | REMOVED) == 0 && self.is_uptodate()
    }
    /// A write-back in flight needs these bytes unchanged until it ends.
    #[inline]
    pub const fn is_stable(self) -> bool {
        self.0 & STABLE != 0
    }
    /// References a latch holder may leave in place and still have the
    /// bytes to itself: its own, the cache's unless the page was removed,
    /// and the pin of a write-back in flight unless that write needs stable
    /// bytes (see `WRITEBACK` in the module docs).
    #[inline]
    pub const fn latch_base(self) -> u64 {
        let base = if self.is_removed() { 1 } else { 2 };
        if self.0 & (WRITEBACK | STABLE) == WRITEBACK {
            base + 1
        } else {
            base
        }
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "State(refs={}", self.refs())?;
        for (bit, name) in [
            (LATCHED, "LATCHED"),
            (WAITERS, "WAITERS"),
            (DRAIN, "DRAIN"),
            (UPTODATE, "UPTODATE"),
            (DIRTY, "DIRTY"),
            (WRITEBACK, "WRITEBACK"),
            (ACCESSED, "ACCESSED"),
            (REMOVED, "REMOVED"),
            (UNEVICTABLE, "UNEVICTABLE"),
            (STABLE, "STABLE"),
            (AWAITERS, "AWAITERS"),
        ] {
            if self.0 & bit != 0 {
                write!(f, " {name}")?;
            }
        }
        f.write_str(")")
    }
}

/// Why a pin could not be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinFail {
    /// Refcount was zero: the frame is free or frozen for removal. Retry from
    /// the root (protocol 5.1 step 2).
    Free,
    /// The exclusive latch is claimed: park with
    /// [`FrameDesc::wait_unlatched_as`] and retry from the root.
    Latched,
    /// Too many pins on one page.
    Overflow,
}

/// Who is pinning, which decides how a claimed latch and the accessed bit
/// are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinKind {
    /// A user lookup: sets `ACCESSED`, stops at any claimed latch.
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
