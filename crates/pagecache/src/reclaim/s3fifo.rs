//! The queue core of the S3-FIFO policy (Yang et al., SOSP'23), kept free of
//! frames and descriptors so that loom can model it (`tests/loom.rs`).
//!
//! Each shard has a *small* FIFO (about 10% of its pages), a *main* FIFO and
//! a *ghost* FIFO of keys recently evicted from small. New pages enter small
//! (or main, if their key is a ghost: they were evicted too early). Eviction
//! takes from small while it is over its target: a page referenced while in
//! small moves to main (its one hit bit cleared), an unreferenced one is
//! evicted and remembered as a ghost. Otherwise it takes from main: a
//! referenced page gets another round (bit cleared), an unreferenced one is
//! evicted. A page read once by a scan leaves through small without ever
//! touching main, which is why a hot set survives a scan twice the cache's
//! size (`docs/benchmarks.md`, "Replacement: hit ratios").
//!
//! # Protocol: batch submission and draining
//!
//! ```text
//!  inserter (miss path, CPU c)              reclaimer (CPU c, or stealing)
//!  1. lock pending[c]; push entry;          1. lock pending[c]; take all;
//!     full (16)? take all                      unlock
//!  2. unlock pending[c]                     2. lock shard[c]; admit them;
//!  3. if taken: lock shard[c]; admit           evict a batch; unlock
//!     each (ghost? main : small); unlock    3. judge each candidate (the
//!                                              caller re-validates under its
//!                                              own protocol: pin, freeze)
//! ```
//!
//! No path holds two of these locks at once. An entry is at every moment in
//! exactly one place: a pending batch, a local batch being moved, a shard
//! queue, or handed out as a candidate (after which the caller evicts it or
//! puts it back). The one exception is the *cold end*: a page whose write
//! for reclaim just ended (reclaim passed it over dirty and the flusher
//! wrote it back so that it could be evicted) gets a second entry there,
//! which eviction looks at before small and main, every shard's (the
//! kernel's `PG_reclaim`: `folio_end_writeback` rotates such a folio to the
//! inactive list's tail). Its first entry stays where it was: a copy taken
//! Cold leaves it behind as stale (dropped as Gone once the frame holds
//! another page); a copy judged anything else is dropped, the first entry
//! still standing for the page. Without it those pages waited in the queues
//! for their turn, clean, and TPC-C dirtied many again before it came: each
//! was written twice. (The copy goes to the writer's CPU's shard, often not
//! the reclaimer's: hence every shard's cold end first, those with copies
//! only, by their length hints.) Entries for frames freed by other paths (truncate, file
//! close) stay queued until popped, when the judge finds their identity
//! changed and drops them ("Gone"). So that a cache that never fills (and
//! so never evicts) cannot accumulate them, a submission that leaves its
//! shard over twice its capacity prunes it: stale entries go, and of several
//! entries for one frame (the per-CPU pool hands a page's frame straight
//! back when it is rewritten after a truncate) only the first stays.

use crate::sync::{AtomicU64, LockClass, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::collections::{HashSet, VecDeque};

/// Pages per insertion batch: one shard-lock acquisition admits this many.
pub const BATCH: usize = 16;

/// Copies a shard's cold end holds at most (see the module docs).
pub const WRITTEN_MAX: usize = 1024;

/// Busy small-queue entries one eviction call looks at before it turns to
/// the main queue (see `Shard::evict`).
const SMALL_BUSY_MAX: usize = 32;

/// A queued page: its frame and a hash of its identity (owner, index),
/// which also serves as the ghost key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Frame number.
    pub frame: u32,
    /// Identity hash.
    pub key: u64,
}

/// What the caller's judge says about a popped entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The frame no longer holds this page: drop the entry.
    Gone,
    /// Pinned or latched: keep it (in main) and look again later.
    Busy,
    /// Referenced since last seen (the judge cleared the bit): keep it.
    Referenced,
    /// Unreferenced: evict it.
    Cold,
}

