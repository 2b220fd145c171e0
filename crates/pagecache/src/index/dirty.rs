//! The dirty tags of the index: which subtrees may hold dirty pages.
//!
//! Each node has a `dirty` bitmap: bit `c` set means "child/slot `c` may hold
//! a dirty page". Protocol (ordering argument):
//!
//! ```text
//!   dirtier (any context)                 sync (tree lock)
//!   D1 set DIRTY on the page (RMW)        S1 clear the tag bit (RMW) top-down,
//!      only a 0->1 transition goes on        each level before scanning below
//!   D2 fetch_or the tag bits (RMW),       S2 start_writeback: test-and-clear
//!      leaf first, then each ancestor        DIRTY on the page (RMW)
//! ```
//!
//! D2 and S1 are AcqRel RMWs on the tag word; D1 (`unlatch_dirty`, or a
//! failed write-back's `end_writeback`, Release) is sequenced before D2 in the dirtier, and S2
//! after S1 in the syncer. If D2 precedes S1 on a tag word, S1 reads from D2
//! (synchronizes-with), so D1 happens-before S2, and S2, an RMW on the same
//! state word, sees DIRTY: this sync writes the page. If S1 precedes D2, the bit stays set and the
//! next sync finds the page. A failed write-back sets DIRTY again (0->1) and
//! re-tags. The flusher, which takes tags as sync does but never waits for
//! a latched page, puts back (D2, under the tree lock) the tag of each page
//! it took and did not write if the page is still DIRTY: the latch holder
//! unlatches an already dirty page without tagging it. Its load of DIRTY
//! reads D1's value, and only S2 (which needs a pin, so not before the
//! latch is dropped) clears it. Its bounded take (`take_dirty_range`)
//! clears a node's bits (S1) and, before releasing the tree lock, sets
//! back (D2) those of subtrees and pages it did not take, children before
//! parents: only a sync, which needs the same lock, could have seen them
//! clear. Spurious tag bits are harmless (sync filters on DIRTY).
//!
//! Growth vs. tagging: the grower stores the new root, then ORs the old
//! root's bitmap into the new root with an RMW on the old root's `dirty`
//! (`fetch_or(0)`, AcqRel); a dirtier re-loads the root after D2 and re-tags
//! from the new root if it changed. Either the grower's RMW reads the
//! dirtier's bit, or the dirtier's RMW reads from the grower's and then sees
//! the new root.

use super::{capacity, slot_at, span, unpack, NodeArena, Tree, TreeLocked};
use crate::frame::FrameNo;
use crate::sync::Ordering;

impl Tree {
    /// Lock-free: sets the dirty tag path for `index` (steps D2 of the
    /// module's tag protocol). Context: any; the caller just moved the page
    /// from clean to dirty while holding a pin on it.
    pub fn tag_dirty(&self, arena: &NodeArena, index: u64) {
        loop {
            // Acquire: see `leaf`.
            let root = self.root.load(Ordering::Acquire);
            let (root_id, height) = unpack(root);
            if height == 0 || index >= capacity(height) {
                return; // the page left the tree (truncated): nothing to tag
            }
            let mut path = [0u64; 12];
            let mut id = root_id;
            let mut level = height - 1;
            let mut depth = 0;
            loop {
                let Some(node) = arena.get(id) else { return };
                path[depth] = id;
                depth += 1;
                if level == 0 {
                    break;
                }
                // Acquire: see `leaf`.
                id = node.slots[slot_at(index, level)].load(Ordering::Acquire);
                level -= 1;
            }
            // Bottom-up: leaf first, so a sync that sees an ancestor bit
            // finds the leaf bit too.
            for (d, &nid) in path[..depth].iter().enumerate().rev() {
                let lvl = height - 1 - d as u32;
                if let Some(n) = arena.get(nid) {
                    // AcqRel: step D2, see the module docs.
                    n.dirty.fetch_or(1 << slot_at(index, lvl), Ordering::AcqRel);
                }
            }
            // Acquire: if a grower replaced the root, re-tag from the new one.
            if self.root.load(Ordering::Acquire) == root {
                return;
            }
        }
    }
}

