//! Drop-behind of long sequential write streams
//! ([`Config::drop_behind_writes`](crate::Config::drop_behind_writes)).
//!
//! A file written from start to end in order (a log, a bulk load, a copy)
//! is written once and rarely read back soon. Left to the general rules,
//! its pages would fill every frame of the budget before the first one is
//! evicted: the cache's hot pages pushed through S3-FIFO's small queue by
//! pages nobody reads, and every frame of the arena faulted in (zeroed by
//! the kernel, a few milliseconds per 2 MiB where a VM returns free memory
//! to its host: `frame/ahead.rs`) for pages held only until written. So,
//! as the kernel's `RWF_DONTCACHE` asks per write:
//!
//! ```text
//!  writer (write_at of bytes a..b)           flusher
//!  B1. a == where the thread's last write of  B3. writes each queued batch at
//!      the file ended: its run grows by b - a;    once, in index order (the
//!      else a new run starts                      pages reclaim passes over take
//!  B2. a run past `long` bytes (an eighth of      the same path, W2), then
//!      the cache, 4-32 MiB): its pages            takes the batch off its
//!      from there on are behind; once `batch`     stream's pending count and
//!      more are written (a sixteenth of           wakes throttled writers
//!      `long`, at most 2 MiB) and the cache's B4. each page behind a run that
//!      dirty count is past the background         is clean once written (by B3,
//!      threshold, the dirty ones are queued       or by a `sync` or reclaim
//!      for the flusher (a kick),                  before B3 reached it: B3
//!      counted pending; past 16 batches           waits for the end of such a
//!      pending, the writer waits for the          write in flight), with no
//!      flusher (the throttle's wait)              other reference, is evicted
//!                                                 (5.2) and its frame freed:
//!                                                 the writer's next frames
//!                                                 come from the pool, warm
//! ```
//!
//! So a stream holds at most about a quarter of the cache (its first
//! `long` bytes, cached as any written page, and 16 batches; in a cache
//! under 32 MiB, 4 MiB and 16 batches, all of a cache under 4 MiB), and
//! once synced only its first `long` bytes and part of a batch; it writes at
//! the device's pace, as the kernel's dirty throttling makes a writer of a
//! file larger than memory do. Nothing here is a protocol of its own: the
//! detection is hints (a thread's run in its thread-local storage; the
//! file's range behind runs, relaxed atomics written once per batch), the
//! writes are write-back's (W1-W4 and 5.5: tags, hooks, errors and
//! `sync`'s truth unchanged), and the drop is an eviction from {cache +
//! the write-back's pin} (5.2 A-C), which fails, leaving the page cached,
//! if anyone else holds it. A page written again before its write-back is
//! dirty and stays. Only `write_at` counts in a run (not `page_mut` or the
//! futures' writes).

// Under loom no stream is detected (the thread-local run is not modelled).
#![cfg_attr(loom, allow(dead_code))]

use super::registry::FileShared;
use super::Inner;
use crate::frame::FrameNo;
use crate::sync::unmodelled::{AtomicU64, Ordering};
use std::sync::Arc;

#[cfg(not(loom))]
std::thread_local! {
    /// B1: this thread's last write: the file (its shared state's
    /// address), where the write ended, and the bytes its run has
    /// written in order. A thread's own: no line another thread writes.
    static RUN: std::cell::Cell<(usize, u64, u64)> = const { std::cell::Cell::new((0, 0, 0)) };
}

/// A file's pages behind a long run in this process (B2-B4: hints,
/// written once per queued batch).
#[derive(Debug, Default)]
pub(crate) struct Behind {
    /// `from..queued`: the pages queued for write-back behind a long run
    /// (empty when `from >= queued`).
    from: AtomicU64,
    queued: AtomicU64,
    /// Pages queued for the flusher and not yet written (B2's bound).
    pending: AtomicU64,
}

impl Behind {
    /// Whether page `index` lies behind a long run (B4's test).
    pub(crate) fn behind(&self, index: u64) -> bool {
        // Relaxed: hints.
        index >= self.from.load(Ordering::Relaxed) && index < self.queued.load(Ordering::Relaxed)
    }

    /// `n` of the pages queued are written (or no longer need to be).
    pub(crate) fn written(&self, n: u64) {
        // Relaxed: a count the writer polls under the flusher's wait.
        let _ = self
            .pending
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |p| {
                Some(p.saturating_sub(n))
            });
    }
}

