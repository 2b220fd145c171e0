//! The asynchronous calls of [`File`]: the blocking calls' twins for
//! callers that keep many reads in flight from few threads (protocol 5.9,
//! `cache/asynch.rs`). Plain [`std::future::Future`]s: no runtime is
//! needed or assumed (tokio, async-std, smol and a hand-written executor
//! all work).
//!
//! A hit is ready on the first poll and allocates nothing. A miss starts
//! the read of its page (or waits for the one in flight) and returns
//! `Pending`; the completion, on the I/O engine's thread, wakes every
//! future waiting for the page. Every future here is cancel-safe: dropped
//! at any await point, it gives back what it held or waited for (the read
//! in flight finishes and leaves the page cached, unpinned), and no other
//! waiter is left waiting.

use super::{File, PageMut, PageRef};
use crate::api::Optimistic;
use crate::cache::{FramePin, GetPage, Handoff};
use crate::stats::Counter;
use crate::sync::Ordering;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The future of [`File::page_async`]: a [`PageRef`] of the page.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct PageFuture<'a> {
    file: &'a File,
    get: GetPage,
}

impl<'a> Future for PageFuture<'a> {
    type Output = io::Result<PageRef<'a>>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let file = this.file;
        file.check_page(this.get.index())?;
        let frame = match this.get.poll(file.inner(), &file.shared, cx) {
            Poll::Ready(r) => r?,
            Poll::Pending => return Poll::Pending,
        };
        Poll::Ready(Ok(PageRef {
            pin: FramePin::new(&file.cache, frame),
            index: this.get.index(),
        }))
    }
}

impl Drop for PageFuture<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.get.is_live() {
            self.get.cancel(self.file.inner());
        }
    }
}

/// The future of [`File::page_mut_async`]: a [`PageMut`] of the page.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct PageMutFuture<'a> {
    file: &'a File,
    get: GetPage,
    throttled: bool,
}

impl<'a> Future for PageMutFuture<'a> {
    type Output = io::Result<PageMut<'a>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let file = this.file;
        let index = this.get.index();
        if !this.throttled {
            file.check_writable("page_mut")?;
            file.check_page(index)?;
            // The dirty throttle, as `page_mut` (waits only past the
            // dirty limit; see the module docs of `cache/asynch.rs`).
            file.inner().balance_dirty();
            this.throttled = true;
        }
        let frame = match this.get.poll(file.inner(), &file.shared, cx) {
            Poll::Ready(r) => r?,
            Poll::Pending => return Poll::Pending,
        };
        Poll::Ready(Ok(file.latched(frame, index, false)))
    }
}

impl Drop for PageMutFuture<'_> {
    fn drop(&mut self) {
        if self.get.is_live() {
            self.get.cancel(self.file.inner());
        }
    }
}

/// The future of [`File::sync_async`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct SyncFuture<'a> {
    file: &'a File,
    slot: Option<Arc<Handoff<io::Result<()>>>>,
}

impl Future for SyncFuture<'_> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some(h) = &this.slot {
            let r = std::task::ready!(h.poll(cx.waker()));
            this.slot = None;
            return Poll::Ready(r);
        }
        let h = Handoff::new(cx.waker());
        let (done, file) = (h.clone(), this.file.clone());
        let spawned = std::thread::Builder::new()
            .name("pagecache-sync".into())
            .spawn(move || {
                let r = file.sync();
                drop(file);
                let _ = done.complete(r);
            });
        match spawned {
            Ok(_) => {
                this.slot = Some(h);
                Poll::Pending
            }
            // No thread to be had: sync here.
            Err(_) => Poll::Ready(this.file.sync()),
        }
    }
}

impl Drop for SyncFuture<'_> {
    fn drop(&mut self) {
        // The sync goes on to its end on its thread; its result is dropped.
        if let Some(h) = self.slot.take() {
            let _ = h.cancel();
        }
    }
}

impl File {
    /// [`File::page`] as a future: a hit is ready on the first poll
    /// (nothing allocated); a miss starts the page's read, or waits for
    /// the read or writer in flight, without blocking the thread.
    /// `UnexpectedEof` at or past the last page. Cancel-safe.
    ///
    /// ```
    /// # use pagecache::{Config, OpenOptions, PageCache};
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = std::env::temp_dir().join(format!("pc-doc-async-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// # let path = dir.join("f");
    /// # std::fs::write(&path, vec![7u8; 8192])?;
    /// let cache = PageCache::new(Config { capacity: 1 << 20, ..Config::default() })?;
    /// let file = cache.open(&path)?;
    /// // Any executor polls it; a tiny one for the example:
    /// let page = pagecache::block_on(file.page_async(1))?;
    /// assert_eq!(page[0], 7);
    /// # drop(page); drop(file); std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn page_async(&self, index: u64) -> PageFuture<'_> {
        PageFuture {
            file: self,
            get: GetPage::new(index, false),
        }
    }

    /// [`File::page_mut`] as a future: the latch of the page, once every
    /// pin of it is dropped, reading the page on a miss, all without
    /// blocking the thread (but past the cache's dirty limit the first
    /// poll waits for write-back, as `page_mut` does). Cancel-safe.
    pub fn page_mut_async(&self, index: u64) -> PageMutFuture<'_> {
        PageMutFuture {
            file: self,
            get: GetPage::new(index, true),
            throttled: false,
        }
    }

