//! [`Optimistic`]: a view of a cached page with no pin and no shared write,
//! for index structures (protocol 5.8, `cache/optimistic.rs`).
//!
//! # Why the racy view is sound
//!
//! A view's loads may run while a latch holder writes the same bytes. Two
//! kinds of writer exist:
//!
//! * the cache's own (`write_at`, a fill, `set_len`'s zeroing, `page_new`):
//!   per-word relaxed atomic stores (`cache::copy`). Atomic loads racing
//!   atomic stores are no data race in Rust's memory model: every load
//!   returns some value that was stored, possibly a mix of old and new
//!   words, which validation rejects.
//! * a [`PageMut`] holder, which writes through `&mut [u8]` with plain
//!   stores. An atomic load racing a plain store is a data race, which
//!   Rust's model (C++20's) calls undefined behaviour. This is the window
//!   every seqlock over plain data has (crossbeam's `AtomicCell`, the
//!   Linux kernel's, vmcache's and LeanStore's optimistic readers), and
//!   RFC 3301's atomic-per-byte copies are the language's planned remedy.
//!   We choose the following and argue it rather than hide it:
//!   - The reader never turns racy bytes into a reference or a pointer:
//!     on x86-64 every load is inline assembly (one `mov` per 1-8 bytes at
//!     any alignment, one `rep movsb` for copies of 256 bytes or more),
//!     which the compiler treats as an opaque access; elsewhere and under
//!     loom, relaxed atomic loads (single bytes at unaligned edges). It
//!     returns plain integers, which the caller treats as untrusted until
//!     [`Optimistic::validate`]: a bounds check comes first on every
//!     access ([`Optimistic::load_u64`] of a garbage offset reads nothing),
//!     so a torn value cannot make the reader touch memory outside the
//!     frame.
//!   - The writer's plain stores happen only between its Release fence
//!     (version odd) and its Release store (version even), with the frame
//!     latched and drained: the compiler of the writer may reorder, merge or
//!     split those stores, but not move them out of that section, and it
//!     cannot know a reader exists (it is in another function, usually
//!     another crate), so it cannot exploit the race. On the hardware we
//!     run on (x86-64, AArch64) every byte load returns a byte some store
//!     wrote: the race is benign exactly as the seqlock argument needs.
//!   - Whatever a load returned is discarded unless the version is
//!     unchanged afterwards (Acquire fence, then re-load): a value that a
//!     writer's store produced always comes with a failed validation.
//!
//!   The alternative that is sound in the model today, making `PageMut`
//!   writes atomic too (no `DerefMut` to `&mut [u8]`), would break every
//!   user of `PageMut` and cost 2x on page-sized writes (`cache::copy`).
//!
//! The frame's memory and descriptor stay valid whatever happens to the
//! page after the view was taken (frames are never unmapped while the
//! cache lives and descriptors are type-stable), so a view of an evicted
//! or reused frame reads wrong bytes, never unmapped memory.

use super::{File, PageMut};
use crate::cache::{atomic_load_copy, atomic_load_small, FrameLatch};
use crate::frame::state::FrameDesc;
use crate::frame::FrameNo;
use std::cell::Cell;
use std::io;

/// A view of a cached page taken without a pin: no reference, no shared
/// write on a hit. Loads may return bytes that are being changed; they
/// count only if [`Optimistic::validate`] returns true afterwards.
/// [`Optimistic::upgrade`] turns the view into a [`PageMut`] if and only
/// if the page is unchanged since the view was taken.
///
/// This is how B-trees on vmcache, LeanStore and Umbra descend (optimistic
/// lock coupling): read a node, validate, go on to the child, and restart
/// from the root when a validation fails. A view holds nothing, so it
/// delays no writer, eviction or truncate, and dropping it does nothing.
///
/// ```
/// use pagecache::{Config, OpenOptions, PageCache};
/// # fn main() -> std::io::Result<()> {
/// # let dir = std::env::temp_dir().join(format!("pagecache-doc-opt-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// let cache = PageCache::new(Config::default())?;
/// let file = cache.open_with(dir.join("opt.bin"), OpenOptions::new().read(true).write(true).create(true))?;
/// file.page_new(0)?[..8].copy_from_slice(&7u64.to_ne_bytes());
///
/// let counter = loop {
///     let o = file.optimistic(0)?; // a hit: no pin, nothing written
///     let n = o.load_u64(0);
///     if !o.validate() {
///         continue; // a writer came between: restart
///     }
///     match o.upgrade() {
///         Ok(mut page) => {
///             page[..8].copy_from_slice(&(n + 1).to_ne_bytes());
///             break n + 1;
///         }
///         Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
///         Err(e) => return Err(e),
///     }
/// };
/// assert_eq!(counter, 8);
/// # drop(file); std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Optimistic<'a> {
    file: &'a File,
    /// The frame's descriptor and bytes, looked up once: loads and
    /// validation touch nothing else.
    desc: &'a FrameDesc,
    base: *const u8,
    len: usize,
    frame: FrameNo,
    version: u64,
    index: u64,
    /// An access fell outside the page (a torn offset, or a bug).
    oob: Cell<bool>,
}

