//! A run's entries in a thread's table (5.15, `ledger.rs`), and P7: the
//! window between a run's RMW on a leaf's pin words and its count, and the
//! recount that finds a run pin a dead process left in it.
//!
//! * P7a. A run (5.7) pins index leaf slots, not frames: its pin of slots
//!   `lo..lo + n` of leaf node `id` is an entry of its own in the table
//!   (the key's top bit set, the slots as `lo` and a mask), counted after
//!   R1's RMWs and narrowed or removed before R4's; one released by
//!   another thread is a negative entry. A fold keeps run entries in the
//!   table, moved to its front (each cleared before it is written again,
//!   the leaf named meanwhile in the row's `moving` word: P4, P6c).
//! * P7b. R1's RMWs and their count, and R4's uncount and its RMWs, run in
//!   a *run window*: the thread's `intent` names the leaf (`RUN_KEY |
//!   node`, `INTENT_RUN`) from before the first until after the last,
//!   stored and cleared as a pin window's (`open_intent`, `close_intent`).
//!   A thread with no table marks its row `direct`: its runs are not
//!   counted, and recounts give up.
//! * P7c. Each slot's nibble in a leaf's pin words has a `MARK` bit
//!   (`index/pins.rs`), which every RMW that changes a count clears in
//!   every nibble of its word: R1's CAS (AcqRel) and R4's (Release). The
//!   recount of a word sets `MARK` in every nibble with an Acquire RMW,
//!   then looks at every table and row (the look of P6b-c: a window on the
//!   leaf open, a fold under way or a row `direct`, and it tries again
//!   later) and sums the run entries of each slot: a slot's count above
//!   its sum is pins nobody counts, a dead process's, dropped with one CAS
//!   from the word it marked, which fails if a run pinned or unpinned a
//!   slot of the word since. P6b's argument holds word for word, the
//!   leaf's word in place of the frame's state word.
//! * P7d. The recovery recounts every leaf a dead process's intent names
//!   (it died in a run window), whose run entry its fold was moving, or
//!   whose run entries a recovery took and did not finish dropping (a taken
//!   run entry keeps its value with `HIGH_KEY` set, P6f). Dropping a pin
//!   wakes the slot's writers (R4), prunes the leaf if empty and runs the
//!   deferred frees, as the run's own R4 would have.

use super::*;

/// An intent (P7b): the thread is inside a run count's window on the leaf
/// its high half names (`RUN_KEY | node`).
pub(super) const INTENT_RUN: u64 = 3;

/// Counts a run's pin of slots `lo..lo + n` of index node `node` (`pin`:
/// after R1's RMWs) or its unpin (before R4's), in its own window, in the
/// cache whose descriptors start at `descs`, if that is a shared cache.
#[cfg(test)]
pub(super) fn count_run(descs: usize, node: u32, lo: usize, n: usize, pin: bool) {
    if let Some(w) = RunWindow::open(descs, node) {
        w.count(lo, n, pin);
        w.close();
    }
}

/// A run count's window on one leaf (P7b), opened before R1's RMWs (or
/// R4's uncount) and closed after their count (or their RMWs).
#[must_use = "a window is closed after its RMWs"]
pub(crate) struct RunWindow {
    reg: &'static Reg,
    /// This thread's table, if it has one.
    table: Option<&'static Table>,
    node: u32,
}

impl RunWindow {
    /// Opens the window on leaf node `node` of the cache whose descriptors
    /// start at `descs`; `None` if that is not a shared cache.
    #[inline]
    pub(crate) fn open(descs: usize, node: u32) -> Option<RunWindow> {
        if AREAS_N.load(Relaxed) == 0 {
            return None;
        }
        let reg = find(descs)?;
        compiler_fence(Ordering::SeqCst);
        let table = window::table_or_direct(reg);
        if let Some(t) = table {
            window::open_intent(t, (RUN_KEY | node as u64) << 32 | INTENT_RUN);
        }
        compiler_fence(Ordering::SeqCst);
        Some(RunWindow { reg, table, node })
    }

    /// Counts the run's pin (`pin`, after R1's RMWs) or unpin (before R4's)
    /// of slots `lo..lo + n` as the calling thread's.
    pub(crate) fn count(&self, lo: usize, n: usize, pin: bool) {
        if n == 0 || n > 16 || lo + n > 64 {
            return;
        }
        compiler_fence(Ordering::SeqCst);
        let mask = ((1u64 << n) - 1) as u32;
        let (node, lo) = (self.node, lo as u32);
        if !self.table.is_some_and(|t| add_run(t, node, lo, mask, pin)) {
            // The table full (folded, then counted), or none.
            count_in(self.reg, |reg, t| match t {
                Some(t) => add_run(t, node, lo, mask, pin),
                None => {
                    reg.area.row_direct(reg.row).store(1, Relaxed);
                    true
                }
            });
        }
        compiler_fence(Ordering::SeqCst);
    }

    /// Closes the window.
    pub(crate) fn close(self) {
        if let Some(t) = self.table {
            window::close_intent(t);
        }
    }
}

/// A run's entry: one pin (or, with `RUN_NEG`, one release) of slots
/// `lo + k` for each bit `k` of `mask`, in leaf node `node`. Appended at a
/// pin; at an unpin, the entry that covers the slots is narrowed (or
/// removed), else a negative entry appended. False if the table is full.
fn add_run(table: &Table, node: u32, lo: u32, mask: u32, pin: bool) -> bool {
    let key = (RUN_KEY | node as u64) << 32;
    let n = table.used.load(Relaxed) as usize;
    if !pin {
        for i in (0..n).rev() {
            let v = table.entries[i].load(Relaxed);
            if v >> 32 != key >> 32 || v & RUN_NEG != 0 {
                continue;
            }
            let (_, elo, emask, _) = run_entry(v);
            if lo < elo || lo - elo >= 16 || (emask >> (lo - elo)) & mask != mask {
                continue;
            }
            let left = emask & !(mask << (lo - elo));
            if left != 0 {
                table.entries[i].store(key | elo as u64 | (left as u64) << 6, Relaxed);
            } else {
                remove(table, i, n);
            }
            return true;
        }
    }
    if n >= ENTRIES {
        return false;
    }
    let neg = if pin { 0 } else { RUN_NEG };
    table.entries[n].store(key | neg | lo as u64 | (mask as u64) << 6, Relaxed);
    table.used.store(n as u32 + 1, Relaxed);
    true
}

impl Area {
    /// P7c: the run pins of each slot of leaf node `node` counted in every
    /// table in use, or `None` if a count of them may be under way (a run
    /// window on the leaf, a fold, a row marked `direct`). The caller set
    /// `MARK` on the pin word it recounts before (its Acquire RMW orders
    /// what this reads).
    pub fn counted_run_pins(&self, node: u32) -> Option<[i64; 64]> {
        let mut sums = [0i64; 64];
        self.look(
            RUN_KEY | node as u64,
            |e| {
                if let Entry::Run(n, lo, mask, c) = e {
                    if n == node {
                        for s in run_slots(lo, mask) {
                            if let Some(x) = sums.get_mut(s as usize) {
                                *x += c;
                            }
                        }
                    }
                }
            },
            // Runs are counted in tables only.
            |_| {},
        )?;
        Some(sums)
    }
}
