//! Run pins: the index side of protocol 5.7 (`cache/run.rs`).
//!
//! A run (`File::run`) pins a range of a leaf's slots with one RMW per 16
//! slots instead of one pin per page. Each slot has a nibble in
//! [`Node::pins`]: a 2-bit count of the runs pinning it (a pin that would
//! take it past 3 is refused: the run falls back to per-page pins), a
//! `MARK` bit and a `STALE` bit. Writers, the evictor and truncate consult
//! a page's slot after changing the page's state word (see the protocol
//! in `cache/run.rs`).
//!
//! `STALE` says that the slot's pins may be holding a page truncate took
//! out of the slot (T3), not the page the slot holds now: truncate sets it
//! while the count is non-zero, and the unpin that takes the count to zero
//! clears it in the same RMW, so `STALE` implies a non-zero count. While it
//! is set no run takes the slot's page (R3 checks it), so a writer of that
//! page waits for no run (W2). Count and bit share one word so that a
//! run's pin and truncate's mark are ordered by it.
//!
//! `MARK` (5.15 P7) is set in every nibble of a word by a recovery's
//! recount of the word, and cleared in every nibble by every RMW that
//! changes a count (R1, R4), so that the recount's compare-and-swap from
//! the word it marked fails if any run pinned or unpinned a slot of the
//! word since. It takes a bit from the count (three bits would allow
//! seven runs) rather than a nibble from the word: a word of 15 slots
//! would make most runs of 16 pages two RMWs instead of one (about 30 ns
//! more per run, C1).
//!
//! A leaf is freed only when no run pins it ([`NodeArena::retire`]), so a
//! pinned leaf keeps its place in the tree, and so its identity
//! ([`Node::owner`], [`Node::pos`]), for as long as the pin lives; an
//! empty pinned leaf stays linked until its last run's drop prunes it.

use super::{Node, NodeArena, FANOUT};
use crate::sync::{fence, Ordering};

/// Slots per pin word.
const PER_WORD: usize = 16;
/// Pin words per node.
pub(crate) const PIN_WORDS: usize = FANOUT / PER_WORD;
/// The most runs that pin one slot at once.
const MAX_RUNS: u64 = 3;
/// One in the low bit of every nibble.
const ONES: u64 = 0x1111_1111_1111_1111;
/// The count bits of every nibble.
const COUNTS: u64 = ONES * MAX_RUNS;
/// The recount's mark of every nibble (5.15 P7): set by `mark_word`,
/// cleared by every RMW that changes a count.
const MARKS: u64 = ONES << 2;

/// The nibble masks (word, one per slot) of slots `lo..lo + n`.
#[inline]
fn words(lo: usize, n: usize) -> impl Iterator<Item = (usize, u64)> {
    debug_assert!(n > 0 && lo + n <= FANOUT);
    let end = lo + n;
    (lo / PER_WORD..=(end - 1) / PER_WORD).map(move |w| {
        let a = lo.max(w * PER_WORD) - w * PER_WORD;
        let b = end.min((w + 1) * PER_WORD) - w * PER_WORD;
        let bits = (b - a) * 4;
        let m = if bits == 64 {
            ONES
        } else {
            (ONES & ((1u64 << bits) - 1)) << (a * 4)
        };
        (w, m)
    })
}

/// The bits of `x` set where a nibble's count is [`MAX_RUNS`] (at the
/// nibble's `MARK` bit).
#[inline]
fn full_counts(x: u64) -> u64 {
    ((x & COUNTS) + ONES) & MARKS
}

/// `old` less one pin of each slot in mask `m`, `STALE` cleared where a
/// count reaches zero.
#[inline]
fn unpinned(old: u64, m: u64) -> u64 {
    let new = old - m;
    new & !((zero_counts(new) & m) << 3)
}

/// The bits set (at each nibble's low bit) where a nibble's count is zero.
#[inline]
fn zero_counts(x: u64) -> u64 {
    let c = x & COUNTS;
    !(c | c >> 1) & ONES
}

