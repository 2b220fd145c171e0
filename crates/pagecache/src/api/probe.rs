//! What tests and tools ask of a cache to see why it is stuck: not stable,
//! hidden from the docs.

use super::{Inner, PageCache};
use std::sync::Weak;

impl PageCache {
    /// Whether this process's flusher holds a shared cache's age lease:
    /// it writes the pages past the age bound of every file it has open
    /// for writing, for every process (false for a private cache, whose
    /// flusher writes its own). Tests and tools.
    #[doc(hidden)]
    pub fn holds_age_lease(&self) -> bool {
        #[cfg(not(loom))]
        return self.inner.holds_age_lease();
        #[cfg(loom)]
        false
    }

    /// For a test that found the cache stuck: the frames held beyond the
    /// cache's own reference, latched or under write-back, with their
    /// holders (and, shared, what each process counts of them). Not
    /// stable: its text is for people.
    #[doc(hidden)]
    pub fn describe_held(&self) -> String {
        self.inner.describe_held()
    }

    /// [`PageCache::describe_held`] for a watchdog thread, which must not
    /// keep the cache alive: the probe holds no reference to it.
    #[doc(hidden)]
    pub fn held_probe(&self) -> HeldProbe {
        HeldProbe(self.inner.me.get().cloned().unwrap_or_default())
    }
}

/// A cache's [`PageCache::describe_held`], asked from another thread
/// without keeping the cache alive.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct HeldProbe(Weak<Inner>);

impl HeldProbe {
    /// The cache's held frames, or `None` once it is gone.
    pub fn describe(&self) -> Option<String> {
        self.0.upgrade().map(|i| i.describe_held())
    }
}

impl PageCache {
    /// For a test whose pages stayed cached when they should not have:
    /// each run of consecutive cached pages of a file in one state, as
    /// `file F pages A..=B State(..) behind=..` (`behind`: whether the
    /// pages lie behind a long write run, `write_behind.rs`). Not stable:
    /// its text is for people.
    #[doc(hidden)]
    pub fn describe_cached(&self) -> String {
        use std::fmt::Write;
        let i = &self.inner;
        let mut pages = Vec::new();
        for f in 0..i.frames.len() as crate::frame::FrameNo {
            let d = i.desc(f);
            let s = d.snapshot();
            if s.refs() >= 1 {
                let (owner, index) = d.identity();
                let behind = i.file_by_id(owner).map(|fs| fs.behind.behind(index));
                pages.push((owner, index, format!("{s:?} behind={behind:?}")));
            }
        }
        pages.sort();
        let mut out = String::new();
        let mut k = 0;
        while k < pages.len() {
            let (owner, first, state) = &pages[k];
            let mut j = k;
            while pages
                .get(j + 1)
                .is_some_and(|(o, index, s)| o == owner && *index == pages[j].1 + 1 && s == state)
            {
                j += 1;
            }
            let _ = writeln!(out, "file {owner} pages {first}..={} {state}", pages[j].1);
            k = j + 1;
        }
        out
    }
}

impl PageCache {
    /// Tests of a cache shared by processes (5.15 P8): takes a frame from
    /// the pool (`"hand"`), or a batch off the global stack as a move
    /// between two stacks does before its second commit (`"batch"`), and
    /// kills this process holding it. Never returns.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn die_holding_frames(&self, what: &str) -> ! {
        self.inner.die_holding_frames(what)
    }
}

impl super::File {
    /// Tests of a cache shared by processes (5.15 P8): drops the last
    /// reference of the page `p` holds (removed from its index: a
    /// `set_len` cut it) and kills this process before the frame is
    /// freed. Never returns.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn die_freeing(&self, p: super::PageRef<'_>) -> ! {
        let d = self.cache.desc(p.frame_hint());
        std::mem::forget(p);
        assert!(
            d.release() == crate::frame::state::Released::Last,
            "the page's last reference"
        );
        crate::segment::kill_self()
    }

    /// Tests of a cache shared by processes (5.15 P5, P8): freezes page
    /// `index` (cached, clean, idle) for an eviction that no intent
    /// records (as a thread with no table does) and kills this process
    /// with the frame frozen in its index. Never returns.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn die_frozen_in_index(&self, index: u64) -> ! {
        let p = self.page(index).expect("a cached page");
        let d = self.cache.desc(p.frame_hint());
        std::mem::forget(p);
        assert!(d.freeze(2).is_ok(), "page {index} idle and clean");
        crate::segment::kill_self()
    }

    /// Tests of a cache shared by processes (5.15 P6): takes one more pin
    /// of the frame `p` holds, inside a pin count's window, and kills this
    /// process before the pin is counted. Never returns.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn die_in_pin_window(&self, p: &super::PageRef<'_>) -> ! {
        self.cache.desc(p.frame_hint()).die_in_pin_window()
    }

    /// Tests of a cache shared by processes (5.15 P7): inside a run
    /// count's window on the leaf of page `index` (cached), pins its slot
    /// and kills this process before the pin is counted, or, with
    /// `unpin`, takes a run of the page and kills this process after its
    /// unpin is uncounted and before the slot is unpinned. Never returns.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn die_in_run_window(&self, index: u64, unpin: bool) -> ! {
        if unpin {
            let run = self.run(index, 1).expect("a run of a cached page");
            assert_eq!(run.len(), 1, "page {index} is cached and idle");
            std::mem::forget(run);
        }
        self.inner().die_in_run_window(&self.shared, index, unpin)
    }
}
