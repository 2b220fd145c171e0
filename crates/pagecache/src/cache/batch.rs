//! Protocol 5.3, asynchronous form: misses in batches, readahead and
//! prefetch. A run of consecutive missing pages is inserted latched by one
//! thread, read by one I/O of the engine, and completed — on the inserting
//! thread when it waits (a `read_at` spanning several missing pages), or on
//! the engine's thread when nobody does (readahead, `File::prefetch`).
//!
//! ```text
//!  submitter (no lock held on entry)        completer (any thread)
//!  1. for each page i of the run, in
//!     ascending order: stop at the first
//!     page present (never wait for a
//!     latch here); else 5.3 steps 1-2
//!     (try_insert): the page is in the
//!     index LATCHED, refs = cache + fill,
//!     not UPTODATE; begin_fill snapshots
//!     the length
//!  2. one vectored read of the frames
//!     (submit; the fills' latches and pins
//!     travel with the op)                   3. the read's result n: page k
//!                                              gets min(ps, n - k*ps) bytes;
//!                                              complete_fill zeroes the rest
//!                                              and past the snapshot length
//!                                              (settle_run; on Err the pages
//!                                              leave the index, still
//!                                              latched); a completer that
//!                                              owns the file drops it here
//!                                           4. Ok: unlatch_uptodate (Release)
//!                                              + wake; drop the fill's pin
//!                                              (or hand it to the waiting
//!                                              submitter)
//!                                              Err: every page of the run is
//!                                              abandoned (removed, unlatched,
//!                                              pin dropped): waiters retry,
//!                                              miss, and read again
//! ```
//!
//! Ordering and races, beyond those of the synchronous 5.3 (`miss.rs`):
//! - Lookups of a page of the run see LATCHED at 5.1 step 2 and park on
//!   that page's latch until step 4, whichever thread runs it; the unlatch
//!   (Release) publishes the bytes to their Acquire pin. Optimistic readers
//!   see !UPTODATE and back off.
//! - Truncate (5.6) may remove pages of a run while the read is in flight:
//!   it orphans them (REMOVED, out of the index); step 4 then unlatches a
//!   removed page and the fill's release frees it. A page inserted after the
//!   truncate stored the new length snapshots that length in step 1 and is
//!   zero past it. So readahead never brings back bytes a truncate cut.
//! - Descriptors: step 4 is the first thing another thread can see, and
//!   nothing after it needs the file, so a completion drops its reference
//!   (and the op its descriptor) before it: a file let go while its reads
//!   were in flight is closed by the last of them, not a moment later.
//! - Eviction never picks a page of a run (pinned by its fill), and the
//!   engine finishes every op before the cache's memory goes away.
//! - Deadlock: step 1 waits for no latch, and once it holds fills it takes
//!   frames without waiting for other runs' reads (`alloc_frame_as(false)`:
//!   a run of its own not yet submitted could be what it waits for), so a
//!   submitter holding its run's latches blocks nobody's progress but
//!   waiters on those very pages; the completer takes only the tree lock
//!   (on error).

use super::miss::Fill;
use super::{FileShared, Inner};
use crate::error::context;
use crate::frame::FrameNo;
use crate::io::engine::{Dir, Oneshot, Op};
use crate::stats::Counter;
use crate::sync::unmodelled::{AtomicU64, Mutex, Ordering};
use std::io;
use std::sync::Arc;

/// Largest single read of a run, in bytes: a readahead window is split
/// into several reads of this size, all in flight at once.
const RUN_BYTES: u64 = 128 << 10;
/// Largest read of a buffered stream (`Config::stream_reads`): the
/// kernel copies from its cache, so large reads cost no more memory.
const STREAM_RUN_BYTES: u64 = 1 << 20;

/// A run whose step 3 is done: its pages, still latched, and whether they
/// were read (else they are out of the index, to be unlatched and freed).
#[derive(Debug)]
struct Settled {
    run: Run,
    ok: bool,
}

/// One thread's run of latched pages being filled.
#[derive(Debug)]
pub(crate) struct Run {
    fills: Vec<Fill>,
}

