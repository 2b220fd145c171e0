//! Counters, kept per thread so that no hot path writes a shared line.
//!
//! Each thread gets a stripe id from a process-wide pool the first time it
//! counts, and gives it back when it exits. While a thread owns its id no
//! other thread writes that stripe, so an increment is a plain load + store
//! (no locked instruction, no shared cache line). If more threads are alive
//! than there are stripes, the extra threads share one overflow stripe with
//! `fetch_add`. [`Stats`] sums the stripes: a snapshot, exact once the
//! counting threads have stopped.

use crate::sync::unmodelled::{AtomicU64, Mutex, Ordering};
use crossbeam_utils::CachePadded;

/// Number of stripes; the last one is the shared overflow stripe.
const STRIPES: usize = 128;

/// The counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// Lookups that found the page cached (pins and `read_at` copies;
    /// optimistic views that hit write nothing, not even this counter).
    Hits,
    /// Lookups that did not.
    Misses,
    /// Page reads issued to the backend (one per missing page).
    Reads,
    /// Write calls issued to the backend (one per run of pages).
    Writes,
    /// Pages written back (by `sync`, close or eviction).
    Writebacks,
    /// Pages evicted to reuse their frame.
    Evictions,
    /// Lookups restarted from the root (frozen frame, identity mismatch,
    /// latch wait).
    LookupRetries,
    /// `read_at` pages copied with no reference (protocol 5.4).
    OptimisticReads,
    /// Optimistic copies that failed validation or found the page busy and
    /// fell back to a pin.
    OptimisticFallbacks,
    /// Failed page reads.
    ReadErrors,
    /// Failed write-backs.
    WriteErrors,
    /// Anonymous pages faulted in (zero-filled on first touch).
    AnonFaults,
    /// Files registered with direct I/O (`O_DIRECT`).
    DirectFiles,
    /// Files registered with buffered I/O (direct I/O off, or refused by
    /// the filesystem).
    BufferedFiles,
    /// Reads submitted to the asynchronous engine (one per run of pages).
    AsyncReads,
    /// Pages read ahead of a sequential reader.
    ReadaheadPages,
    /// Pages whose read `File::prefetch` started.
    PrefetchPages,
    /// Pages of streams read straight into the reader's buffer, past the
    /// frames.
    StreamedPages,
}

/// Counters kept (every [`Counter`]).
pub const NCOUNTERS: usize = 18;

type Stripe = CachePadded<[AtomicU64; NCOUNTERS]>;

/// Per-cache counter stripes. A clone counts into the same stripes (a
/// shared cache's watcher publishes them: `Inner::watch`).
#[derive(Debug, Clone)]
pub struct Counters {
    stripes: std::sync::Arc<[Stripe]>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            stripes: (0..STRIPES)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }
}

/// Releases the thread's stripe id at thread exit. Only touched once per
/// thread (on first count), so the hot path reads a destructor-free `Cell`.
struct Slot {
    id: usize,
}

static FREE_IDS: Mutex<(usize, Vec<usize>)> = Mutex::new((0, Vec::new()));

impl Slot {
    fn acquire() -> Slot {
        let mut g = FREE_IDS.lock();
        let id = if let Some(id) = g.1.pop() {
            id
        } else if g.0 < STRIPES - 1 {
            g.0 += 1;
            g.0 - 1
        } else {
            STRIPES - 1
        };
        Slot { id }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Anything this thread still counts (from other TLS destructors)
        // goes to the shared stripe: the id is about to belong to another.
        let _ = ID.try_with(|c| c.set(STRIPES - 1));
        if self.id != STRIPES - 1 {
            // The mutex orders this thread's last counts before the next
            // owner's first load of the stripe.
            FREE_IDS.lock().1.push(self.id);
        }
    }
}

const UNSET: usize = usize::MAX;

thread_local! {
    /// The thread's stripe id (UNSET before its first count). `const`
    /// initialised with no destructor: reading it is one TLS load.
    static ID: std::cell::Cell<usize> = const { std::cell::Cell::new(UNSET) };
    /// Owns the id and returns it at thread exit.
    static SLOT: Slot = Slot::acquire();
}

#[cold]
fn acquire_id() -> usize {
    // If the thread is being torn down, SLOT is gone: use the overflow
    // stripe (atomic adds), which is always correct.
    let id = SLOT.try_with(|s| s.id).unwrap_or(STRIPES - 1);
    let _ = ID.try_with(|c| c.set(id));
    id
}

