//! The queue of protocol 5.7's deferred frees (`run.rs`, T3 and D1): frames
//! of truncated pages that a run may still read, each with the leaf and
//! slot its run pins. One queue for the whole cache, reached by every
//! process of a shared cache (its segment's `TableId::Deferred`): a run
//! that ends in one process frees what a truncate in another queued, even
//! once that process is gone.
//!
//! ```text
//! head     the queue lock (a futex mutex), the length
//! entries  one per frame at most (a frame is queued once, until freed):
//!          leaf node id, slot, frame
//! ```
//!
//! All zeros is an empty queue. Entries are read and written only under
//! the lock; the count of queued entries every run's end looks at is
//! `Words::deferred_n`.

use crate::frame::FrameNo;
use crate::placed::Placed;
use crate::sync::{AtomicU32, LockClass, Mutex, Ordering};
use std::ptr::NonNull;

/// The queue's head.
#[derive(Debug)]
#[repr(C, align(128))]
pub(crate) struct Head {
    lock: Mutex<()>,
    /// (L) entries in use.
    len: AtomicU32,
}

/// One queued frame (all fields (L)).
#[derive(Debug)]
#[repr(C)]
struct Entry {
    leaf: AtomicU32,
    slot: AtomicU32,
    frame: AtomicU32,
}

impl Entry {
    #[cfg_attr(not(loom), allow(dead_code))]
    fn new() -> Entry {
        Entry {
            leaf: AtomicU32::new(0),
            slot: AtomicU32::new(0),
            frame: AtomicU32::new(0),
        }
    }
}

/// A deferred free: the frame and the run-pinned slot it waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deferred {
    /// The leaf's node id.
    pub(crate) leaf: u32,
    /// The slot in it.
    pub(crate) slot: u32,
    /// The frame, whose cache reference the queue keeps.
    pub(crate) frame: FrameNo,
}

/// The queue (see the module docs), on the heap or in a segment.
#[derive(Debug)]
pub(crate) struct DeferredQueue {
    head: Placed<Head>,
    entries: Entries,
    cap: usize,
}

#[derive(Debug)]
enum Entries {
    Heap(Box<[Entry]>),
    #[cfg_attr(loom, allow(dead_code))]
    At(NonNull<Entry>),
}

// SAFETY: entries are atomics reached under the queue's lock; the placed
// memory lives as long as the queue (`over`'s contract).
unsafe impl Send for DeferredQueue {}
// SAFETY: as above.
unsafe impl Sync for DeferredQueue {}

impl DeferredQueue {
    /// A queue for `frames` frames on the heap.
    pub(crate) fn new(frames: usize) -> DeferredQueue {
        DeferredQueue {
            head: Placed::new(Head {
                lock: Mutex::with_class((), LockClass::Other),
                len: AtomicU32::new(0),
            }),
            entries: Entries::Heap(Self::zeroed(frames)),
            cap: frames,
        }
    }

