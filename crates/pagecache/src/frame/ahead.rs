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
//! the whole arena is present (and collapsed, below), and is joined before
//! the arena is unmapped.
//! Memory cost: at most [`ahead_for`] bytes resident beyond the frames in
//! use (a sixteenth of the arena, at most 64 MiB), none of it once the
//! cache is warm. Kernels before 5.14 lack `MADV_POPULATE_WRITE`: the
//! helper then stops at its first call, and nothing changes.
//!
//! Small pages first, huge pages behind (where the kernel has
//! `MADV_COLLAPSE`, 6.1 and later). The cost above is the huge page's: on
//! memory the host has taken back, faulting in 4 KiB pages ran at 3-4.4
//! GB/s against 0.4 GB/s for huge pages (this VM reports every free 2 MiB
//! block to its host at once, `page_reporting`; small pages come from
//! blocks that were never wholly free), and a one-thread B-tree load
//! consumes frames at about 0.7 GB/s, faster than the helper could fault
//! huge pages in. Yet lookups over a large cache want huge pages (4 KiB
//! ones cost them 14%). So the helper, for each stretch:
//! - faults it in with a huge page (the arena's advice) when the last such
//!   fault was quick (12.7 GB/s on memory just freed) or when no CPU is
//!   idle; else (cold memory and a CPU to spare) with small pages
//!   (`MADV_NOHUGEPAGE` on that stretch), trying a huge one again every
//!   [`RETRY_HUGE`] stretches;
//! - when it has nothing to fault in and a CPU is idle, collapses the
//!   small stretches into huge pages (`MADV_COLLAPSE`: the kernel
//!   allocates one, copies the 512 small pages into it and swaps the
//!   mapping while other threads wait on that range; no byte changes). A
//!   stretch the kernel cannot collapse now (pages pinned by an O_DIRECT
//!   read in flight, no free huge page) is tried again after the others,
//!   [`COLLAPSE_TRIES`] times in all, then left small;
//! - before each collapse on cold memory, faults a huge page into a
//!   scratch mapping of its own and frees it (`warm_a_huge_page`): the
//!   kernel copies into its new huge page holding the process's mmap lock,
//!   and the stretch's threads wait; into a cold page that copy took 5 ms,
//!   into the warmed one 0.44 ms. Without it a one-thread B-tree's random
//!   lookups ran at 217 k/s while the helper collapsed, against 978 k/s.
//!
//! Why "a CPU is idle" (`spare_cpu`: no more runnable tasks than CPUs):
//! the cold memory costs the same CPU time whichever way it is faulted in
//! (5 ms per 2 MiB); deferring it to a collapse only helps when the
//! collapse runs where nobody else would. On busy CPUs it took CPU from the
//! cache's users and, preempted while holding their mmap lock, stalled
//! them: 32 threads on 2 CPUs looked up 1.54-1.65 M/s against 1.79-1.83 M
//! with huge pages faulted in; with the rule, 1.90-1.96 M against
//! 1.86-1.90 M.
//!
//! Measured with the B-tree's `rndread` example (7 M tuples, 1.03 GB, one
//! thread, cold memory, three-second lookups): load 3.6-4.0 M tuples/s
//! with huge pages faulted in, 7.6-8.1 M with small pages collapsed
//! behind; lookups 958-959 k/s against 858-882 k/s (the collapses go on
//! during the lookups for about two seconds). Two threads: load 10.2
//! against 9.6 M, lookups 1.93 against 1.96 M.
//!
//! Fault-ins come first: one collapse (about 5.5 ms on cold memory, the
//! warming included) is the longest the helper keeps an allocator waiting
//! for its next stretch. Without `MADV_COLLAPSE`, or with
//! `PAGECACHE_NO_COLLAPSE` set in the environment (to measure the two side
//! by side), the helper faults huge pages in only.
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
//!                                         H4. nothing to fault in, a small
//!                                             stretch waiting and a CPU idle:
//!                                             collapse it, then H1
//! ```
//!
//! Nothing here is needed for correctness: `done` and `want` are hints
//! (relaxed), a lost wakeup only delays the helper until the next request
//! (A4 is under the lock H1 waits with, so there is none); advice and
//! collapses change how pages are mapped, never their bytes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_utils::CachePadded;

/// Populated per call: one transparent huge page.
const STEP: usize = 2 << 20;

/// Arenas smaller than this are not faulted ahead (a few huge pages:
/// nothing to gain, a thread to spare).
const MIN_ARENA: usize = 16 << 20;

/// A huge page's fault-in slower than this many bytes per second sends
/// the next stretches to small pages (measured: 0.4 GB/s on memory the
/// host took back, 12.7 GB/s on memory just freed; small pages 3-4.4).
const SLOW_HUGE: f64 = 2e9;

