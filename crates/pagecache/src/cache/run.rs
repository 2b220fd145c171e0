//! Protocol 5.7: runs (`File::run`), a leaf-level pin over consecutive
//! pages, against writers (5.5), eviction (5.2) and truncate (5.6).
//!
//! A gang lookup with one pin per page pays a compare-and-swap and a
//! `fetch_sub` on every page's descriptor: the floor of `File::pages`. A
//! run instead adds one count per slot to its index leaf, with one RMW per
//! 16 slots (`index/pins.rs`), then checks each page with loads only. The
//! other side pays instead: whoever changes a page (its writer, the evictor,
//! truncate) does so with an RMW on the page's state, then a SeqCst fence,
//! then looks at the page's slot count. The two fences make it a Dekker
//! handshake: of "run pinned, then read the state" and "changed the state,
//! then read the pins", at least one side sees the other.
//!
//! ```text
//!  run (no lock)                            writer (pin held; 5.5)
//!  R1. leaf = walk(start); +1 on the slot   W1. try_latch (RMW on state)
//!      counts of start..start+n (CAS per    W2. SeqCst fence; leaf of the
//!      16 slots; a count at 15 refuses:         page (a walk; checked as in
//!      per-page pins instead); SeqCst fence     R2); slot count zero -> go on
//!  R2. leaf.owner/pos == (file, start's     W3. else set the slot's waiter
//!      leaf) else unpin, per-page pins          bit, SeqCst fence, re-check,
//!  R3. per page k: f = slot; version v         park; R4 wakes it (still
//!      even; state: refs > 0, not latched,      holding the latch, so new
//!      up to date, not removed; identity        runs see LATCHED in R3)
//!      == (file, start+k); version == v.
//!      The first page failing ends the run  evictor (tree lock held; 5.2)
//!      (its slots unpinned, R4); none ->    E1. freeze (RMW on state)
//!      per-page pins (reads misses)         E2. SeqCst fence; slot count
//!  R4. drop: -1 on the counts; SeqCst       E3. non-zero -> unfreeze, give up
//!      fence; wake W3 waiters of the
//!      slots; an empty leaf -> prune it     truncate (tree lock held; 5.6)
//!      (tree lock, F1-F2); deferred frees   T1. mark REMOVED (RMW on state)
//!      waiting -> D1                        T2. SeqCst fence; slot count;
//!                                               clear the slot
//!  leaf free (tree lock, `retire`)          T3. non-zero -> keep the cache's
//!  F1. owner = 0 (RMW); SeqCst fence            reference, queue (leaf, slot,
//!  F2. any slot count -> owner back, the        frame); then D1. Zero -> drop
//!      leaf stays linked (empty) until R4       it (the last frees the frame)
//!
//!  deferred frees (D1: after T3, and in R4 when the queue is not empty):
//!  lock the queue; SeqCst fence; for each entry whose slot count is zero,
//!  drop the kept reference (the last one frees the frame)
//! ```
//!
//! Why a page a run validated in R3 cannot change under it until R4:
//!
//! * **A writer** latches with W1. If W2's fence precedes R1's in the
//!   fences' total order, R3 (after R1's fence) sees `LATCHED` and the page
//!   is not in the run. Otherwise W2 sees the count R1 added, and waits in
//!   W3 until the run's R4: the writer keeps the latch, so no new run takes
//!   the page meanwhile, and the wake-up cannot be lost (W3 sets the bit
//!   and fences before its re-check; R4 unpins and fences before reading
//!   the bits). The writer finds the leaf with a lock-free walk: the page is
//!   in its tree while pinned by the writer and not removed, and a leaf a
//!   run pins stays linked (F2), so the walk ends at the run's leaf.
//! * **The evictor** freezes with E1, the same handshake with E2: either R3
//!   sees refcount 0 (or the frame's next identity, with an odd version in
//!   between, which R3's version check rejects), or E2 sees the count and
//!   E3 puts the page back. So no frame a run reads is freed or reused.
//! * **Truncate** cannot wait (5.6). T1/T2 is the same handshake; a page a
//!   run may hold keeps the cache's reference, so no release can be its
//!   last, until D1 sees the slot count at zero. Why zero then means every
//!   run that validated the page is gone: such a run's R1 fence precedes
//!   T2's (else its R3 would have seen `REMOVED`), T2's fence precedes D1's
//!   (the queue's lock orders them), so D1 sees that run's count or its
//!   R4. A queued entry cannot be forgotten: T3 queues, then runs D1 (fence,
//!   counts); a run's R4 unpins, fences, then reads the queue's length: one
//!   of them sees the other.
//! * **The leaf** itself is freed only by `retire` (F1-F2), the same
//!   handshake with R1/R2: a leaf a run pinned before F2's fence stays,
//!   with its owner and position; a run pinning after reads owner 0 (or the
//!   next use's owner and position) in R2 and lets go.
//! * **R3's checks** use no pin, so they rest on the version: identity only
//!   changes with the version odd (`FrameDesc::reset`/`assign`), so an even
//!   version unchanged across the state and identity loads means the state
//!   read is that page's. From the moment of that state load (after R1's
//!   fence) the three bullets above hold.
//!
//! A run counts as a pin of every page in its range (lock rule 12, so
//! rules 3 and 4 apply to its holder): its holder must not wait for those pages (read, write or latch them through
//! other calls) while the run lives. Runs are not used by the baseline
//! builds (page mutexes, strict LRU): they take per-page pins.

