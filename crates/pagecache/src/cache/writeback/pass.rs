//! Which pages a pass writes: the file's dirty-tagged pages taken under
//! the tree lock (step 1 of the block in `writeback/mod.rs`), what a
//! background pass picks of them (`Pick`), and the write-back hook's say.

use super::run::{InFlight, WbPin, BACKGROUND_FLIGHT, BACKGROUND_OPS};
use super::{Pick, Sweep};
use crate::cache::{FileShared, Inner, SizeShared};
use crate::frame::FrameNo;
use crate::sync::Ordering;
use std::io;
use std::sync::Arc;

/// Most tagged pages a background take looks at under one hold of the
/// tree lock (a few microseconds of a writer's wait for it; a pass goes
/// on to the next chunk after writing what this one took).
pub(super) const TAKE_VISITS: usize = 4096;

impl Inner {
    /// Writes every dirty page of `fs` back: runs submitted to the engine
    /// without waiting, in a sliding window of a quarter of the cache, each
    /// ended (pins dropped) by its completion; returns once every run has
    /// ended. Returns the first error; failed pages stay dirty. Context: may
    /// sleep (I/O, latch waits with no pins held); the caller holds, proved
    /// by `size`, the size lock shared.
    ///
    /// `background`: the flusher's pass: which pages it writes, and the
    /// cache's dirty count it works down to (`Sweep`). Its failures are
    /// counted in `Stats` (nobody waits for it; a `sync` writes the pages
    /// again), and it never waits for a
    /// page: one latched, or dirty with an older write still in flight,
    /// gets its dirty tag back and is left to a later pass or a sync. A
    /// writer throttled at the dirty limit may hold that latch (a `PageMut`
    /// of another page): waiting for it stalled the writer for the
    /// throttle's whole bound. And once it has started every page it took,
    /// while the count is still over its goal, it takes the file's tags
    /// again (up to a cache's worth of pages per call, so other files get
    /// their turn) with its earlier writes still in flight: a writer
    /// dirtying pages faster than the device writes them, throttled at the
    /// limit, then waits for the next runs to start, not for every write
    /// of the pass to end (36-60 ms stalls, each a whole window of writes,
    /// were the p99 of a sequential writer).
    pub(super) fn write_dirty(
        &self,
        fs: &Arc<FileShared>,
        size: &SizeShared<'_>,
        background: Option<Sweep>,
    ) -> io::Result<()> {
        // Pages per write: up to 1 MiB (256 pages of 4 KiB; the size the
        // kernel's write-back sends down), but never more than a quarter of the
        // cache, so a sync's pins cannot starve other threads of frames (a
        // tiny cache found it: 8 threads and a syncer over 16 frames). The
        // same bound holds for all the runs in flight at once.
        let run_max = ((1 << 20) / self.page_size)
            .clamp(1, 256)
            .min(self.frames.len() / 4)
            .max(1);
        // Pages in flight at once (runs are submitted without waiting, the
        // oldest waited for when this is reached): the same quarter of the
        // cache, and for the flusher at most `BACKGROUND_FLIGHT` bytes.
        let mut flight_max = (self.frames.len() / 4).max(1);
        // Writes in flight at once: for the flusher `BACKGROUND_OPS`.
        let mut runs_max = usize::MAX;
        if background.is_some() {
            flight_max = flight_max.min((BACKGROUND_FLIGHT / self.page_size).max(run_max));
            runs_max = BACKGROUND_OPS;
        }
        let mut first_err: Option<io::Error> = None;
        // The cache and the file, owned, so that each completion can end
        // its run on the engine's thread (no cache to own while it is
        // being dropped: `flush_all` at teardown writes each run here).
        let owner = self
            .me
            .get()
            .and_then(std::sync::Weak::upgrade)
            .map(|inner| (inner, fs.clone()));
        let mut flight = InFlight {
            owner,
            ..InFlight::default()
        };
        let mut dirty = Vec::new();
        let mut taken = 0;
        // Tagged pages this pass may still look at: at most one round of
        // the file's tags (a take resumes where the last stopped, so a
        // filter that keeps refusing every page would otherwise go round
        // and round).
        let mut visits = match background {
            Some(_) => self.dirty_pages() + TAKE_VISITS,
            None => usize::MAX,
        };
        // Where the age pass goes on (see `take_dirty_of`).
        let mut from = 0;
        loop {
            let round_done = self.take_dirty_of(fs, &mut dirty, background, &mut visits, &mut from);
            taken += dirty.len();
            let mut started = false;
            let mut i = 0;
            while i < dirty.len() {
                // Gather a run of consecutive dirty pages, pinned. Never wait
                // for a latch while holding pins (the latch holder may be
                // waiting, through a pending writer, for one of them): runs
                // in flight are finished first.
                let mut run: Vec<(u64, FrameNo)> = Vec::with_capacity(run_max);
                while i < dirty.len() && run.len() < run_max {
                    let (index, f) = dirty[i];
                    if run.last().is_some_and(|&(li, _)| index != li + 1) {
                        break;
                    }
                    let wait = background.is_none() && run.is_empty() && flight.pages == 0;
                    let cause = if background.is_some() {
                        crate::cache::WritebackCause::Background
                    } else {
                        crate::cache::WritebackCause::Sync
                    };
                    let pinned = self.pin_for_writeback(fs, index, f, wait, cause);
                    match pinned {
                        WbPin::Pinned => {
                            run.push((index, f));
                            i += 1;
                        }
                        WbPin::Deferred => {
                            // Release: as `end_run`'s decrement (the page
                            // is tagged again already).
                            fs.writeback_done(1);
                            if background.is_none() {
                                first_err.get_or_insert_with(|| {
                                    io::Error::new(
                                        io::ErrorKind::WouldBlock,
                                        format!(
                                            "{}: page {index}: its write-back hook deferred it",
                                            fs.path.display()
                                        ),
                                    )
                                });
                            }
                            i += 1;
                            break;
                        }
                        WbPin::Skip => {
                            // Release: as `end_run`'s decrement.
                            fs.writeback_done(1);
                            i += 1;
                            break;
                        }
                        WbPin::Busy if background.is_some() => {
                            self.untake(fs, index, f);
                            // Release: after the tag is back (see `untake`).
                            fs.writeback_done(1);
                            i += 1;
                            break;
                        }
                        WbPin::Busy if run.is_empty() => {
                            // Latched (or its older write in flight): finish
                            // what is in flight, then wait for it with no
                            // pins held.
                            self.finish_flight(&mut flight, &mut first_err);
                            break;
                        }
                        WbPin::Busy => break,
                    }
                }
                if !run.is_empty() {
                    started = true;
                    self.start_run(fs, size, run, &mut flight, &mut first_err);
                    self.wake_throttled();
                    // A sliding window: wait for the oldest runs until one
                    // more fits (in pages, and for the flusher in writes),
                    // so the device never runs dry while we wait (waiting
                    // for all would).
                    let pages = flight_max.saturating_sub(run_max);
                    self.finish_flight_to(&mut flight, pages, runs_max - 1, &mut first_err);
                }
            }
            // The flusher takes again while its goal is not reached (see
            // above) and this take started a write (pages it had to put
            // back, latched or busy, would only be taken again); the tags
            // taken so far are all started or put back.
            let more = background.is_some_and(|b| {
                // A take that found nothing to write in its chunk goes on
                // to the next chunk.
                (started || dirty.is_empty())
                    && !round_done
                    && visits > 0
                    && taken < self.frames.len()
                    && self.dirty_pages() > b.goal
            });
            if !more {
                break;
            }
        }
        self.finish_flight(&mut flight, &mut first_err);
        first_err.map_or(Ok(()), Err)
    }

