//! Layer 1, frames: one arena of page-sized frames and their descriptors.
//!
//! The arena is a single anonymous mapping of `nframes * page_size` bytes,
//! made once when the cache is created (with `MADV_HUGEPAGE`, so the kernel
//! can back it with transparent huge pages and the TLB covers more of it;
//! on cold memory the fault-ahead helper faults stretches in with small
//! pages and collapses them later, `ahead.rs`).
//! Frame `f` is the bytes at `base + f * page_size`. [`ARENA_SLACK`]
//! bytes of readable zeros follow the last frame (an optimistic reader,
//! C's above all, may read a little past a page through a torn offset
//! before its validation fails; past the arena that would fault). Next to
//! it lives an array of [`FrameDesc`](state::FrameDesc), one per frame,
//! never freed while the cache lives (type-stable; see `state`).
//!
//! Memory overhead per frame: 64 bytes of descriptor (one cache line, so
//! pins of different frames never share a line) plus the index's share
//! (a 64-way leaf node of 640 bytes covers 64 pages: 10 bytes a page for a
//! dense file).

mod ahead;
mod desc;
#[cfg(not(loom))]
pub(crate) mod ledger;
pub mod state;

pub mod alloc;
mod stacks;

/// Frame number: index into the arena and the descriptor array.
pub type FrameNo = u32;

/// Readable bytes mapped after the cache's last frame (which anonymous
/// regions share): an optimistic reader that reads past a page through a
/// torn offset (as C readers of `pc_optimistic::data` may, before their
/// validation fails) reads zeros there instead of faulting. 64 KiB, so
/// that any 16-bit offset plus a small read from the last frame's end
/// lands in it; faulted in as the kernel's shared zero page when read,
/// never written, never faulted ahead. Reads past a page count only if
/// the view validates, which it never does for a torn offset.
pub const ARENA_SLACK: usize = 64 << 10;

pub use arena::FrameTable;
#[cfg(not(loom))]
pub(crate) use arena::{map_huge, map_table};

mod arena {
    use super::state::FrameDesc;
    use std::io;
    use std::ptr::NonNull;

    use super::FrameNo;

    /// The arena of frames plus their descriptors. Both are fixed for the
    /// life of the cache.
    #[derive(Debug)]
    pub struct FrameTable {
        base: NonNull<u8>,
        map_len: usize,
        page_size: usize,
        page_shift: u32,
        descs: Descs,
        /// Whether the arena and the descriptors live in memory someone
        /// else maps (a shared cache's segment): never unmapped here, never
        /// faulted ahead (`fault_ahead` is then a no-op).
        placed: bool,
        /// Faults the arena in ahead of use (`None`: small, populated, or
        /// under loom or Miri). Dropped before the arena is unmapped.
        ahead: Option<super::ahead::FaultAhead>,
        /// A placed arena's frames this process has mapped in, a bit each
        /// (`map_in`; empty for a private arena).
        mapped: Box<[std::sync::atomic::AtomicU64]>,
    }

    /// Anonymous mapping with `MADV_HUGEPAGE`: random lookups over a large
    /// cache touch descriptors (and frames) all over; huge pages keep the
    /// TLB from adding a page walk to each of those misses. A mapping of
    /// 2 MiB or more starts on a 2 MiB boundary (mapped 2 MiB longer, the
    /// ends trimmed), so that each aligned 2 MiB of it can be one huge page.
    #[cfg_attr(loom, allow(dead_code))] // (its user, `ahead`, is off under loom)
    pub(crate) fn map_huge(len: usize, what: &str) -> io::Result<NonNull<u8>> {
        map_with(len, what, false)
    }

    /// [`map_huge`] for the cache's own tables (the frames, their
    /// descriptors, the index nodes): private, or shared memory (shmem,
    /// as a cache shared by processes must use) when the environment
    /// variable `PAGECACHE_ARENA` is `shared`, for an A/B of what shared
    /// memory costs the hit path (`docs/benchmarks.md`, "Shared memory").
    pub(crate) fn map_table(len: usize, what: &str) -> io::Result<NonNull<u8>> {
        map_with(len, what, arena_shared()?)
    }