impl Counters {
    /// Adds `n` to counter `c` on the calling thread's stripe.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        let mut id = ID.try_with(|c| c.get()).unwrap_or(STRIPES - 1);
        if id == UNSET {
            id = acquire_id();
        }
        let cell = &self.stripes[id][c as usize];
        if id == STRIPES - 1 {
            // Relaxed: a statistic; shared stripe needs an atomic add.
            cell.fetch_add(n, Ordering::Relaxed);
        } else {
            // Relaxed load + store: only this thread writes this stripe
            // (see module docs); readers tolerate a snapshot.
            cell.store(cell.load(Ordering::Relaxed) + n, Ordering::Relaxed);
        }
    }

    /// Sums counter `c` over all stripes.
    pub fn sum(&self, c: Counter) -> u64 {
        self.stripes
            .iter()
            // Relaxed: a snapshot.
            .map(|s| s[c as usize].load(Ordering::Relaxed))
            .sum()
    }

    /// Every counter summed, by [`Counter`] number (what a process of a
    /// shared cache publishes in the segment).
    pub fn sums(&self) -> [u64; NCOUNTERS] {
        let mut out = [0; NCOUNTERS];
        for s in self.stripes.iter() {
            for (o, c) in out.iter_mut().zip(s.iter()) {
                // Relaxed: a snapshot.
                *o += c.load(Ordering::Relaxed);
            }
        }
        out
    }

    /// A snapshot of every counter.
    pub fn snapshot(&self) -> Stats {
        Stats::from_sums(&self.sums())
    }
}

impl Stats {
    /// The snapshot of counters summed by counter number (the crate's
    /// `stats::Counter` order, as a shared cache publishes them).
    pub(crate) fn from_sums(c: &[u64; NCOUNTERS]) -> Stats {
        use Counter::*;
        let s = |k: Counter| c[k as usize];
        Stats {
            // Optimistic reads are hits too; counted once on that path.
            hits: s(Hits) + s(OptimisticReads),
            misses: s(Misses),
            reads: s(Reads),
            writes: s(Writes),
            writebacks: s(Writebacks),
            evictions: s(Evictions),
            lookup_retries: s(LookupRetries),
            optimistic_reads: s(OptimisticReads),
            optimistic_fallbacks: s(OptimisticFallbacks),
            read_errors: s(ReadErrors),
            write_errors: s(WriteErrors),
            anon_faults: s(AnonFaults),
            direct_files: s(DirectFiles),
            buffered_files: s(BufferedFiles),
            async_reads: s(AsyncReads),
            readahead_pages: s(ReadaheadPages),
            prefetch_pages: s(PrefetchPages),
            streamed_pages: s(StreamedPages),
        }
    }
}

/// A snapshot of a cache's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Lookups that found the page cached (pins and `read_at` copies;
    /// optimistic views that hit are not counted: they write nothing).
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Page reads issued to the backend.
    pub reads: u64,
    /// Write calls issued to the backend.
    pub writes: u64,
    /// Pages written back.
    pub writebacks: u64,
    /// Pages evicted.
    pub evictions: u64,
    /// Lookups restarted from the root.
    pub lookup_retries: u64,
    /// `read_at` pages copied with no reference.
    pub optimistic_reads: u64,
    /// Optimistic copies that fell back to a pin.
    pub optimistic_fallbacks: u64,
    /// Failed page reads.
    pub read_errors: u64,
    /// Failed write-backs.
    pub write_errors: u64,
    /// Anonymous pages faulted in.
    pub anon_faults: u64,
    /// Files opened with direct I/O (`O_DIRECT`: no second copy in the
    /// kernel's page cache).
    pub direct_files: u64,
    /// Files opened with buffered I/O (direct I/O off in `Config`, or
    /// refused by the filesystem, e.g. tmpfs).
    pub buffered_files: u64,
    /// Reads submitted to the asynchronous I/O engine, one per run of
    /// consecutive pages (batched misses, readahead, prefetch).
    pub async_reads: u64,
    /// Pages read ahead of sequential readers.
    pub readahead_pages: u64,
    /// Pages whose read [`crate::File::prefetch`] started.
    pub prefetch_pages: u64,
    /// Pages of sequential streams read straight into the reader's buffer,
    /// bypassing the frames (a file larger than the cache, its device's
    /// streams read buffered: [`crate::Config::stream_reads`]); not counted
    /// as reads (the lookup that found the first of each such run missing
    /// counts one miss).
    pub streamed_pages: u64,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "hits {} misses {} reads {} writes {} writebacks {} evictions {} \
             lookup_retries {} optimistic_reads {} optimistic_fallbacks {} \
             read_errors {} write_errors {} anon_faults {} direct_files {} \
             buffered_files {} async_reads {} readahead_pages {} prefetch_pages {} \
             streamed_pages {}",
            self.hits,
            self.misses,
            self.reads,
            self.writes,
            self.writebacks,
            self.evictions,
            self.lookup_retries,
            self.optimistic_reads,
            self.optimistic_fallbacks,
            self.read_errors,
            self.write_errors,
            self.anon_faults,
            self.direct_files,
            self.buffered_files,
            self.async_reads,
            self.readahead_pages,
            self.prefetch_pages,
            self.streamed_pages
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_from_many_threads_are_exact() {
        let c = Arc::new(Counters::default());
        let threads: Vec<_> = (0..200)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        c.add(Counter::Hits, 1);
                    }
                    c.add(Counter::Reads, 2);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = c.snapshot();
        assert_eq!(s.hits, 200_000);
        assert_eq!(s.reads, 400);
        assert_eq!(s.misses, 0);
    }
}
