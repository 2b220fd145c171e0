//! The guards a [`File`] hands out: [`PageRef`] (a pinned page),
//! [`PageRun`] (consecutive pages under one pin) and [`PageMut`] (a latched
//! page).

use super::File;
use crate::cache::RUN_MAX;
use crate::cache::{FrameLatch, FramePin};
use crate::frame::FrameNo;
use std::ops::{Deref, DerefMut};

/// A pinned page: its bytes do not change while it lives. Dereferences to
/// the whole page (`page_size` bytes; past end of file they are zero).
///
/// ```
/// use pagecache::{Config, OpenOptions, PageCache};
/// # fn main() -> std::io::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("pagecache-doc-ref-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let cache = PageCache::new(Config::default())?;
/// let file = cache.open_with(dir.join("ref.bin"), OpenOptions::new().read(true).write(true).create(true))?;
/// file.write_at(&[1u8; 4096 * 3], 0)?;
///
/// let page = file.page(1)?; // pinned: no copy, no system call
/// assert_eq!(page.index(), 1);
/// assert!(page.iter().all(|&b| b == 1));
/// drop(page); // a writer of page 1 would wait until here
///
/// let mut run = Vec::new(); // gang lookup: up to 16 consecutive pages
/// assert_eq!(file.pages(0, &mut run, 16)?, 3); // fewer only at end of file
/// # drop(run); drop(file); std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PageRef<'a> {
    pub(super) pin: FramePin<'a>,
    pub(super) index: u64,
}

impl PageRef<'_> {
    /// The page's index in its file.
    #[inline]
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The frame the page is in, for [`File::optimistic_hinted`] later
    /// (as [`PageMut::frame_hint`]).
    #[inline]
    pub fn frame_hint(&self) -> u32 {
        self.pin.frame()
    }
}

impl Deref for PageRef<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.pin
    }
}

/// Consecutive pages of one file, pinned together (see [`File::run`]).
/// `run.page(k)` is page `run.start() + k`; the bytes do not change while
/// the run lives.
///
/// ```
/// use pagecache::{Config, OpenOptions, PageCache};
/// # fn main() -> std::io::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("pagecache-doc-run-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let cache = PageCache::new(Config::default())?;
/// let file = cache.open_with(dir.join("run.bin"), OpenOptions::new().read(true).write(true).create(true))?;
/// file.write_at(&vec![7u8; 40 * 4096], 0)?;
/// let (mut pos, mut sum) = (0, 0u64);
/// loop {
///     let run = file.run(pos, 16)?;
///     if run.is_empty() {
///         break; // end of file
///     }
///     for page in run.iter() {
///         sum += page.iter().map(|&b| b as u64).sum::<u64>();
///     }
///     pos += run.len() as u64;
/// }
/// assert_eq!(sum, 7 * 40 * 4096);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub struct PageRun<'a> {
    pub(super) file: &'a File,
    pub(super) start: u64,
    pub(super) len: usize,
    /// The leaf whose run pins hold the pages, or `None`: one pin each.
    pub(super) leaf: Option<&'a crate::index::Node>,
    /// The frames of pages `start..start + len` (the rest unused).
    pub(super) frames: [FrameNo; RUN_MAX],
}

impl<'a> PageRun<'a> {
    /// The index of the first page.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// How many pages it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none (`start` was at or past end of file).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether one leaf pin holds the pages (cached pages), rather than
    /// one pin each (`start` had to be read, or was busy).
    pub fn one_pin(&self) -> bool {
        self.leaf.is_some()
    }

    /// The bytes of page `start() + k`. Panics if `k >= len()`.
    #[inline]
    pub fn page(&self, k: usize) -> &[u8] {
        assert!(k < self.len, "page {k} of a run of {}", self.len);
        // SAFETY: the frame is pinned for the run's life, by its own pin or
        // by the leaf's run pin (protocol 5.7: no writer changes it and it
        // is not freed or reused until `drop`).
        unsafe { self.file.cache.frames.bytes(self.frames[k]) }
    }

    /// The pages in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len).map(move |k| self.page(k))
    }
}

impl std::fmt::Debug for PageRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageRun")
            .field("start", &self.start)
            .field("len", &self.len)
            .field("leaf_pin", &self.leaf.is_some())
            .finish()
    }
}

impl Drop for PageRun<'_> {
    fn drop(&mut self) {
        let inner = self.file.inner();
        match self.leaf {
            Some(leaf) => inner.run_unpin(&self.file.shared, leaf, self.start, self.len, true),
            None => {
                for &f in &self.frames[..self.len] {
                    inner.release(f);
                }
            }
        }
    }
}