// SAFETY: `base` points into the cache's frame arena, which lives as long
// as the borrowed `File` and which any thread may read with atomic loads
// (all the view does with it); the rest is `Send` already.
unsafe impl Send for Optimistic<'_> {}

/// What [`File::fast_view`] returns: where an inline hinted view reads.
#[doc(hidden)]
#[cfg(not(loom))]
#[derive(Debug, Clone, Copy)]
pub struct FastView {
    /// Frame 0's descriptor (frame `f`'s is `f * DESC_WORDS` words on).
    pub descs: *const u64,
    /// Frame 0's bytes.
    pub frames: *const u8,
    /// Frames in the arena.
    pub nframes: u64,
    /// The file's id, as its pages' descriptors record it.
    pub owner: u64,
    /// log2 of the page size.
    pub page_shift: u32,
    /// False when the cache runs hooks on hits (the lab's baselines): take
    /// the call.
    pub usable: bool,
}

impl<'a> Optimistic<'a> {
    /// The page's index in its file.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The page size: loads are in bounds below it.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a page is never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Where the page is cached: give it to [`File::optimistic_hinted`]
    /// to find the page again without the index walk while it stays in
    /// that frame.
    pub fn frame_hint(&self) -> u32 {
        self.frame
    }

    /// What [`Optimistic::validate`] compares, for a caller that validates
    /// the view itself (the C ABI's inline `pc_optimistic_valid`): the
    /// addresses of the frame's state word and version, and the version
    /// the view was taken at. The view is valid while (1) after an Acquire
    /// fence, (2) an Acquire load of the state word has
    /// [`internals::STATE_REMOVED`](crate::internals::STATE_REMOVED)
    /// clear and (3) a load of the version, after it, equals the third
    /// value. Both words stay mapped for the cache's life.
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn validation_words(&self) -> (*const u64, *const u64, u64) {
        let (s, v) = self.desc.validation_words();
        (s, v, self.version)
    }

    /// The frame's address, for callers that read the bytes themselves
    /// (the C ABI). Reads through it race writers exactly as the view's
    /// loads do (see the module docs): use atomic or volatile reads, and
    /// trust nothing read before [`Optimistic::validate`] returns true. The
    /// memory stays mapped for the cache's life.
    pub fn as_ptr(&self) -> *const u8 {
        self.base
    }

    /// Asks the CPU to start loading bytes `[off, off + len)` of the page
    /// into its caches, so that loads of them that follow (a binary search
    /// over a node's slots, say) do not each wait for memory in turn. A
    /// hint: clipped to the page, no effect on what loads return.
    #[inline]
    pub fn prefetch(&self, off: usize, len: usize) {
        self.file.inner().frames.prefetch(self.frame, off, len);
    }

    /// `n` bytes at `off` in bounds: their address, or `None` (and the view
    /// remembers it, see `validate`).
    #[inline(always)]
    fn at(&self, off: usize, n: usize) -> Option<*const u8> {
        match off.checked_add(n) {
            Some(end) if end <= self.len => {
                // SAFETY: off + n <= page size: inside the frame.
                Some(unsafe { self.base.add(off) })
            }
            _ => {
                self.oob.set(true);
                None
            }
        }
    }

