//! Errors raised to Python: `OSError` with the errno, `ValueError` for a
//! closed file.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::PyErr;
use std::io;

/// `OSError(errno, message)`: Python picks the subclass from the errno.
pub(crate) fn os_err(e: io::Error) -> PyErr {
    PyOSError::new_err((pagecache::errno(&e), e.to_string()))
}

pub(crate) fn closed() -> PyErr {
    PyValueError::new_err("I/O operation on closed file")
}