/// Whether a run pins slot `s` of a leaf, and whose page it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotRuns {
    /// No run pins the slot.
    None,
    /// Runs pin the slot; any that validated a page holds the slot's page.
    Current,
    /// Runs pin the slot, and some may hold a page truncate took out of it
    /// (`STALE`): none holds the page the slot holds now, if that page was
    /// not itself taken out since.
    Stale,
}

/// The bitmap (one bit per slot) of slots `lo..lo + n`.
#[inline]
fn slot_bits(lo: usize, n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        ((1u64 << n) - 1) << lo
    }
}

impl Node {
    /// Protocol 5.7 R1: adds one run pin to each of slots `lo..lo + n`.
    /// Fails (changing nothing) if a slot has 3 already. The caller issues
    /// the SeqCst fence of R1 after it. Context: any, no sleep.
    pub fn pin_slots(&self, lo: usize, n: usize) -> bool {
        let mut done: [(usize, u64); PIN_WORDS] = [(0, 0); PIN_WORDS];
        for (k, (w, m)) in words(lo, n).enumerate() {
            let word = &self.pins[w];
            // Relaxed: seeds the CAS.
            let mut cur = word.load(Ordering::Relaxed);
            loop {
                if full_counts(cur) & (m << 2) != 0 {
                    for &(w, m) in &done[..k] {
                        self.unpin_word(w, m);
                    }
                    return false;
                }
                // Acquire: pairs with unpinners' Release (not needed for
                // the protocol, which rests on the fence; cheap here).
                // Release: the run's window (5.15 P7) before a recount's
                // mark that reads this pin. Clears `MARK` (P7).
                match word.compare_exchange_weak(
                    cur,
                    (cur & !MARKS) + m,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => break,
                    Err(c) => cur = c,
                }
            }
            done[k] = (w, m);
        }
        true
    }

    /// Protocol 5.7 R4: drops one run pin from each of slots `lo..lo + n`.
    /// The caller issues the SeqCst fence of R4 after it. Context: any.
    pub fn unpin_slots(&self, lo: usize, n: usize) {
        for (w, m) in words(lo, n) {
            self.unpin_word(w, m);
        }
    }

    /// Drops one pin of each slot in mask `m` of pin word `w`, and clears
    /// `STALE` of those whose count reaches zero, and `MARK`, in one RMW.
    fn unpin_word(&self, w: usize, m: u64) {
        // Release: the run's reads of the pages happen-before a writer,
        // evictor or truncate that sees the count drop (Acquire load).
        let _ = self.pins[w].fetch_update(Ordering::Release, Ordering::Relaxed, |old| {
            debug_assert_eq!(!zero_counts(old) & m, m, "unpin of an unpinned slot");
            Some(unpinned(old & !MARKS, m))
        });
    }

    /// 5.15 P7: marks pin word `w` for a recount; returns the word
    /// marked. Acquire: every run whose R1 or R4 RMW on the word came
    /// before is seen with its window (`ledger`). Context: any; the
    /// recovery's thread.
    pub fn mark_word(&self, w: usize) -> u64 {
        self.pins[w].fetch_or(MARKS, Ordering::Acquire) | MARKS
    }

    /// 5.15 P7: drops, from each slot `s` of pin word `w`, the pins `w0`
    /// (the word `mark_word` returned) counts beyond `counted(s)` (runs of
    /// a dead process that nobody counts), in one compare-and-swap from
    /// `w0` that also clears `MARK` (also when nothing is dropped: the word
    /// then described no moment). `None` if the word changed since (the
    /// recount does not hold; try again), else the slots whose pins were
    /// dropped, one bit per slot from slot 0 of the node. Context: any;
    /// the recovery's thread.
    pub fn drop_word_pins(&self, w: usize, w0: u64, counted: impl Fn(usize) -> i64) -> Option<u64> {
        let mut new = w0 & !MARKS;
        let mut slots = 0u64;
        for k in 0..PER_WORD {
            let have = ((w0 >> (k * 4)) & MAX_RUNS) as i64;
            let s = w * PER_WORD + k;
            for _ in 0..(have - counted(s)).clamp(0, have) {
                new = unpinned(new, 1 << (k * 4));
                slots |= 1 << s;
            }
        }
        // AcqRel: as an unpin's Release (what the dead run read happens
        // before whoever sees the count drop), and fails if a run pinned
        // or unpinned since the mark (P7).
        self.pins[w]
            .compare_exchange(w0, new, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| slots)
    }