/// A bounded, filtered take's bounds and what it has looked at.
struct Take<'k> {
    start: u64,
    end: u64,
    /// Stop once `out` holds this many.
    max: usize,
    /// Tagged pages still to look at.
    visits: usize,
    keep: &'k mut dyn FnMut(FrameNo) -> bool,
    /// The last tagged page looked at.
    last: Option<u64>,
}

/// [`TreeLocked::take_dirty_if`] below node `id`: returns whether every
/// tag it cleared here was consumed (its parent's bit may stay clear).
fn take(
    arena: &NodeArena,
    id: u64,
    level: u32,
    base: u64,
    t: &mut Take<'_>,
    out: &mut Vec<(u64, FrameNo)>,
) -> bool {
    let node = arena.get(id).expect("node on a locked path");
    // AcqRel: step S1, see module docs. Clear-then-scan.
    let mut bits = node.dirty.swap(0, Ordering::AcqRel);
    let mut back = 0u64;
    while bits != 0 {
        let s = bits.trailing_zeros() as u64;
        bits &= bits - 1;
        let (idx, last) = span(base, level, s);
        if last < t.start || idx >= t.end || out.len() >= t.max || t.visits == 0 {
            back |= 1 << s;
            continue;
        }
        // Relaxed: under the tree lock, the only writer.
        let e = node.slots[s as usize].load(Ordering::Relaxed);
        if e == 0 {
            continue; // a stray tag: dropped
        }
        if level == 0 {
            t.visits -= 1;
            t.last = Some(idx);
            let f = (e - 1) as FrameNo;
            if (t.keep)(f) {
                out.push((idx, f));
            } else {
                back |= 1 << s;
            }
        } else if !take(arena, e, level - 1, idx, t, out) {
            back |= 1 << s;
        }
    }
    if back != 0 {
        // AcqRel: a put-back is a D2 (module docs); the children's bits
        // were put back before this one, as a dirtier sets them.
        node.dirty.fetch_or(back, Ordering::AcqRel);
    }
    back == 0
}

impl<'a> TreeLocked<'a> {
    /// Sync's collection (steps S1 of the tag protocol): clears every dirty
    /// tag top-down and returns the pages that were tagged, in index order.
    pub fn take_dirty(&self, arena: &NodeArena, out: &mut Vec<(u64, FrameNo)>) {
        self.take_dirty_range(arena, 0, u64::MAX, usize::MAX, out);
    }

    /// The flusher's bounded collection: takes (S1) the tags of the pages
    /// in `start..end`, in index order, until `out` holds `max` pages, and
    /// leaves every other tag set. Its work under the tree lock is the
    /// pages it takes plus one path, not the file's whole dirty set: a
    /// writer inserting a page waits for that lock. A tag it cleared on
    /// the way down and did not consume (a subtree it stopped in, bits out
    /// of range) is put back with a D2 RMW before the lock is released,
    /// bottom-up, so no sync ever sees it missing.
    pub fn take_dirty_range(
        &self,
        arena: &NodeArena,
        start: u64,
        end: u64,
        max: usize,
        out: &mut Vec<(u64, FrameNo)>,
    ) {
        let mut visits = usize::MAX;
        self.take_dirty_if(arena, (start, end), max, &mut visits, &mut |_| true, out);
    }

    /// [`TreeLocked::take_dirty_range`] that takes only the tagged pages whose
    /// frame `keep` accepts (the others keep their tags, put back as
    /// above) and looks at no more than `visits` tagged pages. Returns the
    /// last tagged page it looked at, if any: a caller resuming after it
    /// looks at every tagged page once. `keep` runs under the tree lock:
    /// it may read the frame's descriptor, nothing more.
    pub fn take_dirty_if(
        &self,
        arena: &NodeArena,
        (start, end): (u64, u64),
        max: usize,
        visits: &mut usize,
        keep: &mut dyn FnMut(FrameNo) -> bool,
        out: &mut Vec<(u64, FrameNo)>,
    ) -> Option<u64> {
        let (root_id, height) = self.root();
        if height == 0 || start >= end || out.len() >= max || *visits == 0 {
            return None;
        }
        let mut t = Take {
            start,
            end,
            max,
            visits: *visits,
            keep,
            last: None,
        };
        take(arena, root_id, height - 1, 0, &mut t, out);
        *visits = t.visits;
        t.last
    }
}
