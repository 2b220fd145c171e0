//! `pc_queue`: page requests that never block the caller's thread, for
//! event loops (epoll, io_uring, libuv...): start a request (done at once
//! on a hit, else in flight), learn of completions through an eventfd the
//! loop polls, and collect them with their pins. The C face of the
//! cache's futures (protocol 5.9): each request in flight is a
//! `page_async` / `page_mut_async` future whose waker queues it on the
//! queue's ready list and signals the eventfd; `pc_queue_collect` polls
//! the ready ones (which is also when reads queued by the previous round
//! are submitted, all at once).

use crate::error::{arg, guard, invalid, out, set_last_error};
use crate::file::pc_file;
use crate::pins::{pc_pin, store_pin, Held};
use pagecache::internals::{ReadyList, SlotWaker};
use pagecache::{PageFuture, PageMutFuture};
use std::ffi::c_int;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

/// `pc_queue_page_pin` / `pc_queue_page_latch` result: the request is in
/// flight; its completion will be collected by `pc_queue_collect`.
pub const PC_PENDING: c_int = 1;

/// One collected request: the `user_data` it was started with, its
/// result (0, or a negative `errno`: then `pc_last_error()` after the
/// collect describes the last failed one), and on success the page held
/// in `pin` (released with `pc_pin_release`, as any pin).
#[repr(C)]
#[derive(Debug)]
pub struct pc_completion {
    /// What the caller gave when it started the request.
    pub user_data: u64,
    /// 0, or a negative `errno`.
    pub result: c_int,
    /// The page, when `result` is 0.
    pub pin: pc_pin,
}

/// A completion queue (opaque): requests in flight and the eventfd that
/// says some are ready. Used by one thread at a time (the event loop's);
/// completions are signalled from the cache's I/O threads.
#[derive(Debug)]
pub struct pc_queue {
    ready: ReadyList,
    reqs: Mutex<Slots>,
}

enum Fut {
    Pin(PageFuture<'static>),
    Latch(PageMutFuture<'static>),
}

struct Request {
    fut: Fut,
    file: *const pc_file,
    index: u64,
    user_data: u64,
    waker: SlotWaker,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("index", &self.index)
            .field("user_data", &self.user_data)
            .finish()
    }
}

// SAFETY: the futures are `Send` but borrow the `pc_file` (a `'static`
// reference made from its box, whose close refuses while the request
// counts on it), and `file` is that same handle's address.
unsafe impl Send for Request {}

#[derive(Debug, Default)]
struct Slots {
    reqs: Vec<Option<Request>>,
    free: Vec<usize>,
    live: usize,
}

impl Request {
    /// Polls the request once; `Ready` with the page held (or the error).
    fn poll(&mut self) -> Poll<io::Result<Held>> {
        let mut cx = Context::from_waker(self.waker.waker());
        match &mut self.fut {
            Fut::Pin(f) => Pin::new(f).poll(&mut cx).map(|r| r.map(Held::Pin)),
            Fut::Latch(f) => Pin::new(f).poll(&mut cx).map(|r| r.map(Held::latch)),
        }
    }

    /// The handle the request counts on.
    fn file(&self) -> &pc_file {
        // SAFETY: the handle lives while the request counts on it (its
        // close refuses meanwhile).
        unsafe { &*self.file }
    }
}

/// Creates a completion queue and stores it in `*out`. Its eventfd
/// (`pc_queue_fd`) becomes readable when requests are ready to collect.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_new(out_queue: *mut *mut pc_queue) -> c_int {
    guard("pc_queue_new", || {
        let o = out(out_queue, "pc_queue_new", "out")?;
        let q = Box::new(pc_queue {
            ready: ReadyList::new()?,
            reqs: Mutex::new(Slots::default()),
        });
        // SAFETY: `o` is non-null and writable (the contract).
        unsafe { o.write(Box::into_raw(q)) };
        Ok(())
    })
}

/// The queue's eventfd: add it to the loop's epoll set (`EPOLLIN`) or
/// poll it with io_uring; readable when requests are ready to collect.
/// The library reads it in `pc_queue_collect` (the caller need not).
/// `-EINVAL` for a NULL queue.
///
/// The reads a round of requests starts are submitted to io_uring by the
/// thread that calls `pc_queue_collect`, and the kernel finishes them with
/// task work on that thread: its blocking call (`epoll_wait`, `poll`)
/// may return `EINTR` when they complete. Retry it, as event loops do
/// for signals.
///
/// # Safety
/// `queue` is NULL or from `pc_queue_new`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_fd(queue: *const pc_queue) -> c_int {
    // SAFETY: the contract.
    match unsafe { queue.as_ref() } {
        Some(q) => q.ready.fd(),
        None => {
            set_last_error("pc_queue_fd: queue is NULL".into());
            -libc::EINVAL
        }
    }
}

