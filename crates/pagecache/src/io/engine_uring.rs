//! The io_uring engine (`IoEngine::Uring`): one ring per cache, a
//! submission mutex, and one reaper thread that runs the completions.

use super::{Dir, Op, Ticket};
use crate::io::IoPlan;
use crate::sync::unmodelled::Mutex;
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Submission queue entries; the completion queue is four times as big
/// and the kernel keeps overflowing completions (`IORING_FEAT_NODROP`).
const ENTRIES: u32 = 256;
/// The longest the reaper waits for a completion while ops are in flight,
/// and how long it leaves an entry it has seen queued (with no enter
/// since) before it submits it: a batched entry goes out within about
/// twice this, whatever its future does.
pub(crate) const BATCH_WAIT: std::time::Duration = std::time::Duration::from_micros(500);
/// `user_data` of the no-op that tells the reaper to stop.
const STOP: u64 = u64::MAX;

struct Shared {
    ring: IoUring,
    /// Serialises pushes to the submission queue, and counts the
    /// enters that submit (a batched entry pushed before an enter's
    /// count was bumped is submitted by that enter).
    sq: Mutex<u64>,
    /// Ops submitted and not yet completed.
    inflight: AtomicUsize,
    /// The kernel takes a timeout with a wait (`IORING_FEAT_EXT_ARG`):
    /// batched submissions are possible.
    timed_wait: bool,
    /// Serialises the completion queue's consumers: the reaper and
    /// futures' polls (`Uring::reap_now`, which only try it).
    cq: Mutex<()>,
    /// A poll reaped the stop no-op: the reaper stops once idle.
    stop_seen: AtomicBool,
    /// The reaper is in (or about to enter) a wait with no timeout:
    /// nothing was in flight when it looked. A batched submitter that
    /// sees it submits at once (Dekker's pattern with `inflight`).
    idle: AtomicBool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("entries", &self.ring.params().sq_entries())
            .field("inflight", &self.inflight)
            .finish()
    }
}

#[derive(Debug)]
pub(super) struct Uring {
    shared: Arc<Shared>,
    reaper: Mutex<Option<JoinHandle<()>>>,
}

impl Uring {
    pub(super) fn new() -> io::Result<Uring> {
        let ring = IoUring::builder()
            .setup_cqsize(ENTRIES * 4)
            .build(ENTRIES)?;
        let timed_wait = ring.params().is_feature_ext_arg();
        let shared = Arc::new(Shared {
            ring,
            sq: Mutex::new(0),
            inflight: AtomicUsize::new(0),
            timed_wait,
            idle: AtomicBool::new(false),
            cq: Mutex::new(()),
            stop_seen: AtomicBool::new(false),
        });
        let s = shared.clone();
        let reaper = std::thread::Builder::new()
            .name("pagecache-uring".into())
            .spawn(move || reap(&s))?;
        Ok(Uring {
            shared,
            reaper: Mutex::new(Some(reaper)),
        })
    }

