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
        let _polling = crate::sync::polling();
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
    checked: bool,
    throttle: Throttle,
}

impl<'a> Future for PageMutFuture<'a> {
    type Output = io::Result<PageMut<'a>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let _polling = crate::sync::polling();
        let this = &mut *self;
        let file = this.file;
        let index = this.get.index();
        if !this.checked {
            file.check_writable("page_mut")?;
            file.check_page(index)?;
            this.checked = true;
        }
        // The dirty throttle, as `page_mut`'s, as a wait of the future.
        std::task::ready!(this.throttle.poll(file.inner(), cx));
        let frame = match this.get.poll(file.inner(), &file.shared, cx) {
            Poll::Ready(r) => r?,
            Poll::Pending => return Poll::Pending,
        };
        Poll::Ready(Ok(file.latched(frame, index, false)))
    }
}

impl Drop for PageMutFuture<'_> {
    fn drop(&mut self) {
        self.throttle.cancel(self.file.inner());
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
        let _polling = crate::sync::polling();
        let this = &mut *self;
        if let Some(h) = &this.slot {
            let r = std::task::ready!(h.poll(cx.waker()));
            this.slot = None;
            return Poll::Ready(r);
        }
        let h = Handoff::new(cx.waker());
        let (done, file) = (h.clone(), this.file.clone());
        // On one of the cache's helper threads (reused; `cache/helpers.rs`).
        this.file.inner().helpers.run(Box::new(move || {
            let r = file.sync();
            drop(file);
            let _ = done.complete(r);
        }))?;
        this.slot = Some(h);
        Poll::Pending
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

/// The dirty throttle as a step of a future (`Inner::poll_balance_dirty`):
/// ready at once under the dirty limit; past it, woken by the flusher's
/// passes as a throttled thread is. [`Throttle::cancel`] when dropped.
#[derive(Debug, Default)]
struct Throttle {
    at: Option<(u64, std::time::Instant)>,
    counted: bool,
    done: bool,
}

impl Throttle {
    fn poll(&mut self, c: &crate::cache::Inner, cx: &mut Context<'_>) -> Poll<()> {
        if !self.done {
            std::task::ready!(c.poll_balance_dirty(&mut self.at, &mut self.counted, cx));
            self.done = true;
        }
        Poll::Ready(())
    }

    fn cancel(&mut self, c: &crate::cache::Inner) {
        c.throttle_cancel(&mut self.counted);
    }
}

impl Future for ThrottleFuture<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        this.throttle.poll(this.file.inner(), cx)
    }
}

/// [`Throttle`] as a future of its own.
#[derive(Debug)]
struct ThrottleFuture<'a> {
    file: &'a File,
    throttle: Throttle,
}

impl Drop for ThrottleFuture<'_> {
    fn drop(&mut self) {
        self.throttle.cancel(self.file.inner());
    }
}

/// One page of `write_at_async`: the page latched and drained as a future
/// (read first unless the write covers all of it), then, within one poll,
/// the size lock shared up to the page (as a future too: `poll_read`) and
/// the bytes written (`Inner::write_latched`). The size lock is taken at
/// the start of each poll and never held across one (shared holds are
/// counted per thread); a page truncated while the future held its latch
/// without it is let go and looked up again, so no byte lands in a page
/// `set_len` removed.
#[derive(Debug)]
struct WritePage<'a> {
    file: &'a File,
    get: GetPage,
    reg: crate::sync::waitq::Registration,
    off: usize,
    src: &'a [u8],
}

impl Future for WritePage<'_> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let (c, fs) = (this.file.inner(), &this.file.shared);
        let index = this.get.index();
        let size = std::task::ready!(fs.size.poll_read(index, &mut this.reg, cx.waker()));
        loop {
            let f = match this.get.poll(c, fs, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r?,
            };
            let d = c.desc(f);
            if d.snapshot().is_removed() {
                // Cut by `set_len` between polls: look it up again.
                d.unlatch();
                c.release(f);
                this.get = if this.src.len() == c.page_size {
                    GetPage::overwrite(index)
                } else {
                    GetPage::new(index, true)
                };
                continue;
            }
            c.write_latched(fs, f, index, this.off, this.src);
            drop(size);
            return Poll::Ready(Ok(()));
        }
    }
}