    /// Takes the dirty tags of `fs` (clearing `dirty` first): the pages, in
    /// index order, count as under write-back from now on. A sync
    /// (`background` is `None`) takes every tag. The flusher, working the
    /// cache's dirty count down to its goal, takes only that many pages
    /// (all of them for `Pick::Expired`) of those its `Pick` accepts
    /// (the others keep their tags), looking at no more than `visits`
    /// tagged pages (decremented), from the file's cursor (where its last
    /// pass stopped, the kernel's `writeback_index`) to the end and then
    /// from the start, and moves the cursor past the last page it looked
    /// at: a file whose hot pages stay dirty is written a round at a time,
    /// each page once per round, not every dirty page at every pass; and
    /// the tree lock, which writers inserting pages need, is held for the
    /// pages looked at, not for the file's whole dirty set. The age pass
    /// goes from the start to the end once instead, `from` where its last
    /// take stopped, and leaves the cursor alone. Returns whether
    /// the flusher's take looked at every tagged page (a sync's: true).
    /// Then reserves the file's blocks and length up to the last page
    /// taken. Context: takes the tree lock; may sleep (`fallocate`).
    pub(super) fn take_dirty_of(
        &self,
        fs: &FileShared,
        dirty: &mut Vec<(u64, FrameNo)>,
        background: Option<Sweep>,
        visits: &mut usize,
        from: &mut u64,
    ) -> bool {
        dirty.clear();
        let mut partial = false;
        let mut round_done = true;
        {
            let g = fs.tree.lock();
            // Taken now: a page dirtied from here on gives the file a new
            // dirty time (a hint: a race only reorders the flusher).
            // Relaxed: see `FileShared::dirtied_when`.
            fs.dirtied_when
                .store(0, crate::sync::unmodelled::Ordering::Relaxed);
            match background {
                None => g.take_dirty(&self.nodes, dirty),
                Some(sweep) => {
                    let budget = match sweep.pick {
                        Pick::Expired(_) => usize::MAX,
                        _ => self.dirty_pages().saturating_sub(sweep.goal).max(1),
                    };
                    // Reads the descriptor only (see `take_dirty_if`).
                    let mut keep = |f: FrameNo| -> bool {
                        let d = self.desc(f);
                        match sweep.pick {
                            Pick::Any => true,
                            Pick::Cold(t) => !d.snapshot().is_accessed() || d.dirtied() <= t,
                            Pick::Expired(t) => d.dirtied() <= t,
                        }
                    };
                    // The age pass looks at every tag once, from the
                    // start (`from`), and leaves the file's cursor to the
                    // others: it writes what it finds whatever the round.
                    let aged = matches!(sweep.pick, Pick::Expired(_));
                    // Relaxed: a hint.
                    let cursor = if aged {
                        *from
                    } else {
                        fs.wb_cursor
                            .load(crate::sync::unmodelled::Ordering::Relaxed)
                    };
                    // Looked at under this hold of the lock.
                    let chunk = (*visits).min(TAKE_VISITS);
                    let mut left = chunk;
                    let mut last = g.take_dirty_if(
                        &self.nodes,
                        (cursor, u64::MAX),
                        budget,
                        &mut left,
                        &mut keep,
                        dirty,
                    );
                    let wrapped = dirty.len();
                    let wrap = if aged { (0, 0) } else { (0, cursor) };
                    if let Some(l) =
                        g.take_dirty_if(&self.nodes, wrap, budget, &mut left, &mut keep, dirty)
                    {
                        last = Some(l);
                    }
                    *visits -= chunk - left;
                    // The last looked at in round order: the next pass
                    // starts after it.
                    match last {
                        Some(last) if aged => *from = last.saturating_add(1),
                        // Relaxed: a hint.
                        Some(last) => fs.wb_cursor.store(
                            last.wrapping_add(1),
                            crate::sync::unmodelled::Ordering::Relaxed,
                        ),
                        None => {}
                    }
                    // In index order: the wrapped part first.
                    dirty.rotate_left(wrapped);
                    partial = dirty.len() >= budget || left == 0 || chunk - left > dirty.len();
                    round_done = dirty.len() < budget && left > 0;
                }
            }
            // The taken pages count as under write-back from now on (not
            // from their pin): a sync that finds their tags gone must
            // find them here. Under the tree lock, which a later take
            // also takes. Relaxed: ordered by that lock.
            fs.writeback_started(dirty.len());
        }
        if partial {
            // Tags are left: the file keeps a dirty time.
            self.file_dirtied(fs);
        }
        // Blocks and length up to the last dirty page's end (never past
        // the file's length), so the writes are overwrites the filesystem
        // runs concurrently.
        if let (Some(&(last, _)), Some(w)) = (dirty.last(), fs.write_fd.get()) {
            // Acquire: as in `run_buffers`.
            let len = fs.len.load(Ordering::Acquire);
            w.allocate_to(len.min((last + 1) << self.shift));
        }
        round_done
    }

    /// The flusher took the dirty tag of page `index` (frame `f`) and will
    /// not write it now: puts the tag back if the page is still there and
    /// dirty, so that a later pass or a sync finds it (a writer that
    /// unlatches an already dirty page does not tag it again). A page that
    /// is clean now needs no tag: it is tagged when next dirtied. Tagging a
    /// page that a write-back cleans meanwhile leaves a spurious tag, which
    /// is harmless (the tag protocol, `index` module). Before the caller's
    /// release of its `writeback` count, so that a sync that waits for that
    /// count to reach 0 finds the tag. Context: no sleep; takes the tree
    /// lock (the page cannot leave the index meanwhile).
    pub(super) fn untake(&self, fs: &FileShared, index: u64, f: FrameNo) {
        let g = fs.tree.lock();
        if fs.tree.lookup(&self.nodes, index) == Some(f) && self.desc(f).snapshot().is_dirty() {
            fs.tree.tag_dirty(&self.nodes, index);
            drop(g);
            self.file_dirtied(fs);
        }
    }
}
