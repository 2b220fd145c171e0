//! P4 and P6f of protocol 5.15 (`ledger.rs`): what the recovery of a dead
//! process takes of its tables and row, and their freeing once it is done.

use super::*;

impl Area {
    /// The pins still counted for the process tagged `tag`, by frame (its
    /// tables' and its row's sums, P4), each entry marked taken as it is
    /// read (a second take does not count it again); its tables and its
    /// row stay its until [`Area::free_process`], so that a recovery
    /// killed before it dropped them leaves the next one, for each frame
    /// counted or intended, a suspect to recount (P6f). For a dead process
    /// (its threads run no more) or for this one's detach (no pin held).
    /// Frames past the cache's are ignored (a corrupt entry).
    pub fn take_process(&self, tag: u32) -> Taken {
        let mut sums: std::collections::HashMap<u32, i64> = Default::default();
        let mut runs: std::collections::HashMap<(u32, u32), i64> = Default::default();
        let mut evicting = Vec::new();
        let mut suspects = Vec::new();
        let mut run_suspects = Vec::new();
        for t in 0..TABLES {
            let table = self.table(t);
            // Acquire: what its owner wrote (it is dead or done).
            if table.owner.load(Acquire) != tag {
                continue;
            }
            for e in &table.entries {
                let v = e.load(Relaxed);
                match Entry::of(v) {
                    // Taken by a recovery that did not finish.
                    Entry::Empty if v >> 32 & (RUN_KEY | HIGH_KEY) == HIGH_KEY => {
                        suspects.push((v >> 32 & !HIGH_KEY) as u32 - 1);
                    }
                    Entry::Empty if v >> 32 & HIGH_KEY != 0 => {
                        run_suspects.push((v >> 32 & !(RUN_KEY | HIGH_KEY)) as u32);
                    }
                    Entry::Empty => {}
                    Entry::Frame(f, n) => {
                        // Taken: skipped by counts and recounts from now.
                        e.store(v | HIGH_KEY << 32, Relaxed);
                        *sums.entry(f).or_default() += n;
                    }
                    Entry::Run(node, lo, mask, n) => {
                        // Taken, likewise (P7d).
                        e.store(v | HIGH_KEY << 32, Relaxed);
                        for s in run_slots(lo, mask) {
                            *runs.entry((node, s)).or_default() += n;
                        }
                    }
                }
            }
            let intent = table.intent.load(Relaxed);
            match intent & 0xffff {
                INTENT_EVICT => evicting.push((intent >> 32) as u32 - 1),
                window::INTENT_PIN => suspects.push((intent >> 32) as u32 - 1),
                runs::INTENT_RUN => run_suspects.push((intent >> 32 & !RUN_KEY) as u32),
                _ => {}
            }
            // No live window: recounts look past it (P6f).
            table.intent.store(intent | window::INTENT_TAKEN, Relaxed);
        }
        if let Some(r) = (0..ROWS).find(|&r| self.row_owner(r).load(Acquire) == tag) {
            let taken = self.row_direct(r).fetch_or(window::ROW_TAKEN, Relaxed) & window::ROW_TAKEN;
            for (f, c) in self.row(r).iter().enumerate() {
                // Relaxed: only its process counted here, and it is gone.
                let c = c.load(Relaxed);
                if c != 0 && taken == 0 {
                    *sums.entry(f as u32).or_default() += c as i64;
                } else if c != 0 {
                    suspects.push(f as u32);
                }
            }
            match self.take_quiet(r) {
                Some(window::Moving::Frame(f)) => suspects.push(f),
                Some(window::Moving::Run(node)) => run_suspects.push(node),
                None => {}
            }
        }
        sums.retain(|&f, _| (f as usize) < self.frames);
        evicting.retain(|&f| (f as usize) < self.frames);
        // An eviction's freeze uncounts its pin before its CAS (P5): a
        // death there leaves that pin uncounted, as a window does.
        suspects.extend(&evicting);
        suspects.retain(|&f| (f as usize) < self.frames);
        suspects.sort_unstable();
        suspects.dedup();
        run_suspects.retain(|&n| n as u64 <= MAX_NODES);
        run_suspects.sort_unstable();
        run_suspects.dedup();
        Taken {
            evicting,
            suspects,
            frames: nonzero(sums, |f, n| (f, n)),
            runs: nonzero(runs, |(node, slot), n| (node, slot, n)),
            run_suspects,
        }
    }

    /// Frees the tables and the row of the process tagged `tag`, taken
    /// ([`Area::take_process`]) and what they counted dropped.
    pub fn free_process(&self, tag: u32) {
        for t in 0..TABLES {
            let table = self.table(t);
            if table.owner.load(Acquire) != tag {
                continue;
            }
            for e in &table.entries {
                e.store(0, Relaxed);
            }
            table.intent.store(0, Relaxed);
            table.used.store(0, Relaxed);
            // Release: the cleared entries before the next claimant's
            // Acquire.
            table.owner.store(0, Release);
        }
        if let Some(r) = (0..ROWS).find(|&r| self.row_owner(r).load(Acquire) == tag) {
            for c in self.row(r) {
                c.store(0, Relaxed);
            }
            self.row_direct(r).store(0, Relaxed);
            let _ = self.take_quiet(r);
            self.row_owner(r).store(0, Release);
        }
    }
}

/// What a process's counts add up to ([`Area::take_process`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Taken {
    /// Pins by frame (frame, pins), sorted.
    pub frames: Vec<(u32, i64)>,
    /// Run pins by leaf slot (node id, slot, pins), sorted.
    pub runs: Vec<(u32, u32, i64)>,
    /// Frames its evictions had frozen and not yet taken out of their
    /// index (P5).
    pub evicting: Vec<u32>,
    /// Frames it may hold a pin of that no count says (P6d): it died
    /// inside a window on them (or in an eviction's), sorted.
    pub suspects: Vec<u32>,
    /// Leaf nodes it may hold a run pin of that no count says (P7d), or
    /// whose run pins a recovery took and may not have dropped, sorted.
    pub run_suspects: Vec<u32>,
}