/// One shard's queues. Not synchronized: [`Queues`] locks it.
#[derive(Debug, Default)]
pub struct Shard {
    small: VecDeque<Entry>,
    main: VecDeque<Entry>,
    /// The cold end: copies of entries whose write for reclaim ended,
    /// looked at first (see the module docs).
    written: VecDeque<Entry>,
    ghost: VecDeque<u64>,
    ghost_set: HashSet<u64>,
    small_target: usize,
    ghost_cap: usize,
    /// Pages this shard is meant to hold (prune threshold: twice this).
    cap: usize,
}

impl Shard {
    /// A shard for about `pages` pages.
    pub fn new(pages: usize) -> Shard {
        Shard {
            small_target: (pages / 10).max(1),
            ghost_cap: pages.max(1),
            cap: pages.max(1),
            ..Shard::default()
        }
    }

    /// Drops the entries `is_live` rejects, and every entry for a frame
    /// that an earlier entry (main first, then small) already stands for.
    pub fn prune(&mut self, mut is_live: impl FnMut(&Entry) -> bool) {
        let mut seen = HashSet::with_capacity(self.len());
        self.main.retain(|e| is_live(e) && seen.insert(e.frame));
        self.small.retain(|e| is_live(e) && seen.insert(e.frame));
        // Copies: never the first entry of their frame.
        self.written.retain(|e| is_live(e));
    }

    /// Admits a new page: to main if its key is a ghost, else to small.
    pub fn admit(&mut self, e: Entry) {
        if self.ghost_set.remove(&e.key) {
            self.main.push_back(e);
        } else {
            self.small.push_back(e);
        }
    }

    /// Puts back a page that could not be evicted.
    pub fn put_back(&mut self, e: Entry) {
        self.main.push_back(e);
    }

    /// Puts back a page passed over for being dirty: to small's tail, not
    /// remembered as a ghost (its eviction just now did not happen).
    pub fn rotate(&mut self, e: Entry) {
        self.ghost_set.remove(&e.key);
        self.small.push_back(e);
    }

    /// A copy of a page's entry at the cold end: its write for reclaim
    /// ended (see the module docs). At most [`WRITTEN_MAX`] wait there; the
    /// oldest copy goes first (its page keeps its first entry).
    pub fn written(&mut self, e: Entry) {
        if self.written.len() >= WRITTEN_MAX {
            self.written.pop_front();
        }
        self.written.push_back(e);
    }

    /// Takes Cold copies from the cold end into `out` (up to `want` in
    /// all, examining at most `limit`): copies, so any other verdict drops
    /// the copy, the page's first entry staying in small or main. Returns
    /// how many it examined.
    pub fn evict_written(
        &mut self,
        out: &mut Vec<Entry>,
        want: usize,
        limit: usize,
        mut judge: impl FnMut(&Entry) -> Verdict,
    ) -> usize {
        let mut examined = 0;
        while out.len() < want && examined < limit {
            let Some(e) = self.written.pop_front() else {
                break;
            };
            examined += 1;
            if judge(&e) == Verdict::Cold && !out.iter().any(|x| x.frame == e.frame) {
                out.push(e);
            }
        }
        examined
    }

    fn remember(&mut self, key: u64) {
        if self.ghost_set.insert(key) {
            self.ghost.push_back(key);
        }
        while self.ghost.len() > self.ghost_cap {
            if let Some(k) = self.ghost.pop_front() {
                self.ghost_set.remove(&k);
            }
        }
    }

