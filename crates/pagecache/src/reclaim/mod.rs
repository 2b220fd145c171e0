//! Layer 5, reclaim: which frames to take back when none is free.
//!
//! A [`ReplacementPolicy`] only *orders* frames and hands back candidates; it
//! never frees them, takes no page latch and does no I/O. The cache
//! re-validates every candidate (pin, identity, freeze) before evicting it,
//! so a policy may be racy and stale without harming correctness.
//!
//! [`Clock`] is the simple, correct first policy: one hand sweeping the frame
//! array. "Mark accessed" is the `REFERENCED` bit that the pin CAS sets for
//! free (no separate write on the hit path, and none at all when it is
//! already set). The hand advances in claims of [`CLAIM`] frames per atomic
//! add, so concurrent reclaimers share no lock. The batched, sharded,
//! scan-resistant policy of `DESIGN.md` layer 5 replaces it behind this trait.

use crate::frame::state::{refs, LOCKED, REFERENCED, REMOVED, UNEVICTABLE, UPTODATE, WRITEBACK};
use crate::frame::{FrameNo, FrameTable};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Frames claimed per advance of the clock hand.
pub const CLAIM: usize = 32;

/// Orders frames for eviction.
///
/// Implementations MUST NOT free frames, lock pages, or do I/O; they may
/// clear `REFERENCED` bits (that is their aging).
pub trait ReplacementPolicy: Send + Sync + std::fmt::Debug {
    /// A page was just inserted into frame `f`.
    fn inserted(&self, frames: &FrameTable, f: FrameNo);
    /// Appends up to `want` eviction candidates to `out`; returns how many
    /// frames it examined (the caller gives up after two full sweeps).
    fn candidates(&self, frames: &FrameTable, out: &mut Vec<FrameNo>, want: usize) -> usize;
}

/// CLOCK (second chance) over the frame array.
#[derive(Debug, Default)]
pub struct Clock {
    hand: CachePadded<AtomicUsize>,
}

impl ReplacementPolicy for Clock {
    fn inserted(&self, _frames: &FrameTable, _f: FrameNo) {}

    fn candidates(&self, frames: &FrameTable, out: &mut Vec<FrameNo>, want: usize) -> usize {
        let n = frames.len();
        // A claim must be smaller than the frame count: a claim that is a
        // multiple of it would restart every sweep at the same frame when a
        // sweep stops early (a livelock found with 16-frame caches).
        let claim = CLAIM.min(n / 4).max(1);
        let mut scanned = 0;
        while out.len() < want && scanned < n {
            // Relaxed: the hand is a hint; candidates are re-validated.
            let start = self.hand.fetch_add(claim, Ordering::Relaxed);
            for pos in start..start + claim {
                let f = (pos % n) as FrameNo;
                scanned += 1;
                let d = frames.desc(f);
                let s = d.load();
                // Only pages held by the cache alone, idle and valid.
                if refs(s) != 1
                    || s & (LOCKED | WRITEBACK | REMOVED | UNEVICTABLE) != 0
                    || s & UPTODATE == 0
                {
                    continue;
                }
                if s & REFERENCED != 0 {
                    // Second chance: age it.
                    d.state_clear_referenced();
                    continue;
                }
                out.push(f);
                if out.len() >= want {
                    break;
                }
            }
        }
        scanned
    }
}
