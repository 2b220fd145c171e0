//! Write-back: `sync`, close and eviction write dirty pages through here.
//!
//! ```text
//!  write-back (pin held, size lock shared)   writer (5.5) / truncate (5.6)
//!  1. collect the file's dirty-tagged        a writer sets DIRTY on unlatch
//!     pages under the tree lock, clearing    and re-tags (index dirty-tag
//!     the tags (index S1)                    protocol, D1-D2)
//!  2. pin each (PinKind::Writeback passes
//!     a writer still draining: rule 7);
//!     start_writeback: DIRTY -> WRITEBACK
//!     (RMW; a removed page is skipped)
//!  3. read the length (Acquire) and write    truncate stores the new length
//!     the run's bytes below it, one I/O      before removing pages, and waits
//!  4. end_writeback: clear WRITEBACK; on     for the size lock exclusively,
//!     failure set DIRTY again and re-tag     so no write lands past it
//!  5. release the pins
//! ```
//!
//! A failed write leaves its pages dirty; eviction records its error in the
//! file's `wb_error` for the next `sync`. Never wait for a latch while
//! holding pins (lock rule 6): a run stops at a latched page, is written,
//! and only then does the flush wait.

use crate::cache::{FileShared, Inner, SizeShared};
use crate::error::context;
use crate::frame::state::{PinFail, PinKind};
use crate::frame::FrameNo;
use crate::io::write_full;
use crate::stats::Counter;
use crate::sync::Ordering;
use std::io;

/// Outcome of pinning a tagged page for write-back.
enum WbPin {
    /// Pinned, write-back started.
    Pinned,
    /// Not this file's dirty page any more.
    Skip,
    /// Latched by a writer; retry with no pins held.
    Busy,
}

