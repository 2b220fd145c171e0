//! The asynchronous I/O engines: many reads and writes in flight from one
//! thread, each finished by a completion that may run on another thread.
//!
//! - [`IoEngine::Uring`]: one io_uring per cache. Submitters push entries
//!   under a mutex and enter the kernel once per batch; one reaper thread
//!   waits for completions and runs them. Reads and writes are `READV` /
//!   `WRITEV` of frames straight into the file (`O_DIRECT` where the file
//!   has it).
//! - [`IoEngine::Threads`]: the portable fallback, a pool of I/O threads
//!   (started on demand, up to `Config::io_threads`) doing `preadv` /
//!   `pwritev` through the backend.
//!
//! [`IoEngine::Auto`] takes io_uring where the kernel allows it (it may be
//! disabled by the `io_uring_disabled` sysctl or refused by a seccomp
//! profile) and the pool otherwise; the environment variable
//! `PAGECACHE_IO_ENGINE` (`uring` or `threads`) overrides `Auto`, which is
//! how CI runs the test suite on both.
//!
//! # Contract of an [`Op`]
//!
//! The op's buffers (frames) must stay valid, and nobody else may touch
//! their bytes, until its `done` has run: the submitter holds the pages
//! latched (reads) or pinned with write-back in flight (writes), and the
//! engine drains every op before the cache's memory goes away
//! ([`Engine::shutdown`], run when the last user handle of the cache drops).
//! `done` runs exactly once, on the reaper, a pool thread, or the submitter
//! (an op the backend refused at once).

use super::{read_vectored_full, write_full, BackendFile};
use crate::sync::unmodelled::{Condvar, Mutex};
use std::io::{self, IoSliceMut};
use std::sync::Arc;

/// Which asynchronous I/O engine a cache uses (`Config::io_engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoEngine {
    /// io_uring where available, else the thread pool (default); the
    /// environment variable `PAGECACHE_IO_ENGINE=uring|threads` overrides.
    #[default]
    Auto,
    /// io_uring; creating a cache fails if the kernel refuses it.
    Uring,
    /// A pool of I/O threads doing `preadv` / `pwritev`.
    Threads,
}

impl IoEngine {
    /// The engine's name as the environment variable spells it.
    pub fn name(self) -> &'static str {
        match self {
            IoEngine::Auto => "auto",
            IoEngine::Uring => "uring",
            IoEngine::Threads => "threads",
        }
    }
}

/// Read into, or write from, an op's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    Read,
    Write,
}

/// A batched submission's place in the ring's sequence of enters
/// ([`Engine::submit_batched`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

/// What to do when an op finishes: its result (bytes transferred, which
/// is less than asked only at end of file for reads).
pub(crate) type Done = Box<dyn FnOnce(io::Result<usize>) + Send>;

/// One vectored transfer between frames and a file.
pub(crate) struct Op {
    pub(crate) file: Arc<dyn BackendFile>,
    pub(crate) dir: Dir,
    /// The buffers, in file order; see the module's contract.
    pub(crate) iov: Vec<libc::iovec>,
    pub(crate) offset: u64,
    /// A read of a sequential stream: planned with
    /// [`BackendFile::io_plan_stream`].
    #[cfg_attr(loom, allow(dead_code))] // (no io_uring under loom)
    pub(crate) stream: bool,
    pub(crate) done: Done,
}

// SAFETY: an op is a set of raw buffers plus a `Send` closure; the buffers
// belong to frames whose owner (the submitter's latch or write-back pin) is
// handed to whichever thread runs `done` (the module's contract).
unsafe impl Send for Op {}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Op")
            .field("dir", &self.dir)
            .field("buffers", &self.iov.len())
            .field("offset", &self.offset)
            .finish()
    }
}

impl Op {
    fn total(&self) -> usize {
        self.iov.iter().map(|v| v.iov_len).sum()
    }

    /// Whether every buffer, its length, and the offset are aligned for
    /// direct I/O.
    #[cfg_attr(loom, allow(dead_code))]
    fn aligned(&self) -> bool {
        let a = super::DIRECT_ALIGN;
        self.offset as usize % a == 0
            && self
                .iov
                .iter()
                .all(|v| v.iov_base as usize % a == 0 && v.iov_len % a == 0)
    }