    /// `PAGECACHE_ARENA`: unset, empty or `private` -> false, `shared` ->
    /// true, anything else an error naming the variable.
    fn arena_shared() -> io::Result<bool> {
        match std::env::var("PAGECACHE_ARENA").as_deref() {
            Ok("") | Ok("private") | Err(_) => Ok(false),
            Ok("shared") => Ok(true),
            Ok(other) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("PAGECACHE_ARENA={other:?}: expected \"private\" or \"shared\""),
            )),
        }
    }

    fn map_with(len: usize, what: &str, shared: bool) -> io::Result<NonNull<u8>> {
        const HUGE: usize = 2 << 20;
        // (No padding for a length that would overflow: mmap refuses it.)
        let pad = if (HUGE..=usize::MAX - HUGE).contains(&len) && !cfg!(miri) {
            HUGE
        } else {
            0
        };
        // SAFETY: anonymous mapping (private, or shared memory no other
        // process maps) with no address hint; the result is checked
        // against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + pad,
                libc::PROT_READ | libc::PROT_WRITE,
                // (Miri supports only private anonymous mappings.)
                if shared {
                    libc::MAP_SHARED
                } else {
                    libc::MAP_PRIVATE
                } | libc::MAP_ANONYMOUS
                    | if cfg!(miri) { 0 } else { libc::MAP_NORESERVE },
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("mapping {what} ({len} bytes): {e}"),
            ));
        }
        let p = if pad > 0 {
            let head = (p as usize).next_multiple_of(HUGE) - p as usize;
            // SAFETY: both ranges lie inside the mapping just made (head <
            // pad, tail past `len`), start on page boundaries (mmap's
            // result is page-aligned, so is a 2 MiB boundary), and nothing
            // refers to them; what stays covers `len` bytes from an aligned
            // start, as `munmap(start, len)` will unmap it.
            unsafe {
                if head > 0 {
                    libc::munmap(p, head);
                }
                let start = p.cast::<u8>().add(head);
                // The tail from the first page boundary past `len` (the
                // page `len` ends in, if it ends mid-page, stays).
                let end = p as usize + len + pad;
                let tail = (start as usize + len).next_multiple_of(4096);
                if end > tail {
                    libc::munmap(tail as *mut libc::c_void, end - tail);
                }
                start.cast::<libc::c_void>()
            }
        } else {
            p
        };
        // MADV_HUGEPAGE is advice; failure (no THP support) is harmless
        // (and Miri has no madvise).
        if !cfg!(miri) {
            // SAFETY: `p` is the mapping just made, of `len` bytes.
            unsafe {
                libc::madvise(p, len, libc::MADV_HUGEPAGE);
            }
        }
        // SAFETY: mmap succeeded, so `p` is non-null.
        Ok(unsafe { NonNull::new_unchecked(p.cast()) })
    }

    /// The descriptor array, in its own huge-page mapping.
    #[derive(Debug)]
    struct Descs {
        ptr: NonNull<FrameDesc>,
        len: usize,
        /// In memory someone else maps: not unmapped here.
        placed: bool,
    }

    impl std::ops::Deref for Descs {
        type Target = [FrameDesc];
        fn deref(&self) -> &[FrameDesc] {
            // SAFETY: `len` descriptors were initialised in `new` and live
            // until `drop`.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
    }

    impl Drop for Descs {
        fn drop(&mut self) {
            if self.placed {
                return;
            }
            // SAFETY: unmapping exactly the mapping made in `FrameTable::new`;
            // FrameDesc has no destructor.
            unsafe {
                libc::munmap(
                    self.ptr.as_ptr().cast(),
                    self.len * std::mem::size_of::<FrameDesc>(),
                );
            }
        }
    }

    // SAFETY: the arena is plain memory shared by design; every access to a
    // frame's bytes is governed by the frame's state word (pins, latch,
    // seqlock), which is what makes sharing across threads sound.
    unsafe impl Send for FrameTable {}
    // SAFETY: as above.
    unsafe impl Sync for FrameTable {}

    impl FrameTable {
        /// Maps `nframes` frames of `page_size` bytes (a power of two).
        pub fn new(nframes: usize, page_size: usize) -> io::Result<Self> {
            debug_assert!(page_size.is_power_of_two());
            let map_len = nframes
                .checked_mul(page_size)
                .filter(|l| l.checked_add(super::ARENA_SLACK).is_some())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "capacity overflows"))?;
            // The frames, then the slack (`ARENA_SLACK`).
            let base = map_table(map_len + super::ARENA_SLACK, "the frame arena")?;
            let dlen = nframes * std::mem::size_of::<FrameDesc>();
            let dptr = match map_table(dlen, "the frame descriptors") {
                Ok(p) => p.cast::<FrameDesc>(),
                Err(e) => {
                    // SAFETY: unmapping the arena we just mapped.
                    unsafe { libc::munmap(base.as_ptr().cast(), map_len + super::ARENA_SLACK) };
                    return Err(e);
                }
            };
            for i in 0..nframes {
                // SAFETY: in bounds of the fresh mapping, page-aligned base so
                // each slot is 64-byte aligned; nothing reads it before.
                unsafe { dptr.as_ptr().add(i).write(FrameDesc::new()) };
            }
            Ok(FrameTable {
                base,
                map_len,
                page_size,
                page_shift: page_size.trailing_zeros(),
                descs: Descs {
                    ptr: dptr,
                    len: nframes,
                    placed: false,
                },
                placed: false,
                ahead: None,
                mapped: Box::new([]),
            })
        }

        /// The table over `nframes` frames of `page_size` bytes at `base`
        /// (then [`super::ARENA_SLACK`] bytes of zeros) and their
        /// descriptors at `descs`: a shared cache's (`segment/`).
        ///
        /// # Safety
        ///
        /// Both are mapped, readable and writable while the table lives
        /// (it never unmaps them); `base` is page-aligned; the descriptors
        /// are initialised (`FrameDesc::new`, or in use by processes that
        /// follow the same protocols); both are reached only through tables.
        #[cfg(not(loom))]
        pub unsafe fn over(
            base: NonNull<u8>,
            descs: NonNull<FrameDesc>,
            nframes: usize,
            page_size: usize,
        ) -> Self {
            debug_assert!(page_size.is_power_of_two());
            FrameTable {
                base,
                map_len: nframes * page_size,
                page_size,
                page_shift: page_size.trailing_zeros(),
                descs: Descs {
                    ptr: descs,
                    len: nframes,
                    placed: true,
                },
                placed: true,
                ahead: None,
                mapped: (0..nframes.div_ceil(64))
                    .map(|_| std::sync::atomic::AtomicU64::new(0))
                    .collect(),
            }
        }

        /// Starts faulting the arena in ahead of use (`frame::ahead`),
        /// unless `populated` at creation. Context: at cache creation.
        pub fn fault_ahead(&mut self, populated: bool) {
            if self.placed {
                // Other processes' frames: the helper may write the pages
                // it faults.
                return;
            }
            self.ahead = super::ahead::FaultAhead::new(self.base.as_ptr(), self.map_len, populated);
        }

        /// `fault_ahead(false)` with every stretch faulted in with small
        /// pages, then collapsed (tests of the collapse).
        #[cfg(all(test, not(loom), not(miri)))]
        pub fn fault_ahead_small(&mut self) {
            self.ahead =
                super::ahead::FaultAhead::with(self.base.as_ptr(), self.map_len, false, true);
        }

        /// Frame `f` was just taken from the free pool: keeps the arena
        /// faulted in ahead of it, or (a shared cache's) maps it into this
        /// process (`map_in`). Context: any, no lock held.
        #[inline]
        pub fn note_alloc(&self, f: FrameNo) {
            if self.placed {
                self.map_in(f);
            }
            if let Some(a) = &self.ahead {
                a.note(((f as usize) + 1) << self.page_shift);
            }
        }

        /// Maps frame `f` of a shared cache's arena into this process (once
        /// per frame and process: a bit in `mapped`), and with it the
        /// frames around it that other processes use, by reading a byte of
        /// it: frames go round the attached processes, and
        /// each process maps each frame it uses. A write (the frame's
        /// zeroing or copy, or a direct read's pinning of it) faults in one
        /// 4 KiB page; a read fault also maps the pages around it already
        /// in the segment's file (the kernel's fault-around, 64 KiB), and
        /// the write that follows then finds its page mapped. Only for a
        /// frame that held a page before: a fresh one has no page in the
        /// file yet, and reading it would allocate and zero that page here,
        /// on the allocating thread, rather than in the write that would
        /// anyway (a cold pass of one process, whose direct reads fault
        /// their frames in on the I/O threads, ran 1.2-1.3 s against
        /// 0.7-0.9).
        #[inline]
        fn map_in(&self, f: FrameNo) {
            let (w, bit) = (&self.mapped[f as usize / 64], 1u64 << (f % 64));
            // Relaxed: a hint of this process's own (two threads may both
            // read the byte).
            if w.load(std::sync::atomic::Ordering::Relaxed) & bit != 0 {
                return;
            }
            w.fetch_or(bit, std::sync::atomic::Ordering::Relaxed);
            if self.desc(f).used_before() {
                // SAFETY: in bounds of the arena, mapped readable; the
                // caller just took `f` from the pool (the bytes are
                // nobody's, and reading them changes nothing).
                unsafe {
                    std::ptr::read_volatile(self.base.as_ptr().add((f as usize) << self.page_shift))
                };
            }
        }

        /// Bytes from the arena's start faulted in ahead of use so far
        /// (0 without the helper).
        #[cfg(all(test, not(loom), not(miri)))]
        pub fn faulted_ahead(&self) -> usize {
            self.ahead.as_ref().map_or(0, |a| a.done())
        }

        /// Whether the helper collapses small pages into huge ones, and
        /// how far from the arena's start it is through ((false, 0)
        /// without the helper).
        #[cfg(all(test, not(loom), not(miri)))]
        pub fn collapsed_ahead(&self) -> (bool, usize) {
            self.ahead.as_ref().map_or((false, 0), |a| a.collapsed())
        }

        /// Faults the whole arena in now (`Config::populate`), so that no
        /// later first touch of a frame pays for the page fault (with huge
        /// pages, possibly a compaction of memory: 5-7 ms per 2 MiB were
        /// measured on a fragmented machine). `MADV_POPULATE_WRITE`, or on
        /// kernels without it (before 5.14) a write to each base page.
        /// Context: at cache creation, before any frame is in use.
        pub fn populate(&self) -> io::Result<()> {
            #[cfg(not(miri))]
            {
                // SAFETY: advice on exactly this table's arena mapping.
                let r = unsafe {
                    libc::madvise(
                        self.base.as_ptr().cast(),
                        self.map_len,
                        libc::MADV_POPULATE_WRITE,
                    )
                };
                if r == 0 {
                    return Ok(());
                }
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EINVAL) {
                    return Err(io::Error::new(
                        io::ErrorKind::OutOfMemory,
                        format!("populating the frame arena ({} bytes): {e}", self.map_len),
                    ));
                }
            }
            for off in (0..self.map_len).step_by(4096) {
                if self.placed {
                    // Other processes may use these frames: a read faults
                    // the shared page in without writing it.
                    // SAFETY: in bounds of the arena, mapped readable.
                    unsafe { std::ptr::read_volatile(self.base.as_ptr().add(off)) };
                    continue;
                }
                // SAFETY: in bounds of the arena; no frame is in use yet (the
                // caller's context), so nothing else accesses these bytes,
                // which hold zero already (a fresh anonymous mapping).
                unsafe { std::ptr::write_volatile(self.base.as_ptr().add(off), 0) };
            }
            Ok(())
        }

        /// Number of frames.
        #[inline]
        pub fn len(&self) -> usize {
            self.descs.len()
        }

        /// The descriptor of frame `f`. Panics if `f` is out of range (a
        /// frame number always comes from this table or is bounds-checked
        /// first, see `index`).
        #[inline]
        pub fn desc(&self, f: FrameNo) -> &FrameDesc {
            &self.descs[f as usize]
        }

        /// Start of frame `f`'s bytes.
        #[inline]
        pub fn ptr(&self, f: FrameNo) -> *mut u8 {
            assert!((f as usize) < self.descs.len());
            // SAFETY: in bounds of the mapping: f < nframes.
            unsafe { self.base.as_ptr().add((f as usize) << self.page_shift) }
        }

        /// Asks the CPU to start loading bytes `[off, off + len)` of frame
        /// `f` into its caches (a hint: no fault, no effect on memory;
        /// nothing if `f` is out of range; clipped to the frame). A reader
        /// that will check `f`'s descriptor and then read its bytes issues
        /// this first, so that the misses overlap instead of following
        /// each other.
        #[inline(always)]
        pub fn prefetch(&self, f: FrameNo, off: usize, len: usize) {
            #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
            if (f as usize) < self.descs.len() && off < self.page_size {
                let end = off.saturating_add(len).min(self.page_size);
                let mut line = off & !63;
                while line < end {
                    // SAFETY: the address is inside frame f of the arena's
                    // mapping (f and line are in range); a prefetch reads
                    // nothing architecturally and cannot fault.
                    unsafe {
                        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                        let p = self
                            .base
                            .as_ptr()
                            .add(((f as usize) << self.page_shift) + line);
                        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
                    }
                    line += 64;
                }
            }
            #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
            let _ = (f, off, len);
        }

        /// Frame `f`'s bytes as a shared slice.
        ///
        /// # Safety
        /// The caller must hold a pin on `f` (so the bytes cannot change: all
        /// writers wait for pins to drain) for the whole life of the slice.
        #[inline]
        pub unsafe fn bytes(&self, f: FrameNo) -> &[u8] {
            // SAFETY: in bounds; immutability guaranteed by the caller's pin.
            unsafe { std::slice::from_raw_parts(self.ptr(f), self.page_size) }
        }

        /// Frame `f`'s bytes as a mutable slice.
        ///
        /// # Safety
        /// The caller must own the bytes exclusively: it holds the latch with
        /// the pins drained, or the frame is unpublished (refcount 0 owned by
        /// the caller). Optimistic readers may still read concurrently; they
        /// validate through the version, which the caller keeps odd.
        #[allow(clippy::mut_from_ref)] // exclusivity is the latch's, not the borrow's
        #[inline]
        pub unsafe fn bytes_mut(&self, f: FrameNo) -> &mut [u8] {
            // SAFETY: in bounds; exclusivity guaranteed by the caller.
            unsafe { std::slice::from_raw_parts_mut(self.ptr(f), self.page_size) }
        }
    }

    impl Drop for FrameTable {
        fn drop(&mut self) {
            // The helper first: it faults pages of the arena in.
            drop(self.ahead.take());
            if self.placed {
                return;
            }
            // SAFETY: unmapping exactly the mapping made in `new` (frames
            // and slack); no reference into it outlives the table (pins
            // borrow the cache).
            unsafe {
                libc::munmap(self.base.as_ptr().cast(), self.map_len + super::ARENA_SLACK);
            }
        }
    }
}