    /// The `N` bytes at `off` as the low bytes of a little-endian word.
    #[inline(always)]
    fn load<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        if let Some(p) = self.at(off, N) {
            let w = self.desc.witness();
            // SAFETY: in bounds of the frame (`at`); one or two relaxed
            // atomic loads of the aligned words covering the bytes, which
            // race writers soundly as argued in the module docs.
            let v = unsafe { atomic_load_small::<N>(w, p) };
            b.copy_from_slice(&v.to_le_bytes()[..N]);
        }
        b
    }

    /// The byte at `off`. Out of bounds reads 0 (see `validate`).
    #[inline]
    pub fn load_u8(&self, off: usize) -> u8 {
        self.load::<1>(off)[0]
    }

    /// The native-endian `u16` at `off` (any alignment). Out of bounds
    /// reads 0 (see `validate`).
    #[inline]
    pub fn load_u16(&self, off: usize) -> u16 {
        u16::from_ne_bytes(self.load(off))
    }

    /// The native-endian `u32` at `off` (any alignment). Out of bounds
    /// reads 0 (see `validate`).
    #[inline]
    pub fn load_u32(&self, off: usize) -> u32 {
        u32::from_ne_bytes(self.load(off))
    }

    /// The native-endian `u64` at `off` (any alignment: one or two word
    /// loads). Out of bounds reads 0 (see `validate`).
    #[inline]
    pub fn load_u64(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.load(off))
    }

    /// Copies `buf.len()` bytes at `off` into `buf`. Out of bounds copies
    /// nothing and zeroes `buf` (see `validate`).
    #[inline]
    pub fn copy_to(&self, off: usize, buf: &mut [u8]) {
        match self.at(off, buf.len()) {
            Some(p) => {
                let w = self.desc.witness();
                // SAFETY: as in `load`.
                unsafe { atomic_load_copy(w, buf, p) }
            }
            None => buf.fill(0),
        }
    }

    /// Whether nothing changed the page since the view was taken: no latch
    /// holder wrote it, its frame was not reused, and no truncate cut it
    /// off (a page cut off while pinned stays in its frame until the pin
    /// goes; its views fail from the cut on, even after the file grows
    /// back over its index). Only then do the view's earlier loads count.
    /// Writes nothing.
    ///
    /// # Panics
    /// If a load fell outside the page and the page did not change: the
    /// offset came from bytes that were valid, so the caller's page layout
    /// is wrong (as indexing past a slice's end would be). A load outside
    /// the page on a page that did change is expected (a torn offset) and
    /// just fails validation.
    #[inline]
    pub fn validate(&self) -> bool {
        let ok = self.desc.read_validate(self.version);
        if ok && self.oob.get() {
            self.out_of_bounds();
        }
        ok
    }

    #[cold]
    #[inline(never)]
    fn out_of_bounds(&self) -> ! {
        panic!(
            "{}: page {}: an optimistic load fell outside the page ({} bytes) although the page did not change",
            self.file.path().display(),
            self.index,
            self.len()
        )
    }

    /// The page latched for writing if and only if it is unchanged since
    /// the view was taken (else an `Interrupted` error: restart). Waits
    /// for pins of the page to drain, as [`File::page_mut`] does, but never
    /// for another latch holder: of two upgrades racing, at most one
    /// succeeds. Not throttled at the dirty limit (the caller may hold
    /// other latches). `PermissionDenied` through a read-only handle.
    ///
    /// # Panics
    /// As [`Optimistic::validate`], for a load outside an unchanged page.
    pub fn upgrade(self) -> io::Result<PageMut<'a>> {
        self.upgrade_as(false)
    }

    /// [`Optimistic::upgrade`], but a refusal because another holder has
    /// the page latched first waits for that latch's release (a short
    /// spin, then a park), then fails (`Interrupted`: restart). For a
    /// caller that would restart at once and meet the same latch again:
    /// with more threads than CPUs, a latch holder that was preempted
    /// would otherwise have every other thread restart over and over
    /// until it runs again.
    ///
    /// The caller must hold no pin or latch of any page (it waits for a
    /// latch, lock rule 3: that holder might wait for one of them).
    ///
    /// # Panics
    /// As [`Optimistic::validate`], for a load outside an unchanged page.
    pub fn upgrade_or_wait(self) -> io::Result<PageMut<'a>> {
        self.upgrade_as(true)
    }

    /// The two upgrades (5.8 U1-U5; with `wait`, U0).
    #[inline]
    fn upgrade_as(self, wait: bool) -> io::Result<PageMut<'a>> {
        let file = self.file;
        file.check_writable("upgrade")?;
        if self.oob.get() {
            // Fails (a torn offset: restart) or panics (a layout bug).
            self.validate();
            return Err(io::ErrorKind::Interrupted.into());
        }
        let frame = file
            .inner()
            .optimistic_upgrade(&file.shared, self.index, self.frame, self.version, wait)
            .ok_or(io::ErrorKind::Interrupted)?;
        Ok(file.latched(frame, self.index, false))
    }
}