    /// Transfers the bytes from `skip` on with blocking calls on this
    /// thread. Returns the total done, `skip` included.
    fn transfer_from(&self, skip: usize) -> io::Result<usize> {
        let rest = super::iov_after(&self.iov, skip);
        match self.dir {
            Dir::Read => {
                let mut bufs: Vec<IoSliceMut<'_>> = rest
                    .iter()
                    .map(|v| {
                        // SAFETY: the module's contract: the buffer is valid
                        // and ours (latched, nobody else touches it) until
                        // `done` runs.
                        let b = unsafe {
                            std::slice::from_raw_parts_mut(v.iov_base.cast::<u8>(), v.iov_len)
                        };
                        IoSliceMut::new(b)
                    })
                    .collect();
                Ok(skip + read_vectored_full(&*self.file, &mut bufs, self.offset + skip as u64)?)
            }
            Dir::Write => {
                // Raw buffers, no `&[u8]`: a writer may be changing these
                // frames (see `BackendFile::write_raw`).
                // SAFETY: the module's contract: the buffers are valid
                // until `done` runs.
                unsafe { write_full(&*self.file, &rest, self.offset + skip as u64) }
                    .map(|()| self.total())
            }
        }
    }

    /// Runs the op to the end on this thread and completes it.
    pub(crate) fn run(self) {
        let res = self.transfer_from(0);
        self.complete(res);
    }

    /// Hands `res` to the op's completion, after dropping the op's own
    /// reference to its file and its buffer list: whoever the completion
    /// wakes may let the file go and expect its descriptor closed on
    /// return (`PageCache::forget` after a failed `close`), which a
    /// reference still held by this engine thread would delay.
    fn complete(self, res: io::Result<usize>) {
        let Op {
            file, iov, done, ..
        } = self;
        drop((file, iov));
        done(res);
    }

    /// Whether [`Op::finish`] of `res` goes on with blocking calls (a
    /// short transfer that is not end of file, a retryable error).
    #[cfg_attr(loom, allow(dead_code))]
    fn continues(&self, res: i32) -> bool {
        if res < 0 {
            matches!(-res, libc::EINVAL | libc::EAGAIN | libc::EINTR)
        } else {
            let n = res as usize;
            !(n == self.total() || (n == 0 && self.dir == Dir::Read))
        }
    }

    /// Completes an op the kernel finished with `res` (bytes, or `-errno`):
    /// a short transfer that is not end of file, and errors that a blocking
    /// retry may clear (a refused `O_DIRECT` transfer: the backend then
    /// switches the file to buffered I/O), continue on this thread.
    #[cfg_attr(loom, allow(dead_code))]
    fn finish(self, res: i32) {
        let res = if res < 0 {
            match -res {
                libc::EINVAL | libc::EAGAIN | libc::EINTR => self.transfer_from(0),
                e => Err(io::Error::from_raw_os_error(e)),
            }
        } else {
            let n = res as usize;
            if n == self.total() || (n == 0 && self.dir == Dir::Read) {
                Ok(n)
            } else {
                self.transfer_from(n)
            }
        };
        self.complete(res);
    }
}

/// Completion of one op that a thread waits for: the op's result, or
/// whatever its completion hands over.
#[derive(Debug)]
pub(crate) struct Oneshot<T = io::Result<usize>> {
    slot: Mutex<Option<T>>,
    ready: Condvar,
}

impl<T: Send + 'static> Oneshot<T> {
    pub(crate) fn new() -> Arc<Oneshot<T>> {
        Arc::new(Oneshot {
            slot: Mutex::new(None),
            ready: Condvar::new(),
        })
    }
    /// A completion that hands its value to [`Oneshot::wait`].
    pub(crate) fn done(self: &Arc<Self>) -> impl FnOnce(T) + Send + 'static {
        let me = self.clone();
        move |v| {
            *me.slot.lock() = Some(v);
            me.ready.notify_one();
        }
    }
    /// Waits for the value. Context: sleeps.
    pub(crate) fn wait(&self) -> T {
        crate::sync::may_block("an I/O completion");
        let mut g = self.slot.lock();
        loop {
            if let Some(r) = g.take() {
                return r;
            }
            self.ready.wait(&mut g);
        }
    }
}

/// A cache's engine.
#[derive(Debug)]
pub(crate) struct Engine {
    kind: IoEngine,
    /// Loom only: whether ops wait in `deferred` for a model's own
    /// "reaper" thread ([`Engine::run_deferred`]) instead of running on
    /// the submitter, and the ops waiting.
    #[cfg(loom)]
    deferred: crate::sync::Mutex<(bool, Vec<Op>)>,
    #[cfg(not(loom))]
    uring: Option<uring::Uring>,
    #[cfg(not(loom))]
    pool: pool::Pool,
}

