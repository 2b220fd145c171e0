//! Protocol 5.4 (optimistic read, no reference) against 5.5 (write under
//! the page's latch), and `read_at` / `write_at` built on them.
//!
//! ```text
//!  reader (read_at hit, no reference)       writer (pin held)
//!  1. f = tree.lookup(index)                1. try_latch(): set LATCHED (new
//!  2. v = version (Acquire); odd -> retry      pins and readers now park)
//!  3. state has UPTODATE, not REMOVED;      2. wait_drained(): refs down to
//!     identity == (file, index)                cache + own; a file page
//!                                              also waits for runs holding
//!                                              it (5.7 W2-W3, `run.rs`)
//!  4. copy bytes with racy loads (relaxed   3. version odd (store + Release
//!     atomics, or asm on x86-64: `copy`)       fence)
//!  5. Acquire fence; version == v ->        4. write bytes with per-word
//!     done, else retry (3 times, then          relaxed atomic stores
//!     fall back to a pin)                   5. version even (Release)
//!                                           6. unlatch_dirty() (Release) +
//!                                              wake; tag the index if newly
//!                                              dirty; drop the pin
//! ```
//!
//! Steps 1-2 are [`Inner::latch_pinned`] (then `wait_run_pins` for file
//! pages: anonymous pages have no runs); 3-6 are the [`FrameLatch`] guard
//! (`new` makes the version odd, `drop` does 5-6), so every writer
//! (`write_at`, `PageMut`, `AnonMut`, truncate's tail zeroing) releases the
//! latch the same way, unwinding included.
//!
//! The reader's copy is a correct snapshot iff the version did not change:
//! if it saw any byte of a write (4), the Acquire fence (5) orders the
//! version re-load after the writer's Release fence (3), so it sees an odd or
//! newer value. Identity is covered the same way (reassignment makes the
//! version odd, see `FrameDesc::reset`). Same-page readers write nothing
//! shared, which is the will-it-scale `pread2` case. Both sides use atomic
//! word accesses: a plain `memcpy` racing a writer is undefined behaviour.
//! (A `PageMut` holder writes through `&mut [u8]`; the window in which an
//! optimistic reader could overlap it is between the reader's step 3 and its
//! validation, and its result is then discarded.)

use super::batch::Readahead;
use super::miss::Got;
use super::{atomic_load_copy, FileShared, FrameLatch, Inner};
use crate::frame::FrameNo;
use crate::stats::Counter;
use crate::sync::Ordering;
use std::io;
use std::sync::Arc;

/// Per-page copies of at least this many bytes use a pin instead of the
/// optimistic path (see `read_at`): none where the racy copy is one
/// `rep movsb` (x86-64, `copy.rs`), 1 KiB where it is a loop of relaxed
/// word loads (2x a `memcpy` on a 4 KiB page).
const OPTIMISTIC_MAX: usize = if super::copy::ASM { usize::MAX } else { 1024 };
/// Retries of an optimistic read before falling back to a pin.
const OPTIMISTIC_TRIES: usize = 3;

/// Outcome of an optimistic read (protocol 5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Optimistic {
    /// The bytes were copied and validated.
    Copied,
    /// Not cached: the full path reads it.
    Miss,
    /// Cached but busy (being written, filled, removed) or the version kept
    /// changing: the full path pins it.
    Fallback,
}

impl Inner {
    /// A pinned page with the latch held and older pins drained (5.5 steps
    /// 1-2). With `overwrite`, a missing page is not read (the caller
    /// replaces every byte). The page is up to date unless `overwrite`.
    /// Context: may sleep (latch and drain waits, the read of a miss); the
    /// caller holds no pin of this page and no tree lock.
    pub(crate) fn get_page_latched(
        &self,
        fs: &FileShared,
        index: u64,
        overwrite: bool,
    ) -> io::Result<FrameNo> {
        loop {
            match self.insert_latched(fs, index)? {
                Got::Hit(f) => {
                    self.count(Counter::Hits);
                    if self.latch_pinned(f, fs.id, index) {
                        // Protocol 5.7 W2-W3: a run may be reading it.
                        if self.wait_run_pins(fs, index, f) {
                            return Ok(f);
                        }
                        // Truncated meanwhile: look it up again.
                        self.desc(f).unlatch();
                        self.release(f);
                    }
                }
                Got::Inserted(f) => {
                    if !overwrite {
                        self.fill(fs, index, f)?;
                    }
                    return Ok(f);
                }
            }
        }
    }