impl Inner {
    /// B1-B2 after a write of `len` bytes at `offset` to `fs` by this
    /// thread. Context: no sleep but the flusher's queue mutex (and its
    /// start, once), and, past B2's bound, the throttle's wait (no lock
    /// held).
    #[inline]
    pub(crate) fn note_write(&self, fs: &Arc<FileShared>, offset: u64, len: usize) {
        #[cfg(not(loom))]
        if self.drop_behind_writes {
            let end = offset + len as u64;
            let key = Arc::as_ptr(fs) as usize;
            // B1.
            let run = RUN
                .try_with(|r| {
                    let (k, e, n) = r.get();
                    let n = if k == key && e == offset {
                        n + len as u64
                    } else {
                        len as u64
                    };
                    r.set((key, end, n));
                    n
                })
                .unwrap_or(0);
            let (long, batch) = self.write_behind_bounds();
            if run >= long {
                self.run_behind(fs, end, run - long, batch);
            }
        }
        #[cfg(loom)]
        let _ = (fs, offset, len);
    }

    /// B2 for a run past `long` by `past` bytes, now at `end`.
    fn run_behind(&self, fs: &Arc<FileShared>, end: u64, past: u64, batch: u64) {
        let b = &fs.behind;
        // Pages written whole so far, and where the run passed `long`.
        let done = end >> self.shift;
        let start = (end - past) >> self.shift;
        // Relaxed: hints.
        let queued = b.queued.load(Ordering::Relaxed);
        let lo = if (start..=done).contains(&queued) {
            queued // the range this run queued so far
        } else {
            // Another run: its pages from where it passed `long`.
            b.from.store(start, Ordering::Relaxed);
            b.queued.store(start, Ordering::Relaxed);
            start
        };
        // Only past the background threshold, as the kernel's background
        // write-back: under it nothing is written ahead of need (W4).
        if done < lo + batch || self.dirty_pages() <= self.dirty_background {
            return;
        }
        b.queued.store(done, Ordering::Relaxed);
        // At most sixteen batches at once (a run that crossed the
        // threshold late leaves its older pages to the general rules).
        let most = 16 * batch;
        self.queue_behind(fs, lo.max(done - most.min(done)), done);
        // The stream's writer waits while more than sixteen batches are
        // queued and not yet written: it runs at the device's pace, the
        // frames it takes bounded (the kernel's dirty throttling per
        // device, here per stream).
        if b.pending.load(Ordering::Relaxed) > most {
            self.throttle_while(|| b.pending.load(Ordering::Relaxed) > most);
        }
    }

    /// The run length past which a stream drops behind, and the pages it
    /// queues at a time: an eighth of the cache, from 4 MiB to 32 MiB (a
    /// run of a few pages in a small cache is no stream), and a sixteenth
    /// of that (at most 2 MiB), in pages for the latter.
    fn write_behind_bounds(&self) -> (u64, u64) {
        let cap = (self.frames.len() as u64) << self.shift;
        let long = (cap / 8).clamp(4 << 20, 32 << 20);
        let batch = ((long / 16).min(2 << 20) >> self.shift).max(1);
        (long, batch)
    }

    /// Queues the dirty pages `lo..hi` of `fs` for the flusher (B2's kick).
    /// Context: as `note_write`.
    #[cold]
    fn queue_behind(&self, fs: &Arc<FileShared>, lo: u64, hi: u64) {
        let frames: Vec<FrameNo> = (lo..hi)
            .filter_map(|i| fs.tree.lookup(&self.nodes, i))
            .filter(|&f| {
                (f as usize) < self.frames.len() && {
                    let s = self.desc(f).snapshot();
                    s.is_dirty() && !s.is_under_writeback()
                }
            })
            .collect();
        if frames.is_empty() {
            return;
        }
        // Relaxed: as `written`.
        fs.behind
            .pending
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        let first = {
            let mut q = self.flusher.behind.lock();
            q.push((fs.clone(), frames));
            q.len() == 1
        };
        if first {
            self.kick_flusher();
        }
    }

    /// B4: page `index` of `fs` (frame `f`, pinned by the caller for its
    /// write-back, which has ended or was found done by someone else) is
    /// dropped if it lies behind a long run, is clean, and no one else
    /// holds it: evicted and its frame freed (the caller's pin with it). Whether it was; if not, the
    /// caller still holds its pin. Context: no sleep; takes the tree lock.
    pub(crate) fn drop_written_behind(&self, fs: &FileShared, index: u64, f: FrameNo) -> bool {
        if !fs.behind.behind(index) {
            return false;
        }
        let s = self.desc(f).snapshot();
        if s.is_dirty() || s.is_under_writeback() || s.is_removed() || !s.is_uptodate() {
            return false;
        }
        if !self.evict_from(fs, f, index) {
            return false;
        }
        self.free_frame(f);
        true
    }
}
