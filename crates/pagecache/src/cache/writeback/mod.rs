//! Write-back: `sync`, close and eviction write dirty pages through here.
//!
//! ```text
//!  write-back (pin held, size lock shared)   writer (5.5) / truncate (5.6)
//!  1. collect the file's dirty-tagged        a writer sets DIRTY on unlatch
//!     pages under the tree lock, clearing    and re-tags (index dirty-tag
//!     the tags (index S1)                    protocol, D1-D2)
//!  2. pin each (PinKind::Writeback passes
//!     a writer still draining: rule 7);
//!     start_writeback: DIRTY -> WRITEBACK    a writer latching the page now
//!     (RMW; a removed page is skipped; one   does not wait for the write-
//!     already under write-back and dirty     back's pin (latch_base counts
//!     again: wait for that write to end      it) unless pages are STABLE; it
//!     first, with no pins held)              rewrites the bytes under the
//!                                            I/O, sets DIRTY, re-tags
//!  3. read the length (Acquire) and write    truncate stores the new length
//!     the run's bytes below it, one I/O      before removing pages, and waits
//!  4. end_writeback: clear WRITEBACK; on     for the size lock exclusively,
//!     failure set DIRTY again and re-tag     so no write lands past it
//!  5. release the pins
//! ```
//!
//! Rewrites during the I/O: the page is dirty again when its write ends, so
//! the next pass writes it again; a sync covers only writes that ended
//! before it began, and those bytes are in the frame before its pass starts
//! the write, so they reach the disk whatever a concurrent writer does to
//! other bytes. What a crash may leave is a page mixing the two writes,
//! the same as the kernel's buffered writes to devices without stable
//! pages: readers of the cache never see that (they see pages wholly
//! before or after each write, 5.4/5.5). Soundness: the write's reads of
//! the frame are the kernel's (a DMA or `copy_from_user`), outside Rust's
//! abstract machine, like a device reading shared memory, and write-back
//! makes no `&[u8]` of the frames it writes: raw iovecs all the way to the
//! syscall (`BackendFile::write_raw`, `io::write_full`; a backend that
//! writes through slices keeps the default `stable_writes`, so its pages
//! are stable). What the write takes of bytes being changed is unspecified
//! and never used again (the page is dirty again and rewritten).
//! Transiently, after `end_writeback` and before the pin's release, a
//! write-back pin can pass an active writer (rule 7's test sees one pin
//! more than `latch_base`): such a write-back starts on a page being
//! rewritten, the same case. The pin is what keeps the frame from being
//! evicted, freed or reused under the I/O; it is held from before
//! `start_writeback` until after `end_writeback` (the frame
//! invariant `latch_base` relies on: WRITEBACK set means that pin exists).
//!
//! Steps 4-5 of a `sync`'s or the flusher's write run on the I/O engine's
//! thread when the write completes (the pins go as soon as their own write
//! ends); the pass still holds the size lock shared until every run has
//! ended, so a truncate never overtakes one. Eviction writes a dirty victim
//! with its dirty neighbours in one blocking write (split where a page
//! stopped being dirty). Before a pass, blocks and length are allocated up
//! to its last dirty page (never past the file's length), so the filesystem
//! runs its direct writes as concurrent overwrites.
//!
//! A failed write leaves its pages dirty (and counts in the file's
//! `wb_undone`); eviction's error goes to the call that needed the frame,
//! the flusher's to `Stats`. A write-back that eviction or the flusher
//! starts and then gives up (the hook defers the page, or a writer holds
//! it) leaves its page dirty too, and counts there the same way. A `sync`
//! reports what is true when it returns: `Ok` once every page dirty at its
//! call is on disk, whatever failed or was deferred before (see `flush`).
//! Never wait for a latch while holding pins (lock rule 6): a run stops at
//! a latched page, is written, and only then does the flush wait.

mod hook;
mod pass;
mod run;

pub use hook::{WritebackCause, WritebackDecision, WritebackHook, WritebackPage};

use crate::cache::{FileShared, Inner, SizeShared};
use crate::error::context;
use crate::sync::Ordering;
use std::io;
use std::sync::Arc;

/// What a background pass writes of a file (`flusher.rs` says when each
/// runs; `docs/design.md`, "Which dirty pages background write-back
/// writes", why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Any dirty page (the dirty count past the hard limit, after the cold
    /// ones; `internals::background_pass`).
    Any,
    /// Pages the replacement policy will evict soon (accessed bit clear:
    /// not used since the policy last looked) or dirtied at or before the
    /// given time (milliseconds of `flusher::now_ms`).
    Cold(u64),
    /// Pages dirtied at or before the given time only (the age bound).
    Expired(u64),
}