impl Drop for WritePage<'_> {
    fn drop(&mut self) {
        crate::sync::waitq::cancel(&mut self.reg);
        if self.get.is_live() {
            self.get.cancel(self.file.inner());
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
    /// pin of it and every run over it are dropped, reading the page on a
    /// miss, all without blocking the thread (past the cache's dirty limit
    /// it first waits for write-back, as `page_mut` does, as a future).
    /// Cancel-safe.
    pub fn page_mut_async(&self, index: u64) -> PageMutFuture<'_> {
        PageMutFuture {
            file: self,
            get: GetPage::new(index, true),
            checked: false,
            throttle: Throttle::default(),
        }
    }

    /// [`File::optimistic`] as a future: a view of page `index` once it is
    /// cached (a hit is ready on the first poll, writing nothing shared);
    /// a miss reads it in without blocking the thread. Cancel-safe.
    pub fn optimistic_async(
        &self,
        index: u64,
    ) -> impl Future<Output = io::Result<Optimistic<'_>>> + Send + '_ {
        Polled(self.optimistic_async_inner(index))
    }

    async fn optimistic_async_inner(&self, index: u64) -> io::Result<Optimistic<'_>> {
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
    pub fn read_at_async<'a>(
        &'a self,
        buf: &'a mut [u8],
        offset: u64,
    ) -> impl Future<Output = io::Result<usize>> + Send + 'a {
        Polled(self.read_at_async_inner(buf, offset))
    }

    async fn read_at_async_inner(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
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
                // (No dirty victim written back here: `Polled`.)
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

    /// [`File::write_at`] as a future: the same bytes, length and errors,
    /// without blocking the thread at any point: past the dirty limit it
    /// waits for write-back as a future; each page is latched as
    /// `page_mut_async` latches it (a partial first or last page not
    /// cached is read first; a page the write covers is not read), waiting
    /// for its readers, its writers and the runs over it as a future; the
    /// bytes go in under the file's size lock, taken within one poll.
    /// Atomic per page, as `write_at`. Cancel-safe: dropped, it has
    /// written the pages before the one it waited for, and no other.
    pub fn write_at_async<'a>(
        &'a self,
        buf: &'a [u8],
        offset: u64,
    ) -> impl Future<Output = io::Result<()>> + Send + 'a {
        Polled(self.write_at_async_inner(buf, offset))
    }

    async fn write_at_async_inner(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.check_writable("write")?;
        if buf.is_empty() {
            return Ok(());
        }
        let c = self.inner();
        let fs = &self.shared;
        let end = c.write_end(fs, buf.len(), offset)?;
        // The dirty throttle, as `write_at`'s, as a wait of the future.
        ThrottleFuture {
            file: self,
            throttle: Throttle::default(),
        }
        .await;
        // A missing partial last page is read now, in flight with the
        // first's (as `write_at`); a hint: its error surfaces below.
        c.read_last_ahead(fs, offset, end);
        let ps = c.page_size;
        let mut done = 0;
        while done < buf.len() {
            let pos = offset + done as u64;
            let index = pos >> c.shift;
            let off = (pos & (ps as u64 - 1)) as usize;
            let n = (ps - off).min(buf.len() - done);
            WritePage {
                file: self,
                get: if n == ps {
                    GetPage::overwrite(index)
                } else {
                    GetPage::new(index, true)
                },
                reg: Default::default(),
                off,
                src: &buf[done..done + n],
            }
            .await?;
            done += n;
        }
        Ok(())
    }

    /// [`File::sync`] as a future: the write-back, the length and the
    /// `fdatasync` run on one of the cache's helper threads (at most four,
    /// reused, started on demand) while the caller's thread goes on; the
    /// result is [`File::sync`]'s. Dropping the future does not stop the sync (its
    /// result is then lost; a later `sync` reports the truth again).
    pub fn sync_async(&self) -> SyncFuture<'_> {
        SyncFuture {
            file: self,
            slot: None,
        }
    }
}

/// A future of the crate's whose polls are marked as such (the rule that
/// no poll blocks, `sync::polling`).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
struct Polled<F>(F);

impl<F: Future> Future for Polled<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _polling = crate::sync::polling();
        // Whatever the future starts (readahead, runs of misses) takes
        // frames without writing a dirty victim back on this thread.
        let _defer = crate::cache::DeferDirty::new();
        // SAFETY: structural pinning of the only field: `Polled` has no
        // `Drop` and no `Unpin` impl of its own and never moves `F` out.
        unsafe { self.map_unchecked_mut(|p| &mut p.0) }.poll(cx)
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
