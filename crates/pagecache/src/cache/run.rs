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
//!  R1. had_runs = true (once per file);     W1. try_latch (RMW on state)
//!      leaf = walk(start); +1 on the slot   W2. SeqCst fence; had_runs
//!      counts of start..start+n (CAS per        false -> go on; leaf of the
//!      16 slots; a count at 3 refuses:          page (a walk; checked as in
//!      per-page pins instead); SeqCst fence     R2); slot count zero -> go
//!  R2. leaf.owner/pos == (file, start's         on; then the page's state:
//!      leaf) else unpin, per-page pins          REMOVED -> unlatch, retry
//!  R3. per page k: f = slot; version v          the lookup; slot STALE ->
//!      even; state: refs > 0, not latched,      go on (no run holds it)
//!      up to date, not removed; identity    W3. else one more reference of
//!      == (file, start+k); version == v;        its own (write-back pins
//!      then the slot not STALE. The first       pass, rule 7), set the
//!      page failing ends the run (its           slot's waiter bit, SeqCst
//!      slots unpinned, R4); none ->             fence, re-check W2, park;
//!      per-page pins (reads misses)             R4 wakes it (still holding
//!  R4. drop: -1 on the counts, clearing         the latch, so new runs see
//!      STALE of a slot that reaches 0 (one      LATCHED in R3); drop the
//!      RMW per word); SeqCst fence; wake W3     reference, drain (5.5 step
//!      waiters of the slots; an empty leaf      2) again
//!      -> prune it (tree lock, F1-F2);
//!      deferred frees waiting -> D1         evictor (tree lock held; 5.2)
//!                                           E1. freeze (RMW on state)
//!  leaf free (tree lock, `retire`)          E2. SeqCst fence; slot count
//!  F1. owner = 0 (RMW); SeqCst fence        E3. non-zero -> unfreeze, give up
//!  F2. any slot count -> owner back, the
//!      leaf stays linked (empty) until R4   truncate (tree lock held; 5.6)
//!                                           T1. mark REMOVED (RMW on state)
//!  deferred frees (D1: after T3, and in     T2. SeqCst fence; slot count
//!  R4 when the queue is not empty): lock        non-zero -> set STALE (one
//!  the queue; SeqCst fence; for each            RMW on the pin word: never
//!  entry whose slot count is zero, drop         on a zero count); clear the
//!  the kept reference, under the lock           slot
//!  (the last one frees the frame, after)    T3. pinned -> keep the cache's
//!                                               reference, queue (leaf,
//!                                               slot, frame) under the tree
//!                                               lock; D1 after it. Zero ->
//!                                               drop it (the last frees the
//!                                               frame)
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
//!   `had_runs` skips the walk for a file no run ever pinned: the run
//!   stores it before R1's fence, so if that fence precedes W2's, W2
//!   reads it (it is never cleared) and walks; if W2's precedes, R3 sees
//!   `LATCHED`, as above.
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
//! * **A new page in a truncated slot.** Truncate clears the slot with
//!   runs still holding the old page; a later miss puts a new page there,
//!   and the old runs' counts stay on the slot. They must not hold the new
//!   page's writers (a run holder writing the page at that index again
//!   waited for itself), hence `STALE`. While it is set no run takes the
//!   slot's page: the bit is set (T2, Release) before the slot is cleared,
//!   the new page is stored later (tree lock), so a run whose R3 loads the
//!   new page (Acquire) sees the bit or a later value of the word, and the
//!   bit is cleared only by the unpin that takes the count to zero, which
//!   cannot come before this run's own unpin. So a W2 that reads `STALE`
//!   in the word (after its fence) knows the runs counted there hold pages
//!   truncate removed: if its own page is not REMOVED (read after the
//!   word, which T2 set with Release after T1), none of them holds it;
//!   if it is, the writer retries its lookup and writes nothing here. And
//!   a run that validated the writer's page and was not seen latched in
//!   R3 has its fence before W2's, so W2 reads that run's pin or later:
//!   not a `STALE` older than it (any clear came before that pin).
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

use super::deferred::Deferred;
use super::{FileShared, Inner};
use crate::frame::state::Released;
use crate::frame::FrameNo;
use crate::index::{Node, SlotRuns};
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