impl Run {
    /// A run of one page whose fill began.
    pub(crate) fn one(fill: Fill) -> Run {
        Run { fills: vec![fill] }
    }
    /// The first page's fill.
    pub(crate) fn first(&self) -> Fill {
        self.fills[0]
    }
    pub(crate) fn len(&self) -> usize {
        self.fills.len()
    }
    /// The frames, in page order.
    pub(crate) fn frames(&self) -> impl Iterator<Item = FrameNo> + '_ {
        self.fills.iter().map(|f| f.frame)
    }
}

/// Per-handle sequential detection, in the kernel's on-demand style: a
/// window `[start, start + size)` that the last miss or marker read, and a
/// marker page inside it whose first touch starts the next window.
#[derive(Debug)]
pub(crate) struct Readahead {
    /// (A) the marker page, `u64::MAX` if none: the one field the hit path
    /// reads (a load per `read_at`, written only when a window starts).
    marker: AtomicU64,
    /// (M) the window and the page after the last miss.
    window: Mutex<Window>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Window {
    start: u64,
    size: u64,
    /// The page after the last request that missed.
    next: u64,
}

impl Default for Readahead {
    fn default() -> Self {
        Readahead {
            marker: AtomicU64::new(u64::MAX),
            window: Mutex::new(Window::default()),
        }
    }
}

impl Readahead {
    /// Whether pages `first..=last` cover the marker (a hint: re-checked
    /// under the window's mutex). Context: any, no sleep.
    #[inline]
    pub(crate) fn crosses(&self, first: u64, last: u64) -> bool {
        // Relaxed: a hint.
        let m = self.marker.load(Ordering::Relaxed);
        first <= m && m <= last
    }
}

impl Inner {
    /// The largest run of pages one thread latches at once: a quarter of
    /// the cache (so a tiny cache cannot be pinned into `OutOfMemory` by a
    /// few readers), at most 256.
    fn run_max(&self) -> u64 {
        (self.frames.len() as u64 / 4).clamp(1, 256)
    }

    /// Step 1: inserts latched the missing pages `first..end` in order,
    /// stopping at the first one present, at `run_max`, or when no frame
    /// can be had (if some were inserted). Context: may sleep (eviction);
    /// waits for no latch; no tree lock held.
    /// `patient`: whether the first page may wait in reclaim for other
    /// threads' reads to end (false for a caller holding runs of its own
    /// that are not submitted yet: it would wait for itself).
    pub(crate) fn insert_run(
        &self,
        fs: &FileShared,
        first: u64,
        end: u64,
        patient: bool,
    ) -> io::Result<Run> {
        let end = end.min(first.saturating_add(self.run_max()));
        let mut fills = Vec::new();
        for index in first..end {
            if fs.tree.lookup(&self.nodes, index).is_some() {
                break;
            }
            // Impatient once we hold fills: see `alloc_frame_as`.
            match self.try_insert(fs, index, patient && fills.is_empty()) {
                Ok(Some(f)) => {
                    // Relaxed: a hint for reclaim.
                    self.own(&self.words.filling)
                        .fetch_add(1, Ordering::Relaxed);
                    fills.push(self.begin_fill(fs, index, f))
                }
                Ok(None) => break,
                Err(_) if !fills.is_empty() => break,
                Err(e) => return Err(e),
            }
        }
        Ok(Run { fills })
    }

    /// Step 2's op for `run` (non-empty): one vectored read of its frames
    /// from the file, completed by `done(run, result)`. Context: any.
    pub(super) fn run_op(
        &self,
        fs: &FileShared,
        run: Run,
        stream: bool,
        done: impl FnOnce(Run, io::Result<usize>) + Send + 'static,
    ) -> Op {
        let first = run.fills[0].index;
        let iov = run
            .fills
            .iter()
            .map(|fl| {
                // The read writes the frame's bytes: a writer of them, as
                // far as loom's models can see (`crate::sync::Witness`).
                self.desc(fl.frame).witness().touch();
                libc::iovec {
                    iov_base: self.frames.ptr(fl.frame).cast(),
                    iov_len: self.page_size,
                }
            })
            .collect();
        self.counters.add(Counter::Reads, run.len() as u64);
        self.count(Counter::AsyncReads);
        fs.disk.touch();
        Op {
            file: fs.read_fd.clone(),
            dir: Dir::Read,
            iov,
            offset: first << self.shift,
            stream,
            done: Box::new(move |res| done(run, res)),
        }
    }