/// A background pass over one file: what it writes, and the cache's
/// dirty count it works down to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sweep {
    pub(crate) pick: Pick,
    pub(crate) goal: usize,
}

impl Inner {
    /// Writes every dirty page of `fs` back; with `durable`, also persists
    /// the length and calls `fdatasync`. Returns the truth about
    /// durability now: `Ok` exactly when every page dirty at the call (and,
    /// with `durable`, the length) is on disk. An earlier write-back that
    /// failed (eviction's, reported to the call that needed the frame; the
    /// flusher's, counted in `Stats`) left its pages dirty, so this writes
    /// them and is not failed by that earlier error: a database that rolled
    /// back on the first report must not see its next, successful commit
    /// fail. Its own failure it returns; the next call retries.
    /// Context: may sleep (I/O, latch waits with no pins held); takes the
    /// size lock shared (exclusive-free: `read_recursive`), the tree lock
    /// briefly; the caller holds no `PageMut` of this file.
    pub(crate) fn flush(&self, fs: &Arc<FileShared>, durable: bool) -> io::Result<()> {
        // One sync of a file at a time, and none while the flusher writes
        // it back (it skips the file while we hold this).
        let _flushing = fs.flushing.lock();
        // Taken over from a process that died holding it: nothing to
        // repair (see `write_dirty_file`).
        #[cfg(not(loom))]
        let _ = crate::sync::futex::took_over();
        // Shared for the whole sync: excludes only `set_len`. Writers and
        // eviction's write-back run concurrently.
        let size = fs.size.read(crate::size_lock::ALL_PAGES);
        // Acquire: pairs with the Release increments of `end_run` and
        // `cancel_writeback`, which follow the pages' re-tagging: a page
        // counted here is tagged for the take below.
        let mut undone = fs.wb_undone.load(Ordering::Acquire);
        let mut res = self.write_dirty(fs, &size, None);
        // Others' write-backs of pages we did not find dirty (the flusher
        // took their tags, eviction started them) end before we report.
        // One that failed, or that its starter gave up (the hook deferred
        // the page, a writer held it), left its pages dirty and tagged
        // again: write them ourselves (asking the hook ourselves), and look
        // again, until a round in which no other write-back was undone.
        // Then every page dirty at our call is on disk, written by us or by
        // a write-back that succeeded. Our own failure or deferral ends it,
        // and is what we return.
        while res.is_ok() {
            self.wait_writeback(fs);
            // Acquire: as above.
            let now = fs.wb_undone.load(Ordering::Acquire);
            if now == undone {
                break;
            }
            undone = now;
            res = self.write_dirty(fs, &size, None);
        }
        res = res.and_then(|()| self.persist(fs, size, durable));
        // A page a dead process held latched and dirty (5.14 L4): its
        // changes were lost; reported once, by a sync (a close leaves it
        // for the next), whatever else happened. Relaxed: the page's
        // removal happened before (its tree lock).
        let lost = if durable {
            fs.lost.swap(0, Ordering::Relaxed)
        } else {
            0
        };
        if lost != 0 {
            return Err(io::Error::other(format!(
                "{}: page {}: its unwritten changes were lost (a process that shared this cache died changing it)",
                fs.path.display(),
                lost - 1
            )));
        }
        res
    }

    /// [`Inner::write_dirty`] for the flusher, one `sweep` of `fs`: takes
    /// the size lock shared itself. Context: as
    /// `write_dirty`; no lock held. Skips (`Ok`) a file that a sync or
    /// close is flushing now.
    pub(crate) fn write_dirty_file(&self, fs: &Arc<FileShared>, sweep: Sweep) -> io::Result<()> {
        // Skipped while a sync holds it; taken over from a process that
        // died holding it (its sync or flusher's pass), or no one would
        // write this file by age again until a sync took it over. Nothing
        // to repair: the lock only keeps syncs and passes apart; what the
        // dead process left (its write-backs, the tags it took) is its
        // recovery's (5.14 W3).
        let Some(_flushing) = fs.flushing.try_lock_or_take_over() else {
            return Ok(());
        };
        #[cfg(not(loom))]
        let _ = crate::sync::futex::took_over();
        let size = fs.size.read(crate::size_lock::ALL_PAGES);
        self.write_dirty(fs, &size, Some(sweep))
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

    /// Best-effort write-back of every registered file (cache teardown).
    /// Context: may sleep (I/O); no lock held (cache teardown).
    pub(crate) fn flush_all(&self) {
        let files: Vec<_> = self.registry.read().by_id.values().cloned().collect();
        for fs in files {
            let _ = self.flush(&fs, false);
        }
    }
}
