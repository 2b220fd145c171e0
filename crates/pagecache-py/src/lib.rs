//! The Python package `pagecache` (module `pagecache._pagecache`, wrapped by
//! `python/pagecache/__init__.py`): `PageCache`, `File`, `AnonRegion`,
//! `Page`, `Run`.
//!
//! Every call that may block or do I/O releases the GIL. Errors are
//! `OSError` built from `(errno, message)`, which Python turns into the
//! subclass of that errno (`FileNotFoundError`, `PermissionError`, ...);
//! `pagecache::errno` supplies the number. A closed file raises
//! `ValueError`, as Python's own files do.
//!
//! Soundness of pins: a `Page` keeps the `Arc` of what its guard borrows (a
//! `pagecache::File` for a `PageRef`/`PageMut`, a `pagecache::AnonRegion`
//! for an `AnonRef`/`AnonMut`) in the same struct, dropped after the guard;
//! so the `'static` given to the guard is never outlived. Its bytes are
//! handed to Python only through the buffer protocol (writable only for a
//! latched page), and the guard is released only when the `with` block has
//! ended and no buffer export is left, so no memoryview (or numpy array
//! over one) can see a page after its release. A `Run` does the same for a
//! `PageRun` (one pin over up to 16 pages) or the pins of `File.pages`:
//! one exporter object (`RunPage`) per page, all counted on the run. The
//! `Arc`s themselves are dropped with the GIL released (a file's last
//! handle writes back).
use pagecache::{
    AnonMut, AnonRef, Config, IoEngine, OpenOptions, PageMut, PageRef, PageRun, StreamReads,
};
use pyo3::exceptions::{PyBufferError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyMemoryView};
use std::ffi::{c_int, c_void};
use std::io;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, RwLock};

/// `OSError(errno, message)`: Python picks the subclass from the errno.
fn os_err(e: io::Error) -> PyErr {
    PyOSError::new_err((pagecache::errno(&e), e.to_string()))
}

fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}

/// A page cache: a memory budget of page frames shared by the files
/// opened through it.
#[pyclass(module = "pagecache", frozen)]
struct PageCache {
    /// Dropped by hand, with the GIL released (see `Drop`).
    cache: ManuallyDrop<pagecache::PageCache>,
}

/// Drops `v` with the GIL released: the last handle of a file writes its
/// dirty pages back, and the last handle of a cache stops its threads and
/// writes back whatever is left, which can take as long as the device
/// needs. Other Python threads run meanwhile. Called from `Drop` (the
/// object's deallocation, GIL held).
fn drop_detached<T: Send>(v: T) {
    Python::attach(|py| py.detach(move || drop(v)));
}

impl Drop for PageCache {
    fn drop(&mut self) {
        // SAFETY: `cache` is taken once, here, and never used again (the
        // object is being deallocated).
        let cache = unsafe { ManuallyDrop::take(&mut self.cache) };
        drop_detached(cache);
    }
}

