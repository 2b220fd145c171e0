//! What tools and tests ask of a segment: its processes, its files, its
//! frames in use (`pagecache shared NAME`, `tests/segment.rs`).

use super::{alive, death, Segment, SharedFile, TableId};
use crate::cache::file_table::FileTable;
use crate::frame::state::FrameDesc;
use std::io;
use std::sync::atomic::Ordering;

impl Segment {
    /// The processes attached now (pid, whether it still runs), this one
    /// included.
    pub fn processes(&self) -> Vec<(u32, bool)> {
        self.header()
            .procs
            .iter()
            .filter_map(|p| {
                // Acquire: pairs with A2's CAS and store.
                let pid = p.pid.load(Ordering::Acquire);
                // (A slot being recovered is a dead process's, leaving.)
                (pid != 0 && pid & death::RECOVERING == 0)
                    .then(|| (pid, alive(pid, p.start.load(Ordering::Acquire))))
            })
            .collect()
    }

    /// Slots of dead processes whose recovery is under way (5.14 D5: each
    /// freed once everything its process held is given back).
    pub fn recovering(&self) -> usize {
        self.header()
            .procs
            .iter()
            // Acquire: pairs with the recovery's Release store freeing it.
            .filter(|p| p.pid.load(Ordering::Acquire) & death::RECOVERING != 0)
            .count()
    }

    /// The segment's file table.
    pub(super) fn file_table(&self) -> FileTable {
        // SAFETY: the files' table, sized and aligned by `layout`, zeroed
        // at creation and used only through file tables; it lives as long
        // as the mapping, which outlives the returned table (the callers
        // drop it before returning); our process slot is ours alone.
        unsafe { FileTable::over(self.table(TableId::Files), self.slot) }
    }

    /// Opens the file `(device, inode)` in the cache's file table, as a
    /// process does when it opens the file: its id, and whether this open
    /// made its entry (`len` and `max_len` are its length and limit then).
    /// Tools and tests; a cache opens files through its registry.
    pub fn open_file(&self, ident: (u64, u64), len: u64, max_len: u64) -> io::Result<(u64, bool)> {
        let t = self.file_table();
        let o = t.open(ident, len, max_len, (0, 0))?;
        Ok((o.slot.id, o.created))
    }

    /// Gives back one open of file `id`; the last one anywhere frees its
    /// entry (returns true). Tools and tests, as [`Segment::open_file`],
    /// and only for files no cache holds pages of (a cache drops a file's
    /// pages between its last close and the entry's release).
    pub fn close_file(&self, id: u64) -> io::Result<bool> {
        let t = self.file_table();
        let last = t.close(id)?;
        if last {
            // No page of it to drop: the segment alone caches nothing.
            t.release(id)?;
        }
        Ok(last)
    }

    /// Frames holding a page now, and of those the dirty ones (a snapshot
    /// of every descriptor's state word: no lock, so a dead process's locks
    /// do not stop it). Tools.
    pub fn frames_in_use(&self) -> (u64, u64) {
        let d = self.table(TableId::Descs).cast::<FrameDesc>();
        let (mut used, mut dirty) = (0, 0);
        for i in 0..self.geometry().frames as usize {
            // SAFETY: in bounds of the descriptors' table, initialised by
            // the creator, alive as long as the mapping.
            let s = unsafe { &*d.as_ptr().add(i) }.snapshot();
            used += u64::from(s.refs() > 0);
            dirty += u64::from(s.is_dirty());
        }
        (used, dirty)
    }

    /// The pid of the process whose flusher holds the age lease (writes
    /// pages past the age bound for every process: `cache/shared.rs`), if
    /// one does. Tools.
    pub fn age_flusher(&self) -> Option<u32> {
        // SAFETY: the words' table, sized and aligned for `Words` by
        // `layout`, initialised by the creator, alive as long as the
        // mapping; read through its atomics only.
        let words = unsafe {
            &*self
                .table(TableId::Words)
                .cast::<crate::cache::Words>()
                .as_ptr()
        };
        // Acquire: pairs with the lease's CAS.
        let tag = words.age_flusher.load(Ordering::Acquire);
        let p = self
            .header()
            .procs
            .get(death::slot_of_tag(tag))
            .filter(|_| tag != 0)?;
        // Acquire: as `processes`.
        let pid = p.pid.load(Ordering::Acquire);
        (pid != 0 && pid & death::RECOVERING == 0).then_some(pid)
    }

    /// Runs `f` holding the file table's lock (tests: a process killed
    /// while it holds a segment lock).
    #[doc(hidden)]
    pub fn debug_with_files_locked(&self, f: impl FnOnce()) {
        self.file_table().with_locked(f)
    }

    /// Opens of file `id` by every process (0: not open).
    pub fn file_opens(&self, id: u64) -> u32 {
        self.file_table().opens(id)
    }

    /// The files open in the cache now (device, inode, id, opens by all
    /// processes, length), or an error if the file table's lock stays held
    /// (by a process that died holding it, say): inspection never waits.
    pub fn files(&self) -> io::Result<Vec<SharedFile>> {
        let l = self.file_table().list().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::WouldBlock,
                format!(
                    "shared cache {}: its file table stays locked",
                    self.path.display()
                ),
            )
        })?;
        Ok(l.into_iter()
            .map(|f| SharedFile {
                device: f.ident.0,
                inode: f.ident.1,
                id: f.id,
                opens: f.opens,
                len: f.len,
            })
            .collect())
    }
}