impl Inner {
    /// Writes back a run of consecutive pages `(index, frame)` that the
    /// caller has pinned, `start_writeback()` succeeded on, and (for sync)
    /// ordered. Caller holds the size lock shared. Ends write-back on each
    /// page (dirty again on failure, re-tagged) but keeps the pins.
    /// Context: may sleep (I/O); the caller holds the run's pins and, proved
    /// by `_size`, the file's size lock shared; no tree lock.
    fn write_pages(
        &self,
        fs: &FileShared,
        _size: &SizeShared<'_>,
        run: &[(u64, FrameNo)],
    ) -> io::Result<()> {
        let ps = self.page_size as u64;
        // Acquire: read after pinning the run, so a shrink that began later
        // (it latches the last page, waiting for our pin) cannot be missed;
        // pairs with `set_len`'s Release store.
        let len = fs.len.load(Ordering::Acquire);
        let first = run[0].0;
        let mut slices: Vec<&[u8]> = Vec::with_capacity(run.len());
        for &(index, f) in run {
            let start = index << self.shift;
            let n = len.saturating_sub(start).min(ps) as usize;
            if n == 0 {
                break;
            }
            // SAFETY: pinned by the caller, so the bytes do not change.
            slices.push(unsafe { &self.frames.bytes(f)[..n] });
        }
        let res = match fs.write_fd.get() {
            _ if slices.is_empty() => Ok(()),
            Some(w) => {
                self.count(Counter::Writes);
                fs.disk.touch();
                write_full(&**w, &slices, first << self.shift)
            }
            None => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "dirty pages but no writable descriptor",
            )),
        };
        let failed = res.is_err();
        for &(index, f) in run {
            let d = self.desc(f);
            let old = d.end_writeback(failed);
            if failed && !old.is_removed() {
                fs.tree.tag_dirty(&self.nodes, index);
            }
        }
        match res {
            Ok(()) => {
                self.counters.add(Counter::Writebacks, run.len() as u64);
                Ok(())
            }
            Err(e) => {
                self.count(Counter::WriteErrors);
                let last = run[run.len() - 1].0;
                Err(context(
                    e,
                    format!("{}: writing back pages {first}..={last}", fs.path.display()),
                ))
            }
        }
    }

    /// Write-back of pages the caller has pinned; starts write-back on each
    /// and writes those still dirty. Used by eviction (one page).
    /// Context: may sleep (I/O); the caller holds the pins and, proved by
    /// `size`, the file's size lock shared.
    pub(crate) fn writeback_run(
        &self,
        fs: &FileShared,
        size: &SizeShared<'_>,
        pages: &[(u64, FrameNo)],
    ) -> io::Result<()> {
        let run: Vec<_> = pages
            .iter()
            .copied()
            .filter(|&(_, f)| self.desc(f).start_writeback())
            .collect();
        if run.is_empty() {
            return Ok(());
        }
        self.write_pages(fs, size, &run)
    }

    /// Writes every dirty page of `fs` back; with `durable`, also persists
    /// the length and calls `fdatasync`. Reports a write-back error recorded
    /// by eviction since the last call, even if the retry succeeded, and
    /// only once.
    /// Context: may sleep (I/O, latch waits with no pins held); takes the
    /// size lock shared (exclusive-free: `read_recursive`), the tree lock
    /// briefly; the caller holds no `PageMut` of this file.
    pub(crate) fn flush(&self, fs: &FileShared, durable: bool) -> io::Result<()> {
        // Pages per write: up to 64, but never more than a quarter of the
        // cache, so a sync's pins cannot starve other threads of frames (a
        // tiny cache found it: 8 threads and a syncer over 16 frames).
        let run_max = 64.min(self.frames.len() / 4).max(1);
        let mut first_err: Option<io::Error> = None;
        // Shared for the whole sync: excludes only `set_len`. Writers and
        // eviction's write-back run concurrently.
        let size = fs.size.read_recursive();
        {
            let mut dirty = Vec::new();
            fs.tree.lock().take_dirty(&self.nodes, &mut dirty);
            let mut i = 0;
            while i < dirty.len() {
                // Gather a run of consecutive dirty pages, pinned. Never wait
                // for a latch while holding pins (the latch holder may be
                // waiting, through a pending writer, for one of them).
                let mut run: Vec<(u64, FrameNo)> = Vec::with_capacity(run_max);
                while i < dirty.len() && run.len() < run_max {
                    let (index, f) = dirty[i];
                    if run.last().is_some_and(|&(li, _)| index != li + 1) {
                        break;
                    }
                    match self.pin_for_writeback(fs, index, f, run.is_empty()) {
                        WbPin::Pinned => {
                            run.push((index, f));
                            i += 1;
                        }
                        WbPin::Skip => {
                            i += 1;
                            break;
                        }
                        WbPin::Busy => break, // retried with no pins held
                    }
                }
                if !run.is_empty() {
                    if let Err(e) = self.write_pages(fs, &size, &run) {
                        first_err.get_or_insert(e);
                    }
                    for &(_, f) in &run {
                        self.release(f);
                    }
                }
            }
        }
        let res = match first_err {
            Some(e) => Err(e),
            None => self.persist(fs, size, durable),
        };
        // An error eviction met is reported once, to this sync or close,
        // whatever else happens (the kernel's errseq rule): taken now, it is
        // spent. If this call fails for its own reasons, that error is
        // returned and stands for both.
        let recorded = fs.wb_error.lock().take();
        match (res, recorded) {
            (Err(e), _) => Err(e),
            (Ok(()), Some(e)) => Err(context(e, "earlier write-back failed during eviction")),
            (Ok(()), None) => Ok(()),
        }
    }

    /// The end of a flush whose page writes succeeded: with `durable`,
    /// persists the length (never shrinking the file) and calls
    /// `fdatasync`. Context: may sleep (I/O); releases `size` before the
    /// `fdatasync`.
    fn persist(&self, fs: &FileShared, size: SizeShared<'_>, durable: bool) -> io::Result<()> {
        if !durable {
            return Ok(());
        }
        let Some(w) = fs.write_fd.get() else {
            return Ok(());
        };
        // Acquire: pairs with the writers' AcqRel `fetch_max`.
        let len = fs.len.load(Ordering::Acquire);
        // Never shrinks the file: a concurrent eviction may have written
        // past `len` already (see `grow_to`).
        fs.disk.touch();
        w.grow_to(len)
            .map_err(|e| context(e, format!("{}: persisting length {len}", fs.path.display())))?;
        drop(size);
        w.sync_data().map_err(|e| {
            context(
                e,
                format!("{}: fdatasync (length {len})", fs.path.display()),
            )
        })
    }

    /// Pins `f` for write-back if it still holds page `index` of `fs` and is
    /// dirty, and starts write-back on it. Waits for a latch only if `wait`.
    /// Context: may sleep only if `wait` (then the caller holds no pins); no lock held.
    fn pin_for_writeback(&self, fs: &FileShared, index: u64, f: FrameNo, wait: bool) -> WbPin {
        let d = self.desc(f);
        loop {
            match d.try_pin(PinKind::Writeback) {
                Ok(s) => {
                    if s.is_removed() || d.identity() != (fs.id, index) || !d.start_writeback() {
                        self.release(f);
                        return WbPin::Skip;
                    }
                    return WbPin::Pinned;
                }
                Err(PinFail::Latched) if wait => d.wait_unlatched_as(fs.id, index),
                Err(PinFail::Latched) => return WbPin::Busy,
                // Freed or frozen: the page was written back and evicted.
                Err(_) => return WbPin::Skip,
            }
        }
    }

    /// Best-effort write-back of every registered file (cache teardown).
    /// Context: may sleep (I/O); no lock held (cache teardown).
    pub(crate) fn flush_all(&self) {
        let files: Vec<_> = self.registry.read().by_id.values().cloned().collect();
        for fs in files {
            let _ = self.flush(&fs, false);
        }
    }
}
