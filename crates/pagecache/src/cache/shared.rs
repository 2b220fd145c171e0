//! A cache shared by processes (`PageCache::shared`): the same `Inner` as a
//! private cache, its tables placed in a segment (`segment/`) instead of
//! this process's memory: the frames and their descriptors, the index
//! nodes, the free-frame pool, the cache-wide words and the CLOCK hand, and
//! the file table through which every process finds a file's shared state
//! by (device, inode). What stays with the process: its descriptors of the
//! files, its I/O engine and flusher, its statistics.

#[cfg(not(loom))]
pub(crate) use imp::SharedPart;

/// Never made under loom (segments are not modelled).
#[cfg(loom)]
#[derive(Debug)]
pub(crate) enum SharedPart {}

#[cfg(loom)]
impl SharedPart {
    pub(crate) fn writer_bit(&self) -> u64 {
        match *self {}
    }
    pub(crate) fn slot(&self) -> usize {
        match *self {}
    }
}

impl super::Inner {
    /// This process's bit in the files' `writers` masks (0 in a private
    /// cache).
    pub(crate) fn writer_bit(&self) -> u64 {
        self.shared.as_ref().map_or(0, |sh| sh.writer_bit())
    }

    /// This process's tag in a shared cache's process table (5.14 D1; 0
    /// in a private cache).
    pub(crate) fn process_tag(&self) -> u32 {
        #[cfg(not(loom))]
        if let Some(sh) = &self.shared {
            return crate::sync::futex::member_at(sh.seg.base()).map_or(0, |(_, m)| m.tag);
        }
        0
    }
}

#[cfg(not(loom))]
mod imp {
    use super::super::deferred::DeferredQueue;
    use super::super::file_table::FileTable;
    use super::super::{Inner, Tables, Words};
    use crate::frame::alloc::{Hand, PerCpuPool, Pool};
    use crate::frame::state::{FrameDesc, Held};
    use crate::frame::FrameTable;
    use crate::index::NodeArena;
    use crate::io::engine::Engine;
    use crate::io::Backend;
    use crate::placed::Placed;
    use crate::reclaim::Clock;
    use crate::segment::{Geometry, Segment, TableId};
    use std::io;
    use std::path::Path;
    use std::ptr::NonNull;
    use std::sync::Arc;

    /// How long a recovery recounts the frames and leaves a dead process
    /// may have pinned uncounted (5.15 P6d-e, P7) before it leaves the
    /// pins.
    const RECOUNT_FOR: std::time::Duration = std::time::Duration::from_secs(1);