/// Stretches faulted in with small pages before a huge page is tried
/// again (memory freed meanwhile may make it quick).
const RETRY_HUGE: u32 = 32;

/// Attempts to collapse one stretch into a huge page before it is left
/// small.
const COLLAPSE_TRIES: u8 = 4;

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
    /// Whether the helper may fault stretches in small and collapse them
    /// later (`MADV_COLLAPSE` is there).
    collapse: bool,
    /// Bytes from the arena's start below which no stretch waits for a
    /// collapse (a hint, for tests).
    collapsed: AtomicUsize,
    /// Small pages only, never a huge fault-in (tests of the collapse).
    small_only: bool,
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
        Self::with(base, len, populated, false)
    }

    /// As `new`; `small_only`: every stretch faulted in with small pages
    /// (what cold memory leads to), for tests of the collapse.
    pub(crate) fn with(
        base: *mut u8,
        len: usize,
        populated: bool,
        small_only: bool,
    ) -> Option<FaultAhead> {
        if len < MIN_ARENA || populated || cfg!(any(loom, miri)) {
            return None;
        }
        let collapse = collapse_supported();
        Some(FaultAhead {
            shared: Arc::new(Shared {
                done: CachePadded::new(AtomicUsize::new(0)),
                want: AtomicUsize::new(0),
                stop: AtomicBool::new(false),
                collapse,
                collapsed: AtomicUsize::new(0),
                small_only,
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

    /// Whether the helper collapses small pages into huge ones, and the
    /// bytes from the arena's start it is through with.
    #[cfg(all(test, not(loom), not(miri)))]
    pub(crate) fn collapsed(&self) -> (bool, usize) {
        let s = &self.shared;
        (s.collapse, s.collapsed.load(Ordering::Relaxed))
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

/// The helper's own state: how it faults stretches in, and which it has
/// still to collapse.
struct Collapser {
    /// Fault the next stretch in with a huge page.
    huge: bool,
    /// Small stretches until a huge page is tried again.
    small_left: u32,
    /// Stretches (each one aligned huge page) faulted in with small pages,
    /// to collapse; with the attempts made.
    todo: std::collections::VecDeque<(usize, u8)>,
    /// The last huge page faulted in came slowly (cold memory).
    cold: bool,
    /// A 2 MiB mapping of the helper's own, see `collapse_one`.
    scratch: Option<usize>,
    /// The last collapse failed: wait a little before the next, so that
    /// a retry does not follow at once (an O_DIRECT read pinning its
    /// pages takes a while).
    backoff: bool,
}

impl Drop for Collapser {
    fn drop(&mut self) {
        if let Some(p) = self.scratch.take() {
            // SAFETY: the helper's own scratch mapping, mapped by
            // `map_huge` with this length; nothing refers to it.
            unsafe { libc::munmap(p as *mut libc::c_void, STEP) };
        }
    }
}

impl Collapser {
    fn new(s: &Shared) -> Collapser {
        Collapser {
            huge: !s.small_only,
            small_left: 0,
            todo: std::collections::VecDeque::new(),
            cold: s.small_only,
            scratch: None,
            backoff: false,
        }
    }

    /// Whether a stretch waits for a collapse.
    fn pending(&self) -> bool {
        !self.todo.is_empty()
    }

    /// H2 for one stretch: faults `[addr, addr + n)` in, as a huge page or
    /// small ones (see the module docs). False if the kernel refused.
    fn fault_in(&mut self, s: &Shared, addr: usize, n: usize) -> bool {
        if !s.collapse {
            return populate(addr, n);
        }
        // Only a whole aligned stretch can become a huge page (the arena
        // starts on a 2 MiB boundary, `map_huge`; its last stretch may be
        // shorter).
        let whole = addr % STEP == 0 && n == STEP;
        if !self.huge && whole && (s.small_only || spare_cpu()) {
            self.small_left = self.small_left.saturating_sub(1);
            self.huge = self.small_left == 0 && !s.small_only;
            // Small pages for this stretch only (an allocator faulting in
            // it meanwhile may still get a huge page: then the collapse
            // finds nothing to do). A refusal leaves it huge.
            advise(addr, n, libc::MADV_NOHUGEPAGE);
            self.todo.push_back((addr, 0));
            return populate(addr, n);
        }
        // A huge page (the arena's advice): cold memory with no CPU to
        // spare for collapsing later pays for it now, as without collapses.
        let t = std::time::Instant::now();
        if !populate(addr, n) {
            return false;
        }
        self.cold = (n as f64) / t.elapsed().as_secs_f64().max(1e-9) < SLOW_HUGE;
        if self.cold {
            self.huge = false;
            self.small_left = RETRY_HUGE;
        }
        true
    }

    /// H4: one collapse, of the oldest stretch waiting.
    fn collapse_one(&mut self, s: &Shared) {
        let Some((region, tries)) = self.todo.pop_front() else {
            return;
        };
        // On cold memory the kernel's copy into a fresh huge page runs at
        // first-touch speed (5 ms per 2 MiB here), and it copies holding
        // the process's mmap lock with the region unmapped: every thread
        // touching the region waits, and random lookups touch them all.
        // So a huge page is first faulted into the scratch mapping, with
        // no lock held, and freed: the collapse's allocation gets that
        // page back, warm, and the copy takes 0.44 ms (measured).
        if self.cold {
            self.warm_a_huge_page();
        }
        // MADV_HUGEPAGE first: MADV_COLLAPSE refuses NOHUGEPAGE ranges.
        let ok = advise(region, STEP, libc::MADV_HUGEPAGE) && advise(region, STEP, MADV_COLLAPSE);
        self.backoff = !ok;
        if !ok && tries + 1 < COLLAPSE_TRIES {
            // Not now (pinned pages, no free huge page): a later pass.
            self.todo.push_back((region, tries + 1));
        }
        self.publish(s);
    }

    /// Stores how far from the arena's start nothing waits for a collapse.
    fn publish(&self, s: &Shared) {
        let done = s.done.load(Ordering::Relaxed);
        let through = self
            .todo
            .iter()
            .map(|&(r, _)| r - s.base)
            .fold(done, usize::min);
        s.collapsed.store(through, Ordering::Relaxed);
    }

    /// Faults a huge page into the scratch mapping and frees it again
    /// (`MADV_DONTNEED`), so that the kernel's next huge page comes warm.
    /// A hint: a failure only leaves the next collapse slow.
    fn warm_a_huge_page(&mut self) {
        #[cfg(not(any(loom, miri)))]
        if self.scratch.is_none() {
            self.scratch = super::map_huge(STEP, "the fault-ahead scratch page")
                .ok()
                .map(|p| p.as_ptr() as usize);
        }
        if let Some(p) = self.scratch {
            if populate(p, STEP) {
                advise(p, STEP, libc::MADV_DONTNEED);
            }
        }
    }
}

/// H1-H4.
fn helper(s: &Shared) {
    let mut c = Collapser::new(s);
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
                    break Some(w.min(s.len));
                }
                c.publish(s);
                if c.pending() {
                    if !std::mem::take(&mut c.backoff) && (s.small_only || spare_cpu()) {
                        break None;
                    }
                    // Just failed, or no CPU to spare: a collapse would
                    // take one from the cache's users, and a helper
                    // preempted while it holds their mmap lock stalls every
                    // one of them touching the region. Look again later.
                    t = match s.wake.wait_timeout(t, std::time::Duration::from_millis(20)) {
                        Ok((t, _)) => t,
                        Err(_) => return,
                    };
                    continue;
                }
                if d >= s.len {
                    // Everything faulted in and collapsed (or given up).
                    s.collapsed.store(s.len, Ordering::Relaxed);
                    return;
                }
                t = match s.wake.wait(t) {
                    Ok(t) => t,
                    Err(_) => return,
                };
            }
        };
        let Some(target) = target else {
            // H4.
            c.collapse_one(s);
            continue;
        };
        // H2.
        let mut d = s.done.load(Ordering::Relaxed);
        while d < target && !s.stop.load(Ordering::Relaxed) {
            let n = STEP.min(s.len - d);
            if !c.fault_in(s, s.base + d, n) {
                // H3: no MADV_POPULATE_WRITE here, or no memory for it (a
                // memory limit): the allocators fault pages in themselves.
                s.done.store(s.len, Ordering::Relaxed);
                return;
            }
            d += n;
            s.done.store(d, Ordering::Relaxed);
        }
    }
}

/// Whether a CPU is free for the helper's deferred work: no more tasks
/// runnable on the machine right now (the helper included) than CPUs this
/// process may use (`/proc/loadavg`'s fourth field). False if that cannot
/// be read: then the helper defers nothing, as without collapses.
fn spare_cpu() -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/loadavg") else {
        return false;
    };
    let running = s
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split('/').next())
        .and_then(|r| r.parse::<usize>().ok());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    running.is_some_and(|r| r <= cpus)
}