use super::{FileShared, Inner};
use crate::frame::state::Released;
use crate::frame::FrameNo;
use crate::index::Node;
use crate::stats::Counter;
use crate::sync::{fence, park, unpark_all, wait_timer, LockClass, Ordering};

/// The most pages one run holds (its frame numbers live in the run guard,
/// which callers move around: 16 keep it small).
pub const RUN_MAX: usize = 16;
/// Pages per index leaf: a run never crosses a leaf's end.
pub const LEAF_PAGES: u64 = crate::index::FANOUT as u64;

/// Asks the CPU to bring `d`'s line into the cache (no effect on memory;
/// nothing without x86-64, or under loom).
#[inline(always)]
fn prefetch(d: &crate::frame::state::FrameDesc) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: a prefetch hint reads nothing the program can observe and
    // cannot fault; `d` is a valid reference anyway.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((d as *const crate::frame::state::FrameDesc).cast());
    }
    #[cfg(any(not(target_arch = "x86_64"), loom))]
    let _ = d;
}

/// A frame whose truncated page a run may still read (T3): the cache's
/// reference is kept until the slot's run count is zero.
#[derive(Debug)]
pub(crate) struct Deferred {
    /// The leaf's address (nodes are type-stable: it stays valid memory
    /// for the cache's life, whatever the node is used for next).
    leaf: usize,
    slot: usize,
    frame: FrameNo,
}

impl Inner {
    /// R1-R3: pins the cached, idle pages `start..start + n` (within one
    /// leaf, `n <= RUN_MAX`) with one run pin, writing their frames to `out`
    /// (the first `k` returned are the run's).
    /// Returns the leaf and how many pages from `start` it holds (the run
    /// ends at the first page not cached and idle), or `None` (nothing
    /// pinned): the caller takes per-page pins.
    /// Context: any, no sleep, no lock (an empty garbage leaf's R4 may take
    /// the tree lock).
    pub(crate) fn run_pin(
        &self,
        fs: &FileShared,
        start: u64,
        n: usize,
        out: &mut [FrameNo; RUN_MAX],
    ) -> Option<(&Node, usize)> {
        debug_assert!(
            n > 0 && n <= RUN_MAX && (start % LEAF_PAGES) as usize + n <= LEAF_PAGES as usize
        );
        if self.hooks != 0 {
            return None; // baselines: per-page pins, through the hooks
        }
        let leaf = fs.tree.leaf(&self.nodes, start)?;
        let lo = (start % LEAF_PAGES) as usize;
        // R1.
        if !leaf.pin_slots(lo, n) {
            return None;
        }
        fence(Ordering::SeqCst);
        // R2.
        if !leaf.is_leaf_of(fs.tree.owner(), start - lo as u64) {
            self.run_unpin(fs, leaf, start, n, false);
            return None;
        }
        // R3. First the frames (one leaf line), asking the CPU for their
        // descriptors all at once (a hint: consecutive pages' descriptors
        // are independent cache misses; loading them in turn would wait for
        // each), then the checks.
        let mut m = 0;
        while m < n {
            let Some(f) = leaf.slot(lo + m) else { break };
            if f as usize >= self.frames.len() {
                break;
            }
            prefetch(self.desc(f));
            out[m] = f;
            m += 1;
        }
        let mut k = 0;
        while k < m {
            let f = out[k];
            let d = self.desc(f);
            let Some(v) = d.read_begin() else { break };
            let s = d.snapshot();
            if s.refs() == 0
                || s.is_latched()
                || !s.is_live()
                || d.identity() != (fs.id, start + k as u64)
                || !d.read_validate(v)
            {
                break;
            }
            if !s.is_accessed() {
                d.mark_accessed();
            }
            k += 1;
        }
        if k < n {
            self.run_unpin(fs, leaf, start + k as u64, n - k, true);
        }
        if k == 0 {
            return None;
        }
        self.counters.add(Counter::Hits, k as u64);
        Some((leaf, k))
    }