#[pymethods]
impl PageCache {
    #[new]
    #[pyo3(signature = (capacity = 256 << 20, page_size = 4096, *, direct_io = true,
        io_engine = "auto", readahead_max = 2 << 20, dirty_background_percent = 10,
        dirty_limit_percent = 30, dirty_expire = Some(30.0), stable_writes = false,
        populate = false, stream_reads = "measure"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        capacity: usize,
        page_size: usize,
        direct_io: bool,
        io_engine: &str,
        readahead_max: usize,
        dirty_background_percent: u32,
        dirty_limit_percent: u32,
        dirty_expire: Option<f64>,
        stable_writes: bool,
        populate: bool,
        stream_reads: &str,
    ) -> PyResult<Self> {
        // Seconds a page may stay dirty before background write-back writes
        // it; None: never by age.
        let dirty_expire = match dirty_expire {
            None => std::time::Duration::MAX,
            Some(s) => std::time::Duration::try_from_secs_f64(s).map_err(|_| {
                PyValueError::new_err(format!(
                    "dirty_expire must be a number of seconds >= 0 or None, not {s}"
                ))
            })?,
        };
        let stream_reads = match stream_reads {
            "direct" => StreamReads::Direct,
            "buffered" => StreamReads::Buffered,
            "measure" => StreamReads::Measure,
            other => {
                return Err(PyValueError::new_err(format!(
                    "stream_reads must be 'direct', 'buffered' or 'measure', not {other:?}"
                )))
            }
        };
        let io_engine = match io_engine {
            "auto" => IoEngine::Auto,
            "uring" => IoEngine::Uring,
            "threads" => IoEngine::Threads,
            other => {
                return Err(PyValueError::new_err(format!(
                    "io_engine must be 'auto', 'uring' or 'threads', not {other:?}"
                )))
            }
        };
        let config = Config {
            capacity,
            page_size,
            direct_io,
            io_engine,
            readahead_max,
            dirty_background_percent,
            dirty_limit_percent,
            dirty_expire,
            stable_writes,
            populate,
            stream_reads,
            ..Config::default()
        };
        let cache = py
            .detach(|| pagecache::PageCache::new(config))
            .map_err(os_err)?;
        Ok(PageCache {
            cache: ManuallyDrop::new(cache),
        })
    }

    /// Opens `path` through the cache. `mode`: "r" (read), "r+" (read and
    /// write; must exist), "w" / "w+" (create or truncate), "x" / "x+"
    /// (create; FileExistsError if it exists); "b" is accepted and ignored.
    #[pyo3(signature = (path, mode = "r+"))]
    fn open(&self, py: Python<'_>, path: std::path::PathBuf, mode: &str) -> PyResult<File> {
        let m: String = mode.chars().filter(|&c| c != 'b').collect();
        let mut o = OpenOptions::new();
        match m.as_str() {
            "r" => o.read(true),
            "r+" => o.read(true).write(true),
            "w" => o.write(true).create(true).truncate(true),
            "w+" => o.read(true).write(true).create(true).truncate(true),
            "x" => o.write(true).create_new(true),
            "x+" => o.read(true).write(true).create_new(true),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "mode must be one of 'r', 'r+', 'w', 'w+', 'x', 'x+', not {mode:?}"
                )))
            }
        };
        let file = py
            .detach(|| self.cache.open_with(&path, &o))
            .map_err(os_err)?;
        Ok(File {
            file: RwLock::new(Some(Arc::new(file))),
            path: path.to_string_lossy().into_owned(),
        })
    }

    /// Drops the cached pages of files under `path` that no handle has
    /// open (kept because their last close failed to write them back),
    /// without writing them; returns how many files were forgotten. For a
    /// temporary file, or one deleted since.
    fn forget(&self, py: Python<'_>, path: std::path::PathBuf) -> usize {
        py.detach(|| self.cache.forget(&path))
    }

    /// An anonymous region of `length` bytes (whole pages) from the cache's
    /// budget: pages zero-filled on first touch, never written anywhere
    /// (scratch memory, a hash table's buckets). Its frames return to the
    /// cache when it is freed or collected.
    fn anon(&self, py: Python<'_>, length: u64) -> PyResult<AnonRegion> {
        let region = py.detach(|| self.cache.anon(length)).map_err(os_err)?;
        Ok(AnonRegion {
            region: Arc::new(region),
        })
    }

    /// A snapshot of the cache's counters, as a dict of ints (and the I/O
    /// engine's name).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.cache.stats();
        let d = PyDict::new(py);
        for (k, v) in [
            ("hits", s.hits),
            ("misses", s.misses),
            ("reads", s.reads),
            ("writes", s.writes),
            ("writebacks", s.writebacks),
            ("evictions", s.evictions),
            ("lookup_retries", s.lookup_retries),
            ("optimistic_reads", s.optimistic_reads),
            ("optimistic_fallbacks", s.optimistic_fallbacks),
            ("read_errors", s.read_errors),
            ("write_errors", s.write_errors),
            ("anon_faults", s.anon_faults),
            ("direct_files", s.direct_files),
            ("buffered_files", s.buffered_files),
            ("async_reads", s.async_reads),
            ("readahead_pages", s.readahead_pages),
            ("prefetch_pages", s.prefetch_pages),
            ("streamed_pages", s.streamed_pages),
            ("dirty_pages", self.cache.dirty_pages() as u64),
            ("frames", self.cache.frames() as u64),
            ("free_frames", self.cache.free_frames() as u64),
        ] {
            d.set_item(k, v)?;
        }
        d.set_item("io_engine", self.io_engine())?;
        Ok(d)
    }

    /// Page size in bytes.
    #[getter]
    fn page_size(&self) -> usize {
        self.cache.page_size()
    }

    /// Number of page frames (the capacity in pages).
    #[getter]
    fn frames(&self) -> usize {
        self.cache.frames()
    }

    /// What `stream_reads="measure"` chose so far: one dict per device
    /// whose measurement is complete (`device`, `buffered`, `direct_rate`
    /// and `buffered_rate` in bytes per second).
    fn stream_choices<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.cache
            .stream_choices()
            .into_iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("device", c.device)?;
                d.set_item("buffered", c.buffered)?;
                d.set_item("direct_rate", c.direct_rate)?;
                d.set_item("buffered_rate", c.buffered_rate)?;
                Ok(d)
            })
            .collect()
    }

    /// The I/O engine in use: "uring" or "threads".
    #[getter]
    fn io_engine(&self) -> &'static str {
        match self.cache.io_engine() {
            IoEngine::Uring => "uring",
            IoEngine::Threads => "threads",
            _ => "auto",
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "PageCache(capacity={}, page_size={}, io_engine={:?})",
            self.cache.frames() * self.cache.page_size(),
            self.cache.page_size(),
            self.io_engine()
        )
    }
}