/// `MADV_COLLAPSE` (Linux 6.1; the libc crate may not name it).
const MADV_COLLAPSE: libc::c_int = 25;

/// Whether this kernel knows `MADV_COLLAPSE` (it checks the advice before
/// the range, so an empty range asks without touching anything).
fn collapse_supported() -> bool {
    if cfg!(any(loom, miri)) || std::env::var_os("PAGECACHE_NO_COLLAPSE").is_some() {
        return false;
    }
    // SAFETY: advice on an empty range touches no mapping.
    unsafe { libc::madvise(std::ptr::null_mut(), 0, MADV_COLLAPSE) == 0 }
}

/// `madvise(addr, n, advice)` on the arena or the scratch mapping; false
/// if the kernel refused.
fn advise(addr: usize, n: usize, advice: libc::c_int) -> bool {
    #[cfg(not(any(loom, miri)))]
    {
        // SAFETY: advice on a range inside the arena's mapping, which
        // outlives the helper (the table joins it before unmapping), or
        // inside the helper's scratch mapping. None of the advice used on
        // the arena changes a byte: NOHUGEPAGE and HUGEPAGE set flags,
        // COLLAPSE copies small pages into a huge one; DONTNEED, which
        // drops bytes, is used on the scratch mapping only.
        unsafe { libc::madvise(addr as *mut libc::c_void, n, advice) == 0 }
    }
    #[cfg(any(loom, miri))]
    {
        let _ = (addr, n, advice);
        false
    }
}