    /// Pushes every op the backend lets the ring do; returns the others
    /// (for the thread pool). Ops failed at once complete here. With
    /// `batched`, the entries are queued, not submitted, and the
    /// ticket to flush them is returned (`Engine::submit_batched`).
    pub(super) fn submit_as(&self, ops: Vec<Op>, batched: bool) -> (Vec<Op>, Option<Ticket>) {
        let mut blocking = Vec::new();
        let mut failed = Vec::new();
        let s = &*self.shared;
        let mut g = s.sq.lock();
        let batched = batched && s.timed_wait;
        if self.reaper.lock().is_none() {
            return (ops, None); // shut down: the pool runs them on this thread
        }
        let mut queued = false;
        for op in ops {
            let stream = op.stream && op.dir == Dir::Read;
            let plan = if stream {
                op.file.io_plan_stream(op.offset, op.total(), op.aligned())
            } else {
                op.file
                    .io_plan(op.dir == Dir::Write, op.offset, op.total(), op.aligned())
            };
            let fd = match plan {
                IoPlan::Fd(fd) => fd,
                IoPlan::Call => {
                    blocking.push(op);
                    continue;
                }
                IoPlan::Fail(e) => {
                    failed.push((op, e));
                    continue;
                }
            };
            let (ptr, n, off, dir) = (op.iov.as_ptr(), op.iov.len() as u32, op.offset, op.dir);
            let data = Box::into_raw(Box::new(op)) as u64;
            let entry = match dir {
                // A stream's buffered read in a kernel worker
                // (IOSQE_ASYNC), not inline in this call: the kernel's
                // copy into the frames then runs beside the reader's
                // copy out of them, not before it on the same thread.
                Dir::Read if stream => opcode::Readv::new(types::Fd(fd), ptr, n)
                    .offset(off)
                    .build()
                    .flags(io_uring::squeue::Flags::ASYNC),
                Dir::Read => opcode::Readv::new(types::Fd(fd), ptr, n)
                    .offset(off)
                    .build(),
                Dir::Write => opcode::Writev::new(types::Fd(fd), ptr, n)
                    .offset(off)
                    .build(),
            }
            .user_data(data);
            // SeqCst: one side of the handshake with the reaper's
            // `idle` (see below).
            s.inflight.fetch_add(1, Ordering::SeqCst);
            push(s, &mut g, &entry);
            queued = true;
        }
        // A batched entry waits for its ticket's flush, or the reaper
        // (which submits what has been queued for `BATCH_WAIT`); but a
        // reaper that found nothing in flight waits with no timeout:
        // then this submits now. SeqCst: we counted `inflight`, then
        // read `idle`; the reaper sets `idle`, then reads `inflight`:
        // one of the two sees the other (the reaper then times its
        // wait).
        let reaper_idle = batched
            && queued
            && s.idle.load(Ordering::SeqCst)
            && s.idle.swap(false, Ordering::SeqCst);
        let ticket = if batched && queued && !reaper_idle {
            Some(Ticket(*g))
        } else {
            if queued {
                enter(s, &mut g);
            }
            None
        };
        drop(g);
        for (op, e) in failed {
            op.complete(Err(e));
        }
        (blocking, ticket)
    }

    /// [`super::Engine::reap_now`]: the completions posted, run here if
    /// the queue is not being drained by another thread; returns the ops
    /// whose completion goes on with blocking calls (for the pool).
    #[inline]
    pub(super) fn reap_now(&self) -> Vec<Op> {
        let s = &*self.shared;
        // (Even a look at the queue takes the lock: a queue handle writes
        // its head back when dropped.)
        let Some(g) = s.cq.try_lock() else {
            return Vec::new();
        };
        let mut done = Vec::new();
        // SAFETY: the completion queue's consumers hold `cq`.
        unsafe {
            let mut cq = s.ring.completion_shared();
            cq.sync();
            done.extend(cq.map(|c| (c.user_data(), c.result())));
        }
        drop(g);
        if done.is_empty() {
            return Vec::new();
        }
        let mut blocking = Vec::new();
        for (data, res) in done {
            if data == STOP {
                s.stop_seen.store(true, Ordering::Release);
                continue;
            }
            // SAFETY: as in `reap`: a boxed op leaked by `submit_as`,
            // completed once.
            let op = unsafe { Box::from_raw(data as *mut Op) };
            if op.continues(res) {
                blocking.push(*op);
            } else {
                op.finish(res);
            }
            s.inflight.fetch_sub(1, Ordering::Relaxed);
        }
        blocking
    }

    /// Submits what was queued with `ticket` unless an enter since did.
    pub(super) fn flush(&self, ticket: Ticket) {
        let s = &*self.shared;
        let mut g = s.sq.lock();
        if *g == ticket.0 {
            enter(s, &mut g);
        }
    }

    pub(super) fn shutdown(&self) {
        let Some(h) = self.reaper.lock().take() else {
            return;
        };
        {
            let mut g = self.shared.sq.lock();
            push(
                &self.shared,
                &mut g,
                &opcode::Nop::new().build().user_data(STOP),
            );
            enter(&self.shared, &mut g);
        }
        let _ = h.join();
    }
}

/// Pushes one entry, submitting to make room when the queue is full.
/// The caller holds the submission mutex (`enters`).
fn push(s: &Shared, enters: &mut u64, entry: &squeue::Entry) {
    loop {
        // SAFETY: the submission mutex is held, so this is the only
        // submission queue handle; `entry`'s buffers follow the
        // module's contract (valid until the op completes).
        let pushed = unsafe {
            let mut sq = s.ring.submission_shared();
            let r = sq.push(entry);
            sq.sync();
            r
        };
        if pushed.is_ok() {
            return;
        }
        *enters += 1;
        if s.ring.submit().is_err() {
            // The kernel is busy flushing completions: let the reaper
            // drain them.
            std::thread::yield_now();
        }
    }
}

/// Submits what is queued; errors leave entries for the next enter (a
/// flush, a blocking submission, or the reaper's once its wait times
/// out with ops in flight). The caller holds the submission mutex
/// (`enters`, bumped first: entries pushed before are this enter's).
fn enter(s: &Shared, enters: &mut u64) {
    *enters += 1;
    let _ = s.ring.submit();
}