/// A file opened through a `PageCache`. Safe to share between threads.
#[pyclass(module = "pagecache", frozen)]
struct File {
    /// `None` once closed. The lock is held only to clone the `Arc`.
    file: RwLock<Option<Arc<pagecache::File>>>,
    path: String,
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

/// What a `Page` or `Run` holds for Python code: the guard (a `PageRef` or
/// a `PageRun`), the buffer exports counting on it, the memoryviews
/// `__enter__` returned, and how far its `with` block got. The guard goes
/// once the block has ended and no export is left, so no Python object can
/// see a frame after its pin is gone.
struct Held<G> {
    /// Field order matters: the guard drops before its owner's `file`.
    guard: Option<G>,
    /// Buffer exports not yet released.
    exports: usize,
    /// The memoryviews `__enter__` returned.
    views: Vec<Py<PyMemoryView>>,
    entered: bool,
    exited: bool,
}

impl<G> Default for Held<G> {
    fn default() -> Self {
        Held {
            guard: None,
            exports: 0,
            views: Vec::new(),
            entered: false,
            exited: false,
        }
    }
}

/// The lock of a `Held` (a panic while it was held leaves it usable).
fn lock_held<G>(m: &Mutex<Held<G>>) -> std::sync::MutexGuard<'_, Held<G>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `__enter__`'s first step: a `Page` or `Run` is entered once.
fn enter_once<G>(m: &Mutex<Held<G>>, what: &str) -> PyResult<()> {
    let mut st = lock_held(m);
    if st.entered {
        return Err(PyValueError::new_err(format!(
            "a {what} can be entered once"
        )));
    }
    st.entered = true;
    Ok(())
}

/// `__exit__`: releases the memoryviews and, once no buffer over them is
/// left, the guard. A buffer still exported (a numpy array over a view)
/// keeps the guard until it goes (`release_export`); the views themselves
/// are released either way when no such export holds them.
fn exit_block<G>(m: &Mutex<Held<G>>, py: Python<'_>) {
    let views = {
        let mut st = lock_held(m);
        st.exited = true;
        std::mem::take(&mut st.views)
    };
    for v in views {
        // BufferError if something still exports the view: then the guard
        // is released by the last __releasebuffer__.
        let _ = v.bind(py).call_method0("release");
    }
    let mut st = lock_held(m);
    if st.exports == 0 {
        st.guard = None;
    }
}

/// `__getbuffer__`'s check: the bytes `bytes(guard)` points at, counted as
/// one more export, or an error outside the `with` block.
fn export<G>(
    m: &Mutex<Held<G>>,
    outside: &str,
    bytes: impl FnOnce(&mut G) -> (*mut u8, usize),
) -> PyResult<(*mut u8, usize)> {
    let mut st = lock_held(m);
    let Some(g) = st.guard.as_mut() else {
        return Err(PyValueError::new_err(outside.to_string()));
    };
    let got = bytes(g);
    st.exports += 1;
    Ok(got)
}

/// `__releasebuffer__`: one export fewer; the last one after the block
/// ended releases the guard.
fn release_export<G>(m: &Mutex<Held<G>>) {
    let mut st = lock_held(m);
    st.exports -= 1;
    if st.exports == 0 && st.exited {
        st.guard = None;
    }
}

/// What a `Page`'s guard borrows: kept alive by the `Page`, dropped after
/// the guard, with the GIL released (a file's last handle writes back).
enum Owner {
    File(Arc<pagecache::File>),
    Anon(Arc<pagecache::AnonRegion>),
}

/// What a `Page` holds while its block runs: a pin (read-only) or a latch
/// (writable, the page dirty when it goes) of a file's or an anonymous
/// region's page.
enum PageGuard {
    Ref(PageRef<'static>),
    Mut(PageMut<'static>),
    AnonRef(AnonRef<'static>),
    AnonMut(AnonMut<'static>),
}

impl PageGuard {
    /// The page's bytes, as a pointer writable only through a latch.
    fn bytes(&mut self) -> (*mut u8, usize) {
        let ro = |b: &[u8]| (b.as_ptr() as *mut u8, b.len());
        match self {
            PageGuard::Ref(r) => ro(r),
            PageGuard::AnonRef(r) => ro(r),
            PageGuard::Mut(m) => {
                // Python writes through a writable memoryview we cannot
                // watch: the page is dirty when released.
                m.mark_dirty();
                (m.as_mut_ptr(), m.len())
            }
            PageGuard::AnonMut(m) => (m.as_mut_ptr(), m.len()),
        }
    }
}

/// One page, pinned or latched for the duration of a `with` block (see
/// `File.page`, `File.page_mut`, `AnonRegion.page`, `AnonRegion.page_mut`).
#[pyclass(module = "pagecache", frozen)]
struct Page {
    state: Mutex<Held<PageGuard>>,
    /// What the guard borrows (declared after `state`; taken in `Drop`,
    /// after the guard).
    owner: ManuallyDrop<Owner>,
    index: u64,
    writable: bool,
}

impl Page {
    fn new(owner: Owner, index: u64, writable: bool) -> Page {
        Page {
            state: Mutex::default(),
            owner: ManuallyDrop::new(owner),
            index,
            writable,
        }
    }

    fn path(&self) -> String {
        match &*self.owner {
            Owner::File(f) => format!("{:?}", f.path()),
            Owner::Anon(_) => "an anonymous region".into(),
        }
    }
}

/// A `Page`'s or `Run`'s deallocation: the guard first (it borrows the
/// owner), then the owner with the GIL released (it may hold a file's
/// last handle, whose drop writes back).
///
/// # Safety
/// Called once, from the object's `Drop`; `owner` is not used again.
unsafe fn drop_guard_then_owner<G, O: Send>(
    state: &mut Mutex<Held<G>>,
    owner: &mut ManuallyDrop<O>,
) {
    let guard = state
        .get_mut()
        .unwrap_or_else(|e| e.into_inner())
        .guard
        .take();
    drop(guard);
    // SAFETY: the caller's contract (taken once, never used again); the
    // guard that borrowed it is gone.
    drop_detached(unsafe { ManuallyDrop::take(owner) });
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the one call, from the deallocation.
        unsafe { drop_guard_then_owner(&mut self.state, &mut self.owner) };
    }
}

#[pymethods]
impl Page {
    /// Pins (or latches) the page, waiting for its read or another holder
    /// with the GIL released, and returns a memoryview of it (writable
    /// for a latch).
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyMemoryView>> {
        let py = slf.py();
        let me = slf.get();
        enter_once(&me.state, "Page")?;
        let (index, writable) = (me.index, me.writable);
        let guard = match &*me.owner {
            Owner::File(f) => {
                // SAFETY: `me.owner` lives as long as `me`, and the guard
                // is dropped before it (module docs, `Drop`), so 'static is
                // never outlived.
                let file: &'static pagecache::File = unsafe { &*Arc::as_ptr(f) };
                if writable {
                    PageGuard::Mut(py.detach(|| file.page_mut(index)).map_err(os_err)?)
                } else {
                    PageGuard::Ref(py.detach(|| file.page(index)).map_err(os_err)?)
                }
            }
            Owner::Anon(a) => {
                // SAFETY: as above.
                let region: &'static pagecache::AnonRegion = unsafe { &*Arc::as_ptr(a) };
                if writable {
                    PageGuard::AnonMut(py.detach(|| region.page_mut(index)).map_err(os_err)?)
                } else {
                    PageGuard::AnonRef(py.detach(|| region.page(index)).map_err(os_err)?)
                }
            }
        };
        lock_held(&me.state).guard = Some(guard);
        let view = PyMemoryView::from(slf.as_any())?;
        lock_held(&me.state).views = vec![view.clone().unbind()];
        Ok(view)
    }

    /// Releases the memoryview and, once no buffer over it is left, the
    /// pin or latch (see `exit_block`).
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        exit_block(&self.state, py);
        Ok(false)
    }

    /// The page's index in its file or region.
    #[getter]
    fn index(&self) -> u64 {
        self.index
    }

    /// Whether the page is pinned (or latched) right now.
    #[getter]
    fn pinned(&self) -> bool {
        lock_held(&self.state).guard.is_some()
    }

    /// Whether the view is writable (a latched page).
    #[getter]
    fn writable(&self) -> bool {
        self.writable
    }

    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("NULL view"));
        }
        let writable = slf.get().writable;
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE && !writable {
            return Err(PyBufferError::new_err(
                "a pinned page is read-only (page_mut gives a writable one)",
            ));
        }
        let (buf, len) = export(
            &slf.get().state,
            "the page is not held: use it inside its `with` block",
            PageGuard::bytes,
        )?;
        // SAFETY: `view` is non-null (checked) and Python's to fill; the
        // bytes stay pinned (or latched, writable by this holder alone)
        // until the matching __releasebuffer__ (exports counted above), and
        // `obj` keeps this Page alive until then.
        unsafe { fill_view(view, slf.into_any(), buf, len, !writable, flags) };
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {
        release_export(&self.state);
    }