/// A run count's window (5.15 P7, `frame/ledger_runs.rs`) in a shared
/// cache; nothing in a private one.
struct RunWindow(#[cfg(not(loom))] Option<crate::frame::ledger::RunWindow>);

impl RunWindow {
    /// Counts the run's pin (after R1's RMWs) or unpin (before R4's) of
    /// slots `lo..lo + n` as this thread's.
    #[inline]
    fn count(&self, lo: usize, n: usize, pin: bool) {
        #[cfg(not(loom))]
        if let Some(w) = &self.0 {
            w.count(lo, n, pin);
        }
        #[cfg(loom)]
        let _ = (lo, n, pin);
    }

    /// Closes the window.
    #[inline]
    fn close(self) {
        #[cfg(not(loom))]
        if let Some(w) = self.0 {
            w.close();
        }
    }
}

/// Whether a run holds a latched page (protocol 5.7 W2).
#[derive(Debug)]
pub(crate) enum RunHold<'a> {
    /// No run holds it: the latch holder goes on.
    Free,
    /// Runs pinning slot `.1` of leaf `.0` may hold it: wait (W3).
    Held(&'a Node, usize),
    /// The page was removed meanwhile, and runs pin its slot: write
    /// nothing, let go and retry the lookup.
    Removed,
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
        // R1. The file has had runs (a store once per file): writers' W2
        // look for them from now on.
        // Relaxed: ordered before W2's loads by R1's fence below.
        if !fs.had_runs.load(Ordering::Relaxed) {
            fs.had_runs.store(true, Ordering::Relaxed);
        }
        // 5.15 P7: R1's RMWs and their count in a window (a shared cache).
        let w = self.run_window(leaf);
        if !leaf.pin_slots(lo, n) {
            w.close();
            return None;
        }
        // Counted as this thread's after R1's RMWs.
        w.count(lo, n, true);
        w.close();
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
        // The slots' STALE bits, read after their frames (see the
        // protocol's argument): a stale slot ends the run.
        let stale = leaf.stale_slots(lo, m);
        let m = if stale == 0 {
            m
        } else {
            m.min(stale.trailing_zeros() as usize)
        };
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
                d.mark_accessed(s);
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
        // 5.15 P7: uncounted before R4's RMWs, in a window.
        let w = self.run_window(leaf);
        w.count(lo, n, false);
        leaf.unpin_slots(lo, n);
        w.close();
        self.run_unpinned(leaf, lo, n);
        if prune && leaf.is_empty() {
            fs.tree.lock().prune(&self.nodes, start);
        }
        // Relaxed: after R4's fence, which D1's handshake rests on (T3
        // queues, then fences in D1 and reads the counts).
        if self.words.deferred_n.load(Ordering::Relaxed) != 0 {
            self.run_deferred();
        }
    }

    /// R4 after the unpin of slots `lo..lo + n` of `leaf`: the fence, and
    /// writers waiting for those slots woken.
    pub(crate) fn run_unpinned(&self, leaf: &Node, lo: usize, n: usize) {
        fence(Ordering::SeqCst);
        let mut w = leaf.take_pin_waiters(lo, n);
        while w != 0 {
            let s = w.trailing_zeros() as usize;
            w &= w - 1;
            unpark_all(leaf.pin_key(s));
            // Futures waiting in W3 (`poll_run_pins`) on the same key.
            crate::sync::waitq::wake_all(leaf.pin_key(s));
        }
    }

    /// R4 for one run pin of slot `s` of `leaf` that a dead process held
    /// (5.15): unpinned, its waiters woken, the leaf pruned if empty (its
    /// file reached through the file table if not open here), pending
    /// deferred frees run. Context: as `run_unpin`; the recovery's thread.
    #[cfg(not(loom))]
    pub(crate) fn run_unpin_dead(&self, leaf: &Node, s: usize) {
        leaf.unpin_slots(s, 1);
        self.run_unpinned(leaf, s, 1);
        self.run_unpinned_dead(leaf);
    }

    /// R4's end for run pins of `leaf` a dead process held, dropped (by
    /// `run_unpin_dead` or a recount, 5.15 P7) and their writers woken:
    /// the leaf pruned if empty (its file reached through the file table
    /// if not open here), pending deferred frees run. Context: as
    /// `run_unpin`; the recovery's thread.
    #[cfg(not(loom))]
    pub(crate) fn run_unpinned_dead(&self, leaf: &Node) {
        if leaf.is_empty() {
            let (owner, pos) = leaf.placement();
            self.with_slot(owner, |fs| {
                if fs.tree.owner() == owner {
                    fs.tree.lock().prune(&self.nodes, pos);
                }
            });
        }
        // Relaxed: as in `run_unpin`.
        if self.words.deferred_n.load(Ordering::Relaxed) != 0 {
            self.run_deferred();
        }
    }

    /// A run count's window on `leaf` (5.15 P7), in a shared cache; an
    /// empty one otherwise.
    #[inline]
    fn run_window(&self, leaf: &Node) -> RunWindow {
        #[cfg(not(loom))]
        if self.file_table().is_some() {
            let descs = self.desc(0) as *const crate::frame::state::FrameDesc as usize;
            return RunWindow(crate::frame::ledger::RunWindow::open(
                descs,
                self.nodes.id_of(leaf),
            ));
        }
        let _ = leaf;
        RunWindow(
            #[cfg(not(loom))]
            None,
        )
    }

    /// Tests of 5.15 P7 (`File::die_in_run_window`): kills this process
    /// inside a run count's window on page `index`'s slot: after R1's RMW
    /// and before its count, or (`unpin`, a run of the page held) after
    /// R4's uncount and before its RMW.
    #[cfg(not(loom))]
    pub(crate) fn die_in_run_window(&self, fs: &FileShared, index: u64, unpin: bool) -> ! {
        let leaf = fs.tree.leaf(&self.nodes, index).expect("a cached page");
        let lo = (index % LEAF_PAGES) as usize;
        let w = self.run_window(leaf);
        if unpin {
            w.count(lo, 1, false);
        } else {
            assert!(leaf.pin_slots(lo, 1), "slot {lo} pinned three times");
        }
        crate::segment::kill_self() // (`w` never closed)
    }

    /// W2: the caller just claimed the latch of page `index` (frame `f`,
    /// W1); whether a run holds the page. The walk is lock-free: the page
    /// is in its tree while latched and not removed, and a leaf a run pins
    /// stays linked (F2), so it ends at the run's leaf. Context: any, no
    /// sleep.
    pub(crate) fn run_over(
        &self,
        fs: &super::registry::FileSlot,
        index: u64,
        f: FrameNo,
    ) -> RunHold<'_> {
        fence(Ordering::SeqCst);
        // No run ever pinned this file's slots: no walk. Relaxed: after the
        // fence; a run stores it before its R1 fence, so if that fence
        // precedes ours we read it (and walk), and if ours precedes, the
        // run's R3 sees our latch.
        if !fs.had_runs.load(Ordering::Relaxed) {
            return RunHold::Free;
        }
        let Some(leaf) = fs.tree.leaf(&self.nodes, index) else {
            return RunHold::Free;
        };
        let s = (index % LEAF_PAGES) as usize;
        if !leaf.is_leaf_of(fs.tree.owner(), index - s as u64) {
            return RunHold::Free;
        }
        self.slot_hold(leaf, s, f)
    }

    /// W2's verdict for slot `s` of `leaf` and the latched page's frame
    /// `f`: the slot word first, then the page's state (see the argument
    /// for `STALE` above). Context: any, no sleep.
    fn slot_hold<'a>(&self, leaf: &'a Node, s: usize, f: FrameNo) -> RunHold<'a> {
        let runs = leaf.slot_runs(s);
        if runs == SlotRuns::None {
            return RunHold::Free;
        }
        if self.desc(f).snapshot().is_removed() {
            return RunHold::Removed;
        }
        match runs {
            SlotRuns::Current => RunHold::Held(leaf, s),
            _ => RunHold::Free,
        }
    }

    /// W2-W3: the caller just latched page `index` of `fs` (frame `f`, W1)
    /// and holds it; waits while a run holds the page. Returns false if the
    /// page was removed meanwhile while runs pinned its slot: the caller
    /// writes nothing, unlatches, drops its pin and retries its lookup.
    /// While it waits it holds one reference more than `latch_base`, so
    /// that write-back pins pass it as they pass a writer still draining
    /// (lock rule 7: the run's holder may `sync` meanwhile), and once the
    /// run is gone it drains such pins again (5.5 step 2). Context: may
    /// sleep (parks until the run's R4); holds the page's latch only.
    pub(crate) fn wait_run_pins(&self, fs: &FileShared, index: u64, f: FrameNo) -> bool {
        // W2.
        let (leaf, s) = match self.run_over(fs, index, f) {
            RunHold::Free => return true,
            RunHold::Removed => return false,
            RunHold::Held(leaf, s) => (leaf, s),
        };
        // W3.
        let d = self.desc(f);
        d.pin_more();
        // A write-back parked on the latch before that reference may pass
        // now (lock rule 7): it looks again.
        d.wake_latch_waiters();
        let _timer = wait_timer(LockClass::PageDrainWait);
        let go_on = loop {
            leaf.add_pin_waiter(s);
            fence(Ordering::SeqCst);
            match self.slot_hold(leaf, s, f) {
                RunHold::Free => break true,
                RunHold::Removed => break false,
                RunHold::Held(..) => {}
            }
            park(leaf.pin_key(s), || {
                leaf.pin_waiter_set(s) && leaf.slot_runs(s) == SlotRuns::Current
            });
        };
        let r = d.release();
        debug_assert_eq!(r, Released::Alive, "the latch holder's own pin remains");
        if go_on {
            d.wait_drained();
        }
        go_on
    }

    /// W2-W3 for a future (protocol 5.9): as [`Inner::wait_run_pins`],
    /// where W3's park is a registration on the same key (R4 wakes both)
    /// and `Pending`. `extra` says whether W3's extra reference is held
    /// (taken at the first wait; dropped here when the wait ends, by the
    /// caller's cancel if it is dropped first). Ready with `Some(waited)`
    /// when no run holds the page (after a wait the caller drains again,
    /// 5.5 step 2), `None` when it was removed meanwhile (the caller
    /// unlatches, unpins and retries its lookup). Context: no sleep.
    pub(crate) fn poll_run_pins(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        extra: &mut bool,
        reg: &mut crate::sync::waitq::Registration,
        waker: &std::task::Waker,
    ) -> std::task::Poll<Option<bool>> {
        let d = self.desc(f);
        let mut hold = self.run_over(fs, index, f);
        loop {
            // W2 (again, after W3's fence).
            let (leaf, s) = match hold {
                RunHold::Held(leaf, s) => (leaf, s),
                other => {
                    crate::sync::waitq::cancel(reg);
                    let waited = std::mem::take(extra);
                    if waited {
                        let r = d.release();
                        debug_assert_eq!(r, Released::Alive, "the latch holder's own pin remains");
                    }
                    return std::task::Poll::Ready(
                        matches!(other, RunHold::Free).then_some(waited),
                    );
                }
            };
            // W3.
            if !*extra {
                d.pin_more();
                *extra = true;
                // As `wait_run_pins`.
                d.wake_latch_waiters();
            }
            leaf.add_pin_waiter(s);
            fence(Ordering::SeqCst);
            hold = self.slot_hold(leaf, s, f);
            if !matches!(hold, RunHold::Held(..)) {
                continue;
            }
            if crate::sync::waitq::register(reg, leaf.pin_key(s), waker, || {
                leaf.pin_waiter_set(s) && leaf.slot_runs(s) == SlotRuns::Current
            }) {
                return std::task::Poll::Pending;
            }
            hold = self.slot_hold(leaf, s, f);
        }
    }

    /// T3: queues the frames of truncated pages a run may still read (the
    /// cache's reference of each is kept), under the tree lock that took
    /// them out of their index (5.15 P6e: a kept reference is never in
    /// one thread's hands alone); the caller runs D1 (`run_deferred`) once
    /// that lock is released. Context: no sleep; the tree lock held; takes
    /// the queue's lock (a leaf).
    pub(crate) fn queue_frees(&self, entries: &[(&Node, usize, FrameNo)]) {
        if entries.is_empty() {
            return;
        }
        let q: Vec<Deferred> = entries
            .iter()
            .map(|&(leaf, slot, frame)| Deferred {
                leaf: self.nodes.id_of(leaf),
                slot: slot as u32,
                frame,
            })
            .collect();
        self.deferred.push(&q, &self.words.deferred_n);
    }

    /// D1: drops the kept reference of every queued frame whose slot no
    /// run pins any more, whichever process queued it. Context: no sleep;
    /// takes the queue's lock, then (freeing) the policy's and pool's.
    pub(crate) fn run_deferred(&self) {
        let done = self.deferred.take_unpinned(
            &self.words.deferred_n,
            |e| {
                // A queued leaf stays linked while its slot is pinned (F2),
                // and nodes are type-stable: the id names memory of the
                // arena.
                self.nodes
                    .get(e.leaf.into())
                    .is_some_and(|leaf| leaf.slot_pinned(e.slot as usize))
            },
            |f| self.desc(f).release_base() == Released::Last,
        );
        for f in done {
            self.free_frame(f);
        }
    }
}
