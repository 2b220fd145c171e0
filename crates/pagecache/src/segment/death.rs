//! A process that dies attached to a segment (protocol 5.14, numbered as
//! in `docs/design.md`).
//!
//! * D1. Every attached process has a slot of the process table: its pid,
//!   its start time and the slot's generation (bumped by every claim). The
//!   slot's index and generation are the process's *tag*, which its threads
//!   write into the segment's locks they hold (`FutexMutex`, R1) and into
//!   the state word of the pages they latch (L1).
//! * D2. A process is dead when its pid no longer runs the process that
//!   started at its start time (gone, reused, or a zombie whose threads
//!   have all ended: its main thread alone may be a zombie while another
//!   thread is still inside a read into a frame). A slot whose start time
//!   is still 0 is being claimed: only its pid is checked. Every read or
//!   write a process has in flight is a thread's system call in a shared
//!   cache (its I/O engine is the thread pool: an io_uring request of a
//!   dead process may still move bytes after all its threads ended, as
//!   the kernel tears its ring down in the background), so a dead process
//!   moves no more bytes into or out of a frame.
//! * D3. A waiter on a segment lock that sleeps `HOLDER_CHECK` (200 ms)
//!   with the same holder asks [`gone`] about the holder's tag: true when
//!   the slot's generation moved on, the slot is free or being recovered,
//!   or its process is dead (D2). Then the waiter takes the lock over
//!   (R3) and repairs what it guards. Nothing on the hit path looks.
//! * D4. Each attached process runs a watcher thread that looks at the
//!   process table every [`WATCH_EVERY`]; an attacher with no free slot
//!   looks too. A dead process's slot is claimed for recovery by a CAS of
//!   its pid word to `RECOVERING | pid of the recoverer` (one recoverer; a
//!   recoverer that dies is itself seen dead by D2 on its pid, and the
//!   slot is claimed again: recovery is idempotent).
//! * D5. Recovery gives back what the table can name as the dead
//!   process's: its opens of files (the file table's ledger row,
//!   `FileTable::forget_process`); then its cache, on a thread of its own,
//!   drops the pages it held latched (L3-L4) and ends its write-backs
//!   (W3), from one pass over the descriptors, then gives back its pins,
//!   runs, size-lock holds and counts (5.15, `frame/ledger.rs`). That
//!   thread zeroes the start time and clears the pid word (Release) once
//!   all is given back ([`Recovered::free`]): until then the slot stays
//!   claimed, so that if the recoverer dies too, the slot is recovered
//!   again (else what the dead process counted would stay for ever). A
//!   watcher with no cache over the segment (a tool) frees it at once.
//!
//! A latch (protocol 5.5) is not a futex word but a bit of a frame's state
//! word, taken by the same CAS as a pin; it gets the same treatment:
//!
//! * L1. In a cache shared by processes, the CAS that sets `LATCHED` also
//!   writes the holder's tag into the word's `HOLDER` field, and every RMW
//!   that clears `LATCHED` clears it (a private cache writes 0).
//! * L2. A waiter for the latch (`FrameDesc::wait_unlatched_as`) in a
//!   shared cache sleeps at most `HOLDER_CHECK` at a time; when one holder
//!   has held the latch that long, it asks [`gone`] about its tag.
//! * L3. Gone: a CAS from the state it saw to the same with its own tag
//!   makes the latch the waiter's (Acquire: whatever the dead holder
//!   wrote); the dead holder's pin stays in the count.
//! * L4. The page may be torn: the waiter drops it (`Inner::drop_torn`),
//!   out of the index as truncate takes a page out (5.7 T1-T3, runs
//!   keep its frame until they end); if it was dirty, its unwritten
//!   changes are lost, and the file's slot records the page for the next
//!   `sync`, in any process, to report once. Then it unlatches: waiters
//!   retry, miss and read the page from the file.
//!
//! A write-back in flight (its pin and `WRITEBACK`, counted in its file's
//! `writeback`) would keep every `sync` of the file waiting:
//!
//! * W1. In a cache shared by processes, a write-back's starter claims the
//!   descriptor's `wb_owner` word (CAS from 0 to its tag) before the RMW
//!   that sets `WRITEBACK`, and clears it if that RMW fails.
//! * W2. Its end clears `WRITEBACK`, then the word.
//! * W3. The recovery of a dead process ends each write-back it owns as
//!   failed (`Inner::cancel_writeback`: the page dirty and tagged again,
//!   the file's undone count moved; its `writeback` count comes down with
//!   the rest of what the process counted, 5.15), then clears the word
//!   (also where the process died between W1's claim and its RMW, or
//!   between W2's two steps). A sync waiting for the file's write-backs
//!   then writes the page itself.
//!
//! Why the order holds: a lock tagged by the dead process names its slot
//! and generation; the generation changes only when the slot is claimed
//! again, after D5, so a tag is never taken for a live process's; and a
//! slot is recovered only once its process cannot run (D2), so no thread
//! of it still holds or takes anything when D5 gives its opens back.

