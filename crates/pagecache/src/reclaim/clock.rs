//! CLOCK (second chance) over the frame array: the first policy, kept as a
//! baseline. One hand, advanced by claims of [`CLAIM`] frames with a
//! relaxed `fetch_add`, so reclaimers on different CPUs scan different
//! frames; the accessed bit gives a page a second chance.

use super::{examine, ReplacementPolicy, Verdict};
use crate::frame::{FrameNo, FrameTable};
use crate::placed::Placed;
use crate::sync::{AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// Frames claimed per advance of the clock hand.
pub const CLAIM: usize = 32;

/// CLOCK (second chance) over the frame array.
#[derive(Debug)]
pub struct Clock {
    hand: Placed<CachePadded<AtomicUsize>>,
}

impl Clock {
    /// A policy for `frames` frames.
    pub fn new(_frames: usize) -> Clock {
        Clock {
            hand: Placed::new(CachePadded::new(AtomicUsize::new(0))),
        }
    }

    /// A policy whose hand is the word at `hand` (a shared cache's,
    /// `cache/words.rs`).
    ///
    /// # Safety
    ///
    /// As [`Placed::at`].
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) unsafe fn at(hand: std::ptr::NonNull<CachePadded<AtomicUsize>>) -> Clock {
        Clock {
            // SAFETY: the caller's.
            hand: unsafe { Placed::at(hand) },
        }
    }
}

impl ReplacementPolicy for Clock {
    fn inserted(&self, _frames: &FrameTable, _f: FrameNo) {}

    fn pass_len(&self, frames: &FrameTable) -> usize {
        frames.len()
    }

    fn candidates(
        &self,
        frames: &FrameTable,
        out: &mut Vec<FrameNo>,
        want: usize,
        urgent: bool,
    ) -> usize {
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
                if examine(frames, f, urgent) != Verdict::Cold {
                    continue; // busy, or referenced and aged now
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
