//! Cache-wide invariants, checked by tests (`PageCache::validate`).

use super::Inner;
use crate::frame::alloc::FrameAllocator;
use crate::frame::FrameNo;

impl Inner {
    /// Waits until no run (a batched miss, readahead, prefetch) is being
    /// read. Context: sleeps; tests only.
    pub(crate) fn wait_runs(&self) {
        // Acquire: pairs with `complete_run`'s Release decrement.
        while self
            .words
            .filling
            .all()
            .any(|c| c.load(crate::sync::unmodelled::Ordering::Acquire) > 0)
        {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    /// Checks cache-wide invariants (tests). Call with no operation running.
    /// Context: tests only, with no operation running and no pin held;
    /// takes the registry lock, then each tree lock in turn.
    pub(crate) fn validate(&self) {
        self.wait_runs();
        self.wait_flusher_idle();
        // A cache shared by processes: other processes' files are not in
        // this registry; what is checked is that no pin is counted or
        // held, in any process (5.15).
        #[cfg(not(loom))]
        if self.file_table().is_some() {
            self.validate_pins();
            return self.validate_frames();
        }
        let reg = self.registry.read();
        let mut in_index = vec![false; self.frames.len()];
        for fs in reg.by_id.values() {
            let g = fs.tree.lock();
            g.validate(&self.nodes, |index, f, tagged| {
                let d = self.desc(f);
                let s = d.snapshot();
                assert!(!in_index[f as usize], "frame {f} in two slots");
                in_index[f as usize] = true;
                assert_eq!(d.identity(), (fs.id, index), "frame {f} identity");
                assert!(
                    s.is_idle(),
                    "cached frame {f} not idle (the cache's reference, unlatched, \
                     not removed, up to date): {s:?}"
                );
                if s.is_dirty() {
                    assert!(
                        tagged,
                        "dirty page {index} of {} not tagged",
                        fs.path.display()
                    );
                }
            });
        }
        assert_eq!(
            self.deferred.len(),
            0,
            "truncated frames still deferred with no run alive (run.rs T3)"
        );
        assert_eq!(
            self.async_frames.handed(),
            0,
            "pins of completed reads that no future took or gave back (5.9)"
        );
        let free = self.alloc.free_count();
        let cached = in_index.iter().filter(|&&b| b).count();
        let is_anon: Vec<bool> = (0..self.frames.len() as FrameNo)
            .map(|f| {
                let d = self.desc(f);
                let s = d.snapshot();
                s.is_unevictable() && s.refs() > 0
            })
            .collect();
        let anon = is_anon.iter().filter(|&&b| b).count();
        // With no pins held, every frame is cached, anonymous, or free.
        assert_eq!(
            free + cached + anon,
            self.frames.len(),
            "frames leaked or double-counted ({free} free, {cached} cached, {anon} anonymous)"
        );
        // List baselines: exactly the cached and anonymous frames listed.
        if let Some(listed) = self.policy.listed() {
            let want: Vec<FrameNo> = (0..self.frames.len() as FrameNo)
                .filter(|&f| in_index[f as usize] || is_anon[f as usize])
                .collect();
            let mut listed = listed.unwrap_or_else(|e| panic!("replacement list broken: {e}"));
            listed.sort_unstable();
            assert_eq!(listed, want, "replacement list vs cached frames");
        }
    }
}