    /// Steps 3-4 with the run's result. `keep`: the pages stay pinned for
    /// the caller (who releases them); else the fills' pins are dropped.
    /// On error every page is abandoned and the error returned. Context:
    /// no sleep; takes the tree lock on error.
    pub(crate) fn complete_run(
        &self,
        fs: &FileShared,
        run: Run,
        res: io::Result<usize>,
        keep: bool,
    ) -> io::Result<()> {
        let (settled, res) = self.settle_run(fs, run, res);
        self.publish_run(settled, keep);
        res
    }

    /// A buffered stream read of `fs` ended at byte `end`
    /// (`Config::stream_reads`): once it crosses an 8 MiB boundary,
    /// drops the kernel's copy of the two aligned blocks behind the one it
    /// is in. Whole aligned blocks, because the kernel frees only whole
    /// folios and caches files in large ones (`POSIX_FADV_DONTNEED` of each
    /// 1 MiB read freed nothing: `scripts/probe-scan.c`); two, so that a
    /// boundary no read crossed (its pages were cached already) still gets
    /// its block dropped. A hint: a stream that stops keeps at most those
    /// blocks and the kernel's readahead in its cache, until the file's
    /// last handle closes (`detach` drops the rest). Context: any (the
    /// engine's completion); one system call per 8 MiB.
    pub(crate) fn drop_behind(&self, fs: &FileShared, end: u64) {
        const BLOCK: u64 = 8 << 20;
        let upto = end.saturating_sub(BLOCK) & !(BLOCK - 1);
        // Relaxed: a hint; two streams of a file at most drop twice.
        if upto > 0 && fs.dropped_behind.swap(upto, Ordering::Relaxed) != upto {
            let from = upto.saturating_sub(2 * BLOCK);
            fs.read_fd.drop_behind(from, upto - from);
        }
    }

    /// Step 3, and on error the pages' removal from the index: all that
    /// needs the file. Nothing is visible to other threads yet (the pages
    /// are still latched), so a completer that owns a reference to the
    /// file drops it before [`Inner::publish_run`]: a thread woken there
    /// may let the file go and expect its descriptor closed on return.
    /// Context: no sleep; takes the tree lock on error.
    fn settle_run(
        &self,
        fs: &FileShared,
        run: Run,
        res: io::Result<usize>,
    ) -> (Settled, io::Result<()>) {
        let ps = self.page_size;
        match res {
            Ok(n) => {
                for (k, &fill) in run.fills.iter().enumerate() {
                    let got = n.saturating_sub(k * ps).min(ps);
                    // Zeroes past what was read: cannot fail with `Ok`.
                    let zeroed = self.complete_fill(fs, fill, Ok(got));
                    debug_assert!(zeroed.is_ok());
                }
                (Settled { run, ok: true }, Ok(()))
            }
            Err(e) => {
                let first = run.fills[0].index;
                let n = run.len();
                for fill in &run.fills {
                    self.count(Counter::ReadErrors);
                    self.abandon_unindex(fs, fill.index, fill.frame);
                }
                let e = context(
                    e,
                    format!(
                        "{}: reading pages {first}..{}",
                        fs.path.display(),
                        first + n as u64
                    ),
                );
                (Settled { run, ok: false }, Err(e))
            }
        }
    }

    /// Step 4: unlatches the settled pages (which wakes their waiters) and
    /// drops the fills' pins unless `keep` (on success). Context: no sleep;
    /// the file is not needed.
    fn publish_run(&self, settled: Settled, keep: bool) {
        let pages = settled.run.len();
        for f in settled.run.frames() {
            if settled.ok {
                self.desc(f).unlatch_uptodate();
                if !keep {
                    self.release(f);
                }
            } else {
                self.abandon_unlatch(f);
            }
        }
        self.fills_ended(pages);
    }