    /// Pops up to `want` eviction candidates into `out`, examining at most
    /// `limit` entries; returns how many it examined.
    pub fn evict(
        &mut self,
        out: &mut Vec<Entry>,
        want: usize,
        limit: usize,
        mut judge: impl FnMut(&Entry) -> Verdict,
    ) -> usize {
        let mut examined = 0;
        // Each entry present now is examined at most once per call (busy
        // and referenced ones go back to a tail, and must not be met again
        // before the others have been looked at).
        let mut left_small = self.small.len();
        let mut left_main = self.main.len();
        // Busy entries met in the small queue this call. Past
        // `SMALL_BUSY_MAX` the rest of the call looks at main: a small queue
        // over its target and full of pages under write-back (a load of new
        // pages, flushed as it goes) must not hide main's evictable pages
        // (found by the B-tree's out-of-memory load: every call examined
        // its limit of busy small entries and none of main's thousands of
        // clean pages, and reclaim gave up with `OutOfMemory`).
        let mut small_busy = 0;
        while out.len() < want && examined < limit && left_small + left_main > 0 {
            let from_small = if left_small == 0 {
                false
            } else if left_main == 0 {
                true
            } else {
                self.small.len() > self.small_target
            };
            let e = if from_small {
                left_small -= 1;
                self.small.pop_front()
            } else {
                left_main -= 1;
                self.main.pop_front()
            };
            let Some(e) = e else { break };
            examined += 1;
            match judge(&e) {
                Verdict::Gone => {}
                // Busy is not a reference: back where it came from.
                Verdict::Busy if from_small => {
                    self.small.push_back(e);
                    small_busy += 1;
                    if small_busy >= SMALL_BUSY_MAX {
                        left_small = 0;
                    }
                }
                Verdict::Busy | Verdict::Referenced => self.main.push_back(e),
                // A second entry for a frame already chosen is a duplicate
                // (see "prune" in the module docs): drop it.
                Verdict::Cold if out.iter().any(|x| x.frame == e.frame) => {}
                Verdict::Cold => {
                    if from_small {
                        self.remember(e.key);
                    }
                    out.push(e);
                }
            }
        }
        examined
    }

    /// Entries queued (small + main + the cold end's copies).
    pub fn len(&self) -> usize {
        self.small.len() + self.main.len() + self.written.len()
    }

    /// Whether no entry is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A shard behind its lock, and a length hint readable without the lock.
#[derive(Debug)]
struct ShardCell {
    q: Mutex<Shard>,
    /// (A) queued entries as of the last unlock; a hint for `len_hint`.
    len: AtomicU64,
    /// (A) copies at the cold end as of the last unlock: a hint, so that
    /// eviction locks only shards that have some.
    written: AtomicU64,
}

impl ShardCell {
    /// Publishes the length before the guard is dropped.
    fn note_len(&self, s: &Shard) {
        // Relaxed: a hint (reclaim's give-up bound), never used for safety.
        self.len.store(s.len() as u64, Ordering::Relaxed);
        // Relaxed: a hint; a copy missed now waits for the next call.
        self.written
            .store(s.written.len() as u64, Ordering::Relaxed);
    }
}

/// Per-CPU pending batches and shards.
#[derive(Debug)]
pub struct Queues {
    pending: Box<[CachePadded<Mutex<Vec<Entry>>>]>,
    shards: Box<[CachePadded<ShardCell>]>,
    /// Pages each shard is meant to hold (`Shard::cap`).
    share: usize,
}

impl Queues {
    /// `n` shards sharing about `pages` pages.
    pub fn new(n: usize, pages: usize) -> Queues {
        let n = n.max(1);
        Queues {
            pending: (0..n)
                .map(|_| {
                    CachePadded::new(Mutex::with_class(
                        Vec::with_capacity(BATCH),
                        LockClass::ReplacementBatch,
                    ))
                })
                .collect(),
            shards: (0..n)
                .map(|_| {
                    CachePadded::new(ShardCell {
                        q: Mutex::with_class(Shard::new(pages / n), LockClass::Replacement),
                        len: AtomicU64::new(0),
                        written: AtomicU64::new(0),
                    })
                })
                .collect(),
            share: (pages / n).max(1),
        }
    }