/// Requests in flight (started, not yet collected), or `-EINVAL`.
///
/// # Safety
/// `queue` is NULL or from `pc_queue_new`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_pending(queue: *const pc_queue) -> c_int {
    // SAFETY: the contract.
    match unsafe { queue.as_ref() } {
        Some(q) => q.reqs.lock().unwrap_or_else(|e| e.into_inner()).live as c_int,
        None => {
            set_last_error("pc_queue_pending: queue is NULL".into());
            -libc::EINVAL
        }
    }
}

/// Starts pinning page `index` of `file`: returns 0 with the page in
/// `*pin` if it is cached and free (a hit), `PC_PENDING` if it is being
/// read or written (the request's completion, with `user_data`, comes
/// out of `pc_queue_collect`; `*pin` is untouched), or a negative errno
/// (`-ENXIO` past the last page). Never blocks on I/O or on another
/// holder. The file cannot be closed while requests on it are in flight
/// (`-EBUSY`).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_page_pin(
    queue: *const pc_queue,
    file_: *const pc_file,
    index: u64,
    user_data: u64,
    pin: *mut pc_pin,
) -> c_int {
    start(
        queue,
        file_,
        index,
        user_data,
        pin,
        false,
        "pc_queue_page_pin",
    )
}

/// As `pc_queue_page_pin`, latching the page for writing (as
/// `pc_page_latch`: every other pin of it drained first; dirty when
/// released). `-EACCES` through a read-only handle.
///
/// # Safety
/// As `pc_queue_page_pin`.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_page_latch(
    queue: *const pc_queue,
    file_: *const pc_file,
    index: u64,
    user_data: u64,
    pin: *mut pc_pin,
) -> c_int {
    start(
        queue,
        file_,
        index,
        user_data,
        pin,
        true,
        "pc_queue_page_latch",
    )
}

fn start(
    queue: *const pc_queue,
    file_: *const pc_file,
    index: u64,
    user_data: u64,
    pin: *mut pc_pin,
    latch: bool,
    what: &str,
) -> c_int {
    let mut pending = false;
    let rc = guard(what, || {
        // SAFETY: the contract: null or live handles of this library.
        let q = unsafe { arg(queue, what, "queue") }?;
        // SAFETY: as above.
        let f = unsafe { arg(file_, what, "file") }?;
        let p = out(pin, what, "pin")?;
        // SAFETY: the handle lives until its close, which refuses while
        // this request (then its pin) counts on it: 'static is never
        // outlived.
        let sf: &'static pc_file = unsafe { &*(f as *const pc_file) };
        let mut slots = q.reqs.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.free.pop().unwrap_or(slots.reqs.len());
        let mut r = Request {
            fut: if latch {
                Fut::Latch(sf.file.page_mut_async(index))
            } else {
                Fut::Pin(sf.file.page_async(index))
            },
            file: f,
            index,
            user_data,
            waker: q.ready.waker(slot),
        };
        f.pins.add();
        match r.poll() {
            Poll::Ready(Ok(held)) => {
                store_pin(p, held, index, &f.pins);
                slots.free.push(slot);
                Ok(())
            }
            Poll::Ready(Err(e)) => {
                f.pins.sub();
                slots.free.push(slot);
                Err(e)
            }
            Poll::Pending => {
                if slot == slots.reqs.len() {
                    slots.reqs.push(Some(r));
                } else {
                    slots.reqs[slot] = Some(r);
                }
                slots.live += 1;
                pending = true;
                Ok(())
            }
        }
    });
    if rc == 0 && pending {
        PC_PENDING
    } else {
        rc
    }
}