    fn __repr__(&self) -> String {
        format!(
            "<pagecache.Page {} of {} {}={}>",
            self.index,
            self.path(),
            if self.writable { "latched" } else { "pinned" },
            self.pinned()
        )
    }
}

/// An anonymous region (see `PageCache.anon`): pages of the cache's budget
/// that belong to no file, zero-filled on first touch.
#[pyclass(module = "pagecache", frozen)]
struct AnonRegion {
    region: Arc<pagecache::AnonRegion>,
}

#[pymethods]
impl AnonRegion {
    /// Page `index` pinned, as a context manager giving a read-only
    /// memoryview (zeros if never written).
    fn page(&self, index: u64) -> Page {
        Page::new(Owner::Anon(self.region.clone()), index, false)
    }

    /// Page `index` latched, as a context manager giving a writable
    /// memoryview.
    fn page_mut(&self, index: u64) -> Page {
        Page::new(Owner::Anon(self.region.clone()), index, true)
    }

    /// Frees pages `start..end` (clamped to the region): their frames go
    /// back to the cache (pinned ones when their pin ends); they read as
    /// zeros when touched again.
    fn free(&self, start: u64, end: u64) {
        self.region.free(start..end);
    }

    /// The region's length in bytes.
    fn __len__(&self) -> usize {
        self.region.len() as usize
    }