/// Faults `[addr, addr + n)` of the arena (or of the helper's scratch
/// mapping) in as writes would; false if the kernel refused.
fn populate(addr: usize, n: usize) -> bool {
    #[cfg(not(any(loom, miri)))]
    loop {
        // SAFETY: advice on a range inside the arena's mapping, which
        // outlives the helper (the table joins it before unmapping), or
        // inside the helper's own scratch mapping. MADV_POPULATE_WRITE
        // changes no byte of a page already present.
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
    use crate::frame::{FrameNo, FrameTable};
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

    /// Bytes of the arena `[addr, addr + len)` mapped by huge pages (the
    /// `AnonHugePages` of the mappings inside it and its slack,
    /// `/proc/self/smaps`: the last mapping holds the slack too).
    fn huge_bytes(addr: *mut u8, len: usize) -> usize {
        let (lo, hi) = (
            addr as usize,
            addr as usize + len + crate::frame::ARENA_SLACK,
        );
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let (mut inside, mut kb) = (false, 0);
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = head.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a >= lo && b <= hi;
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("AnonHugePages:") {
                    kb += v
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<usize>()
                        .unwrap();
                }
            }
        }
        kb << 10
    }

    #[test]
    fn small_pages_are_collapsed_into_huge_ones_behind_the_frames_in_use_and_keep_their_bytes() {
        let len = 64 << 20;
        let mut t = FrameTable::new(len / 4096, 4096).unwrap();
        assert_eq!(
            t.ptr(0) as usize % STEP,
            0,
            "the arena starts on a huge page"
        );
        // A mapping of its own, kept apart from its neighbours': another
        // test's arena mapped next to it with the same flags merges with
        // it, and a mapping reaching past the arena counts for nothing in
        // `huge_bytes` (a CI run counted 0 bytes in huge pages, most
        // likely so). VM_DONTCOPY is a flag no other mapping here has.
        // SAFETY: advice on exactly this table's arena and slack; it
        // changes how a fork would copy them, nothing else.
        let r = unsafe {
            libc::madvise(
                t.ptr(0).cast(),
                len + crate::frame::ARENA_SLACK,
                libc::MADV_DONTFORK,
            )
        };
        assert_eq!(r, 0, "MADV_DONTFORK: {}", std::io::Error::last_os_error());
        t.fault_ahead_small();
        let (collapse, _) = t.collapsed_ahead();
        if !collapse {
            eprintln!("no MADV_COLLAPSE on this kernel: nothing to test");
            return;
        }
        assert_eq!(huge_bytes(t.ptr(0), len), 0, "nothing mapped yet");
        // Frames written in ascending order, as allocators hand them out,
        // each with its own pattern, while the helper faults in ahead and
        // collapses behind.
        let pattern = |f: usize, i: usize| (f * 31 + i / 8) as u8;
        for f in 0..len / 4096 {
            t.note_alloc(f as FrameNo);
            // SAFETY: frame f is no one's but this test's (a bare table).
            let b = unsafe { t.bytes_mut(f as FrameNo) };
            for (i, x) in b.iter_mut().enumerate() {
                *x = pattern(f, i);
            }
        }
        let t0 = Instant::now();
        while t.collapsed_ahead().1 < len {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "collapsed {} of {len} bytes",
                t.collapsed_ahead().1
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Stretches the kernel could not collapse in four tries stay small
        // (pinned pages: none here); allow a few for a busy machine.
        let huge = huge_bytes(t.ptr(0), len);
        assert!(
            huge >= len - 4 * STEP,
            "{huge} of {len} bytes in huge pages"
        );
        for f in 0..len / 4096 {
            // SAFETY: as above.
            let b = unsafe { t.bytes(f as FrameNo) };
            for (i, &x) in b.iter().enumerate() {
                assert_eq!(x, pattern(f, i), "frame {f} byte {i}");
            }
        }
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