/// Collects up to `max` finished requests into `out[0..n]` and returns
/// `n` (0 if none is ready: not an error), or a negative errno. Polls the
/// requests whose state changed since the last call (which also submits
/// the reads the previous round queued); call it whenever the eventfd is
/// readable (it clears it, and signals it again if more than `max` are
/// ready). A completion with `result` 0 holds its page in `pin`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid: `out` has room for
/// `max` completions.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_collect(
    queue: *const pc_queue,
    out_: *mut pc_completion,
    max: usize,
) -> c_int {
    let mut n = 0usize;
    let rc = guard("pc_queue_collect", || {
        // SAFETY: the contract.
        let q = unsafe { arg(queue, "pc_queue_collect", "queue") }?;
        let o = out(out_, "pc_queue_collect", "out")?;
        if max == 0 {
            return Err(invalid("pc_queue_collect: max is 0"));
        }
        let ready = q.ready.take();
        let mut slots = q.reqs.lock().unwrap_or_else(|e| e.into_inner());
        let mut last_err = None;
        let mut rest = Vec::new();
        for slot in ready {
            if n == max {
                rest.push(slot);
                continue;
            }
            let Some(Some(r)) = slots.reqs.get_mut(slot) else {
                continue; // a late wake of a request collected already
            };
            // A wake during the poll queues the request again.
            r.waker.rearm();
            let res = match r.poll() {
                Poll::Pending => continue,
                Poll::Ready(res) => res,
            };
            let r = slots.reqs[slot].take().expect("polled above");
            slots.free.push(slot);
            slots.live -= 1;
            // SAFETY: `o` has room for `max` entries (the contract) and
            // `n < max`; fields written through raw pointers (the caller's
            // memory may be uninitialized).
            let c = unsafe { o.add(n) };
            let f = r.file();
            let result = match res {
                Ok(held) => {
                    // SAFETY: as above.
                    store_pin(unsafe { &raw mut (*c).pin }, held, r.index, &f.pins);
                    0
                }
                Err(e) => {
                    f.pins.sub();
                    // SAFETY: as above.
                    unsafe {
                        let pin = &raw mut (*c).pin;
                        (&raw mut (*pin).data).write(std::ptr::null_mut());
                        (&raw mut (*pin).len).write(0);
                        (&raw mut (*pin).index).write(r.index);
                        (&raw mut (*pin).hint).write(crate::PC_NO_HINT);
                        (&raw mut (*pin).held_).write(0);
                    }
                    let errno = -pagecache::errno(&e);
                    last_err = Some(e);
                    errno
                }
            };
            // SAFETY: as above.
            unsafe {
                (&raw mut (*c).user_data).write(r.user_data);
                (&raw mut (*c).result).write(result);
            }
            n += 1;
        }
        drop(slots);
        q.ready.put_back(rest);
        if let Some(e) = last_err {
            set_last_error(format!("pc_queue_collect: {e}"));
        }
        Ok(())
    });
    if rc == 0 {
        n as c_int
    } else {
        rc
    }
}

/// Cancels the requests in flight started with `user_data` (a timeout
/// of the caller's, a client gone): their reads finish in the background
/// and leave the pages cached, and they will not be collected. Returns how
/// many were cancelled (0 if none was in flight: finished ones are
/// collected, not cancelled), or `-EINVAL`.
///
/// # Safety
/// `queue` is NULL or from `pc_queue_new`, not yet freed.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_cancel(queue: *const pc_queue, user_data: u64) -> c_int {
    let mut cancelled = 0;
    let rc = guard("pc_queue_cancel", || {
        // SAFETY: the contract.
        let q = unsafe { arg(queue, "pc_queue_cancel", "queue") }?;
        let gone: Vec<Request> = {
            let mut slots = q.reqs.lock().unwrap_or_else(|e| e.into_inner());
            let mut gone = Vec::new();
            for slot in 0..slots.reqs.len() {
                if slots.reqs[slot]
                    .as_ref()
                    .is_some_and(|r| r.user_data == user_data)
                {
                    gone.push(slots.reqs[slot].take().expect("checked"));
                    slots.free.push(slot);
                    slots.live -= 1;
                }
            }
            gone
        };
        for r in gone {
            cancel(r);
            cancelled += 1;
        }
        Ok(())
    });
    if rc == 0 {
        cancelled
    } else {
        rc
    }
}

/// Drops a request in flight: its future first (it gives back what it
/// holds or waits for), then the count that kept its file open.
fn cancel(r: Request) {
    let pins = &r.file().pins as *const crate::pin_count::PinCount;
    drop(r);
    // SAFETY: the handle lives until this count is gone.
    unsafe { &*pins }.sub();
}

/// Frees the queue. Requests still in flight are cancelled: their reads
/// finish in the background and leave the pages cached, and no page is
/// handed to anyone. Returns how many were cancelled, or `-EINVAL`.
///
/// # Safety
/// `queue` is NULL or from `pc_queue_new`, not yet freed; not used after.
#[no_mangle]
pub unsafe extern "C" fn pc_queue_free(queue: *mut pc_queue) -> c_int {
    let mut cancelled = 0;
    let rc = guard("pc_queue_free", || {
        if queue.is_null() {
            return Err(invalid("pc_queue_free: queue is NULL"));
        }
        // SAFETY: from pc_queue_new, freed once (the contract).
        let q = unsafe { Box::from_raw(queue) };
        let slots = q.reqs.into_inner().unwrap_or_else(|e| e.into_inner());
        for r in slots.reqs.into_iter().flatten() {
            cancel(r);
            cancelled += 1;
        }
        Ok(())
    });
    if rc == 0 {
        cancelled
    } else {
        rc
    }
}