    /// Protocol 5.5 steps 1-2 on a page the caller pinned as `(owner,
    /// index)`: claim the latch and wait for older pins to drain. Returns
    /// false if that was not possible — another latch holder (which may be
    /// waiting for our pin: never wait for a latch while pinned, see
    /// `try_latch`), or the page was removed meanwhile. Then the caller's pin
    /// has been dropped, the holder (if any) waited for, and the caller
    /// retries its lookup. The one place this is written. Context: may
    /// sleep (parks on the latch or for the drain).
    pub(crate) fn latch_pinned(&self, f: FrameNo, owner: u64, index: u64) -> bool {
        let d = self.desc(f);
        if !d.try_latch() {
            self.release(f);
            if d.wait_unlatched_as(owner, index) {
                self.drop_torn(owner, index, f);
            }
            return false;
        }
        if d.snapshot().is_removed() {
            d.unlatch();
            self.release(f);
            return false;
        }
        d.wait_drained();
        true
    }

    /// Protocol 5.4: copies `dst.len()` bytes from offset `off` of page
    /// `index` with no reference.
    /// Context: any, no sleep, no lock; writes nothing shared except the accessed bit when it was clear.
    #[inline]
    fn read_optimistic(
        &self,
        fs: &FileShared,
        index: u64,
        off: usize,
        dst: &mut [u8],
    ) -> Optimistic {
        for _ in 0..OPTIMISTIC_TRIES {
            // 1.
            let Some(f) = fs.tree.lookup(&self.nodes, index) else {
                return Optimistic::Miss;
            };
            if f as usize >= self.frames.len() {
                return Optimistic::Miss;
            }
            let d = self.desc(f);
            // 2.
            let Some(v) = d.read_begin() else {
                continue;
            };
            // 3.
            let s = d.snapshot();
            if !s.is_live() || d.identity() != (fs.id, index) {
                return Optimistic::Fallback;
            }
            // 4.
            // SAFETY: `ptr(f) + off .. + dst.len()` is inside frame f
            // (off + len <= page size, checked by the caller); atomic word
            // loads race soundly with writers and are validated below.
            unsafe { atomic_load_copy(d.witness(), dst, self.frames.ptr(f).add(off)) };
            // 5.
            if d.read_validate(v) {
                if !s.is_accessed() {
                    d.mark_accessed(s);
                }
                self.hit_hook(f);
                return Optimistic::Copied;
            }
        }
        Optimistic::Fallback
    }

    /// One page's part of a read, if it needs no wait: 5.4 (counted in
    /// `optimistic`), else the inlined first attempt of 5.1 and a copy
    /// under that pin. False: the page is not cached, or busy (the caller
    /// takes the full path, or stops). The one place `read_at` and
    /// `read_cached` copy a page. Context: any, no sleep, no lock.
    #[inline(always)]
    fn copy_nowait(
        &self,
        fs: &FileShared,
        index: u64,
        off: usize,
        dst: &mut [u8],
        optimistic: &mut u64,
    ) -> bool {
        // Where the racy copy is a word loop, large copies go through a
        // pin so they can use the vectorised memcpy (the one refcount RMW
        // pair is small next to such a copy). Where it is `rep movsb`,
        // every copy is optimistic: a pin's CAS on a descriptor that
        // misses the cache is a locked RMW the copy cannot overlap
        // (a 4 KiB `read_at` over a 230 MiB set: 0.82-0.85x `memcpy`
        // pinned, 0.87-0.90x optimistic; `docs/benchmarks.md`).
        let tried = if dst.len() < OPTIMISTIC_MAX {
            self.read_optimistic(fs, index, off, dst)
        } else {
            Optimistic::Miss
        };
        if tried == Optimistic::Copied {
            *optimistic += 1;
            return true;
        }
        if tried == Optimistic::Fallback {
            self.count(Counter::OptimisticFallbacks);
        }
        let Some(f) = self.find_get_fast(fs, index) else {
            return false;
        };
        self.count(Counter::Hits);
        // SAFETY: pinned, so the bytes do not change.
        let src = unsafe { self.frames.bytes(f) };
        dst.copy_from_slice(&src[off..off + dst.len()]);
        self.release(f);
        true
    }

