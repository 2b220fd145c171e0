//! Faulting the frame arena in ahead of use.
//!
//! Frames leave the free pool in ascending order the first time round (the
//! pool starts as `0..n`, lowest on top), so the arena is first touched
//! from its start upwards. Each first touch of a 2 MiB stretch is a page
//! fault that allocates and zeroes a transparent huge page, and on some
//! machines that is slow: where free memory is fragmented the kernel
//! compacts first, and in a virtual machine whose guest hands free memory
//! back to the host (free page reporting, ballooning) the host must fault
//! it in again too. On this project's test VM a fresh 2 MiB costs about
//! 5 ms (0.4 GB/s; 3 GB/s for 4 KiB pages, 8 GB/s for huge pages just
//! freed by another process): half of a B-tree bulk load's time went to
//! `clear_page_erms` under the first write of each new node.
//!
//! So a helper thread keeps the arena faulted in a little ahead of the
//! highest frame handed out, with `MADV_POPULATE_WRITE` (which faults
//! pages in as a write would, and leaves pages already present alone: it
//! never changes a byte of a frame in use). A thread that takes a frame
//! from the free pool pays one relaxed load; a thread that gets ahead of the
//! helper still faults its page in itself, as without it. The helper
//! starts on the first request, sleeps when it has caught up, stops once
//! the whole arena is present, and is joined before the arena is unmapped.
//! Memory cost: at most [`ahead_for`] bytes resident beyond the frames in
//! use (a sixteenth of the arena, at most 64 MiB), none of it once the
//! cache is warm. Kernels before 5.14 lack `MADV_POPULATE_WRITE`: the
//! helper then stops at its first call, and nothing changes.
//!
//! ```text
//!  allocator (any thread)                 helper
//!  A1. f handed out; end = (f+1)*page     H1. lock; while want <= done and
//!  A2. end + ahead <= done (relaxed):          !stop: wait; target = want
//!      return                             H2. unlock; populate [done, target)
//!  A3. upto = round_up(end + ahead, 2M);      2 MiB at a time, storing done
//!      want >= upto: return (asked)           after each (relaxed: a hint)
//!  A4. want = max(want, upto); lock;      H3. error -> done = len (no more
//!      spawn if none; notify; unlock           requests), exit
//! ```
//!
//! Nothing here is needed for correctness: `done` and `want` are hints
//! (relaxed), a lost wakeup only delays the helper until the next request
//! (A4 is under the lock H1 waits with, so there is none).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_utils::CachePadded;

/// Populated per call: one transparent huge page.
const STEP: usize = 2 << 20;

/// Arenas smaller than this are not faulted ahead (a few huge pages:
/// nothing to gain, a thread to spare).
const MIN_ARENA: usize = 16 << 20;

/// How far ahead of the highest frame in use the arena is kept faulted in.
pub(crate) fn ahead_for(map_len: usize) -> usize {
    (map_len / 16).clamp(2 * STEP, 64 << 20) & !(STEP - 1)
}

#[derive(Debug)]
struct Shared {
    /// Bytes from the arena's start known to be faulted in.
    done: CachePadded<AtomicUsize>,
    /// Bytes from the start the allocators asked for.
    want: AtomicUsize,
    /// The table is being dropped.
    stop: AtomicBool,
    /// (The helper's handle, under the lock the helper waits with.)
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    wake: Condvar,
    base: usize,
    len: usize,
}

/// The arena's fault-ahead helper (see the module docs).
#[derive(Debug)]
pub(crate) struct FaultAhead {
    shared: Arc<Shared>,
    ahead: usize,
}

impl FaultAhead {
    /// A helper for the arena at `base` of `len` bytes; `None` if the
    /// arena is too small to bother, or `populated` already (at creation).
    pub(crate) fn new(base: *mut u8, len: usize, populated: bool) -> Option<FaultAhead> {
        if len < MIN_ARENA || populated || cfg!(any(loom, miri)) {
            return None;
        }
        Some(FaultAhead {
            shared: Arc::new(Shared {
                done: CachePadded::new(AtomicUsize::new(0)),
                want: AtomicUsize::new(0),
                stop: AtomicBool::new(false),
                thread: Mutex::new(None),
                wake: Condvar::new(),
                base: base as usize,
                len,
            }),
            ahead: ahead_for(len),
        })
    }

    /// Bytes from the arena's start faulted in by the helper so far.
    #[cfg(all(test, not(loom), not(miri)))]
    pub(crate) fn done(&self) -> usize {
        self.shared.done.load(Ordering::Relaxed)
    }

    /// A1-A4: the bytes up to `end` are about to be used. Context: any, no
    /// lock held; takes a leaf mutex (and spawns the helper, once) at most
    /// once per 2 MiB of new frames.
    #[inline]
    pub(crate) fn note(&self, end: usize) {
        // A2. Relaxed: a hint; an old value only asks again (A3 filters).
        if end + self.ahead <= self.shared.done.load(Ordering::Relaxed) {
            return;
        }
        self.request(end);
    }

    #[cold]
    fn request(&self, end: usize) {
        let s = &self.shared;
        // A3.
        let upto = (end + self.ahead).next_multiple_of(STEP).min(s.len);
        if s.want.load(Ordering::Relaxed) >= upto || s.done.load(Ordering::Relaxed) >= s.len {
            return;
        }
        // A4.
        s.want.fetch_max(upto, Ordering::Relaxed);
        let Ok(mut t) = s.thread.lock() else {
            return;
        };
        if s.stop.load(Ordering::Relaxed) {
            return;
        }
        if t.is_none() {
            let me = Arc::clone(s);
            match std::thread::Builder::new()
                .name("pagecache-fault".into())
                .spawn(move || helper(&me))
            {
                Ok(h) => *t = Some(h),
                Err(_) => {
                    // No thread: allocators fault their pages in themselves.
                    s.done.store(s.len, Ordering::Relaxed);
                    return;
                }
            }
        }
        drop(t);
        s.wake.notify_one();
    }
}

