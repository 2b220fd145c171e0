//! A guard held by a Python object: entered once by a `with` block,
//! exported through the buffer protocol, released only when the block has
//! ended and no export is left.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyMemoryView;
use std::ffi::{c_int, c_void};
use std::mem::ManuallyDrop;
use std::sync::Mutex;

/// Drops `v` with the GIL released: the last handle of a file writes its
/// dirty pages back, and the last handle of a cache stops its threads and
/// writes back whatever is left, which can take as long as the device
/// needs. Other Python threads run meanwhile. Called from `Drop` (the
/// object's deallocation, GIL held).
pub(crate) fn drop_detached<T: Send>(v: T) {
    Python::attach(|py| py.detach(move || drop(v)));
}

/// What a `Page` or `Run` holds for Python code: the guard (a `PageRef` or
/// a `PageRun`), the buffer exports counting on it, the memoryviews
/// `__enter__` returned, and how far its `with` block got. The guard goes
/// once the block has ended and no export is left, so no Python object can
/// see a frame after its pin is gone.
pub(crate) struct Held<G> {
    /// Field order matters: the guard drops before its owner's `file`.
    pub(crate) guard: Option<G>,
    /// Buffer exports not yet released.
    pub(crate) exports: usize,
    /// The memoryviews `__enter__` returned.
    pub(crate) views: Vec<Py<PyMemoryView>>,
    pub(crate) entered: bool,
    pub(crate) exited: bool,
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
pub(crate) fn lock_held<G>(m: &Mutex<Held<G>>) -> std::sync::MutexGuard<'_, Held<G>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `__enter__`'s first step: a `Page` or `Run` is entered once.
pub(crate) fn enter_once<G>(m: &Mutex<Held<G>>, what: &str) -> PyResult<()> {
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
pub(crate) fn exit_block<G>(m: &Mutex<Held<G>>, py: Python<'_>) {
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
pub(crate) fn export<G>(
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
pub(crate) fn release_export<G>(m: &Mutex<Held<G>>) {
    let mut st = lock_held(m);
    st.exports -= 1;
    if st.exports == 0 && st.exited {
        st.guard = None;
    }
}

/// A `Page`'s or `Run`'s deallocation: the guard first (it borrows the
/// owner), then the owner with the GIL released (it may hold a file's
/// last handle, whose drop writes back).
///
/// # Safety
/// Called once, from the object's `Drop`; `owner` is not used again.
pub(crate) unsafe fn drop_guard_then_owner<G, O: Send>(
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

/// Fills a one-dimensional byte buffer over `len` bytes at `buf`, exported
/// by `obj`, read-only unless `readonly` is false.
///
/// # Safety
/// `view` is a non-null `Py_buffer` Python asked us to fill; the bytes
/// stay valid until the matching `__releasebuffer__`, unchanged if
/// `readonly`, else written only through this buffer (a latch held).
pub(crate) unsafe fn fill_view(
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