use super::stats::StatsHook;
use super::{alive, stat, Header, Segment, TableId, MAX_PROCS};
use crate::cache::file_table::FileTable;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The pid word of a slot being recovered (D4), with the recoverer's pid.
pub(super) const RECOVERING: u32 = 1 << 31;

/// Bits of a tag that hold the slot's index.
const SLOT_BITS: u32 = 6;
const _: () = assert!(MAX_PROCS == 1 << SLOT_BITS);
/// Bits of a slot's generation: a tag (generation and slot) fits the
/// latch holder's field of a frame's state word
/// (`frame::state::HOLDER_BITS`).
const GEN_BITS: u32 = 15;
const _: () = assert!(GEN_BITS + SLOT_BITS == crate::frame::state::HOLDER_BITS);

/// What a watcher calls once it has claimed a dead process's slot, with
/// that process's tag (a cache's recovery of the pages it held latched,
/// the write-backs it had started and what it counted,
/// `Inner::recover_dead_pages`, `Inner::recover_dead_pins`), and the slot
/// to free once that is done ([`Recovered::free`]).
pub type DeathHook = Box<dyn Fn(u32, Recovered) + Send + Sync>;

/// A dead process's slot being recovered (D5): freed by [`Recovered::free`]
/// once everything the process held is given back. Until then it stays
/// claimed by the recoverer (`RECOVERING` and its pid), so that if the
/// recoverer dies too, the next watcher recovers the slot again. Dropped
/// without `free` (the cache is going away) the slot is handed back to be
/// recovered by another process.
#[derive(Debug)]
pub struct Recovered {
    base: usize,
    slot: usize,
    done: bool,
    claims: Arc<std::sync::atomic::AtomicU64>,
}

impl Recovered {
    /// Frees the slot: the dead process's recovery is complete.
    pub fn free(mut self) {
        self.done = true;
        // SAFETY: the segment's mapping outlives the recovery: the hook's
        // caller (the cache) holds it until its recovery thread ends.
        let h = unsafe { header(self.base) };
        super::stats::retire(h, self.slot);
        let p = &h.procs[self.slot];
        // Relaxed: ordered before the pid's Release store.
        p.start.store(0, Ordering::Relaxed);
        // Release: the recovery before the next claim's Acquire.
        p.pid.store(0, Ordering::Release);
        // Relaxed: the claims are this process's, read by its segment's
        // drop, which comes after the cache (and so this recovery) ends.
        self.claims.fetch_and(!(1 << self.slot), Ordering::Relaxed);
    }

    /// Leaves the slot claimed, for the segment's detach to hand back
    /// (the cache is going; its segment may be unmapped already).
    pub fn abandon(mut self) {
        self.done = true;
    }
}