    /// A batched miss: reads the pages of `run` (non-empty) with one I/O,
    /// runs `meanwhile` once the read is started (readahead submits then),
    /// and waits. Returns the frames, pinned and up to date, in page order
    /// (the caller releases them). A run of one page is read on this
    /// thread, with no hand-off. Context: may sleep (I/O); holds the run's
    /// latches only.
    pub(crate) fn read_run(
        &self,
        fs: &FileShared,
        run: Run,
        meanwhile: impl FnOnce(),
    ) -> io::Result<Vec<FrameNo>> {
        let frames: Vec<FrameNo> = run.frames().collect();
        if run.len() == 1 {
            meanwhile();
            let res = self.read_fill(fs, &run.fills[0]);
            return self.complete_run(fs, run, res, true).map(|()| frames);
        }
        let w = Oneshot::new();
        let done = w.done();
        self.engine.submit(vec![
            self.run_op(fs, run, false, move |run, res| done((run, res)))
        ]);
        meanwhile();
        let (run, res) = w.wait();
        self.complete_run(fs, run, res, true).map(|()| frames)
    }

    /// Starts reads of the missing pages `first..end` (clipped to end of
    /// file) and returns without waiting: runs of consecutive missing pages,
    /// each split into reads of at most `RUN_BYTES`, all submitted at once;
    /// each completes on the engine's thread. Pages present are skipped.
    /// Returns how many pages it started. Context: may sleep (eviction, the
    /// submission mutex); no latch or tree lock held.
    pub(crate) fn read_async(
        &self,
        fs: &Arc<FileShared>,
        first: u64,
        end: u64,
        stream: bool,
    ) -> u64 {
        let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return 0;
        };
        // Acquire: as `read_at`.
        let npages = fs
            .len
            .load(Ordering::Acquire)
            .div_ceil(self.page_size as u64);
        // At most half the cache being read at once.
        // Relaxed: a bound, not a protocol.
        let busy = self.filling_now() as u64;
        let budget = (self.frames.len() as u64 / 2).saturating_sub(busy);
        let end = end.min(npages).min(first.saturating_add(budget));
        if first >= end {
            return 0;
        }
        // A stream's window: direct or buffered (`Config::stream_reads`),
        // and measured while its device's choice is being made.
        let window = stream.then(|| {
            self.streams
                .window(fs.ident.0, (end - first) << self.shift, false)
        });
        let probe = window.as_ref().and_then(|w| w.probe.clone());
        let stream = window.is_some_and(|w| w.buffered);
        // Relaxed: a hint for `detach`.
        if stream && !fs.streamed.load(Ordering::Relaxed) {
            fs.streamed.store(true, Ordering::Relaxed);
        }
        let per_op = ((if stream { STREAM_RUN_BYTES } else { RUN_BYTES }) >> self.shift).max(1);
        let mut ops = Vec::new();
        let mut started = 0;
        let mut i = first;
        while i < end {
            // Never patient: runs inserted above are not submitted yet, and
            // a hint is not worth waiting for frames.
            let run = match self.insert_run(fs, i, end.min(i + per_op), false) {
                Ok(run) => run,
                Err(_) => break, // no frame to be had: a hint, give up
            };
            if run.len() == 0 {
                i += 1; // present: skip it
                continue;
            }
            i += run.len() as u64;
            started += run.len() as u64;
            let (inner, file) = (me.clone(), fs.clone());
            let end = i << self.shift; // (i <= npages)
            let probe = probe.clone();
            if let Some(p) = &probe {
                p.add_read((run.len() as u64) << self.shift);
            }
            ops.push(self.run_op(fs, run, stream, move |run, res| {
                if let Some(p) = &probe {
                    inner.streams.done(p);
                }
                if stream && res.is_ok() {
                    inner.drop_behind(&file, end);
                }
                // An error removes the pages; a later read of one retries
                // it and reports what happens then.
                let (settled, _) = inner.settle_run(&file, run, res);
                // The file before the wake-ups (see `settle_run`).
                drop(file);
                inner.publish_run(settled, false);
            }));
            if ops.len() >= 32 {
                self.engine.submit(std::mem::take(&mut ops));
            }
        }
        self.engine.submit(ops);
        // The submitter's count: the window is measured once its last read
        // ends.
        if let Some(p) = &probe {
            self.streams.done(p);
        }
        started
    }