    /// R4: drops the run pins of pages `start..start + n` of `leaf`, wakes
    /// writers waiting for them, prunes the leaf if it is empty (with
    /// `prune`: it was the file's leaf), and runs pending deferred frees.
    /// Context: no sleep beyond the tree lock (prune) and the deferred
    /// queue's lock; the caller holds no tree lock.
    pub(crate) fn run_unpin(
        &self,
        fs: &FileShared,
        leaf: &Node,
        start: u64,
        n: usize,
        prune: bool,
    ) {
        let lo = (start % LEAF_PAGES) as usize;
        leaf.unpin_slots(lo, n);
        fence(Ordering::SeqCst);
        let mut w = leaf.take_pin_waiters(lo, n);
        while w != 0 {
            let s = w.trailing_zeros() as usize;
            w &= w - 1;
            unpark_all(leaf.pin_key(s));
        }
        if prune && leaf.is_empty() {
            fs.tree.lock().prune(&self.nodes, start);
        }
        // Relaxed: after R4's fence, which D1's handshake rests on (T3
        // queues, then fences in D1 and reads the counts).
        if self.deferred_n.load(Ordering::Relaxed) != 0 {
            self.run_deferred();
        }
    }

    /// W2: the caller just claimed page `index`'s latch (W1); the page's
    /// leaf and slot if a run holds the page. The walk is lock-free: the
    /// page is in its tree while latched and not removed, and a leaf a run
    /// pins stays linked (F2), so it ends at the run's leaf. Context: any,
    /// no sleep.
    pub(crate) fn run_over(&self, fs: &FileShared, index: u64) -> Option<(&Node, usize)> {
        fence(Ordering::SeqCst);
        let leaf = fs.tree.leaf(&self.nodes, index)?;
        let s = (index % LEAF_PAGES) as usize;
        (leaf.slot_pinned(s) && leaf.is_leaf_of(fs.tree.owner(), index - s as u64))
            .then_some((leaf, s))
    }

    /// W2-W3: the caller just latched page `index` of `fs` (W1) and holds
    /// it; waits while a run pins it. Context: may sleep (parks until the
    /// run's R4); holds the page's latch only.
    pub(crate) fn wait_run_pins(&self, fs: &FileShared, index: u64) {
        // W2.
        let Some((leaf, s)) = self.run_over(fs, index) else {
            return;
        };
        // W3.
        let _timer = wait_timer(LockClass::PageDrainWait);
        loop {
            leaf.add_pin_waiter(s);
            fence(Ordering::SeqCst);
            if !leaf.slot_pinned(s) {
                return;
            }
            park(leaf.pin_key(s), || {
                leaf.pin_waiter_set(s) && leaf.slot_pinned(s)
            });
        }
    }

    /// T3: queues the frames of truncated pages a run may still read (the
    /// cache's reference of each is kept), then D1. Context: no sleep; no
    /// tree lock held.
    pub(crate) fn defer_frees(&self, entries: Vec<(&Node, usize, FrameNo)>) {
        if entries.is_empty() {
            return;
        }
        {
            let mut q = self.deferred.lock();
            for (leaf, slot, frame) in entries {
                q.push(Deferred {
                    leaf: leaf as *const Node as usize,
                    slot,
                    frame,
                });
                // Relaxed: ordered by the queue lock and D1's fence.
                self.deferred_n.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.run_deferred();
    }

    /// D1: drops the kept reference of every queued frame whose slot no
    /// run pins any more. Context: no sleep; takes the queue's lock, then
    /// (freeing) the policy's and pool's.
    pub(crate) fn run_deferred(&self) {
        let mut free = Vec::new();
        {
            let mut q = self.deferred.lock();
            fence(Ordering::SeqCst);
            q.retain(|e| {
                // SAFETY: `leaf` is the address of a node of `self.nodes`,
                // whose nodes live (type-stable) as long as the cache.
                let leaf = unsafe { &*(e.leaf as *const Node) };
                if leaf.slot_pinned(e.slot) {
                    return true;
                }
                // Relaxed: under the queue lock.
                self.deferred_n.fetch_sub(1, Ordering::Relaxed);
                if self.desc(e.frame).release() == Released::Last {
                    free.push(e.frame);
                }
                false
            });
        }
        for f in free {
            self.free_frame(f);
        }
    }
}
