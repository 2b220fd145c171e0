//! What an audit reads of a segment's pin counts (protocol 5.15,
//! `ledger.rs`): every process's sums, for `PageCache::validate` of a
//! quiet cache, and who counts what, for a test's report of a stuck one.
//! Each reads under the registration lock, which an exiting thread's fold
//! holds (an entry moved from its table to its row while the audit reads
//! the tables, then the rows, would be missed or seen twice).

use super::*;

/// The run entries whose sums are not zero: "run", the leaf's node, the
/// slot, and each owner's tag with its sum.
pub type OtherCounts = Vec<(&'static str, usize, u32, Vec<(u32, i64)>)>;

/// The run slots an entry counts, as (node, slot), with its count: one per
/// slot of a run entry.
fn others_of(e: Entry, mut each: impl FnMut((usize, u32), i64)) {
    if let Entry::Run(node, lo, mask, c) = e {
        for s in run_slots(lo, mask) {
            each((node as usize, s), c);
        }
    }
}

impl Area {
    /// Calls `each` with every entry of every owned table and its owner's
    /// tag. The caller holds the registration lock.
    fn each_entry(&self, mut each: impl FnMut(u32, Entry)) {
        for t in 0..TABLES {
            let table = self.table(t);
            // Acquire: the owner's claim, before its entries.
            let o = table.owner.load(Acquire);
            if o != 0 {
                for e in &table.entries {
                    each(o, Entry::of(e.load(Relaxed)));
                }
            }
        }
    }

    /// Who counts pins of frame `f`: (owner's tag, in its row rather than
    /// a table, the count), the nonzero ones. For a test's report of a
    /// stuck cache.
    pub fn holders(&self, f: u32) -> Vec<(u32, bool, i64)> {
        let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        self.each_entry(|o, e| {
            if let Entry::Frame(g, c) = e {
                if g == f {
                    out.push((o, false, c));
                }
            }
        });
        for r in 0..ROWS {
            let o = self.row_owner(r).load(Acquire);
            let c = self.row(r).get(f as usize).map_or(0, |c| c.load(Relaxed));
            if o != 0 && c != 0 && !self.row_taken(r) {
                out.push((o, true, c as i64));
            }
        }
        out
    }

    /// The run entries whose sums are not zero ([`OtherCounts`]). For a
    /// test's report.
    pub fn other_counts(&self) -> OtherCounts {
        let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let mut sums: std::collections::BTreeMap<(usize, u32), Vec<(u32, i64)>> =
            Default::default();
        self.each_entry(|o, e| {
            others_of(e, |k, c| {
                let v = sums.entry(k).or_default();
                match v.iter_mut().find(|(w, _)| *w == o) {
                    Some((_, n)) => *n += c,
                    None => v.push((o, c)),
                }
            })
        });
        sums.into_iter()
            .filter(|(_, v)| v.iter().map(|&(_, c)| c).sum::<i64>() != 0)
            .map(|((node, slot), v)| ("run", node, slot, v))
            .collect()
    }

    /// Every process's pins of every frame, summed over all tables and
    /// rows: for an audit of a quiet cache (tests, with
    /// [`Area::other_counts`] for the rest).
    pub fn frame_counts(&self) -> Vec<i64> {
        let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = vec![0i64; self.frames];
        self.each_entry(|_, e| {
            if let Entry::Frame(f, c) = e {
                if let Some(x) = n.get_mut(f as usize) {
                    *x += c;
                }
            }
        });
        for r in 0..ROWS {
            if self.row_owner(r).load(Acquire) != 0 && !self.row_taken(r) {
                for (f, c) in self.row(r).iter().enumerate() {
                    n[f] += c.load(Relaxed) as i64;
                }
            }
        }
        n
    }
}