    /// `File::prefetch`: starts reads of the missing pages of the byte
    /// range. Context: as [`Inner::read_async`].
    pub(crate) fn prefetch(&self, fs: &Arc<FileShared>, offset: u64, len: u64) {
        if len == 0 {
            return;
        }
        let first = offset >> self.shift;
        let end = offset.saturating_add(len).div_ceil(self.page_size as u64);
        let n = self.read_async(fs, first, end, false);
        self.counters.add(Counter::PrefetchPages, n);
    }

    /// A `read_at` of pages `first..=last` touched the marker of `ra`:
    /// start the next window, twice as large (up to the maximum), and put
    /// the marker on its first page. Context: as [`Inner::read_async`].
    #[cold]
    pub(crate) fn readahead_marker(
        &self,
        fs: &Arc<FileShared>,
        ra: &Readahead,
        first: u64,
        last: u64,
    ) {
        // A stream that may now bypass the frames (`Measure` reached its
        // buffered side, say) ends its chain of windows here: its next
        // miss, where the next window would have started, is sequential
        // and reads past the cache. (Before the lock: `bypasses` may take
        // the streams' leaf lock.)
        let bypass = self.bypasses(fs);
        let (start, end) = {
            let mut w = ra.window.lock();
            // Relaxed: under the mutex, which orders the marker's writers.
            let m = ra.marker.load(Ordering::Relaxed);
            if !(first <= m && m <= last) {
                return; // another reader of this handle got there first
            }
            if bypass {
                ra.marker.store(u64::MAX, Ordering::Relaxed);
                return;
            }
            let start = w.start + w.size;
            let size = (w.size * 2).min(self.readahead_max).max(1);
            *w = Window {
                start,
                size,
                next: w.next,
            };
            ra.marker.store(start, Ordering::Relaxed);
            (start, start + size)
        };
        let n = self.read_async(fs, start, end, true);
        self.counters.add(Counter::ReadaheadPages, n);
    }

    /// A `read_at` of pages `first..=last` missed at `first`: decides the
    /// window. Sequential (the miss is where the last missing request ended,
    /// inside or just past the window, or at page 0): the request is read,
    /// and past it a window of four times the request, then twice the last,
    /// up to the maximum, is read asynchronously, the marker on its first
    /// page; but with `bypass` (a stream that may bypass the frames,
    /// `read_bypass`), the miss is recorded with no window of our own (the
    /// kernel reads ahead on the buffered descriptor) and the result is
    /// `None`. Random: readahead stops. Returns the end of the window
    /// (exclusive). Context: no sleep (a leaf mutex).
    pub(crate) fn readahead_miss(
        &self,
        ra: &Readahead,
        first: u64,
        last: u64,
        bypass: bool,
    ) -> Option<u64> {
        let max = self.readahead_max;
        let req = last - first + 1;
        let mut w = ra.window.lock();
        let sequential = max > 0
            && (first == 0
                || first == w.next
                || (w.size > 0 && first >= w.start && first <= w.start + 2 * w.size));
        w.next = last + 1;
        if sequential && bypass {
            // The request as the window: the next request is sequential if
            // it starts in it or just past it (a request ending inside a
            // page is followed by one starting in that page).
            w.start = first;
            w.size = req;
            // Relaxed: under the mutex.
            ra.marker.store(u64::MAX, Ordering::Relaxed);
            return None;
        }
        if !sequential {
            w.size = 0;
            // Relaxed: under the mutex.
            ra.marker.store(u64::MAX, Ordering::Relaxed);
            return Some(last + 1);
        }
        // The part read ahead, past the request: four times the request
        // at first, then twice the last, up to the maximum (a request as
        // large as the maximum still gets one maximum window ahead of it).
        let ahead = if w.size == 0 { req * 4 } else { w.size * 2 }.clamp(1, max);
        w.start = last + 1;
        w.size = ahead;
        // Relaxed: under the mutex.
        ra.marker.store(last + 1, Ordering::Relaxed);
        Some(last + 1 + ahead)
    }

