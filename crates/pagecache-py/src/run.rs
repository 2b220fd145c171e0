//! `Run`: consecutive pages held together (one leaf pin, or one pin each),
//! one buffer exporter (`RunPage`) per page.

use crate::error::os_err;
use crate::held::{
    drop_guard_then_owner, enter_once, exit_block, export, fill_view, lock_held, release_export,
    Held,
};
use pagecache::{PageRef, PageRun};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyMemoryView;
use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

/// What a `Run` holds while its block runs: a `PageRun` (`File.run`) or
/// one pin per page (`File.pages`).
pub(crate) enum Gang {
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
pub(crate) struct Run {
    pub(crate) state: Mutex<Held<Gang>>,
    /// What the gang borrows (declared after `state`; taken in `Drop`,
    /// after the gang).
    pub(crate) file: ManuallyDrop<Arc<pagecache::File>>,
    pub(crate) start: u64,
    pub(crate) max: usize,
    /// `File.pages`: a pin per page, not a run.
    pub(crate) per_page: bool,
}

impl Run {
    pub(crate) fn new(file: Arc<pagecache::File>, start: u64, max: usize, per_page: bool) -> Run {
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
pub(crate) struct RunPage {
    pub(crate) run: Py<Run>,
    pub(crate) k: usize,
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