impl Engine {
    /// Starts the engine `asked` resolves to (see [`IoEngine::Auto`]).
    /// `threads` caps the thread pool. Context: may sleep (spawns the
    /// reaper).
    pub(crate) fn new(asked: IoEngine, threads: usize) -> io::Result<Engine> {
        let asked = match asked {
            IoEngine::Auto => match std::env::var("PAGECACHE_IO_ENGINE").as_deref() {
                Ok("uring") => IoEngine::Uring,
                Ok("threads") => IoEngine::Threads,
                Ok("") | Ok("auto") | Err(_) => IoEngine::Auto,
                Ok(other) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("PAGECACHE_IO_ENGINE={other}: expected uring, threads or auto"),
                    ))
                }
            },
            k => k,
        };
        #[cfg(loom)]
        {
            let _ = threads;
            Ok(Engine {
                kind: asked,
                deferred: crate::sync::Mutex::with_class(
                    (false, Vec::new()),
                    crate::sync::LockClass::Other,
                ),
            })
        }
        #[cfg(not(loom))]
        {
            let pool = pool::Pool::new(threads.max(1));
            let uring = match asked {
                IoEngine::Threads => None,
                IoEngine::Uring => Some(uring::Uring::new().map_err(|e| {
                    crate::error::context(e, "starting the io_uring engine".to_string())
                })?),
                IoEngine::Auto => uring::Uring::new().ok(),
            };
            let kind = if uring.is_some() {
                IoEngine::Uring
            } else {
                IoEngine::Threads
            };
            Ok(Engine { kind, uring, pool })
        }
    }

    /// The engine in use: [`IoEngine::Uring`] or [`IoEngine::Threads`].
    pub(crate) fn kind(&self) -> IoEngine {
        self.kind
    }

    /// Starts every op; returns without waiting (an op the backend fails at
    /// once completes on this thread). Context: no sleep beyond the
    /// submission mutex; the caller may hold latches and pins (of the ops'
    /// pages), no tree lock.
    pub(crate) fn submit(&self, ops: Vec<Op>) {
        #[cfg(loom)]
        {
            let mut q = self.deferred.lock();
            if q.0 {
                q.1.extend(ops);
                return;
            }
            drop(q);
            for op in ops {
                op.run();
            }
        }
        #[cfg(not(loom))]
        {
            let rest = match &self.uring {
                Some(u) => u.submit_as(ops, false).0,
                None => ops,
            };
            self.pool.submit(rest);
        }
    }

    /// As [`Engine::submit`], for callers that do not wait on this thread
    /// (futures): with io_uring the entries are queued without entering
    /// the kernel, and the returned ticket is handed to [`Engine::flush`]
    /// a moment later (a future wakes itself and flushes when polled
    /// again, after its executor ran the other ready tasks, which queue
    /// theirs): one system call and one device notification for the reads
    /// of a whole round of tasks. An enter by anyone since (another
    /// flush, a blocking submission) submits them too; a reaper waiting
    /// with nothing in flight makes the submitter enter at once; and the
    /// reaper submits entries it has seen queued for
    /// [`uring::BATCH_WAIT`] with no enter since, so an entry whose ticket
    /// is never flushed still goes out (within about 1 ms). `None`:
    /// nothing to flush.
    /// Context: as `submit`.
    pub(crate) fn submit_batched(&self, ops: Vec<Op>) -> Option<Ticket> {
        #[cfg(loom)]
        {
            self.submit(ops);
            None
        }
        #[cfg(not(loom))]
        {
            let (rest, ticket) = match &self.uring {
                Some(u) => u.submit_as(ops, true),
                None => (ops, None),
            };
            self.pool.submit(rest);
            ticket
        }
    }

    /// Submits the entries queued with `ticket` unless an enter since did.
    /// Context: no sleep but the submission mutex and one system call.
    pub(crate) fn flush(&self, ticket: Ticket) {
        #[cfg(not(loom))]
        if let Some(u) = &self.uring {
            u.flush(ticket);
        }
        #[cfg(loom)]
        let _ = ticket;
    }

    /// Runs the completions the kernel has posted, on this thread, if no
    /// other thread is running them right now: a future's poll takes its
    /// own completion (and its neighbours') without waiting for the
    /// reaper thread to be scheduled. An op whose completion would go on
    /// with blocking calls goes to the thread pool instead. Context: no
    /// sleep (a try-lock); the caller holds no lock.
    #[inline]
    pub(crate) fn reap_now(&self) {
        #[cfg(not(loom))]
        if let Some(u) = &self.uring {
            let blocking = u.reap_now();
            if !blocking.is_empty() {
                self.pool.submit(blocking);
            }
        }
    }

    /// Loom only: from now on ops wait for [`Engine::run_deferred`]
    /// (`defer`), or run on their submitter again.
    #[cfg(loom)]
    pub(crate) fn defer(&self, defer: bool) {
        self.deferred.lock().0 = defer;
    }

    /// Loom only: runs the ops waiting, on this thread (a model's reaper);
    /// returns how many.
    #[cfg(loom)]
    pub(crate) fn run_deferred(&self) -> usize {
        let ops = std::mem::take(&mut self.deferred.lock().1);
        let n = ops.len();
        for op in ops {
            op.run();
        }
        n
    }

    /// Waits for every op in flight, then stops the threads and closes the
    /// ring. Later submissions run on the submitter. Idempotent (the cache's
    /// last handle calls it; `Drop` calls it again, which covers an engine
    /// whose cache failed to be built). Context: sleeps; not on an engine
    /// thread.
    pub(crate) fn shutdown(&self) {
        #[cfg(not(loom))]
        {
            if let Some(u) = &self.uring {
                u.shutdown();
            }
            self.pool.shutdown();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(not(loom))]
mod pool {
    //! The thread-pool engine (and io_uring's helper for ops the backend
    //! wants done by blocking calls).

    use super::Op;
    use crate::sync::unmodelled::{Condvar, Mutex};
    use std::collections::VecDeque;
    use std::sync::Arc;
    use std::thread::JoinHandle;

    #[derive(Debug, Default)]
    struct Queue {
        ops: VecDeque<Op>,
        idle: usize,
        stop: bool,
    }

    #[derive(Debug, Default)]
    struct Shared {
        q: Mutex<Queue>,
        more: Condvar,
    }

    #[derive(Debug)]
    pub(super) struct Pool {
        shared: Arc<Shared>,
        threads: Mutex<Vec<JoinHandle<()>>>,
        max: usize,
    }

    impl Pool {
        pub(super) fn new(max: usize) -> Pool {
            Pool {
                shared: Arc::default(),
                threads: Mutex::new(Vec::new()),
                max,
            }
        }

        pub(super) fn submit(&self, ops: Vec<Op>) {
            if ops.is_empty() {
                return;
            }
            let mut q = self.shared.q.lock();
            if q.stop {
                drop(q);
                ops.into_iter().for_each(Op::run);
                return;
            }
            let n = ops.len();
            q.ops.extend(ops);
            let want = n.saturating_sub(q.idle);
            drop(q);
            if want > 0 {
                let mut threads = self.threads.lock();
                for _ in 0..want.min(self.max.saturating_sub(threads.len())) {
                    let shared = self.shared.clone();
                    match std::thread::Builder::new()
                        .name("pagecache-io".into())
                        .spawn(move || worker(&shared))
                    {
                        Ok(h) => threads.push(h),
                        Err(_) => break,
                    }
                }
                if threads.is_empty() {
                    // No thread could be started: do the work here.
                    drop(threads);
                    let ops: Vec<Op> = self.shared.q.lock().ops.drain(..).collect();
                    ops.into_iter().for_each(Op::run);
                    return;
                }
            }
            for _ in 0..n {
                self.shared.more.notify_one();
            }
        }

        pub(super) fn shutdown(&self) {
            self.shared.q.lock().stop = true;
            self.shared.more.notify_all();
            for h in self.threads.lock().drain(..) {
                let _ = h.join();
            }
        }
    }

    fn worker(shared: &Shared) {
        let mut q = shared.q.lock();
        loop {
            if let Some(op) = q.ops.pop_front() {
                drop(q);
                op.run();
                q = shared.q.lock();
            } else if q.stop {
                return; // the queue is drained
            } else {
                q.idle += 1;
                shared.more.wait(&mut q);
                q.idle -= 1;
            }
        }
    }
}

#[cfg(not(loom))]
#[path = "engine_uring.rs"]
mod uring;