/// `io_uring_enter` that submits nothing and waits for one completion
/// (with `timed`, for at most `BATCH_WAIT`: `ETIME` then).
fn wait(s: &Shared, timed: bool) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    /// `struct io_uring_getevents_arg`.
    #[repr(C)]
    struct Args {
        sigmask: u64,
        sigmask_sz: u32,
        min_wait_usec: u32,
        ts: u64,
    }
    /// `struct __kernel_timespec`.
    #[repr(C)]
    struct Ts {
        sec: i64,
        nsec: i64,
    }
    const GETEVENTS: u32 = 1;
    const EXT_ARG: u32 = 8;
    let ts = Ts {
        sec: 0,
        nsec: BATCH_WAIT.as_nanos() as i64,
    };
    let args = Args {
        sigmask: 0,
        sigmask_sz: 0,
        min_wait_usec: 0,
        ts: &raw const ts as u64,
    };
    let (flags, arg, size) = if timed {
        (
            GETEVENTS | EXT_ARG,
            (&raw const args).cast::<libc::c_void>(),
            std::mem::size_of::<Args>(),
        )
    } else {
        (GETEVENTS, std::ptr::null(), 0)
    };
    // SAFETY: io_uring_enter on our ring's descriptor, submitting
    // nothing; `arg` (with `ts`) lives across the call and has the
    // kernel's layout and size, or is null with size 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_enter,
            s.ring.as_raw_fd(),
            0u32,
            1u32,
            flags,
            arg,
            size,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn reap(s: &Shared) {
    let mut stopping = false;
    let mut done = Vec::new();
    // Entries seen queued: the enter count then, and when.
    let mut queued: Option<(u64, std::time::Instant)> = None;
    loop {
        // Waits for a completion; with ops in flight (or entries
        // queued), for at most BATCH_WAIT. The reaper submits nothing
        // while a round's entries are fresh (entering the kernel with
        // them would take a round's reads one by one as their futures
        // queue them, before the round's flush: it did, with a p99 of
        // 5-10 ms); an entry it has seen queued for BATCH_WAIT with no
        // enter since (a future not polled again) it submits below.
        let r = if s.timed_wait {
            // SeqCst: the handshake with `submit_as` (idle, then
            // inflight here; inflight, then idle there).
            s.idle.store(true, Ordering::SeqCst);
            if s.inflight.load(Ordering::SeqCst) > 0 || queued.is_some() {
                s.idle.store(false, Ordering::Relaxed);
                wait(s, true)
            } else {
                let r = wait(s, false);
                s.idle.store(false, Ordering::Relaxed);
                r
            }
        } else {
            // No batched entries without timed waits (`submit_as`).
            s.ring.submit_and_wait(1).map(|_| ())
        };
        if s.timed_wait {
            let mut g = s.sq.lock();
            // SAFETY: a length read of the submission queue under the
            // submission mutex (no other handle pushes).
            if unsafe { s.ring.submission_shared().len() } == 0 {
                queued = None;
            } else {
                match queued {
                    // Queued since we first saw them, no enter since.
                    Some((e, t)) if e == *g && t.elapsed() >= BATCH_WAIT => {
                        enter(s, &mut g);
                        queued = None;
                    }
                    Some((e, _)) if e == *g => {}
                    _ => queued = Some((*g, std::time::Instant::now())),
                }
            }
        }
        if let Err(e) = r {
            let code = e.raw_os_error();
            if code != Some(libc::EINTR) && code != Some(libc::EBUSY) && code != Some(libc::ETIME) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        {
            let _g = s.cq.lock();
            // SAFETY: the completion queue's consumers hold `cq`.
            unsafe {
                let mut cq = s.ring.completion_shared();
                cq.sync();
                done.extend(cq.map(|c| (c.user_data(), c.result())));
            }
        }
        if s.stop_seen.load(Ordering::Acquire) {
            stopping = true;
        }
        for (data, res) in done.drain(..) {
            if data == STOP {
                stopping = true;
                continue;
            }
            // SAFETY: every other user_data is a boxed op leaked by
            // `submit`; the kernel completes each entry once.
            let op = unsafe { Box::from_raw(data as *mut Op) };
            op.finish(res);
            s.inflight.fetch_sub(1, Ordering::Relaxed);
        }
        if stopping && s.inflight.load(Ordering::Relaxed) == 0 {
            return;
        }
    }
}