    /// Pages in the region.
    #[getter]
    fn pages(&self) -> u64 {
        self.region.pages()
    }

    /// Pages that hold a frame right now.
    #[getter]
    fn resident(&self) -> usize {
        self.region.resident()
    }

    fn __repr__(&self) -> String {
        format!(
            "<pagecache.AnonRegion pages={} resident={}>",
            self.region.pages(),
            self.region.resident()
        )
    }
}

/// What a `Run` holds while its block runs: a `PageRun` (`File.run`) or
/// one pin per page (`File.pages`).
enum Gang {
    Run(PageRun<'static>),
    Pages(Vec<PageRef<'static>>),
}

impl Gang {
    fn len(&self) -> usize {
        match self {
            Gang::Run(r) => r.len(),
            Gang::Pages(v) => v.len(),
        }
    }

    fn page(&self, k: usize) -> &[u8] {
        match self {
            Gang::Run(r) => r.page(k),
            Gang::Pages(v) => &v[k],
        }
    }
}

/// Consecutive pages held together for the duration of a `with` block
/// (see `File.run` and `File.pages`).
#[pyclass(module = "pagecache", frozen)]
struct Run {
    state: Mutex<Held<Gang>>,
    /// What the gang borrows (declared after `state`; taken in `Drop`,
    /// after the gang).
    file: ManuallyDrop<Arc<pagecache::File>>,
    start: u64,
    max: usize,
    /// `File.pages`: a pin per page, not a run.
    per_page: bool,
}

impl Run {
    fn new(file: Arc<pagecache::File>, start: u64, max: usize, per_page: bool) -> Run {
        Run {
            state: Mutex::default(),
            file: ManuallyDrop::new(file),
            start,
            max,
            per_page,
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        // SAFETY: the one call, from the deallocation.
        unsafe { drop_guard_then_owner(&mut self.state, &mut self.file) };
    }
}

#[pymethods]
impl Run {
    /// Takes the pages (reading missing ones or waiting for a writer with
    /// the GIL released) and returns one read-only memoryview per page.
    fn __enter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        let py = slf.py();
        let me = slf.get();
        enter_once(&me.state, "Run")?;
        // SAFETY: `me.file` lives as long as `me`, and the gang is dropped
        // before it (module docs, `Drop`), so 'static is never outlived.
        let file: &'static pagecache::File = unsafe { &*Arc::as_ptr(&me.file) };
        let (start, max) = (me.start, me.max);
        let gang = if me.per_page {
            let max = max.min(pagecache::File::RUN_MAX);
            let mut v = Vec::with_capacity(max);
            py.detach(|| file.pages(start, &mut v, max))
                .map_err(os_err)?;
            Gang::Pages(v)
        } else {
            Gang::Run(py.detach(|| file.run(start, max)).map_err(os_err)?)
        };
        let n = gang.len();
        lock_held(&me.state).guard = Some(gang);
        let mut views = Vec::with_capacity(n);
        for k in 0..n {
            let page = Bound::new(
                py,
                RunPage {
                    run: slf.clone().unbind(),
                    k,
                },
            )?;
            views.push(PyMemoryView::from(page.as_any())?);
        }
        lock_held(&me.state).views = views.iter().map(|v| v.clone().unbind()).collect();
        pyo3::types::PyTuple::new(py, views)
    }

    /// Releases the memoryviews and, once no buffer over them is left, the
    /// pages (see `exit_block`).
    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        exit_block(&self.state, py);
        Ok(false)
    }

    /// The first page's index.
    #[getter]
    fn start(&self) -> u64 {
        self.start
    }

    /// Whether the pages are held right now.
    #[getter]
    fn held(&self) -> bool {
        lock_held(&self.state).guard.is_some()
    }

    /// Whether one pin of the index leaf holds them (a `run` of cached
    /// pages; never for `pages`).
    #[getter]
    fn one_pin(&self) -> bool {
        matches!(lock_held(&self.state).guard.as_ref(), Some(Gang::Run(r)) if r.one_pin())
    }

    fn __repr__(&self) -> String {
        let st = lock_held(&self.state);
        format!(
            "<pagecache.Run from page {} of {:?} pages={} held={}>",
            self.start,
            self.file.path(),
            st.guard.as_ref().map_or(0, |r| r.len()),
            st.guard.is_some()
        )
    }
}

/// Page `k` of a `Run`: the object its memoryview exports from.
#[pyclass(module = "pagecache", frozen)]
struct RunPage {
    run: Py<Run>,
    k: usize,
}

#[pymethods]
impl RunPage {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("NULL view"));
        }
        if flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("a run's page is read-only"));
        }
        let me = slf.get();
        let (buf, len) = export(
            &me.run.get().state,
            "the run is not held: use its pages inside its `with` block",
            |r| {
                let b = r.page(me.k);
                (b.as_ptr() as *mut u8, b.len())
            },
        )?;
        // SAFETY: `view` is non-null (checked) and Python's to fill; the
        // bytes stay held until the matching __releasebuffer__ (exports
        // counted on the run above), and `obj` keeps this RunPage, and so
        // its Run, alive until then.
        unsafe { fill_view(view, slf.into_any(), buf, len, true, flags) };
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {
        release_export(&self.run.get().state);
    }
}