    /// Whether a run pins a slot of pin word `w` (Acquire: as
    /// `slot_runs`).
    pub fn word_pinned(&self, w: usize) -> bool {
        self.pins[w].load(Ordering::Acquire) & COUNTS != 0
    }

    /// How many runs pin slot `s` (Acquire: as `slot_runs`).
    pub fn slot_pins(&self, s: usize) -> u64 {
        (self.pins[s / PER_WORD].load(Ordering::Acquire) >> ((s % PER_WORD) * 4)) & MAX_RUNS
    }

    /// Protocol 5.7 T2-T3: truncate took slot `s`'s page out (T1, fenced):
    /// if a run pins the slot, marks it `STALE` and returns true (the
    /// page's frame must wait for those runs); else false. One RMW, so the
    /// bit is never set on a slot whose count is zero. Context: under the
    /// tree lock, after the caller's SeqCst fence.
    pub(crate) fn mark_stale(&self, s: usize) -> bool {
        let shift = (s % PER_WORD) * 4;
        // Release: a writer whose Acquire load sees the bit (W2) sees the
        // page's REMOVED (T1) too. Acquire on failure: the count read is
        // the one T2 acts on (a zero from a run's unpin orders its reads
        // before the caller's free).
        self.pins[s / PER_WORD]
            .fetch_update(Ordering::Release, Ordering::Acquire, |w| {
                ((w >> shift) & MAX_RUNS != 0).then_some(w | 8 << shift)
            })
            .is_ok()
    }

    /// Whether a run pins slot `s` (protocol 5.7 E2/D1: after the
    /// caller's RMW on the page's state and a SeqCst fence). Acquire: a
    /// zero read from a run's unpin orders that run's reads before ours.
    #[inline]
    pub(crate) fn slot_pinned(&self, s: usize) -> bool {
        self.slot_runs(s) != SlotRuns::None
    }

    /// The slots of `lo..lo + n` marked `STALE`, one bit per slot from
    /// bit 0 (R3, after loading their frames). Acquire: as `slot_runs`.
    #[inline]
    pub(crate) fn stale_slots(&self, lo: usize, n: usize) -> u64 {
        let mut out = 0;
        if n == 0 {
            return 0;
        }
        for (w, m) in words(lo, n) {
            let mut st = self.pins[w].load(Ordering::Acquire) & (m << 3);
            while st != 0 {
                let slot = w * PER_WORD + st.trailing_zeros() as usize / 4;
                out |= 1 << (slot - lo);
                st &= st - 1;
            }
        }
        out
    }

    /// Whether runs pin slot `s`, and whether they may hold a page taken
    /// out of it (protocol 5.7 W2, and R3's check of `STALE`). Acquire: as
    /// `slot_pinned`, and pairs with `mark_stale`'s Release.
    #[inline]
    pub(crate) fn slot_runs(&self, s: usize) -> SlotRuns {
        let w = self.pins[s / PER_WORD].load(Ordering::Acquire);
        let n = (w >> ((s % PER_WORD) * 4)) & 15;
        if n & MAX_RUNS == 0 {
            SlotRuns::None
        } else if n & 8 != 0 {
            SlotRuns::Stale
        } else {
            SlotRuns::Current
        }
    }

    /// Whether any slot is pinned (after a SeqCst fence).
    pub(crate) fn any_pinned(&self) -> bool {
        // Acquire: as in `slot_pinned`.
        (0..PIN_WORDS).any(|w| self.word_pinned(w))
    }

    /// Whether this node is, right now, the leaf of tree `owner` that
    /// starts at index `base` (a run checks it after pinning, R2).
    #[inline]
    pub(crate) fn is_leaf_of(&self, owner: u64, base: u64) -> bool {
        // Acquire: pairs with the Release that linked the node; a retired
        // node reads 0 (R2 vs `retire`).
        self.owner.load(Ordering::Acquire) == owner && self.pos.load(Ordering::Acquire) == base
    }

