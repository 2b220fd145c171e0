//! `File`: reads and writes by offset, pins and latches of pages, runs,
//! optimistic access, length, sync, close.

use crate::error::{closed, os_err};
use crate::held::drop_detached;
use crate::page::{Owner, Page};
use crate::run::Run;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Arc, RwLock};

/// A file opened through a `PageCache`. Safe to share between threads.
#[pyclass(module = "pagecache", frozen)]
pub(crate) struct File {
    /// `None` once closed. The lock is held only to clone the `Arc`.
    pub(crate) file: RwLock<Option<Arc<pagecache::File>>>,
    pub(crate) path: String,
}

impl Drop for File {
    /// A handle garbage-collected without `close`: if it is the file's last,
    /// its write-back runs here, without the GIL.
    fn drop(&mut self) {
        let taken = self
            .file
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(f) = taken {
            drop_detached(f);
        }
    }
}

impl File {
    fn get(&self) -> PyResult<Arc<pagecache::File>> {
        self.file
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(closed)
    }
}

#[pymethods]
impl File {
    /// Reads up to `n` bytes at `offset` (fewer only at end of file).
    fn read_at<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        n: usize,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let f = self.get()?;
        let mut buf = vec![0u8; n];
        let got = py.detach(|| f.read_at(&mut buf, offset)).map_err(os_err)?;
        Ok(PyBytes::new(py, &buf[..got]))
    }

    /// Reads into `buffer` (any writable contiguous bytes-like object: a
    /// bytearray, a memoryview, a numpy uint8 array) at `offset`, with no
    /// copy beyond it; returns the number of bytes read (fewer than its
    /// length only at end of file).
    fn readinto_at(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        offset: u64,
    ) -> PyResult<usize> {
        let f = self.get()?;
        let b = pyo3::buffer::PyBuffer::<u8>::get(buffer)?;
        if b.readonly() {
            return Err(PyBufferError::new_err(
                "readinto_at: the buffer is read-only",
            ));
        }
        if !b.is_c_contiguous() {
            return Err(PyBufferError::new_err(
                "readinto_at: the buffer is not contiguous",
            ));
        }
        let (ptr, len) = (b.buf_ptr() as usize, b.len_bytes());
        let got = py
            .detach(|| {
                // SAFETY: `b` (alive until the end of this function) holds
                // the buffer export, so the object cannot free or resize
                // its memory; it is writable and contiguous (checked).
                let s = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) };
                f.read_at(s, offset)
            })
            .map_err(os_err)?;
        drop(b);
        Ok(got)
    }

    /// Writes all of `data` (any contiguous bytes-like object) at `offset`
    /// (the file grows if needed); returns its length.
    fn write_at(&self, py: Python<'_>, data: &Bound<'_, PyAny>, offset: u64) -> PyResult<usize> {
        let f = self.get()?;
        let b = pyo3::buffer::PyBuffer::<u8>::get(data)?;
        if !b.is_c_contiguous() {
            return Err(PyBufferError::new_err(
                "write_at: the data is not contiguous",
            ));
        }
        let (ptr, len) = (b.buf_ptr() as usize, b.len_bytes());
        py.detach(|| {
            // SAFETY: as in readinto_at: the export held by `b` keeps the
            // memory in place; we only read it.
            let s = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
            f.write_at(s, offset)
        })
        .map_err(os_err)?;
        drop(b);
        Ok(len)
    }

    /// The file's length in bytes.
    fn len(&self) -> PyResult<u64> {
        Ok(self.get()?.len())
    }

    /// Sets the file's length (cut pages are dropped; growth reads as zeros).
    fn set_len(&self, py: Python<'_>, length: u64) -> PyResult<()> {
        let f = self.get()?;
        py.detach(|| f.set_len(length)).map_err(os_err)
    }

    /// Writes every dirty page back, persists the length, fdatasync: returns
    /// exactly when every page dirty at the call is on disk.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let f = self.get()?;
        py.detach(|| f.sync()).map_err(os_err)
    }

    /// Starts reading `length` bytes at `offset` into the cache without
    /// waiting (errors surface when the pages are read).
    fn prefetch(&self, py: Python<'_>, offset: u64, length: u64) -> PyResult<()> {
        let f = self.get()?;
        py.detach(|| f.prefetch(offset, length)).map_err(os_err)
    }

    /// A pinned page as a context manager: `with f.page(i) as view:` gives
    /// a read-only memoryview of the page's bytes in the cache (no copy;
    /// `numpy.frombuffer(view, ...)` works). The pin ends with the block;
    /// using the view after it raises ValueError.
    fn page(&self, index: u64) -> PyResult<Page> {
        Ok(Page::new(Owner::File(self.get()?), index, false))
    }

    /// A latched page as a context manager: `with f.page_mut(i) as view:`
    /// gives a writable memoryview of the page's bytes in the cache (no
    /// copy; numpy can write through `numpy.frombuffer(view, ...)`). The
    /// latch ends with the block, and the page is then dirty (written back
    /// by `sync`, the flusher or eviction). Others' reads and writes of the
    /// page wait for the block; one thread holding a `page(i)` and asking
    /// for `page_mut(i)` waits for itself. PermissionError through a
    /// read-only file.
    fn page_mut(&self, index: u64) -> PyResult<Page> {
        Ok(Page::new(Owner::File(self.get()?), index, true))
    }

    /// Up to `max` (at most 16) consecutive pages from `start` as a context
    /// manager: `with f.run(start) as pages:` gives a tuple of read-only
    /// memoryviews, page `start + k` at `pages[k]` (no copy), all held by
    /// one pin of their index leaf when cached. The tuple is shorter at end
    /// of file (empty past it), at a multiple of 64 pages, and at the first
    /// page that is not cached and idle. One call for many pages: cheaper
    /// than a `page()` per page.
    #[pyo3(signature = (start, max=16))]
    fn run(&self, start: u64, max: usize) -> PyResult<Run> {
        Ok(Run::new(self.get()?, start, max, false))
    }

    /// A gang lookup: up to `max` (at most 16) consecutive pages from
    /// `start`, each pinned on its own, as a context manager like `run`
    /// (a tuple of read-only memoryviews). Missing pages are read (in one
    /// batch); the tuple is shorter only at end of file (empty past it).
    #[pyo3(signature = (start, max=16))]
    fn pages(&self, start: u64, max: usize) -> PyResult<Run> {
        Ok(Run::new(self.get()?, start, max, true))
    }

    /// `await f.page_async(i)`: the page pinned without blocking the
    /// event loop's thread (a miss is read while other tasks run); the
    /// `Page` is held already: `with page as view:` gives its bytes.
    /// Must be called from a coroutine on a running asyncio loop.
    fn page_async(&self, py: Python<'_>, index: u64) -> PyResult<Py<PyAny>> {
        crate::aio::page_async(py, self.get()?, index, false)
    }

    /// `await f.page_mut_async(i)`: the page latched for writing (every
    /// other pin of it drained first), without blocking the loop's
    /// thread; dirty when its `with` block ends.
    fn page_mut_async(&self, py: Python<'_>, index: u64) -> PyResult<Py<PyAny>> {
        crate::aio::page_async(py, self.get()?, index, true)
    }

    /// `await f.read_at_async(offset, n)`: up to `n` bytes at `offset`
    /// (fewer only at end of file), the missing pages read without
    /// blocking the loop's thread.
    fn read_at_async(&self, py: Python<'_>, offset: u64, n: usize) -> PyResult<Py<PyAny>> {
        crate::aio::read_at_async(py, self.get()?, offset, n)
    }

    /// Whether the file is read and written with direct I/O.
    #[getter]
    fn direct_io(&self) -> PyResult<bool> {
        Ok(self.get()?.direct_io())
    }

    /// The path the file was opened with.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.file
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// Writes the file's dirty pages back and closes this handle, reporting
    /// a write-back error. A second close does nothing. Pages still pinned
    /// (a buffer still exported) keep the file open until they go; their
    /// data is synced here.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.file.write().unwrap_or_else(|e| e.into_inner()).take();
        let Some(f) = taken else { return Ok(()) };
        py.detach(|| match Arc::try_unwrap(f) {
            Ok(f) => f.close(),
            Err(shared) => shared.sync(),
        })
        .map_err(os_err)
    }

    /// Closes this handle without writing anything back: if it was the
    /// file's last handle, its cached pages are dropped, dirty or not (for
    /// temporary or deleted files). Returns whether that happened. A second
    /// call (or one after `close`) returns False.
    fn discard(&self, py: Python<'_>) -> bool {
        let taken = self.file.write().unwrap_or_else(|e| e.into_inner()).take();
        let Some(f) = taken else { return false };
        py.detach(|| match Arc::try_unwrap(f) {
            Ok(f) => f.discard(),
            Err(_) => false, // pinned pages keep the file; it closes with them
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<pagecache.File {:?} closed={}>", self.path, self.closed())
    }
}
