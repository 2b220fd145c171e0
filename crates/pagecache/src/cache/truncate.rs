//! Protocol 5.6: truncate (`set_len` shorter), and `set_len` in general.
//!
//! ```text
//!  truncater (size lock exclusive)           readers / pin holders
//!  1. store the new length (Release): no     a lookup that pins before 3 keeps
//!     write-back after this writes past it   valid bytes until it releases;
//!  2. tree lock: clear every slot past the   one after sees REMOVED (5.1 step
//!     new end and orphan() its frame         3) or an empty slot: a miss past
//!     (REMOVED, DIRTY cleared, the cache's   EOF reads zeros
//!     reference dropped, one RMW); frames
//!     nobody pinned are freed now, pinned
//!     ones by their last release
//!  3. drop the tree lock; zero the tail of
//!     the new last page under its latch
//!  4. ftruncate; on failure remember the
//!     length, retried before the file grows
//! ```
//!
//! Waiting for pinned pages is wrong (their holders may wait for us): they
//! are marked and freed by their last release. No write-back can race:
//! write-back holds the size lock shared.

use super::{FileShared, FrameLatch, Inner};
use crate::error::context;
use crate::frame::state::Released;
use crate::sync::Ordering;
use std::io;

impl Inner {
    /// Retries a shrink whose `ftruncate` failed. Context: may sleep (I/O,
    /// the size lock exclusive); no lock held.
    pub(crate) fn retry_truncate(&self, fs: &FileShared) -> io::Result<()> {
        let mut size = fs.size.write();
        if let Some(t) = size.pending_truncate {
            let w = fs.write_fd.get().ok_or_else(|| {
                io::Error::new(io::ErrorKind::PermissionDenied, "no writable descriptor")
            })?;
            w.set_len(t)
                .map_err(|e| context(e, format!("{}: truncating to {t}", fs.path.display())))?;
            size.pending_truncate = None;
        }
        Ok(())
    }

    /// Removes every page at index >= `first` (orphaning pinned ones).
    /// Context: no sleep; takes the tree lock; callers hold the size lock
    /// exclusively or the file has no handle left.
    pub(crate) fn remove_pages_from(&self, fs: &FileShared, first: u64) {
        let mut victims = Vec::new();
        let mut to_free = Vec::new();
        {
            let mut g = fs.tree.lock();
            g.entries_from(&self.nodes, first, &mut victims);
            for &(index, f) in &victims {
                if g.remove(&self.nodes, index, f) && self.desc(f).orphan() == Released::Last {
                    to_free.push(f);
                }
            }
        }
        for f in to_free {
            self.free_frame(f);
        }
    }

    /// `File::set_len`. Context: may sleep (I/O, latch waits); takes the
    /// size lock exclusively; the caller holds no pin or latch of the new
    /// last page and no `PageMut` of this file (docs/locking.md).
    pub(crate) fn set_len(&self, fs: &FileShared, new_len: u64) -> io::Result<()> {
        if new_len > i64::MAX as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{}: length {new_len} too large", fs.path.display()),
            ));
        }
        let w = fs.write_fd.get().cloned().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: set_len through a read-only handle", fs.path.display()),
            )
        })?;
        let mut size = fs.size.write();
        // Acquire: exclusive size lock; pairs with writers' `fetch_max`.
        let old = fs.len.load(Ordering::Acquire);
        if let Some(t) = size.pending_truncate {
            w.set_len(t)
                .map_err(|e| context(e, format!("{}: truncating to {t}", fs.path.display())))?;
            size.pending_truncate = None;
        }
        if new_len >= old {
            w.set_len(new_len).map_err(|e| {
                context(e, format!("{}: extending to {new_len}", fs.path.display()))
            })?;
            // Release: readers that see the new length see the extension
            // (the file bytes are zero; no cached page covers them).
            fs.len.store(new_len, Ordering::Release);
            return Ok(());
        }
        // Shrink: the length first, so no write-back after this point writes
        // past the new end (write-backs read the length under their pin).
        // Release: pairs with the Acquire loads of write-back and `fill`.
        fs.len.store(new_len, Ordering::Release);
        let ps = self.page_size as u64;
        let first_gone = new_len.div_ceil(ps);
        self.remove_pages_from(fs, first_gone);
        // Zero the tail of the new last page if it is cached.
        if new_len % ps != 0 {
            let last = new_len / ps;
            while let Some(f) = self.find_get(fs, last)? {
                if !self.latch_pinned(f, fs.id, last) {
                    continue;
                }
                let latch = FrameLatch::new(self, f, None);
                let tail = (new_len % ps) as usize;
                // SAFETY: latched, drained, version odd: exclusive; the range
                // ends at the end of the frame.
                unsafe { latch.zero(tail, self.page_size - tail) };
                break;
            }
        }
        if let Err(e) = w.set_len(new_len) {
            size.pending_truncate = Some(new_len);
            return Err(context(
                e,
                format!("{}: truncating to {new_len}", fs.path.display()),
            ));
        }
        Ok(())
    }
}