/// An exclusively latched page. Dereferences mutably to the whole page;
/// marked dirty when dropped if it was dereferenced mutably (or came from
/// [`File::page_new`], or [`PageMut::mark_dirty`] was called): a latch
/// taken only to read, or to decide not to write, leaves a clean page
/// clean.
///
/// ```
/// use pagecache::{Config, OpenOptions, PageCache};
/// # fn main() -> std::io::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("pagecache-doc-mut-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let cache = PageCache::new(Config::default())?;
/// let file = cache.open_with(dir.join("mut.bin"), OpenOptions::new().read(true).write(true).create(true))?;
/// file.set_len(4096)?;
/// {
///     let mut page = file.page_mut(0)?; // pins of page 0 wait meanwhile
///     page[..5].copy_from_slice(b"hello");
/// } // dirty now; `sync` writes it
/// assert_eq!(file.dirty_pages(), 1);
/// file.sync()?;
/// assert_eq!(file.dirty_pages(), 0);
/// # drop(file); std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PageMut<'a> {
    pub(super) latch: FrameLatch<'a>,
    pub(super) file: &'a File,
    pub(super) index: u64,
    /// The file's length when the latch was taken.
    pub(super) eof: u64,
    /// Dirty on release (written through, or new).
    pub(super) touched: bool,
}

impl PageMut<'_> {
    /// The page's index in its file.
    #[inline]
    pub fn index(&self) -> u64 {
        self.index
    }

    /// Marks the page dirty on release even if it is never dereferenced
    /// mutably (a caller that writes through [`PageMut::as_mut_ptr`]).
    #[inline]
    pub fn mark_dirty(&mut self) {
        self.touched = true;
    }

    /// Whether the page will be marked dirty on release.
    #[inline]
    pub fn is_dirtied(&self) -> bool {
        self.touched
    }

    /// The frame the page is in, for [`File::optimistic_hinted`] later
    /// (as [`Optimistic::frame_hint`](crate::Optimistic::frame_hint)): an
    /// index structure that records where a node it just made or changed
    /// lives can find it again without the index walk.
    #[inline]
    pub fn frame_hint(&self) -> u32 {
        self.latch.frame()
    }

    /// The page's bytes, writable by this holder alone while it lives,
    /// without marking the page dirty: a caller that writes through it must
    /// call [`PageMut::mark_dirty`] (the C ABI's latches).
    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.latch.as_mut_ptr()
    }
}

/// A latched page's parts outside its guard ([`PageMut::into_raw`]), for
/// a caller that keeps a latch in a struct of its own and gives it back
/// with [`PageMut::from_raw`] (the C ABI's `pc_pin`: a few words stored
/// and read back instead of the guard).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct RawLatch {
    frame: FrameNo,
    /// Marked dirty when released.
    pub touched: bool,
    eof: u64,
}

impl<'a> PageMut<'a> {
    /// The latch as its parts: still held (the page stays latched and in
    /// its write section) until [`PageMut::from_raw`] with the same file
    /// and index gives the guard back and that guard is dropped. Dropping
    /// the parts instead leaves the page latched for ever.
    #[doc(hidden)]
    #[inline]
    pub fn into_raw(self) -> RawLatch {
        let m = std::mem::ManuallyDrop::new(self);
        RawLatch {
            frame: m.latch.frame(),
            touched: m.touched,
            eof: m.eof,
        }
    }

    /// The file the page is of (for [`PageMut::from_raw`]).
    #[doc(hidden)]
    #[inline]
    pub fn file(&self) -> &'a File {
        self.file
    }

    /// The guard of a latch [`PageMut::into_raw`] took apart.
    ///
    /// # Safety
    /// `raw` came from `into_raw` of a latch of page `index` whose
    /// [`PageMut::file`] was `file`, and this is the only `from_raw` of it.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn from_raw(file: &'a File, index: u64, raw: RawLatch) -> PageMut<'a> {
        PageMut {
            latch: FrameLatch::adopt(&file.cache, raw.frame, Some((&file.shared, index))),
            file,
            index,
            eof: raw.eof,
            touched: raw.touched,
        }
    }
}

impl Deref for PageMut<'_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        &self.latch
    }
}

impl DerefMut for PageMut<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.touched = true;
        &mut self.latch
    }
}

impl Drop for PageMut<'_> {
    fn drop(&mut self) {
        if !self.touched {
            // Unchanged: release without DIRTY (bytes past the end are
            // still zero, as nothing was written).
            self.latch.keep_clean();
            return;
        }
        // Bytes past end of file must stay zero, including bytes written
        // past the end the holder found if another thread grew the file
        // meanwhile (they were past the end when written). The latch
        // (dropped after this) then ends the write: version even, DIRTY,
        // unlatch, tag.
        let len = self.file.len().min(self.eof);
        let ps = self.file.cache.page_size as u64;
        let start = self.index * ps;
        if len < start + ps {
            let keep = len.saturating_sub(start) as usize;
            // SAFETY: still latched with the version odd; the range ends at
            // the end of the frame. Atomic stores, as everywhere a frame's
            // bytes may race a stale optimistic reader (see `cache::copy`).
            unsafe { self.latch.zero(keep, ps as usize - keep) };
        }
    }
}
