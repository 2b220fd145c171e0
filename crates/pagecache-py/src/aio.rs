//! asyncio: `await f.page_async(i)`, `await f.page_mut_async(i)`,
//! `await f.read_at_async(offset, n)`. Each call is one of the cache's
//! futures (protocol 5.9), driven by an `AsyncQueue` per event loop
//! (`pagecache._queue_for`): the future's waker, run on the cache's I/O
//! thread without the GIL, queues the request on a ready list and signals
//! an eventfd the loop watches (`loop.add_reader`); the loop's callback
//! (`AsyncQueue.collect`, GIL held, on the loop's thread) polls the ready
//! requests and resolves their asyncio futures. So no thread waits for a
//! miss, the GIL is not held while a read is in flight, and a hit resolves
//! at once (the first poll). A cancelled asyncio future drops its request
//! (cancel-safe: what it held or waited for is given back).

use crate::error::os_err;
use crate::held::drop_detached;
use crate::page::{Owner, Page, PageGuard};
use pagecache::internals::{ReadyList, SlotWaker};
use pagecache::{PageFuture, PageMutFuture};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

/// What a request waits for.
enum Kind {
    Pin(PageFuture<'static>),
    Mut(PageMutFuture<'static>),
    /// `read_at_async`: the future borrows `buf` (a box owned by the
    /// request, dropped after the future).
    Read {
        fut: Pin<Box<dyn Future<Output = io::Result<usize>> + Send>>,
        buf: *mut [u8],
    },
}

/// One request in flight. Field order: the future drops before the
/// buffer it borrows and the file it borrows.
struct Request {
    /// `None` only while being dropped.
    kind: Option<Kind>,
    file: Option<Arc<pagecache::File>>,
    index: u64,
    pyfut: Py<PyAny>,
    waker: SlotWaker,
    /// Distinguishes this request from a later one in the same slot.
    id: u64,
}

// SAFETY: the futures are `Send`; `buf` is a box owned by the request,
// touched only by its future and by the request's drop.
unsafe impl Send for Request {}

impl Drop for Request {
    fn drop(&mut self) {
        // The future first (it may borrow the buffer and the file).
        if let Some(Kind::Read { fut, buf }) = self.kind.take() {
            drop(fut);
            // SAFETY: made by `Box::into_raw` in `read_at_async`; the
            // future that borrowed it is gone.
            drop(unsafe { Box::from_raw(buf) });
        }
        if let Some(f) = self.file.take() {
            drop_detached(f);
        }
    }
}

impl Request {
    fn poll(&mut self) -> Poll<io::Result<Done>> {
        let mut cx = Context::from_waker(self.waker.waker());
        match self.kind.as_mut().expect("a live request has its future") {
            Kind::Pin(f) => Pin::new(f).poll(&mut cx).map(|r| r.map(Done::Ref)),
            Kind::Mut(f) => Pin::new(f).poll(&mut cx).map(|r| r.map(Done::Mut)),
            Kind::Read { fut, buf } => fut.as_mut().poll(&mut cx).map(|r| {
                r.map(|n| {
                    // SAFETY: the future finished: nothing borrows the box.
                    let b = unsafe { &**buf };
                    Done::Bytes(b[..n].to_vec())
                })
            }),
        }
    }
}

enum Done {
    Ref(pagecache::PageRef<'static>),
    Mut(pagecache::PageMut<'static>),
    Bytes(Vec<u8>),
}

#[derive(Default)]
struct Slots {
    reqs: Vec<Option<Request>>,
    free: Vec<usize>,
    next_id: u64,
    /// The asyncio future of each request in flight (its address) and
    /// where the request is: a cancelled future's callback finds it here.
    by_future: std::collections::HashMap<usize, (usize, u64)>,
}

/// The requests of one event loop (one per loop: `pagecache._queue_for`).
#[pyclass(module = "pagecache", name = "_AsyncQueue", frozen)]
pub(crate) struct AsyncQueue {
    ready: ReadyList,
    reqs: Arc<Mutex<Slots>>,
}

impl AsyncQueue {
    /// Starts `kind` for an asyncio future of `loop_`, which it returns:
    /// resolved already on a hit.
    fn start(
        q: &Bound<'_, AsyncQueue>,
        py: Python<'_>,
        loop_: &Bound<'_, PyAny>,
        file: Arc<pagecache::File>,
        index: u64,
        make: impl FnOnce(&'static pagecache::File) -> Kind,
    ) -> PyResult<Py<PyAny>> {
        let pyfut = loop_.call_method0("create_future")?;
        // SAFETY: the request keeps the `Arc` and drops it after the
        // future that borrows it (`Request::drop`): 'static is never
        // outlived.
        let sf: &'static pagecache::File = unsafe { &*Arc::as_ptr(&file) };
        let this = q.get();
        let mut slots = this.reqs.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.free.pop().unwrap_or(slots.reqs.len());
        let id = slots.next_id;
        slots.next_id += 1;
        let mut r = Request {
            kind: Some(make(sf)),
            file: Some(file),
            index,
            pyfut: pyfut.clone().unbind(),
            waker: this.ready.waker(slot),
            id,
        };
        match r.poll() {
            Poll::Ready(res) => {
                slots.free.push(slot);
                drop(slots);
                resolve(py, &mut r, res)?;
            }
            Poll::Pending => {
                if slot == slots.reqs.len() {
                    slots.reqs.push(Some(r));
                } else {
                    slots.reqs[slot] = Some(r);
                }
                slots.by_future.insert(pyfut.as_ptr() as usize, (slot, id));
                drop(slots);
                // A cancelled asyncio future drops its request at once
                // (`_cancelled`; a bound method, made per call: one kept
                // by the queue would make a cycle with it).
                let cb = q.getattr("_cancelled")?;
                pyfut.call_method1("add_done_callback", (cb,))?;
            }
        }
        Ok(pyfut.unbind())
    }
}

/// Resolves the request's asyncio future with `res` (a `Page` held, or
/// bytes, or the error), unless it was cancelled (then what it got is
/// dropped with the request).
fn resolve(py: Python<'_>, r: &mut Request, res: io::Result<Done>) -> PyResult<()> {
    let fut = r.pyfut.bind(py);
    if fut.call_method0("done")?.is_truthy()? {
        return Ok(()); // cancelled: `res` drops here, before the file
    }
    match res {
        Err(e) => {
            fut.call_method1("set_exception", (os_err(e).into_value(py),))?;
        }
        Ok(Done::Bytes(b)) => {
            fut.call_method1("set_result", (PyBytes::new(py, &b),))?;
        }
        Ok(done) => {
            let file = r.file.take().expect("a page request has its file");
            let (guard, writable) = match done {
                Done::Ref(g) => (PageGuard::Ref(g), false),
                Done::Mut(g) => (PageGuard::Mut(g), true),
                Done::Bytes(_) => unreachable!("handled above"),
            };
            let page = Page::held(Owner::File(file), r.index, writable, guard);
            fut.call_method1("set_result", (Py::new(py, page)?,))?;
        }
    }
    Ok(())
}

#[pymethods]
impl AsyncQueue {
    #[new]
    fn new() -> PyResult<AsyncQueue> {
        Ok(AsyncQueue {
            ready: ReadyList::new().map_err(os_err)?,
            reqs: Arc::default(),
        })
    }

    /// A done callback of a request's asyncio future: a cancelled one
    /// drops its request (which gives back what it held or waited for).
    fn _cancelled(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if !fut.call_method0("cancelled")?.is_truthy()? {
            return Ok(());
        }
        let gone = {
            let mut s = self.reqs.lock().unwrap_or_else(|e| e.into_inner());
            match s.by_future.remove(&(fut.as_ptr() as usize)) {
                Some((slot, id))
                    if s.reqs
                        .get(slot)
                        .is_some_and(|x| x.as_ref().is_some_and(|r| r.id == id)) =>
                {
                    s.free.push(slot);
                    s.reqs[slot].take()
                }
                _ => None,
            }
        };
        drop(gone);
        Ok(())
    }

    /// The eventfd the loop watches.
    fn fd(&self) -> i32 {
        self.ready.fd()
    }

    /// Requests in flight.
    fn pending(&self) -> usize {
        let s = self.reqs.lock().unwrap_or_else(|e| e.into_inner());
        s.reqs.iter().filter(|r| r.is_some()).count()
    }

    /// The loop's reader callback: polls the requests whose state changed
    /// and resolves those that finished.
    fn collect(&self, py: Python<'_>) -> PyResult<()> {
        for slot in self.ready.take() {
            let mut slots = self.reqs.lock().unwrap_or_else(|e| e.into_inner());
            let Some(Some(r)) = slots.reqs.get_mut(slot) else {
                continue;
            };
            // A wake during the poll queues the request again.
            r.waker.rearm();
            let res = match r.poll() {
                Poll::Pending => continue,
                Poll::Ready(res) => res,
            };
            let mut r = slots.reqs[slot].take().expect("polled above");
            slots.free.push(slot);
            slots.by_future.remove(&(r.pyfut.as_ptr() as usize));
            drop(slots);
            resolve(py, &mut r, res)?;
        }
        Ok(())
    }
}

/// `asyncio.get_running_loop` and `pagecache._queue_for`, looked up once.
static FUNCS: pyo3::sync::PyOnceLock<(Py<PyAny>, Py<PyAny>)> = pyo3::sync::PyOnceLock::new();

/// `File.page_async` and friends: the running loop and its queue.
fn queue_for<'py>(py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, AsyncQueue>)> {
    let (running, queue_for) = FUNCS.get_or_try_init(py, || -> PyResult<_> {
        Ok((
            py.import("asyncio")?.getattr("get_running_loop")?.unbind(),
            py.import("pagecache")?.getattr("_queue_for")?.unbind(),
        ))
    })?;
    let loop_ = running.bind(py).call0()?;
    let q = queue_for.bind(py).call1((&loop_,))?;
    Ok((loop_, q.cast_into::<AsyncQueue>()?))
}

/// `File.page_async(i)`: an awaitable of a pinned `Page`.
pub(crate) fn page_async(
    py: Python<'_>,
    file: Arc<pagecache::File>,
    index: u64,
    writable: bool,
) -> PyResult<Py<PyAny>> {
    let (loop_, q) = queue_for(py)?;
    AsyncQueue::start(&q, py, &loop_, file, index, move |f| {
        if writable {
            Kind::Mut(f.page_mut_async(index))
        } else {
            Kind::Pin(f.page_async(index))
        }
    })
}

/// `File.read_at_async(offset, n)`: an awaitable of bytes.
pub(crate) fn read_at_async(
    py: Python<'_>,
    file: Arc<pagecache::File>,
    offset: u64,
    n: usize,
) -> PyResult<Py<PyAny>> {
    let (loop_, q) = queue_for(py)?;
    AsyncQueue::start(&q, py, &loop_, file, offset, move |f| {
        let buf: *mut [u8] = Box::into_raw(vec![0u8; n].into_boxed_slice());
        // SAFETY: the box lives in the request until after this future
        // (`Request::drop`), and nothing else touches it meanwhile.
        let b: &'static mut [u8] = unsafe { &mut *buf };
        Kind::Read {
            fut: Box::pin(f.read_at_async(b, offset)),
            buf,
        }
    })
}