impl Drop for Recovered {
    fn drop(&mut self) {
        if !self.done {
            // SAFETY: as in `free`.
            hand_back(unsafe { header(self.base) }, self.slot);
            // Relaxed: as in `free`.
            self.claims.fetch_and(!(1 << self.slot), Ordering::Relaxed);
        }
    }
}

/// Hands the claimed slot `slot` back, its recovery unfinished, to be
/// claimed and recovered again by any watcher: a pid of 0 under
/// `RECOVERING` runs no more (D2).
pub(super) fn hand_back(h: &Header, slot: usize) {
    // Release: the recovery so far before the next claim's Acquire.
    h.procs[slot].pid.store(RECOVERING, Ordering::Release);
}

/// A segment's hooks, shared with its watcher thread: for dead processes,
/// and for this process's counters (`stats.rs`).
#[derive(Clone, Default)]
pub(super) struct Hooks(
    pub(super) Arc<Mutex<(Option<DeathHook>, Option<StatsHook>)>>,
    /// The slots this segment's watcher claimed for recovery and whose
    /// recovery has not finished (bit per slot): handed back on detach.
    pub(super) Arc<std::sync::atomic::AtomicU64>,
);

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("death::Hooks")
    }
}

/// How often each attached process looks for dead ones (D4).
pub const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The generation after `g` (never 0: a tag is never a lock's "no tag").
pub(super) fn next_gen(g: u32) -> u32 {
    match (g + 1) & ((1 << GEN_BITS) - 1) {
        0 => 1,
        n => n,
    }
}

/// Kills this process with SIGKILL, where it stands: the tests' deaths at
/// a chosen instruction (a window open, a frame in hand). Never returns.
pub(crate) fn kill_self() -> ! {
    // SAFETY: a signal to this process; no memory is touched.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    loop {
        std::thread::park();
    }
}

/// The slot of the process tagged `tag` (D1).
pub fn slot_of_tag(tag: u32) -> usize {
    (tag & ((1 << SLOT_BITS) - 1)) as usize
}

/// The lock tag of the process in slot `slot`, generation `gen` (D1).
pub(super) fn tag(slot: usize, gen: u32) -> u32 {
    gen << SLOT_BITS | slot as u32
}

/// Whether process `pid` runs (exists, and is no zombie whose threads have
/// all ended).
fn runs(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| super::group_runs(pid, state))
}

// A bit per slot in a watcher's claims (`Hooks`).
const _: () = assert!(MAX_PROCS <= 64);

/// The header of the segment mapped at `base`.
///
/// # Safety
///
/// `base` is an attached or inspected segment's mapping, mapped for `'a`.
pub(super) unsafe fn header<'a>(base: usize) -> &'a Header {
    // SAFETY: the caller's.
    unsafe { &*(base as *const Header) }
}

/// D3: whether the holder tagged `tag` of a lock in the segment at `base`
/// is gone. (`Member::gone` of the segment's region.)
pub(super) fn gone(base: usize, tag: u32) -> bool {
    // SAFETY: called for a lock of the region registered at `base`, which
    // is mapped while registered (a segment's whole mapping).
    let h = unsafe { header(base) };
    let p = &h.procs[(tag & ((1 << SLOT_BITS) - 1)) as usize];
    // Acquire (all three): pairs with A2's Release stores.
    let pid = p.pid.load(Ordering::Acquire);
    if p.gen.load(Ordering::Acquire) != tag >> SLOT_BITS || pid == 0 || pid & RECOVERING != 0 {
        return true;
    }
    dead(pid, p.start.load(Ordering::Acquire))
}

/// D2 for a slot's pid word and start time.
fn dead(pid: u32, start: u64) -> bool {
    if pid & RECOVERING != 0 {
        return !runs(pid & !RECOVERING);
    }
    if start == 0 {
        return !runs(pid);
    }
    !alive(pid, start)
}