impl File {
    /// An optimistic view of page `index` (see [`Optimistic`]): no pin and
    /// no shared write on a hit; a miss reads the page in first (and waits
    /// for a writer of the page, as [`File::page`] does).
    /// `UnexpectedEof` at or past the last page.
    #[inline]
    pub fn optimistic(&self, index: u64) -> io::Result<Optimistic<'_>> {
        self.check_page(index)?;
        let (frame, version) = self.inner().optimistic_begin(&self.shared, index)?;
        Ok(self.view(frame, version, index))
    }

    /// Asks the CPU to start loading bytes `[off, off + len)` of frame
    /// `hint` into its caches, before [`File::optimistic_hinted`] of the
    /// same hint checks the frame's descriptor: the two loads from memory
    /// then overlap. A hint about a hint: no I/O, no effect on any page,
    /// nothing for a frame number out of range. `optimistic_hinted` does
    /// not prefetch by itself: a caller that only validates (or reads one
    /// word) would pay for lines it never reads (0.5 ns of a 7 ns view in
    /// the micro-benchmark); one that reads the node's slots next says
    /// which bytes.
    #[inline]
    pub fn prefetch_hinted(&self, hint: u32, off: usize, len: usize) {
        self.inner().frames.prefetch(hint, off, len);
    }

    /// A view of page `index` if it is still cached in frame `hint` (from
    /// [`Optimistic::frame_hint`] of an earlier view of the page) and no
    /// writer holds its latch, else `None`: then call [`File::optimistic`]
    /// (which waits for the writer). Never reads, never waits,
    /// writes nothing shared: a good hint skips the cache's index walk
    /// (what vmcache's page table and LeanStore's swizzled pointers save),
    /// a stale or made-up one costs two loads. An index structure keeps a
    /// hint per page it visits, and follows a child it read from a view
    /// it has not validated yet only through this call (no I/O for a
    /// number that may be torn).
    #[inline]
    pub fn optimistic_hinted(&self, index: u64, hint: u32) -> Option<Optimistic<'_>> {
        // No end-of-file check: a page found live with this file's
        // identity is below the end (truncate removes pages first).
        let (frame, version) = self.inner().optimistic_hinted(&self.shared, index, hint)?;
        Some(self.view(frame, version, index))
    }

    /// A view of page `index` if it is cached and not latched right now,
    /// else `None`: never reads, never waits (the cache's index walk, then
    /// [`File::optimistic_hinted`]'s checks). For an index structure
    /// descending from a task that must not block: on `None` it awaits
    /// [`File::page_async`] (or [`File::optimistic_async`]) of the page and
    /// descends again, as the B+tree's `get_async` does.
    /// `UnexpectedEof` at or past the last page.
    #[inline]
    pub fn try_optimistic(&self, index: u64) -> io::Result<Option<Optimistic<'_>>> {
        self.check_page(index)?;
        let inner = self.inner();
        Ok(self
            .shared
            .tree
            .lookup(&inner.nodes, index)
            .and_then(|f| inner.optimistic_hinted(&self.shared, index, f))
            .map(|(frame, version)| self.view(frame, version, index)))
    }

    /// Pins page `index` unless that would wait for another holder: `None`
    /// if a writer holds it (or is reading it in). A miss is read (waits
    /// for the read only). For index structures that hold other pages and
    /// must back off rather than wait. `UnexpectedEof` at or past the last
    /// page.
    pub fn try_pin(&self, index: u64) -> io::Result<Option<super::PageRef<'_>>> {
        self.check_page(index)?;
        Ok(self
            .inner()
            .try_pin(&self.shared, index)?
            .map(|f| super::PageRef {
                pin: crate::cache::FramePin::new(&self.cache, f),
                index,
            }))
    }

    /// Latches page `index` unless that would wait for another holder:
    /// `None` if another thread latches or pins it (or a run holds it). A
    /// miss is read. Not throttled at the dirty limit. `UnexpectedEof` at
    /// or past the last page, `PermissionDenied` through a read-only
    /// handle.
    #[inline]
    pub fn try_latch(&self, index: u64) -> io::Result<Option<PageMut<'_>>> {
        self.check_writable("try_latch")?;
        self.check_page(index)?;
        Ok(self
            .inner()
            .try_latch(&self.shared, index)?
            .map(|f| self.latched(f, index, false)))
    }

    /// A new page at `index` that nobody has written: at or past the end of
    /// file, or in a hole past every byte that may be on disk and not
    /// cached (another thread's `page_new` of a later page, or `set_len`,
    /// grew the file over it). Latched, zeroed, and dirty when released;
    /// the file grows to cover it at once. Nothing is read and no system
    /// call is made (the length reaches the disk at the next `sync`).
    /// `AlreadyExists` if the page is cached (another thread created it
    /// first) or its bytes may be on disk (below the file's length when it
    /// was opened, or written back since), `PermissionDenied` through a
    /// read-only handle. Not throttled at the dirty limit.
    ///
    /// ```
    /// use pagecache::{Config, OpenOptions, PageCache};
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("pagecache-doc-new-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let cache = PageCache::new(Config::default())?;
    /// let file = cache.open_with(dir.join("new.bin"), OpenOptions::new().read(true).write(true).create(true))?;
    /// let mut node = file.page_new(3)?; // pages 0-2 are a hole of zeros
    /// node[0] = 1;
    /// drop(node);
    /// assert_eq!(file.len(), 4 * 4096);
    /// assert_eq!(file.page_new(3).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    /// let hole = file.page_new(1)?; // nobody wrote page 1: a new page too
    /// drop(hole);
    /// # drop(file); std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub fn page_new(&self, index: u64) -> io::Result<PageMut<'_>> {
        self.check_writable("page_new")?;
        let frame = self.inner().page_new(&self.shared, index)?;
        Ok(self.latched(frame, index, true))
    }

    /// A view of page `index` in `frame` at `version`.
    #[inline(always)]
    pub(super) fn view(&self, frame: FrameNo, version: u64, index: u64) -> Optimistic<'_> {
        let inner = self.inner();
        Optimistic {
            file: self,
            desc: inner.desc(frame),
            base: inner.frames.ptr(frame),
            len: inner.page_size,
            frame,
            version,
            index,
            oob: Cell::new(false),
        }
    }

    /// The addresses and numbers an inline hinted view reads (the C ABI's
    /// `pc_page_optimistic_fast`, which takes a view without a call where
    /// [`File::optimistic_hinted`] would find the page in its frame): frame
    /// `f`'s descriptor is the [`internals::DESC_WORDS`] words from
    /// `descs + f * DESC_WORDS` (state word 0, version 1, owner 2, page
    /// index 3), its bytes `1 << page_shift` from `frames + (f <<
    /// page_shift)`. The reader does what `optimistic_hinted` does (5.8
    /// O2-O3 on the hinted frame): `f < nframes`; the version, acquire,
    /// even; the state word, acquire, with `STATE_UPTODATE` set and
    /// `STATE_REMOVED` clear; owner and index equal to `owner` and the
    /// page's index; and, as it cannot set the accessed bit nor run the
    /// cache's hit hooks, it takes the call instead when `STATE_ACCESSED`
    /// is clear or `usable` is false. Its view is then `(f, version)`, to
    /// validate as [`Optimistic::validate`] does and to rebuild with
    /// [`File::view_at`]. Everything stays mapped for the cache's life.
    ///
    /// [`internals::DESC_WORDS`]: crate::internals::DESC_WORDS
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn fast_view(&self) -> FastView {
        let inner = self.inner();
        FastView {
            descs: std::ptr::from_ref(inner.desc(0)).cast::<u64>(),
            frames: inner.frames.ptr(0).cast_const(),
            nframes: inner.frames.len() as u64,
            owner: self.shared.id,
            page_shift: inner.shift,
            usable: inner.hooks == 0,
        }
    }

    /// The view of page `index` at `version` in `frame`, as
    /// [`File::fast_view`]'s reader took it (the C ABI keeps views as these
    /// three numbers), or `None` if the frame holds another page now (a
    /// view that would no longer validate). A version the frame never had
    /// while it held this page only makes a view that fails validation.
    #[doc(hidden)]
    #[inline]
    pub fn view_at(&self, frame: FrameNo, version: u64, index: u64) -> Option<Optimistic<'_>> {
        let inner = self.inner();
        if frame as usize >= inner.frames.len() {
            return None;
        }
        // Relaxed: a change of identity makes the version odd, then new;
        // the view validates only if the version is `version` still.
        (inner.desc(frame).identity() == (self.shared.id, index))
            .then(|| self.view(frame, version, index))
    }

    /// Wraps a latched, drained frame of page `index` in a [`PageMut`];
    /// `touched`: dirty on release even if never written through.
    #[inline]
    pub(super) fn latched(&self, frame: FrameNo, index: u64, touched: bool) -> PageMut<'_> {
        PageMut {
            latch: FrameLatch::new(&self.cache, frame, Some((&self.shared, index))),
            // With the latch held: the page's end of file as the holder
            // found it (bytes past it must read as zero when released).
            eof: self.len(),
            file: self,
            index,
            touched,
        }
    }
}