    /// `frames` empty entries, their memory untouched until used (a
    /// zeroed allocation: the kernel's zero pages until written).
    #[cfg(not(loom))]
    fn zeroed(frames: usize) -> Box<[Entry]> {
        if frames == 0 {
            return Box::new([]);
        }
        let layout = std::alloc::Layout::array::<Entry>(frames).expect("a frame count that fits");
        // SAFETY: a non-zero size; zeroed memory is a valid `Entry` (three
        // atomics of zero); the box frees it with the same layout.
        unsafe {
            let p = std::alloc::alloc_zeroed(layout).cast::<Entry>();
            if p.is_null() {
                std::alloc::handle_alloc_error(layout);
            }
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, frames))
        }
    }

    /// Under loom, atomics are made, not zeroed.
    #[cfg(loom)]
    fn zeroed(frames: usize) -> Box<[Entry]> {
        (0..frames).map(|_| Entry::new()).collect()
    }

    /// Bytes a placed queue for `frames` frames takes.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn bytes(frames: usize) -> usize {
        std::mem::size_of::<Head>() + frames * std::mem::size_of::<Entry>()
    }

    /// Alignment a placed queue needs.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn align() -> usize {
        std::mem::align_of::<Head>()
    }

    /// The queue for `frames` frames at `base`.
    ///
    /// # Safety
    ///
    /// `base` is [`DeferredQueue::bytes`] bytes aligned to
    /// [`DeferredQueue::align`], all zeros when first used by any queue,
    /// used only through queues of this size, and mapped while the result
    /// lives.
    #[cfg(not(loom))]
    pub(crate) unsafe fn over(base: NonNull<u8>, frames: usize) -> DeferredQueue {
        DeferredQueue {
            // SAFETY: the head's place (zeroed: unlocked, empty).
            head: unsafe { Placed::at(base.cast()) },
            entries: Entries::At(
                // SAFETY: inside the caller's memory, after the head.
                unsafe {
                    NonNull::new_unchecked(base.as_ptr().add(std::mem::size_of::<Head>()).cast())
                },
            ),
            cap: frames,
        }
    }

    fn entry(&self, i: usize) -> &Entry {
        assert!(i < self.cap);
        match &self.entries {
            Entries::Heap(b) => &b[i],
            // SAFETY: in bounds of the placed array (`over`'s contract).
            Entries::At(p) => unsafe { &*p.as_ptr().add(i) },
        }
    }

    /// T3: queues `entries`, counting each in `n`. Context: no sleep; takes
    /// the queue lock (a leaf).
    pub(crate) fn push(&self, entries: &[Deferred], n: &crate::sync::AtomicUsize) {
        let _g = self.head.lock.lock();
        // Relaxed (all): under the queue lock.
        let mut len = self.head.len.load(Ordering::Relaxed) as usize;
        for d in entries {
            // A frame is queued once until freed: the queue holds them all.
            let e = self.entry(len);
            e.leaf.store(d.leaf, Ordering::Relaxed);
            e.slot.store(d.slot, Ordering::Relaxed);
            e.frame.store(d.frame, Ordering::Relaxed);
            len += 1;
            // Relaxed: ordered by the queue lock and D1's fence.
            n.fetch_add(1, Ordering::Relaxed);
        }
        self.head.len.store(len as u32, Ordering::Relaxed);
    }

    /// D1: under the queue lock and after a SeqCst fence, takes out every
    /// entry `still_pinned` says no run holds any more (uncounting it in
    /// `n`) and drops the frame's kept reference with `release`, still
    /// under the lock (a kept reference is never in one thread's hands
    /// alone, where its death would lose it: 5.15 P6e); returns the frames
    /// whose last reference that was (`release` true), for the caller to
    /// free. Context: no sleep; takes the queue lock.
    pub(crate) fn take_unpinned(
        &self,
        n: &crate::sync::AtomicUsize,
        still_pinned: impl Fn(&Deferred) -> bool,
        release: impl Fn(FrameNo) -> bool,
    ) -> Vec<FrameNo> {
        let mut out = Vec::new();
        let _g = self.head.lock.lock();
        crate::sync::fence(Ordering::SeqCst);
        // Relaxed (all): under the queue lock.
        let mut len = self.head.len.load(Ordering::Relaxed) as usize;
        let mut i = 0;
        while i < len {
            let e = self.entry(i);
            let d = Deferred {
                leaf: e.leaf.load(Ordering::Relaxed),
                slot: e.slot.load(Ordering::Relaxed),
                frame: e.frame.load(Ordering::Relaxed),
            };
            if still_pinned(&d) {
                i += 1;
                continue;
            }
            if release(d.frame) {
                out.push(d.frame);
            }
            // The last entry takes its place.
            len -= 1;
            if i < len {
                let last = self.entry(len);
                e.leaf
                    .store(last.leaf.load(Ordering::Relaxed), Ordering::Relaxed);
                e.slot
                    .store(last.slot.load(Ordering::Relaxed), Ordering::Relaxed);
                e.frame
                    .store(last.frame.load(Ordering::Relaxed), Ordering::Relaxed);
            }
            // Relaxed: under the queue lock.
            n.fetch_sub(1, Ordering::Relaxed);
        }
        self.head.len.store(len as u32, Ordering::Relaxed);
        out
    }

    /// `f(queued)` under the queue lock, `queued` whether `frame` is
    /// queued (its cache reference kept here). Context: no sleep; takes the
    /// queue lock.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn with_queued<R>(&self, frame: FrameNo, f: impl FnOnce(bool) -> R) -> R {
        let _g = self.head.lock.lock();
        // Relaxed (all): under the queue lock.
        let len = self.head.len.load(Ordering::Relaxed) as usize;
        let queued = (0..len).any(|i| self.entry(i).frame.load(Ordering::Relaxed) == frame);
        f(queued)
    }

    /// Entries queued now (`validate`). Context: takes the queue lock.
    pub(crate) fn len(&self) -> usize {
        let _g = self.head.lock.lock();
        // Relaxed: under the queue lock.
        self.head.len.load(Ordering::Relaxed) as usize
    }
}