    /// [`File::optimistic`] as a future: a view of page `index` once it is
    /// cached (a hit is ready on the first poll, writing nothing shared);
    /// a miss reads it in without blocking the thread. Cancel-safe.
    pub async fn optimistic_async(&self, index: u64) -> io::Result<Optimistic<'_>> {
        self.check_page(index)?;
        let c = self.inner();
        loop {
            if let Some(f) = self.shared.tree.lookup(&c.nodes, index) {
                if let Some((f, v)) = c.optimistic_hinted(&self.shared, index, f) {
                    return Ok(self.view(f, v, index));
                }
            }
            // Through a pin: while it is held no writer has drained, so
            // the version is even and the page's.
            let p = self.page_async(index).await?;
            let frame = p.pin.frame();
            let v = c.desc(frame).read_begin();
            drop(p);
            if let Some(v) = v {
                return Ok(self.view(frame, v, index));
            }
        }
    }

    /// [`File::read_at`] as a future: cached pages are copied at once; the
    /// missing pages of the request are read together (runs, as the
    /// blocking call reads them) and a sequential reader's window ahead,
    /// all without blocking the thread. Short only at end of file; each
    /// page is read atomically. Cancel-safe (a dropped read leaves `buf`
    /// partly written).
    pub async fn read_at_async(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let c = self.inner();
        let fs = &self.shared;
        // Acquire: as `read_at`.
        let len = fs.len.load(Ordering::Acquire);
        if offset >= len || buf.is_empty() {
            return Ok(0);
        }
        let end = len.min(offset.saturating_add(buf.len() as u64));
        let total = (end - offset) as usize;
        let ps = c.page_size;
        let last = (end - 1) >> c.shift;
        if self.ra.crosses(offset >> c.shift, last) {
            c.readahead_marker(fs, &self.ra, offset >> c.shift, last);
        }
        let mut done = 0;
        let mut missed = false;
        loop {
            done = c.read_cached(fs, buf, offset, total, done);
            if done == total {
                return Ok(total);
            }
            let pos = offset + done as u64;
            let index = pos >> c.shift;
            if !missed && fs.tree.lookup(&c.nodes, index).is_none() {
                // The first miss: every missing page of the request from
                // here on starts now (runs), and readahead decides a
                // window past it (never a bypass: that is a blocking read).
                missed = true;
                let ra_end = c
                    .readahead_miss(&self.ra, index, last, false)
                    .unwrap_or(last + 1);
                c.read_async(fs, index, last + 1, false);
                if ra_end > last + 1 {
                    let n = c.read_async(fs, last + 1, ra_end, true);
                    c.counters.add(Counter::ReadaheadPages, n);
                }
            }
            // This page: its read (or another's write) ends, or we read it.
            let p = self.page_async(index).await?;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(total - done);
            buf[done..done + n].copy_from_slice(&p[off..off + n]);
            done += n;
        }
    }

    /// [`File::write_at`] as a future: the pages the write must read first
    /// (a partial first or last page not cached) are read without blocking
    /// the thread, then the bytes are written as `write_at` writes them
    /// (which waits, blocking, only for other holders of those pages'
    /// latches and past the dirty limit). Cancel-safe: dropped before its
    /// reads end, it writes nothing.
    pub async fn write_at_async(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable("write")?;
        if buf.is_empty() {
            return Ok(());
        }
        let c = self.inner();
        let ps = c.page_size as u64;
        let end = offset.saturating_add(buf.len() as u64);
        let (first, last) = (offset / ps, (end - 1) / ps);
        let npages = self.npages();
        let mut need = [None, None];
        if offset % ps != 0 && first < npages {
            need[0] = Some(first);
        }
        if end % ps != 0 && last < npages && last != first {
            need[1] = Some(last);
        } else if end % ps != 0 && last < npages && need[0].is_none() {
            need[0] = Some(last);
        }
        let need: Vec<u64> = need
            .into_iter()
            .flatten()
            .filter(|&i| self.shared.tree.lookup(&c.nodes, i).is_none())
            .collect();
        // Both reads in flight at once, then each awaited (a pin taken and
        // dropped: the page stays cached for the write).
        for &i in &need {
            c.read_async(&self.shared, i, i + 1, false);
        }
        for &i in &need {
            drop(self.page_async(i).await?);
        }
        self.write_at(buf, offset)
    }

    /// [`File::sync`] as a future: the write-back, the length and the
    /// `fdatasync` run on a helper thread while the caller's thread goes
    /// on; the result is [`File::sync`]'s. Dropping the future does not stop the sync (its
    /// result is then lost; a later `sync` reports the truth again).
    pub fn sync_async(&self) -> SyncFuture<'_> {
        SyncFuture {
            file: self,
            slot: None,
        }
    }
}

/// Runs a future to completion on the calling thread, parking it between
/// polls: for examples, tests and callers with no runtime. (An executor
/// of a few lines; any runtime's `block_on` does the same.)
pub fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unparker(std::thread::Thread);
    impl std::task::Wake for Unparker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unparker(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
