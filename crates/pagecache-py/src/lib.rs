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

mod aio;
mod anon;
mod cache;
mod error;
mod file;
mod held;
mod page;
mod run;

use anon::AnonRegion;
use cache::PageCache;
use file::File;
use page::Page;
use run::{Run, RunPage};

use pyo3::prelude::*;

/// The compiled core of the `pagecache` package.
#[pymodule]
fn _pagecache(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PageCache>()?;
    m.add_class::<File>()?;
    m.add_class::<Page>()?;
    m.add_class::<AnonRegion>()?;
    m.add_class::<Run>()?;
    m.add_class::<RunPage>()?;
    m.add_class::<aio::AsyncQueue>()?;
    m.add("ABI_VERSION", 4)?;
    Ok(())
}
