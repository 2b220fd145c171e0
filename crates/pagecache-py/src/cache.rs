//! `PageCache`: a cache, its files and regions, statistics.

use crate::anon::AnonRegion;
use crate::error::os_err;
use crate::file::File;
use crate::held::drop_detached;
use pagecache::{Config, IoEngine, OpenOptions, StreamReads};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::mem::ManuallyDrop;
use std::sync::{Arc, RwLock};

/// A page cache: a memory budget of page frames shared by the files
/// opened through it.
#[pyclass(module = "pagecache", frozen)]
pub(crate) struct PageCache {
    /// Dropped by hand, with the GIL released (see `Drop`).
    pub(crate) cache: ManuallyDrop<pagecache::PageCache>,
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
        populate = false, stream_reads = "measure", drop_behind_writes = true))]
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
        drop_behind_writes: bool,
    ) -> PyResult<Self> {
        let config = make_config(
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
            drop_behind_writes,
        )?;
        let cache = py
            .detach(|| pagecache::PageCache::new(config))
            .map_err(os_err)?;
        Ok(PageCache {
            cache: ManuallyDrop::new(cache),
        })
    }

    /// The cache shared by processes under `name`: created with these
    /// settings if no process has made it yet, else attached to (its
    /// capacity and page size must then be its creator's: OSError, errno
    /// EINVAL, naming both, otherwise). Every process that opens the same file through it
    /// shares one copy of its pages (`multiprocessing` workers, pre-forked
    /// servers). The segment lives in `dir` (default "/dev/shm"), readable
    /// and writable by this user only unless `group` (a group id) is given.
    /// Shared caches use the CLOCK policy.
    #[staticmethod]
    #[pyo3(signature = (name, capacity = 256 << 20, page_size = 4096, *, dir = None,
        group = None, direct_io = true, io_engine = "auto", readahead_max = 2 << 20,
        dirty_background_percent = 10, dirty_limit_percent = 30, dirty_expire = Some(30.0),
        stable_writes = false, populate = false, stream_reads = "measure",
        drop_behind_writes = true))]
    #[allow(clippy::too_many_arguments)]
    fn shared(
        py: Python<'_>,
        name: &str,
        capacity: usize,
        page_size: usize,
        dir: Option<std::path::PathBuf>,
        group: Option<u32>,
        direct_io: bool,
        io_engine: &str,
        readahead_max: usize,
        dirty_background_percent: u32,
        dirty_limit_percent: u32,
        dirty_expire: Option<f64>,
        stable_writes: bool,
        populate: bool,
        stream_reads: &str,
        drop_behind_writes: bool,
    ) -> PyResult<Self> {
        let config = Config {
            policy: pagecache::PolicyKind::Clock,
            ..make_config(
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
                drop_behind_writes,
            )?
        };
        let opts = pagecache::SharedOptions { dir, group };
        let cache = py
            .detach(|| pagecache::PageCache::shared_with(name, config, &opts))
            .map_err(os_err)?;
        Ok(PageCache {
            cache: ManuallyDrop::new(cache),
        })
    }

    /// Removes the shared cache `name` from `dir` (default "/dev/shm") if
    /// no live process is attached to it (OSError otherwise).
    #[staticmethod]
    #[pyo3(signature = (name, dir = None))]
    fn remove_shared(py: Python<'_>, name: &str, dir: Option<std::path::PathBuf>) -> PyResult<()> {
        py.detach(|| pagecache::PageCache::remove_shared(name, dir.as_deref()))
            .map_err(os_err)
    }

    /// The segment file of a shared cache, or None for a private one.
    #[getter]
    fn shared_path(&self) -> Option<String> {
        self.cache
            .shared_path()
            .map(|p| p.to_string_lossy().into_owned())
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

/// A `Config` from the Python arguments (`PageCache()`, `PageCache.shared`).
#[allow(clippy::too_many_arguments)]
fn make_config(
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
    drop_behind_writes: bool,
) -> PyResult<Config> {
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
    Ok(Config {
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
        drop_behind_writes,
        ..Config::default()
    })
}