/// H1-H3.
fn helper(s: &Shared) {
    loop {
        // H1.
        let target = {
            let Ok(mut t) = s.thread.lock() else {
                return;
            };
            loop {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                let (w, d) = (
                    s.want.load(Ordering::Relaxed),
                    s.done.load(Ordering::Relaxed),
                );
                if w > d {
                    break w.min(s.len);
                }
                t = match s.wake.wait(t) {
                    Ok(t) => t,
                    Err(_) => return,
                };
            }
        };
        // H2.
        let mut d = s.done.load(Ordering::Relaxed);
        while d < target && !s.stop.load(Ordering::Relaxed) {
            let n = STEP.min(s.len - d);
            if !populate(s.base + d, n) {
                // H3: no MADV_POPULATE_WRITE here, or no memory for it (a
                // memory limit): the allocators fault pages in themselves.
                s.done.store(s.len, Ordering::Relaxed);
                return;
            }
            d += n;
            s.done.store(d, Ordering::Relaxed);
        }
        if d >= s.len {
            return;
        }
    }
}

/// Faults `[addr, addr + n)` of the arena in as writes would; false if the
/// kernel refused.
fn populate(addr: usize, n: usize) -> bool {
    #[cfg(not(any(loom, miri)))]
    loop {
        // SAFETY: advice on a range inside the arena's mapping, which
        // outlives the helper (the table joins it before unmapping).
        // MADV_POPULATE_WRITE changes no byte of a page already present.
        let r = unsafe { libc::madvise(addr as *mut libc::c_void, n, libc::MADV_POPULATE_WRITE) };
        if r == 0 {
            return true;
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
            _ => return false,
        }
    }
    #[cfg(any(loom, miri))]
    {
        let _ = (addr, n);
        false
    }
}

impl Drop for FaultAhead {
    fn drop(&mut self) {
        let s = &self.shared;
        s.stop.store(true, Ordering::Relaxed);
        let h = match s.thread.lock() {
            Ok(mut t) => t.take(),
            Err(_) => None,
        };
        s.wake.notify_all();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

#[cfg(all(test, not(loom), not(miri)))]
mod tests {
    use super::*;
    use crate::frame::FrameTable;
    use std::time::{Duration, Instant};

    /// Whether each 4 KiB page of `[addr, addr + len)` is resident.
    fn resident(addr: *mut u8, len: usize) -> Vec<bool> {
        let mut v = vec![0u8; len.div_ceil(4096)];
        // SAFETY: a query on a range of a live mapping into a vector of
        // one byte per page.
        let r = unsafe { libc::mincore(addr.cast(), len, v.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().map(|b| b & 1 != 0).collect()
    }

    fn wait_for(t: &FrameTable, bytes: usize) -> bool {
        let t0 = Instant::now();
        while t.faulted_ahead() < bytes {
            if t0.elapsed() > Duration::from_secs(30) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn the_arena_is_faulted_in_ahead_of_the_frames_in_use_and_no_further() {
        let mut t = FrameTable::new(16384, 4096).unwrap(); // 64 MiB
        t.fault_ahead(false);
        let ahead = ahead_for(64 << 20);
        assert_eq!(ahead, 4 << 20);
        // A frame in use before the helper gets there keeps its bytes.
        // SAFETY: frame 100 is no one's (a bare table), 4096 bytes long.
        unsafe { t.bytes_mut(100) }.fill(0xAB);
        assert_eq!(t.faulted_ahead(), 0, "nothing asked yet");
        t.note_alloc(0);
        let want = (4096 + ahead).next_multiple_of(STEP);
        assert!(
            wait_for(&t, want),
            "helper reached {} of {want}",
            t.faulted_ahead()
        );
        let r = resident(t.ptr(0), 64 << 20);
        assert!(r[..want / 4096].iter().all(|&x| x), "asked range resident");
        assert!(
            r[(want + STEP) / 4096..].iter().all(|&x| !x),
            "nothing far past the asked range"
        );
        // SAFETY: as above; frame 101 untouched by anyone but the helper.
        assert!(unsafe { t.bytes(100) }.iter().all(|&b| b == 0xAB));
        // SAFETY: as above.
        assert!(unsafe { t.bytes(101) }.iter().all(|&b| b == 0));
        // Frames further up: the helper follows.
        t.note_alloc(10_000);
        let want = (10_001 * 4096 + ahead).next_multiple_of(STEP);
        assert!(
            wait_for(&t, want),
            "helper reached {} of {want}",
            t.faulted_ahead()
        );
        assert!(resident(t.ptr(0), want).iter().all(|&x| x));
        // Past the end: clipped to the arena.
        t.note_alloc(16383);
        assert!(wait_for(&t, 64 << 20));
    }

    #[test]
    fn small_or_populated_arenas_get_no_helper_and_drop_stops_a_busy_one() {
        let mut small = FrameTable::new(1024, 4096).unwrap(); // 4 MiB
        small.fault_ahead(false);
        small.note_alloc(0);
        assert_eq!(small.faulted_ahead(), 0);
        let mut populated = FrameTable::new(8192, 4096).unwrap();
        populated.fault_ahead(true);
        populated.note_alloc(0);
        assert_eq!(populated.faulted_ahead(), 0);
        for _ in 0..20 {
            let mut t = FrameTable::new(65536, 4096).unwrap(); // 256 MiB
            t.fault_ahead(false);
            t.note_alloc(65535); // asks for all of it
            drop(t); // joins the helper mid-way, then unmaps
        }
    }
}