/// Fills a one-dimensional byte buffer over `len` bytes at `buf`, exported
/// by `obj`, read-only unless `readonly` is false.
///
/// # Safety
/// `view` is a non-null `Py_buffer` Python asked us to fill; the bytes
/// stay valid until the matching `__releasebuffer__`, unchanged if
/// `readonly`, else written only through this buffer (a latch held).
unsafe fn fill_view(
    view: *mut pyo3::ffi::Py_buffer,
    obj: Bound<'_, PyAny>,
    buf: *mut u8,
    len: usize,
    readonly: bool,
    flags: c_int,
) {
    // SAFETY: the caller's contract.
    unsafe {
        (*view).obj = obj.into_ptr();
        (*view).buf = buf as *mut c_void;
        (*view).len = len as isize;
        (*view).readonly = c_int::from(readonly);
        (*view).itemsize = 1;
        (*view).format = if flags & pyo3::ffi::PyBUF_FORMAT == pyo3::ffi::PyBUF_FORMAT {
            c"B".as_ptr() as *mut _
        } else {
            std::ptr::null_mut()
        };
        (*view).ndim = 1;
        (*view).shape = if flags & pyo3::ffi::PyBUF_ND == pyo3::ffi::PyBUF_ND {
            &mut (*view).len
        } else {
            std::ptr::null_mut()
        };
        (*view).strides = if flags & pyo3::ffi::PyBUF_STRIDES == pyo3::ffi::PyBUF_STRIDES {
            &mut (*view).itemsize
        } else {
            std::ptr::null_mut()
        };
        (*view).suboffsets = std::ptr::null_mut();
        (*view).internal = std::ptr::null_mut();
    }
}

/// The compiled core of the `pagecache` package.
#[pymodule]
fn _pagecache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PageCache>()?;
    m.add_class::<File>()?;
    m.add_class::<Page>()?;
    m.add_class::<AnonRegion>()?;
    m.add_class::<Run>()?;
    m.add_class::<RunPage>()?;
    m.add("ABI_VERSION", 3)?;
    Ok(())
}