    /// Whether a stream's miss in `fs` may bypass the frames: its device's
    /// streams read buffered, and the file is larger than the cache (a
    /// smaller one is kept, for the next pass to hit; a larger one would
    /// only cycle through the frames, evicting everything else, and pay a
    /// second copy). Oracle's "direct path reads" of tables larger than
    /// the buffer cache are the same idea. Context: no sleep but a leaf
    /// lock.
    pub(crate) fn bypasses(&self, fs: &FileShared) -> bool {
        // Acquire: as `read_at`.
        if fs.len.load(Ordering::Acquire) <= (self.frames.len() as u64) << self.shift {
            return false;
        }
        // Relaxed: a cached answer; `Streams` is the truth.
        match fs.stream_buffered.load(Ordering::Relaxed) {
            0 => match self.streams.buffered(fs.ident.0) {
                Ok(b) => {
                    fs.stream_buffered.store(1 + b as u8, Ordering::Relaxed);
                    b
                }
                // `Measure` measuring: the buffered side is measured on
                // the path its streams will take, this one.
                Err(buffered_phase) => buffered_phase,
            },
            b => b == 2,
        }
    }

    /// A stream's read of the pages `first..=last` (bytes from `pos`, into
    /// `dst`), at a missing page `first`, bypassing the frames: the
    /// missing pages from `first` on, up to the first page present, are
    /// read from the file straight into `dst` (one copy, by the kernel)
    /// and dropped from the kernel's cache behind the stream; no frame is
    /// taken, so the scan evicts nothing. Pages present (dirty ones
    /// above all) are left to the caller's next lookup. Returns the bytes
    /// copied (0 if `first` is present now).
    ///
    /// Why the file's bytes are the page's: a page that is not in the
    /// index is clean (a dirty page leaves the index only after its
    /// write-back, `cache/evict.rs`), so the file holds its latest bytes,
    /// and the kernel's cache, which direct writes invalidate, does not
    /// hide them. A page inserted and written by another thread after the
    /// lookup is a write concurrent with this read: the read gives the
    /// bytes from before it, as a read that ran first would. Bytes within
    /// the cache's length but past the file's end on disk (a write past
    /// the end not yet written back, the gap before it) read as zeros, as
    /// a miss there does. Context: may sleep (the read); no latch, pin or
    /// lock held.
    pub(crate) fn read_bypass(
        &self,
        fs: &FileShared,
        first: u64,
        last: u64,
        pos: u64,
        dst: &mut [u8],
    ) -> io::Result<usize> {
        let mut end = first;
        while end <= last && fs.tree.lookup(&self.nodes, end).is_none() {
            end += 1;
        }
        let want = ((end << self.shift).saturating_sub(pos) as usize).min(dst.len());
        // While `Measure` measures this device's buffered side, this read
        // is one of its windows (warm-up or measured).
        // Relaxed: as in `bypasses`.
        let probe = if want > 0 && fs.stream_buffered.load(Ordering::Relaxed) == 0 {
            let w = self.streams.window(fs.ident.0, want as u64, true);
            match w.probe {
                Some(p) if w.buffered => {
                    p.add_read(want as u64);
                    Some(p)
                }
                Some(p) => {
                    // A direct-side probe (not expected: the phase never
                    // goes back to direct once the buffered side began):
                    // released unmeasured.
                    self.streams.done(&p);
                    None
                }
                None => None,
            }
        } else {
            None
        };
        let mut got = 0;
        let mut res = Ok(());
        while got < want {
            match fs
                .read_fd
                .read_stream_at(&mut dst[got..want], pos + got as u64)
            {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if let Some(p) = &probe {
            // The read's count, then the submitter's.
            self.streams.done(p);
            self.streams.done(p);
        }
        if let Err(e) = res {
            self.count(Counter::ReadErrors);
            return Err(context(
                e,
                format!(
                    "{}: reading pages {}..{end} (a stream, past the cache)",
                    fs.path.display(),
                    (pos + got as u64) >> self.shift
                ),
            ));
        }
        dst[got..want].fill(0);
        if want > 0 {
            // Relaxed: a hint for `detach`.
            if !fs.streamed.load(Ordering::Relaxed) {
                fs.streamed.store(true, Ordering::Relaxed);
            }
            self.drop_behind(fs, pos + want as u64);
            self.counters.add(Counter::StreamedPages, end - first);
        }
        Ok(want)
    }
}
