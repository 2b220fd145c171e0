//! `Page`: one pinned or latched page of a file or an anonymous region,
//! its bytes exported as a buffer.

use crate::error::os_err;
use crate::held::{
    drop_guard_then_owner, enter_once, exit_block, export, fill_view, lock_held, release_export,
    Held,
};
use pagecache::{AnonMut, AnonRef, PageMut, PageRef};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::PyMemoryView;
use std::ffi::c_int;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex};

/// What a `Page`'s guard borrows: kept alive by the `Page`, dropped after
/// the guard, with the GIL released (a file's last handle writes back).
pub(crate) enum Owner {
    File(Arc<pagecache::File>),
    Anon(Arc<pagecache::AnonRegion>),
}

/// What a `Page` holds while its block runs: a pin (read-only) or a latch
/// (writable, the page dirty when it goes) of a file's or an anonymous
/// region's page.
pub(crate) enum PageGuard {
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
pub(crate) struct Page {
    pub(crate) state: Mutex<Held<PageGuard>>,
    /// What the guard borrows (declared after `state`; taken in `Drop`,
    /// after the guard).
    pub(crate) owner: ManuallyDrop<Owner>,
    pub(crate) index: u64,
    pub(crate) writable: bool,
}

impl Page {
    pub(crate) fn new(owner: Owner, index: u64, writable: bool) -> Page {
        Page {
            state: Mutex::default(),
            owner: ManuallyDrop::new(owner),
            index,
            writable,
        }
    }

    /// A page whose guard is held already (an awaited `page_async`): its
    /// `with` block gives the view without pinning again.
    pub(crate) fn held(owner: Owner, index: u64, writable: bool, guard: PageGuard) -> Page {
        let p = Page::new(owner, index, writable);
        lock_held(&p.state).guard = Some(guard);
        p
    }

    fn path(&self) -> String {
        match &*self.owner {
            Owner::File(f) => format!("{:?}", f.path()),
            Owner::Anon(_) => "an anonymous region".into(),
        }
    }
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
        if lock_held(&me.state).guard.is_some() {
            // Held already (an awaited `page_async`).
            let view = PyMemoryView::from(slf.as_any())?;
            lock_held(&me.state).views = vec![view.clone().unbind()];
            return Ok(view);
        }
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