    /// `attempt` until it gives an answer or `until` passes (then `None`),
    /// `between` and a millisecond's sleep between tries: a recount that
    /// did not hold (5.15 P6d, P7).
    fn retry_until<T>(
        until: std::time::Instant,
        attempt: impl Fn() -> Option<T>,
        between: impl Fn(),
    ) -> Option<T> {
        loop {
            if let Some(r) = attempt() {
                return Some(r);
            }
            if std::time::Instant::now() >= until {
                return None;
            }
            between();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// What a shared cache's `Inner` holds beyond a private one's.
    #[derive(Debug)]
    pub(crate) struct SharedPart {
        /// The files by (device, inode), in the segment.
        pub(crate) files: FileTable,
        /// This process's recoveries of dead processes under way.
        recoveries: Arc<Recoveries>,
        /// The segment (attached while this lives). Last: unmapped when it
        /// drops.
        pub(crate) seg: Segment,
    }

    /// A process's recoveries of dead processes under way, each on a thread
    /// of its own holding the cache (so the process stays attached until
    /// they end), and whether the last handle is going (no recovery starts
    /// then: its dead process's slot stays claimed by this process, handed
    /// back when the segment drops). The last handle's drop waits for them
    /// (`Inner::end_recoveries`): a process whose handles are all gone is
    /// detached (else a `remove_shared` just after the drop could find it
    /// still attached). Kept apart from the cache: a recovery counts
    /// itself out after it let the cache go.
    #[derive(Debug, Default)]
    struct Recoveries {
        /// (under way, closing)
        state: std::sync::Mutex<(usize, bool)>,
        ended: std::sync::Condvar,
    }

    impl Recoveries {
        /// Counts a recovery in, unless the last handle is going.
        fn begin(&self) -> bool {
            let mut r = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if r.1 {
                return false;
            }
            r.0 += 1;
            true
        }

        /// Counts a recovery out (its thread holds the cache no more).
        fn end(&self) {
            let mut r = self.state.lock().unwrap_or_else(|e| e.into_inner());
            r.0 -= 1;
            if r.0 == 0 {
                self.ended.notify_all();
            }
        }

        /// No recovery starts from now on; waits for those under way.
        fn close(&self) {
            let mut r = self.state.lock().unwrap_or_else(|e| e.into_inner());
            r.1 = true;
            while r.0 > 0 {
                r = self.ended.wait(r).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    impl SharedPart {
        /// This process's bit in the files' `writers` masks: its slot's.
        pub(crate) fn writer_bit(&self) -> u64 {
            self.seg.slot().map_or(0, |s| 1 << s)
        }

        /// This process's slot (0 if it has none): which of each count
        /// kept per process is its own (`words.rs`' `Counts`, a file's
        /// write-back counts).
        #[inline]
        pub(crate) fn slot(&self) -> usize {
            self.seg.slot().unwrap_or(0)
        }
    }

    impl Inner {
        /// The age lease (W1 across processes): the flusher of one
        /// attached process at a time writes the pages past the age bound
        /// of every file it has open for writing; another process's
        /// flusher writes those of its files that process cannot write
        /// (not open there for writing: `FileSlot::writers`). A flusher
        /// takes the lease at its age pass when it is free or its holder's
        /// process is gone (5.14 R2's question), and gives it back when its
        /// cache goes; the recovery of a dead holder frees it and wakes its
        /// own flusher. `None`: this process writes every file it has open
        /// (a private cache, or the lease is its own); `Some(s)`: the
        /// holder's slot. Context: any, no sleep; the flusher thread.
        pub(crate) fn age_lease(&self) -> Option<usize> {
            let w = &*self.words.age_flusher;
            let (base, me) = crate::sync::futex::member_at(w.as_ptr() as usize)?;
            // Acquire/AcqRel: a hint between flushers; each write-back is
            // its own protocol, whoever runs it.
            let cur = w.load(std::sync::atomic::Ordering::Acquire);
            if cur == me.tag {
                return None;
            }
            if cur == 0 || (me.gone)(base, cur) {
                let won = w.compare_exchange(
                    cur,
                    me.tag,
                    std::sync::atomic::Ordering::AcqRel,
                    std::sync::atomic::Ordering::Acquire,
                );
                if won.is_ok() {
                    return None;
                }
            }
            match w.load(std::sync::atomic::Ordering::Acquire) {
                t if t == me.tag => None,
                t => Some(crate::segment::slot_of_tag(t)),
            }
        }

        /// Whether this process holds the age lease (a look: it takes
        /// nothing). Context: any.
        pub(crate) fn holds_age_lease(&self) -> bool {
            let w = &*self.words.age_flusher;
            crate::sync::futex::member_at(w.as_ptr() as usize)
                .is_some_and(|(_, me)| w.load(std::sync::atomic::Ordering::Acquire) == me.tag)
        }

        /// Gives the age lease back if this process holds it (its cache
        /// goes). Context: any, no sleep.
        pub(crate) fn release_age_lease(&self) {
            let w = &*self.words.age_flusher;
            if let Some((_, me)) = crate::sync::futex::member_at(w.as_ptr() as usize) {
                let _ = w.compare_exchange(
                    me.tag,
                    0,
                    std::sync::atomic::Ordering::AcqRel,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }

        /// The recovery of the process tagged `tag`: if it held the age
        /// lease, the lease is freed and this process's flusher woken
        /// (started if need be), which takes it at once. Context: no sleep
        /// but a thread's start; the recovery's thread.
        fn recover_age_lease(&self, tag: u32) {
            let w = &*self.words.age_flusher;
            let freed = w.compare_exchange(
                tag,
                0,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Relaxed,
            );
            if freed.is_ok() {
                self.kick_flusher();
            }
        }

        /// The cache named `name` in `dir`, created as `config` says if it
        /// does not exist, else attached to (its creator's geometry and
        /// policy must be `config`'s). `group`: a group whose members may
        /// attach too. Context: any.
        pub(crate) fn shared(
            config: &crate::Config,
            backend: Arc<dyn Backend>,
            engine: Engine,
            dir: &Path,
            name: &str,
            group: Option<u32>,
        ) -> io::Result<Inner> {
            let nframes = config.frames()?;
            let unsupported = |what: String| {
                io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("shared cache {name:?}: {what}"),
                )
            };
            if config.policy != crate::PolicyKind::Clock {
                return Err(unsupported(format!(
                    "policy {:?} cannot be shared yet; use PolicyKind::Clock",
                    config.policy
                )));
            }
            if config.pool != crate::frame::alloc::PoolKind::PerCpu {
                return Err(unsupported(format!(
                    "pool {:?} cannot be shared; use PoolKind::PerCpu",
                    config.pool
                )));
            }
            if config.page_locks != crate::PageLockKind::Bits {
                return Err(unsupported(format!(
                    "page locks {:?} cannot be shared; use PageLockKind::Bits",
                    config.page_locks
                )));
            }
            let g = Geometry {
                page_size: config.page_size as u64,
                frames: nframes as u64,
                policy: Geometry::policy_code(config.policy),
            };
            let seg = Segment::open(dir, name, g, group)?;
            let max_nodes = NodeArena::max_nodes(nframes, config.page_size)?;
            // Each table below is its extent in the mapping, which `seg`
            // keeps until it drops, after them (`Inner::shared` is the last
            // field, and `FileShared`s hold it too); sized and aligned for
            // it by the segment's layout, initialised by its creator (C1);
            // reached only through these tables, by every process alike.
            // SAFETY: the frames and descriptors, as above.
            let frames = unsafe {
                FrameTable::over(
                    seg.table(TableId::Frames),
                    seg.table(TableId::Descs).cast::<FrameDesc>(),
                    nframes,
                    config.page_size,
                )
            };
            if config.populate {
                frames.populate()?;
            }
            // SAFETY: the node arena, as above.
            let nodes = unsafe { NodeArena::over(seg.table(TableId::Nodes), max_nodes) };
            // SAFETY: the pool, as above (its head is checked on attach).
            let pool = unsafe { PerCpuPool::over(seg.table(TableId::Pool), nframes)? };
            // What the pool writes in the frames it hands out (5.15 P8b).
            let holder = frames.desc(0).holder();
            // SAFETY: the descriptors are contiguous and live in `seg`,
            // which outlives the pool (as above).
            let pool = pool.with_hand(unsafe { Hand::new(frames.desc(0), nframes, holder) });
            let alloc = Pool::PerCpu(pool);
            // SAFETY: the words, as above.
            let words: Placed<Words> = unsafe { Placed::at(seg.table(TableId::Words).cast()) };
            // SAFETY: the hand is in the words, which live as long.
            let policy = Box::new(unsafe { Clock::at(NonNull::from(&words.clock_hand)) });
            // SAFETY: the file table, as above (all zeros when the segment
            // was made: an empty table); our process slot is ours alone.
            let files = unsafe { FileTable::over(seg.table(TableId::Files), seg.slot()) };
            // SAFETY: the deferred-free queue, as above.
            let deferred = unsafe { DeferredQueue::over(seg.table(TableId::Deferred), nframes) };
            let tables = Tables {
                frames,
                nodes,
                alloc,
                policy,
                words,
                deferred,
                shared: Some(Arc::new(SharedPart {
                    files,
                    recoveries: Arc::default(),
                    seg,
                })),
            };
            Self::build(config, backend, engine, tables)
        }

        /// For a shared cache, what the segment's watcher does for this
        /// cache: publish its counters every round, and, once it has
        /// claimed a dead process, drop the pages that process held latched
        /// and end its write-backs (5.14 D5, L3-L4, W3). Context: the
        /// cache's `Arc` just made.
        pub(crate) fn watch_deaths(self: &Arc<Inner>) {
            if let Some(sh) = &self.shared {
                // The watcher publishes this process's counters (a clone
                // of the stripes: it never holds the cache).
                let counters = self.counters.clone();
                sh.seg.set_stats_hook(Box::new(move || counters.sums()));
                let me = Arc::downgrade(self);
                let recoveries = Arc::clone(&sh.recoveries);
                sh.seg.set_death_hook(Box::new(move |tag, done| {
                    // On a thread of its own: the watcher must never hold
                    // the cache (its last reference would drop the segment
                    // on the watcher's own thread). The slot is freed once
                    // all is given back (a recoverer that dies first leaves
                    // it to be recovered again, D5). If no thread can
                    // start, it is handed back at once (`done` dropped),
                    // and waiters still take the latches over (L2-L3).
                    let me = me.clone();
                    let rec = Arc::clone(&recoveries);
                    let _ = std::thread::Builder::new()
                        .name("pagecache-recover".into())
                        .spawn(move || {
                            if !rec.begin() {
                                // The last handle is going: the slot stays
                                // claimed by this process; its detach
                                // hands it back.
                                return done.abandon();
                            }
                            match me.upgrade() {
                                Some(inner) => {
                                    inner.recover_age_lease(tag);
                                    inner.recover_dead_pages(tag);
                                    inner.recover_dead_pins(tag);
                                    inner.recover_dead_anon(tag);
                                    // (The segment mapped: `inner` holds it.)
                                    done.free();
                                    // After the slot is freed: finishing a
                                    // cut waits for the size lock's shared
                                    // holders that reach it, which must not
                                    // keep the dead process's slot.
                                    inner.finish_dead_cuts(tag);
                                }
                                // The cache is gone: its segment may be
                                // unmapped already. As above.
                                None => done.abandon(),
                            }
                            rec.end();
                        });
                }));
            }
        }

        /// The last handle is going: no recovery starts from now on, and
        /// this waits for those under way (each holds the cache, and the
        /// process stays attached until the last reference goes: a
        /// `remove_shared` just after the drop would find it in use). Context:
        /// the last handle's drop; sleeps.
        pub(crate) fn end_recoveries(&self) {
            if let Some(sh) = &self.shared {
                sh.recoveries.close();
            }
        }

        /// 5.15 P4: takes back what the process tagged `tag` (dead, its
        /// latches and write-backs recovered first) still held, as its
        /// tables and row count them: its counts, size-lock holds, runs
        /// and pins; a frame whose last reference that was is freed. A
        /// count that finds nothing left to take (a corrupt count) stops
        /// there. Context: no sleep but the
        /// free's pool and policy locks; the recovery's own thread.
        pub(crate) fn recover_dead_pins(&self, tag: u32) {
            let Some(sh) = &self.shared else { return };
            // Recounts (P6) wait until its pins are taken and dropped.
            let pins = sh.seg.pins();
            let unquiet = pins.unquiet_mine();
            let taken = pins.take_process(tag);
            // Its files' write-back counts: syncs wait for them (its
            // write-backs were ended by `recover_dead_pages`). Each file
            // keeps one per process (`FileSlot::writeback`): its own
            // zeroed. A file's slot is borrowed, not held under the table
            // lock (giving back an exclusive size-lock hold takes the
            // lock's mutex); a CLOSING entry's counts are nobody's to wait
            // for.
            let slot = crate::segment::slot_of_tag(tag);
            let counted = sh.files.ids_where(|s| {
                s.writeback
                    .get(slot)
                    .is_some_and(|w| w.load(std::sync::atomic::Ordering::Relaxed) != 0)
            });
            for id in counted {
                self.with_slot(id, |fs| fs.writeback_dead(slot));
            }
            // Its cache-wide counts of fills, reclaims and removals in
            // flight (reclaim waits while they are not zero): its own,
            // zeroed (`words.rs`, `Counts`). Release: as their decrements.
            self.words
                .filling
                .of(slot)
                .store(0, std::sync::atomic::Ordering::Release);
            for c in [&self.words.reclaiming, &self.words.freeing] {
                c.of(slot).store(0, std::sync::atomic::Ordering::Release);
            }
            // Its size-lock holds: writers and `set_len`s wait for them.
            // Its shard of each file's lock, and X1 where its mutex word
            // names it, say exactly what it held (`size_lock.rs`).
            for id in sh.files.ids_where(|s| s.size.held_by(slot, tag)) {
                self.with_slot(id, |fs| fs.size.release_dead(slot, tag));
            }
            // Frames its evictions had frozen and not yet taken out of
            // their index (P5): readers of those pages would wait for ever.
            for &f in &taken.evicting {
                let _ = self.finish_dead_eviction(f);
            }
            // Its runs before its pins: a run's end may free frames it
            // kept (deferred frees), and writers of its pages wait for it
            // (5.7 W3).
            for &(node, slot, n) in &taken.runs {
                if let Some(leaf) = self.nodes.get(node as u64) {
                    for _ in 0..n.max(0) {
                        if !leaf.slot_pinned(slot as usize) {
                            break; // a corrupt count: never below zero
                        }
                        self.run_unpin_dead(leaf, slot as usize);
                    }
                }
            }
            for &(f, n) in &taken.frames {
                for _ in 0..n.max(0) {
                    match self.desc(f).release_dead() {
                        Some(crate::frame::state::Released::Last) => self.free_frame(f),
                        Some(_) => {}
                        None => break,
                    }
                }
            }
            drop(unquiet);
            // The run pins it took or left inside a window, which no count
            // says (P7), the pins likewise (P6d), and what it held of
            // removed pages (P6e).
            let until = std::time::Instant::now() + RECOUNT_FOR;
            for &node in &taken.run_suspects {
                self.drop_uncounted_runs(node, until);
            }
            for &f in &taken.suspects {
                self.drop_uncounted_pins(f, until);
            }
            self.recover_removed_frames(until);
            // The frames it held with no reference (P8).
            self.recover_lost_frames(tag);
            // Only now: a recovery killed before here leaves the next one
            // the suspects to recount (P6f).
            pins.free_process(tag);
        }

        /// 5.15 P6e: every frame of a page taken out of its index
        /// (`REMOVED`) that still holds references: what neither a count,
        /// nor the deferred-free queue, nor a live remover accounts for is
        /// a dead process's (a pin taken in a window; the cache's reference
        /// a remover or a D1 had in hand), dropped, and the frame freed if
        /// that was its last. A live remover has such a reference in hand
        /// only under the file's tree lock (T1-T3) or the queue's lock
        /// (D1), which the recount holds; a region's page leaves its slot
        /// with its reference dropped in the same RMW (`orphan`): none.
        /// Context: may sleep (a recount that does not hold is retried
        /// until `until`); the recovery's thread.
        pub(crate) fn recover_removed_frames(&self, until: std::time::Instant) {
            let Some(sh) = &self.shared else { return };
            for f in 0..self.frames.len() as crate::frame::FrameNo {
                let d = self.desc(f);
                let s = d.snapshot();
                if !s.is_removed() || s.refs() == 0 {
                    continue;
                }
                let (owner, index) = d.identity();
                let recount = || {
                    let counted = || sh.seg.pins().counted_pins(f);
                    if crate::anon::region_process(owner).is_some() {
                        let held = Held::Removed {
                            page: (owner, index),
                            base: 0,
                        };
                        return d.drop_uncounted(held, counted);
                    }
                    let mut r = Some((0, false));
                    self.with_slot(owner, |fs| {
                        let _g = fs.tree.lock();
                        // In its index: its readers or the next cut finish
                        // the removal (`finish_removal`).
                        if fs.tree.lookup(&self.nodes, index) == Some(f) {
                            return;
                        }
                        r = self.deferred.with_queued(f, |queued| {
                            let held = Held::Removed {
                                page: (owner, index),
                                base: queued as u64,
                            };
                            d.drop_uncounted(held, counted)
                        });
                    });
                    r
                };
                if let Some((_, true)) = retry_until(until, recount, || {}) {
                    self.free_frame(f);
                }
            }
        }

        /// 5.15 P8c: the frames the process tagged `tag` (dead, its pins
        /// dropped and its evictions finished) held with no reference, and
        /// any batch a dead process left between two stacks of the pool:
        /// found by a census under every pool lock and freed. Context: no
        /// lock held; takes the pool's locks, then the free's.
        pub(crate) fn recover_lost_frames(&self, tag: u32) {
            let Pool::PerCpu(pool) = &self.alloc else {
                return;
            };
            for f in pool.census(|d| d.lost_in_hand(tag)) {
                // One still in its index is an eviction's frozen frame that
                // no intent named (the evicting thread had no table, P5):
                // taken out and freed as P5 does, or kept for a run.
                if !self.finish_dead_eviction(f) {
                    self.free_frame(f);
                }
            }
        }

        /// `PageCache::die_holding_frames` (tests of P8).
        pub(crate) fn die_holding_frames(&self, what: &str) -> ! {
            let Pool::PerCpu(pool) = &self.alloc else {
                panic!("a per-CPU pool")
            };
            match what {
                "hand" => {
                    self.alloc_frame().expect("a frame");
                }
                "batch" => assert!(pool.take_batch() > 0, "a batch on the global stack"),
                _ => panic!("die holding {what:?}?"),
            }
            crate::segment::kill_self()
        }

        /// 5.15 P6d: frame `f`, which a dead process may have pinned
        /// inside a window: recounted until the recount holds, and the
        /// references nobody counts dropped. A page busy with pins is
        /// quieted by taking its latch (new pins then wait), when nobody
        /// holds it. Gives up at `until` (a pin left uncounted stays).
        /// Context: may sleep; the recovery's thread.
        fn drop_uncounted_pins(&self, f: crate::frame::FrameNo, until: std::time::Instant) {
            use crate::frame::state::Released;
            let Some(sh) = &self.shared else { return };
            let d = self.desc(f);
            let latched = std::cell::Cell::new(false);
            let recount = || d.drop_uncounted(Held::Indexed, || sh.seg.pins().counted_pins(f));
            retry_until(until, recount, || {
                if !latched.get() && !d.snapshot().is_latched() {
                    latched.set(d.try_pin_latch().is_ok());
                }
            });
            let latched = latched.get();
            // (Its flags unchanged: nothing was written under it.)
            if latched && d.unlatch_release() == Released::Last {
                self.free_frame(f);
            }
        }

        /// 5.15 P7: leaf node `node`, whose slots a dead process may have
        /// pinned with a run inside a window: each pin word recounted
        /// until the recount holds, the pins nobody counts dropped, their
        /// writers woken, the leaf pruned if empty. Gives up on a word at
        /// `until` (a run pin left uncounted stays). Context: may sleep;
        /// the recovery's thread.
        fn drop_uncounted_runs(&self, node: u32, until: std::time::Instant) {
            let Some(sh) = &self.shared else { return };
            let Some(leaf) = self.nodes.get(node as u64) else {
                return;
            };
            let mut dropped = false;
            // Each word a run pins (a word with none has nothing to drop).
            for w in (0..crate::index::PIN_WORDS).filter(|&w| leaf.word_pinned(w)) {
                let recount = || {
                    let w0 = leaf.mark_word(w);
                    let counted = sh.seg.pins().counted_run_pins(node)?;
                    leaf.drop_word_pins(w, w0, |s| counted[s])
                };
                let Some(mut slots) = retry_until(until, recount, || {}) else {
                    continue;
                };
                while slots != 0 {
                    let s = slots.trailing_zeros() as usize;
                    slots &= slots - 1;
                    self.run_unpinned(leaf, s, 1);
                    dropped = true;
                }
            }
            if dropped {
                self.run_unpinned_dead(leaf);
            }
        }

        /// The cuts the process tagged `tag` (dead, all it held given
        /// back) left under way (5.6 T0), finished. Context: may sleep
        /// (each waits for the size lock's shared holders that reach it);
        /// the recovery's thread, after the dead process's slot is freed.
        pub(crate) fn finish_dead_cuts(&self, tag: u32) {
            let Some(sh) = &self.shared else { return };
            // Relaxed: a first look; `finish_dead_cut` reads them under
            // the size lock's mutex.
            let cuts = sh.files.ids_where(|s| {
                s.cut.load(std::sync::atomic::Ordering::Relaxed) != 0
                    && s.cut_by.load(std::sync::atomic::Ordering::Relaxed) == tag
            });
            for id in cuts {
                self.finish_dead_cut(id, tag);
            }
        }

        /// For `validate` (tests, no pin held in any process): every
        /// process's counted pins of every frame are none, and no frame
        /// holds a reference beyond the cache's own (5.15).
        pub(crate) fn validate_pins(&self) {
            let Some(sh) = &self.shared else { return };
            let others = sh.seg.pins().other_counts();
            assert!(
                others.is_empty(),
                "runs, size-lock holds or counters counted while none is held: {others:?}"
            );
            for (f, &n) in sh.seg.pins().frame_counts().iter().enumerate() {
                let d = self.desc(f as crate::frame::FrameNo);
                let s = d.snapshot();
                assert!(
                    n == 0 && s.refs() <= 1,
                    "frame {f}: {n} pins counted ({:?}), {} references ({s:?}, page {:?})",
                    sh.seg.pins().holders(f as u32),
                    s.refs(),
                    d.identity()
                );
            }
        }

        /// For `validate` (tests, no pin held and no frame taken in any
        /// process): every frame is in a stack of the pool with no
        /// reference, or holds a page of its file's index (or of an
        /// anonymous region): none lost (5.15 P8).
        pub(crate) fn validate_frames(&self) {
            let Pool::PerCpu(pool) = &self.alloc else {
                return;
            };
            let pages = pool.with_stacked(|stacked| {
                let mut pages = Vec::new();
                for (f, &stacked) in stacked.iter().enumerate() {
                    let d = self.desc(f as crate::frame::FrameNo);
                    let s = d.snapshot();
                    let (owner, index) = d.identity();
                    if stacked {
                        assert_eq!(s.refs(), 0, "frame {f} is free and held: {s:?}");
                    } else {
                        assert!(
                            s.refs() > 0,
                            "frame {f} is lost: in no stack, no reference ({s:?}, page {index} of {owner})"
                        );
                        if crate::anon::region_process(owner).is_none() {
                            pages.push((f as crate::frame::FrameNo, owner, index));
                        }
                    }
                }
                pages
            });
            for (f, owner, index) in pages {
                let mut found = false;
                self.with_slot(owner, |fs| {
                    found = fs.tree.lookup(&self.nodes, index) == Some(f)
                });
                assert!(
                    found,
                    "frame {f} holds page {index} of file {owner}, in no index ({:?})",
                    self.desc(f).snapshot()
                );
            }
        }

        /// For a test that found the cache stuck: each frame that holds
        /// more than the cache's own reference, or is latched or under
        /// write-back, with its page, holders and counts; then the runs,
        /// size-lock holds and counters counted.
        pub(crate) fn describe_held(&self) -> String {
            use std::fmt::Write;
            let mut out = String::new();
            for f in 0..self.frames.len() as crate::frame::FrameNo {
                let d = self.desc(f);
                let s = d.snapshot();
                if s.refs() > 1 || s.is_latched() || s.is_under_writeback() {
                    let (owner, index) = d.identity();
                    let _ = write!(
                        out,
                        "frame {f}: file {owner} page {index} {s:?} latch holder {} write-back owner {}",
                        s.latch_holder(),
                        d.writeback_owner()
                    );
                    if let Some(sh) = &self.shared {
                        let _ = write!(out, " counted {:?}", sh.seg.pins().holders(f));
                    }
                    out.push('\n');
                }
            }
            if let Some(sh) = &self.shared {
                let _ = writeln!(out, "other counts {:?}", sh.seg.pins().other_counts());
            }
            out
        }

        /// A shared cache's segment file.
        pub(crate) fn shared_path(&self) -> Option<&Path> {
            self.shared.as_ref().map(|s| s.seg.path())
        }

        /// The file table, for a shared cache.
        #[inline]
        pub(crate) fn file_table(&self) -> Option<&FileTable> {
            self.shared.as_ref().map(|s| &s.files)
        }
    }
}

#[cfg(loom)]
impl super::Inner {
    /// Never a shared cache under loom.
    #[inline]
    pub(crate) fn file_table(&self) -> Option<&super::file_table::FileTable> {
        None
    }

    /// Nothing to report under loom.
    pub(crate) fn describe_held(&self) -> String {
        String::new()
    }
}

impl SharedPart {
    /// Gives back an open of file `id` (`FileShared`'s drop).
    pub(crate) fn close_file(&self, id: u64, stamp: Option<(u64, u64)>) {
        #[cfg(not(loom))]
        let _ = self.files.close_idle(id, stamp);
        #[cfg(loom)]
        {
            let _ = (id, stamp);
            match *self {}
        }
    }
}