/// D4-D5 over the segment mapped at `base`: recovers every slot whose
/// process is dead. Returns how many it recovered.
///
/// # Safety
///
/// As [`header`].
unsafe fn recover_dead(base: usize, hooks: &Hooks) -> usize {
    // SAFETY: the caller's.
    let h = unsafe { header(base) };
    let me = std::process::id();
    let mut n = 0;
    for (slot, p) in h.procs.iter().enumerate() {
        // Acquire: pairs with A2's stores (and a recoverer's).
        let pid = p.pid.load(Ordering::Acquire);
        if pid == 0 || !dead(pid, p.start.load(Ordering::Acquire)) {
            continue;
        }
        // D4. Acquire: what the dead process (or recoverer) wrote.
        if p.pid
            .compare_exchange(pid, RECOVERING | me, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            continue;
        }
        // D5. SAFETY: the files' table of the mapping at `base` (laid out
        // by `layout`, checked on attach), looked at only (no slot of our
        // own needed to give back another's opens).
        let files = unsafe {
            let e = h.tables[TableId::Files as usize];
            FileTable::over(
                NonNull::new_unchecked((base + e.offset as usize) as *mut u8),
                None,
            )
        };
        files.forget_process(slot);
        // The pages it held latched (L3-L4), its write-backs and what it
        // counted, by this process's cache, which frees the slot when done.
        // Relaxed: the slot's generation is ours to read now (claimed).
        let dead = tag(slot, p.gen.load(Ordering::Relaxed));
        // Relaxed: as `Recovered::free`'s clear.
        hooks.1.fetch_or(1 << slot, Ordering::Relaxed);
        let done = Recovered {
            base,
            slot,
            done: false,
            claims: hooks.1.clone(),
        };
        match hooks.0.lock().unwrap_or_else(|e| e.into_inner()).0.as_ref() {
            Some(h) => h(dead, done),
            // No cache over the segment here (a tool, or an attach before
            // its cache is made): its opens given back, the slot free.
            None => done.free(),
        }
        n += 1;
    }
    n
}

impl Segment {
    /// D4-D5: recovers the slots of dead processes; how many.
    pub fn recover_dead(&self) -> usize {
        // SAFETY: our mapping, mapped while `self` lives.
        unsafe { recover_dead(self.base.as_ptr() as usize, &self.hooks) }
    }

    /// Sets what this process's watcher calls for each dead process it
    /// recovers (D5), after giving back its opens.
    pub fn set_death_hook(&self, hook: DeathHook) {
        self.hooks.0.lock().unwrap_or_else(|e| e.into_inner()).0 = Some(hook);
    }

    /// Sets what this process's watcher publishes as its counters.
    pub fn set_stats_hook(&self, hook: StatsHook) {
        self.hooks.0.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(hook);
    }
}

/// The watcher thread of an attached segment (D4); stopped and joined when
/// dropped.
#[derive(Debug)]
pub(super) struct Watcher {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `seg` (attached; the watcher must drop before the
    /// mapping does).
    pub(super) fn start(seg: &Segment) -> io::Result<Watcher> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (s2, base, hooks) = (stop.clone(), seg.base.as_ptr() as usize, seg.hooks.clone());
        let slot = seg.slot.unwrap_or(0);
        let thread = std::thread::Builder::new()
            .name("pagecache-watch".into())
            .spawn(move || {
                let (m, cv) = &*s2;
                let mut stopped = m.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    stopped = cv
                        .wait_timeout(stopped, WATCH_EVERY)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    if *stopped {
                        return;
                    }
                    drop(stopped);
                    // SAFETY: the segment keeps its mapping until its Drop
                    // has stopped and joined this thread.
                    unsafe {
                        super::stats::publish(base, slot, &hooks);
                        recover_dead(base, &hooks)
                    };
                    stopped = m.lock().unwrap_or_else(|e| e.into_inner());
                }
            })
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "shared cache {}: starting its watcher: {e}",
                        seg.path.display()
                    ),
                )
            })?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let (m, cv) = &*self.stop;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
