//! The glue between the cache's futures and an event loop that is not a
//! Rust runtime (a C loop on epoll, Python's asyncio): requests are slots
//! of the caller's table; each has a waker that, wherever it runs (the I/O
//! engine's reaper, a releasing thread, the future's own poll), puts its
//! slot on a ready list and, when the list was empty, writes an eventfd
//! the loop polls. The loop then takes the list and polls those slots.
//! Used by the C ABI's `pc_queue` and the Python package's asyncio queue.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Wake, Waker};

#[derive(Debug)]
struct Shared {
    ready: Mutex<Vec<usize>>,
    efd: RawFd,
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: our own eventfd, closed once (by the last of the list and
        // its wakers, which may outlive it).
        unsafe { libc::close(self.efd) };
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<usize>> {
        self.ready.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: an 8-byte write to our eventfd; a full counter (EAGAIN)
        // is readable already, which is all a signal is for.
        unsafe { libc::write(self.efd, (&raw const one).cast(), 8) };
    }
}

/// Slots woken since the loop last looked, and the eventfd that says so.
#[derive(Debug)]
pub struct ReadyList {
    shared: Arc<Shared>,
}

/// One request's waker: queues its slot once until [`SlotWaker::rearm`].
#[derive(Debug)]
pub struct SlotWaker {
    wake: Arc<Wakeup>,
    waker: Waker,
}

#[derive(Debug)]
struct Wakeup {
    shared: Arc<Shared>,
    slot: usize,
    queued: AtomicBool,
}

impl Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // AcqRel: the loop's `rearm` before its poll happens before a later
        // wake's push, and a wake's effects before the poll it causes.
        if !self.queued.swap(true, Ordering::AcqRel) {
            let mut r = self.shared.lock();
            let first = r.is_empty();
            r.push(self.slot);
            drop(r);
            if first {
                self.shared.signal();
            }
        }
    }
}

impl ReadyList {
    /// An empty list with its eventfd (nonblocking, close-on-exec).
    pub fn new() -> io::Result<ReadyList> {
        // SAFETY: eventfd has no memory arguments.
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ReadyList {
            shared: Arc::new(Shared {
                ready: Mutex::new(Vec::new()),
                efd,
            }),
        })
    }

    /// The eventfd: readable while slots may be ready.
    pub fn fd(&self) -> RawFd {
        self.shared.efd
    }

    /// A waker for the request in `slot` (a slot reused later gets a new
    /// one; a late wake of the old one only costs the new request a poll).
    pub fn waker(&self, slot: usize) -> SlotWaker {
        let wake = Arc::new(Wakeup {
            shared: self.shared.clone(),
            slot,
            queued: AtomicBool::new(false),
        });
        SlotWaker {
            waker: Waker::from(wake.clone()),
            wake,
        }
    }

    /// Clears the eventfd and takes the slots woken since the last call.
    /// Call [`SlotWaker::rearm`] before polling each.
    pub fn take(&self) -> Vec<usize> {
        let mut buf = 0u64;
        // SAFETY: an 8-byte read of our nonblocking eventfd (EAGAIN when
        // nothing was signalled).
        unsafe { libc::read(self.shared.efd, (&raw mut buf).cast(), 8) };
        std::mem::take(&mut *self.shared.lock())
    }

    /// Puts back slots taken and not polled (the caller had no room for
    /// more completions), and signals the eventfd again.
    pub fn put_back(&self, slots: Vec<usize>) {
        if slots.is_empty() {
            return;
        }
        self.shared.lock().extend(slots);
        self.shared.signal();
    }
}

impl SlotWaker {
    /// The waker to poll the request with.
    pub fn waker(&self) -> &Waker {
        &self.waker
    }

    /// Right before polling the request: a wake from now on queues it
    /// again (a wake during the poll is not lost).
    pub fn rearm(&self) {
        // Release: pairs with the wake's AcqRel swap.
        self.wake.queued.store(false, Ordering::Release);
    }
}