    /// The tree (owner) and first index this node holds, as last linked
    /// (0, 0 once retired).
    #[cfg(not(loom))]
    pub(crate) fn placement(&self) -> (u64, u64) {
        // Acquire: as in `is_leaf_of`.
        (
            self.owner.load(Ordering::Acquire),
            self.pos.load(Ordering::Acquire),
        )
    }

    /// Whether the node has no entries (a run's drop checks it after R4's
    /// fence: an empty leaf it pinned may be waiting for it to be freed).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        // Acquire: pairs with `remove`'s AcqRel decrement.
        self.count.load(Ordering::Acquire) == 0
    }

    /// W3: registers a writer waiting for slot `s`'s run pins; the caller
    /// fences (SeqCst) and re-checks before parking.
    pub(crate) fn add_pin_waiter(&self, s: usize) {
        // Relaxed: the SeqCst fence after it orders it before the re-check.
        self.pin_waiters.fetch_or(1 << s, Ordering::Relaxed);
    }

    /// R4: takes the waiter bits of slots `lo..lo + n` (after the unpin and
    /// its fence); the caller wakes each slot's key.
    pub(crate) fn take_pin_waiters(&self, lo: usize, n: usize) -> u64 {
        let mask = slot_bits(lo, n);
        // Relaxed: ordered after the unpin by R4's SeqCst fence.
        let w = self.pin_waiters.load(Ordering::Relaxed) & mask;
        if w != 0 {
            // Relaxed: a waiter that re-registers re-checks the pins itself.
            self.pin_waiters.fetch_and(!w, Ordering::Relaxed);
        }
        w
    }

    /// The wait-queue key of slot `s`'s writers (inside the node: unique).
    #[inline]
    pub(crate) fn pin_key(&self, s: usize) -> usize {
        self as *const Node as usize + s
    }

    /// Whether slot `s`'s waiter bit is still set (parking's re-check).
    pub(crate) fn pin_waiter_set(&self, s: usize) -> bool {
        // Relaxed: evaluated after the park's SeqCst fence (5.10 P1-P3);
        // the unpinner clears the bit before its own fence and unpark (K1).
        self.pin_waiters.load(Ordering::Relaxed) & (1 << s) != 0
    }
}