    /// The shard eviction starts from: the reclaimer's own (`c`), unless
    /// it holds less than its share of pages while another holds more;
    /// then the fullest. A reader that has just moved to this CPU finds in
    /// this CPU's shard only the pages it inserted since, the newest: its
    /// read-ahead, not read yet. Taking those (the shard's main queue is
    /// empty, so its small queue goes, however short) made a sequential
    /// reader read pages twice under CPU migration (`io_engine`'s
    /// `a_sequential_reader_is_read_ahead` under a CPU hog: 2067 reads for
    /// 8192 pages), while the shard it left held the pages it had read.
    /// One relaxed load per shard (the length hints).
    fn first_shard(&self, c: usize) -> usize {
        // Relaxed: hints; a stale one only picks a worse start.
        let len = |j: usize| self.shards[j].len.load(Ordering::Relaxed) as usize;
        if len(c) >= self.share {
            return c;
        }
        let fullest = (0..self.shards.len()).max_by_key(|&j| len(j)).unwrap_or(c);
        if len(fullest) > self.share {
            fullest
        } else {
            c
        }
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The smallest shard's probationary (small) queue target: how many
    /// new, unreferenced pages one CPU's shard keeps before evicting them.
    pub fn small_target(&self) -> usize {
        self.shards
            .iter()
            .map(|c| c.q.lock().small_target)
            .min()
            .unwrap_or(1)
    }

    /// Submission (steps 1-3 of the inserter). `is_live` tells whether an
    /// entry still stands for a cached page; it is consulted only when the
    /// shard has grown past twice its capacity and is pruned.
    pub fn submit(&self, c: usize, e: Entry, is_live: impl FnMut(&Entry) -> bool) {
        let c = c % self.pending.len();
        let batch = {
            let mut p = self.pending[c].lock();
            p.push(e);
            if p.len() < BATCH {
                return;
            }
            std::mem::replace(&mut *p, Vec::with_capacity(BATCH))
        };
        let cell = &self.shards[c];
        let mut s = cell.q.lock();
        for e in batch {
            s.admit(e);
        }
        if s.len() > 2 * s.cap {
            s.prune(is_live);
        }
        cell.note_len(&s);
    }

    /// Moves shard `c`'s pending batch into its queues.
    fn drain(&self, c: usize) {
        let batch = std::mem::take(&mut *self.pending[c].lock());
        if batch.is_empty() {
            return;
        }
        let cell = &self.shards[c];
        let mut s = cell.q.lock();
        for e in batch {
            s.admit(e);
        }
        cell.note_len(&s);
    }

    /// Eviction (the reclaimer's steps 1-2): the shards' cold ends first
    /// (pages whose write for reclaim ended), then candidates from shard `c`
    /// first (or, if it is under its share, the fullest: `first_shard`),
    /// then the others, each examined up to `limit` entries (a
    /// budget per shard: a shared one let a shard full of busy pages, reads
    /// in flight inserted on this CPU, hide every other shard's cold
    /// pages); every pending batch is drained before its shard is
    /// searched. Returns the number of entries examined.
    pub fn evict(
        &self,
        c: usize,
        out: &mut Vec<Entry>,
        want: usize,
        limit: usize,
        mut judge: impl FnMut(&Entry) -> Verdict,
    ) -> usize {
        let n = self.shards.len();
        let first = self.first_shard(c % n);
        let mut examined = 0;
        // Every shard's cold end first (a page the flusher wrote for this
        // reclaimer went to the flusher's CPU's shard), those with copies
        // only (the hints: one relaxed load per shard).
        for d in 0..n {
            if out.len() >= want {
                return examined;
            }
            let cell = &self.shards[(first + d) % n];
            // Relaxed: a hint.
            if cell.written.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut s = cell.q.lock();
            examined += s.evict_written(out, want, limit, &mut judge);
            cell.note_len(&s);
        }
        for d in 0..n {
            if out.len() >= want {
                break;
            }
            let j = (first + d) % n;
            self.drain(j);
            let cell = &self.shards[j];
            let mut s = cell.q.lock();
            examined += s.evict(out, want, limit, &mut judge);
            cell.note_len(&s);
        }
        examined
    }

    /// Puts back a candidate that could not be evicted (to shard `c`).
    pub fn put_back(&self, c: usize, e: Entry) {
        let cell = &self.shards[c % self.shards.len()];
        let mut s = cell.q.lock();
        s.put_back(e);
        cell.note_len(&s);
    }

    /// Puts back a page passed over for being dirty (to shard `c`).
    pub fn rotate(&self, c: usize, e: Entry) {
        let cell = &self.shards[c % self.shards.len()];
        let mut s = cell.q.lock();
        s.rotate(e);
        cell.note_len(&s);
    }

    /// A page's write for reclaim ended: a copy of its entry to shard
    /// `c`'s cold end.
    pub fn written(&self, c: usize, e: Entry) {
        let cell = &self.shards[c % self.shards.len()];
        let mut s = cell.q.lock();
        s.written(e);
        cell.note_len(&s);
    }

    /// Entries queued or pending, without taking any lock: the shards'
    /// length hints plus a full batch per CPU. An upper estimate for one
    /// pass of eviction (`ReplacementPolicy::pass_len`).
    pub fn len_hint(&self) -> usize {
        self.shards
            .iter()
            // Relaxed: a hint.
            .map(|c| c.len.load(Ordering::Relaxed) as usize)
            .sum::<usize>()
            + BATCH * self.pending.len()
    }

    /// Entries queued or pending (a snapshot, tests).
    pub fn len(&self) -> usize {
        self.pending.iter().map(|p| p.lock().len()).sum::<usize>()
            + self.shards.iter().map(|s| s.q.lock().len()).sum::<usize>()
    }

    /// Whether nothing is queued or pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The replacement policy over [`Queues`]: frames and descriptors enter
/// here (not under loom, which models the queues alone).
pub use policy::S3Fifo;

mod policy {
    use super::{Entry, Queues, Verdict};
    use crate::frame::{FrameNo, FrameTable};
    use crate::reclaim::{examine, ReplacementPolicy};

    /// Identity hash of a page, for S3-FIFO entries and ghosts.
    fn key(owner: u64, index: u64) -> u64 {
        (owner.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ index).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
    }

    /// S3-FIFO, sharded per CPU (see the module docs).
    #[derive(Debug)]
    pub struct S3Fifo {
        queues: Queues,
    }

    impl S3Fifo {
        /// A policy for `frames` frames, one shard per CPU.
        pub fn new(frames: usize) -> S3Fifo {
            S3Fifo {
                queues: Queues::new(crate::frame::alloc::num_cpus(), frames),
            }
        }

        /// Whether `e` still stands for the page its frame holds: the frame is
        /// cached (not free, removed or anonymous) with the same identity.
        fn live(frames: &FrameTable, e: &Entry) -> bool {
            if e.frame as usize >= frames.len() {
                return false;
            }
            let d = frames.desc(e.frame);
            let s = d.snapshot();
            let (o, i) = d.identity();
            s.refs() != 0 && !s.is_removed() && !s.is_unevictable() && key(o, i) == e.key
        }

        fn entry(frames: &FrameTable, f: FrameNo) -> Entry {
            let (o, i) = frames.desc(f).identity();
            Entry {
                frame: f,
                key: key(o, i),
            }
        }
    }

    impl ReplacementPolicy for S3Fifo {
        fn readahead_room(&self) -> Option<usize> {
            Some(self.queues.small_target())
        }

        fn inserted(&self, frames: &FrameTable, f: FrameNo) {
            let c = crate::frame::alloc::current_cpu();
            self.queues
                .submit(c, Self::entry(frames, f), |e| Self::live(frames, e));
        }

        fn candidates(
            &self,
            frames: &FrameTable,
            out: &mut Vec<FrameNo>,
            want: usize,
            urgent: bool,
        ) -> usize {
            let c = crate::frame::alloc::current_cpu();
            let mut got = Vec::with_capacity(want);
            let examined = self.queues.evict(c, &mut got, want, 4 * want + 64, |e| {
                if !Self::live(frames, e) {
                    return Verdict::Gone;
                }
                examine(frames, e.frame, urgent)
            });
            out.extend(got.iter().map(|e| e.frame));
            examined
        }

        fn not_evicted(&self, frames: &FrameTable, f: FrameNo) {
            let c = crate::frame::alloc::current_cpu();
            self.queues.put_back(c, Self::entry(frames, f));
        }

        fn deferred(&self, frames: &FrameTable, f: FrameNo) {
            // Back to the small queue's tail: not promoted to main.
            let c = crate::frame::alloc::current_cpu();
            self.queues.rotate(c, Self::entry(frames, f));
        }

        fn written_for_reclaim(&self, frames: &FrameTable, f: FrameNo) {
            let c = crate::frame::alloc::current_cpu();
            self.queues.written(c, Self::entry(frames, f));
        }

        fn pass_len(&self, _frames: &FrameTable) -> usize {
            // Lock-free: reclaim asks every round.
            self.queues.len_hint()
        }
    }
}

#[cfg(all(test, not(loom)))]
#[path = "s3fifo_tests.rs"]
mod tests;