    /// `File::read_at`. Misses are read in batches (every missing page of
    /// the request from the first miss on, in runs, see `batch.rs`); with
    /// `ra`, the handle's readahead state, a sequential reader's window is
    /// read ahead asynchronously. Context: may sleep (a miss's read, latch
    /// waits on pinned copies or busy pages); no latch or tree lock
    /// held; the caller pins only lower pages of this file.
    pub(crate) fn read_at(
        &self,
        fs: &Arc<FileShared>,
        ra: Option<&Readahead>,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<usize> {
        // Acquire: pairs with the Release `fetch_max` of writers, so pages
        // written before the length grew are visible.
        let len = fs.len.load(Ordering::Acquire);
        if offset >= len || buf.is_empty() {
            return Ok(0);
        }
        let end = len.min(offset.saturating_add(buf.len() as u64));
        let total = (end - offset) as usize;
        let ps = self.page_size;
        let last_page = (end - 1) >> self.shift;
        if let Some(ra) = ra {
            if ra.crosses(offset >> self.shift, last_page) {
                self.readahead_marker(fs, ra, offset >> self.shift, last_page);
            }
        }
        let mut done = 0;
        let mut optimistic = 0;
        let mut missed = false;
        let mut bypass = false;
        while done < total {
            let pos = offset + done as u64;
            let index = pos >> self.shift;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(total - done);
            let dst = &mut buf[done..done + n];
            if self.copy_nowait(fs, index, off, dst, &mut optimistic) {
                done += n;
                continue;
            }
            // The full path (which also decides a miss), as `get_page`
            // does after its inlined first attempt.
            if let Some(f) = self.find_get(fs, index)? {
                self.count(Counter::Hits);
                // SAFETY: pinned, so the bytes do not change.
                let src = unsafe { self.frames.bytes(f) };
                dst.copy_from_slice(&src[off..off + n]);
                self.release(f);
                done += n;
                continue;
            }
            // A miss: this page and the missing ones after it, up to the
            // request's end, in one run; the first miss of the call also
            // decides readahead, or that a stream bypasses the frames
            // (`read_bypass`), for the rest of the call.
            let ra_end = match ra {
                Some(ra) if !missed => {
                    let may_bypass = self.bypasses(fs);
                    match self.readahead_miss(ra, index, last_page, may_bypass) {
                        Some(end) => end,
                        None => {
                            bypass = true;
                            last_page + 1
                        }
                    }
                }
                _ => last_page + 1,
            };
            missed = true;
            if bypass {
                let pos = offset + done as u64;
                done += self.read_bypass(fs, index, last_page, pos, &mut buf[done..total])?;
                continue;
            }
            let run = self.insert_run(fs, index, last_page + 1, true)?;
            if run.len() == 0 {
                continue; // another thread's page appeared: look it up
            }
            let frames = self.read_run(fs, run, || {
                if ra_end > last_page + 1 {
                    let n = self.read_async(fs, last_page + 1, ra_end, true);
                    self.counters.add(Counter::ReadaheadPages, n);
                }
            })?;
            for f in frames {
                let pos = offset + done as u64;
                let off = (pos & (ps as u64 - 1)) as usize;
                let n = (ps - off).min(total - done);
                // SAFETY: pinned, so the bytes do not change.
                let src = unsafe { self.frames.bytes(f) };
                buf[done..done + n].copy_from_slice(&src[off..off + n]);
                self.release(f);
                done += n;
            }
        }
        if optimistic > 0 {
            // Counted as hits by the snapshot (one add on the hot path).
            self.counters.add(Counter::OptimisticReads, optimistic);
        }
        Ok(total)
    }

    /// `read_at`'s copies that need no wait, for the asynchronous read
    /// (`File::read_at_async`): from byte `done` of the request on, copies
    /// pages while each is cached and not latched (5.4, else a pin of 5.1
    /// that did not have to wait), and returns how far it got (`total`, or
    /// the start of the first page it would have had to wait for or read).
    /// Context: any, no sleep, no lock.
    pub(crate) fn read_cached(
        &self,
        fs: &FileShared,
        buf: &mut [u8],
        offset: u64,
        total: usize,
        mut done: usize,
    ) -> usize {
        let ps = self.page_size;
        let mut optimistic = 0;
        while done < total {
            let pos = offset + done as u64;
            let index = pos >> self.shift;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(total - done);
            if !self.copy_nowait(fs, index, off, &mut buf[done..done + n], &mut optimistic) {
                break;
            }
            done += n;
        }
        if optimistic > 0 {
            self.counters.add(Counter::OptimisticReads, optimistic);
        }
        done
    }

    /// Context: may sleep (latch and drain waits, reads of partial pages, eviction); takes the size lock shared (recursively); the caller holds no pin of the pages written and no `PageMut` of this file.
    pub(crate) fn write_at(&self, fs: &Arc<FileShared>, buf: &[u8], offset: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = self.write_end(fs, buf.len(), offset)?;
        // Dirty throttling, before any lock (cache/flusher.rs).
        self.balance_dirty();
        // Before the size lock (reads may evict).
        let last = self.read_last_ahead(fs, offset, end);
        let size = fs.size.read(last);
        let ps = self.page_size;
        let mut done = 0;
        while done < buf.len() {
            let pos = offset + done as u64;
            let index = pos >> self.shift;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(buf.len() - done);
            // Only a whole-page write skips reading the page; a partial page
            // past the end is zero-filled by `fill`, which re-reads the
            // length after inserting (a stale length here could otherwise
            // skip bytes another writer just put there).
            let f = self.get_page_latched(fs, index, n == ps)?;
            self.write_latched(fs, f, index, off, &buf[done..done + n]);
            done += n;
        }
        drop(size);
        Ok(())
    }

    /// 5.3 for a write of `offset..end`: the only pages it must read are
    /// a partial first and a partial last page. A missing last one is
    /// read asynchronously now, so that its read is in flight with the
    /// first page's (or while the pages between are copied): one wait,
    /// not two in a row. A hint: its error, if any, surfaces when the
    /// writer reads the page itself; `read_async` skips a page past end
    /// of file (the lookup only spares it a cached page). Returns the
    /// write's last page. Context: no sleep but reclaim's (none for a
    /// future: `DeferDirty`); no size lock held.
    pub(crate) fn read_last_ahead(&self, fs: &Arc<FileShared>, offset: u64, end: u64) -> u64 {
        let last = (end - 1) >> self.shift;
        if last > offset >> self.shift
            && end & (self.page_size as u64 - 1) != 0
            && fs.tree.lookup(&self.nodes, last).is_none()
        {
            self.read_async(fs, last, last + 1, false);
        }
        last
    }

    /// The end of a write of `len` bytes at `offset`, checked: no overflow,
    /// a length the filesystem takes (`FileTooLarge` otherwise, before
    /// anything changes). Context: any, no sleep.
    pub(crate) fn write_end(&self, fs: &FileShared, len: usize, offset: u64) -> io::Result<u64> {
        let end = offset
            .checked_add(len as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{}: write of {len} bytes at offset {offset} overflows the file size",
                        fs.path.display(),
                    ),
                )
            })?;
        // Acquire: see `fill`.
        if end > fs.len.load(Ordering::Acquire) {
            self.check_len(fs, end, "write")?;
        }
        Ok(end)
    }

    /// 5.5 steps 3-6 for one page of a write: `src` at byte `off` of page
    /// `index` (frame `f`, latched, drained and pinned by the caller, who
    /// holds the size lock shared up to this page), the file's length
    /// grown to cover it, then the latch and pin released (dirty). The one
    /// place `write_at` and `write_at_async` write a page. Context: no
    /// sleep.
    pub(crate) fn write_latched(
        &self,
        fs: &Arc<FileShared>,
        f: FrameNo,
        index: u64,
        off: usize,
        src: &[u8],
    ) {
        // 5.5 step 3: version odd; 4: write
        let latch = FrameLatch::new(self, f, Some((fs, index)));
        // SAFETY: latched and drained, version odd; off + len <= ps.
        unsafe { latch.write(off, src) };
        // Grow the length to cover this page's bytes before the page is
        // unlatched (so a write-back of it sees them inside the file).
        // AcqRel: Release publishes this page's bytes to readers that load
        // the new length with Acquire (`read_at`); Acquire orders us after
        // earlier growers. Only when the write extends the file: a length
        // that covers the bytes already cannot shrink while we hold the
        // size lock shared, and the Acquire load that saw it orders us
        // after its grower as the RMW would (a write-back that finds this
        // page dirty, after our unlatch, loads a length at least as
        // large). The locked RMW on every write made the CPU wait for the
        // copy's stores right there.
        let covered = (index << self.shift) + (off + src.len()) as u64;
        // Acquire: as above, when it covers the bytes already.
        if covered > fs.len.load(Ordering::Acquire) {
            fs.len.fetch_max(covered, Ordering::AcqRel);
        }
        // 5-6: version even, DIRTY, unlatch, tag, unpin.
        drop(latch);
    }
}