impl NodeArena {
    /// Decides whether an empty node may be freed (protocol 5.7 F1-F2):
    /// clears its owner, then looks for run pins; if a run pins a leaf,
    /// restores the owner and returns false (the node stays linked; the
    /// run's drop prunes it). Interior nodes are never pinned by a run
    /// that keeps its pin (R2 rejects them), so only the owner is cleared.
    /// Context: under the tree lock.
    pub(crate) fn retire(&self, node: &Node, leaf: bool) -> bool {
        // F1. AcqRel RMW: a run whose R2 reads the owner after this sees 0.
        let owner = node.owner.swap(0, Ordering::AcqRel);
        if !leaf {
            return true;
        }
        // F2. SeqCst fence, then the pins: either a run's R1 pin is seen
        // here, or its R2 (after its own fence) sees the cleared owner.
        // (Truncate and eviction fenced already, in T2 and E2, after their
        // last change; the miss path's `abandon` did not, and a run there
        // holds no page of the empty leaf: the fence is for the rule, not
        // a case loom can tell apart.)
        fence(Ordering::SeqCst);
        if node.any_pinned() {
            // Release: the node stays what it was.
            node.owner.store(owner, Ordering::Release);
            return false;
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn masks_cover_exactly_the_slots() {
        let got: Vec<_> = words(14, 4).collect();
        assert_eq!(got, vec![(0, 0x11 << 56), (1, 0x11)]);
        assert_eq!(words(0, 16).collect::<Vec<_>>(), vec![(0, ONES)]);
        assert_eq!(words(48, 16).collect::<Vec<_>>(), vec![(3, ONES)]);
        assert_eq!(words(0, 64).count(), 4);
        assert_eq!(PIN_WORDS, 4);
        assert_eq!(slot_bits(3, 2), 0b11000);
        assert_eq!(slot_bits(0, 64), u64::MAX);
    }

    #[test]
    fn full_counts_finds_three_only() {
        assert_eq!(full_counts(0x3), 0x4);
        assert_eq!(full_counts(0xb), 0x4, "a stale slot at 3 is full");
        assert_eq!(full_counts(0x7), 0x4, "a marked slot at 3 is full");
        assert_eq!(full_counts(0xe), 0);
        assert_eq!(full_counts(0x2), 0);
        assert_eq!(full_counts(0x3030), 0x4040);
        assert_eq!(full_counts(u64::MAX), MARKS);
    }

    #[test]
    fn the_unpin_to_zero_clears_stale() {
        let n = crate::index::Node::empty();
        assert!(n.pin_slots(3, 2) && n.pin_slots(4, 1));
        assert!(!n.mark_stale(2), "unpinned: never stale");
        assert!(n.mark_stale(3) && n.mark_stale(4));
        assert_eq!(n.slot_runs(3), SlotRuns::Stale);
        assert_eq!(n.stale_slots(2, 3), 0b110);
        n.unpin_slots(3, 2);
        assert_eq!(n.slot_runs(3), SlotRuns::None, "count 0 clears STALE");
        assert_eq!(n.slot_runs(4), SlotRuns::Stale, "one pin left");
        n.unpin_slots(4, 1);
        assert!(!n.any_pinned());
        for _ in 0..3 {
            assert!(n.pin_slots(0, 16));
        }
        assert!(!n.pin_slots(15, 2), "slot 15 is at 3");
        assert_eq!(
            n.slot_runs(16),
            SlotRuns::None,
            "the refused pin left nothing"
        );
    }

    #[test]
    fn a_recount_drops_from_the_word_it_marked_and_only_from_it() {
        let n = crate::index::Node::empty();
        assert!(n.pin_slots(15, 3) && n.pin_slots(16, 1));
        assert!(n.mark_stale(17));
        let w0 = n.mark_word(1);
        let counts: Vec<u64> = (16..19).map(|s| n.slot_pins(s)).collect();
        assert_eq!(counts, [2, 1, 0], "a mark changes no count");
        assert_eq!(n.slot_runs(18), SlotRuns::None, "a mark is no pin");
        // Slot 16 counted once, slot 17 not at all.
        let counted = |s: usize| if s == 16 { 1 } else { 0 };
        // A pin since the mark: the recount does not hold.
        assert!(n.pin_slots(20, 1));
        assert_eq!(n.drop_word_pins(1, w0, counted), None);
        n.unpin_slots(20, 1);
        let w0 = n.mark_word(1);
        assert!(n.any_pinned());
        assert_eq!(
            n.drop_word_pins(1, w0, counted),
            Some(1 << 16 | 1 << 17),
            "one of slot 16's two, and slot 17's one"
        );
        assert_eq!(n.slot_runs(16), SlotRuns::Current);
        assert_eq!(n.slot_runs(17), SlotRuns::None, "count 0 clears STALE");
        // Never below zero, and no mark left behind.
        let w0 = n.mark_word(1);
        assert_eq!(n.drop_word_pins(1, w0, |_| -4), Some(1 << 16));
        n.unpin_slots(15, 1);
        let w0 = n.mark_word(0);
        assert_eq!(n.drop_word_pins(0, w0, |_| 3), Some(0));
        assert!(!n.any_pinned());
        assert_eq!(n.mark_word(2), MARKS);
        assert!(!n.any_pinned(), "a mark is no pin");
        assert!(n.pin_slots(32, 1));
        assert_eq!(
            n.pins[2].load(Ordering::Relaxed),
            1,
            "a pin clears the mark"
        );
        assert_eq!(n.mark_word(2), MARKS | 1);
        n.unpin_slots(32, 1);
        assert_eq!(n.pins[2].load(Ordering::Relaxed), 0, "so does an unpin");
    }
}
