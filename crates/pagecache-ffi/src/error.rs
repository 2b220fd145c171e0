//! Errors across the boundary: the calling thread's last message
//! (`pc_last_error`), negated errnos, panics caught, argument checks.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

pub(crate) fn set_last_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

/// An error: its message for `pc_last_error`, its number returned negated.
pub(crate) fn fail(e: &io::Error) -> c_int {
    set_last_error(e.to_string());
    -pagecache::errno(e)
}

pub(crate) fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Runs `f`, turning its error or panic into a negative errno.
pub(crate) fn guard(what: &str, f: impl FnOnce() -> io::Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => fail(&e),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_last_error(format!("{what}: internal error (panic): {msg}"));
            -libc::EIO
        }
    }
}

/// `p` as a reference, or `EINVAL` naming the argument.
///
/// # Safety
/// `p` is null or points to a live `T` (the caller's contract).
pub(crate) unsafe fn arg<'a, T>(p: *const T, what: &str, name: &str) -> io::Result<&'a T> {
    // SAFETY: the caller's contract: null or valid.
    unsafe { p.as_ref() }.ok_or_else(|| invalid(format!("{what}: {name} is NULL")))
}

pub(crate) fn out<T>(p: *mut T, what: &str, name: &str) -> io::Result<*mut T> {
    if p.is_null() {
        Err(invalid(format!("{what}: {name} is NULL")))
    } else {
        Ok(p)
    }
}

/// The message of the calling thread's last error: a NUL-terminated string
/// valid until this thread's next failing call (empty if none failed).
/// Never NULL.
#[no_mangle]
pub extern "C" fn pc_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn a_panic_is_returned_as_eio_with_its_message() {
        let rc = guard("pc_test", || panic!("boom at page 7"));
        assert_eq!(rc, -libc::EIO);
        // SAFETY: pc_last_error never returns NULL, and the string lives
        // until this thread's next failure.
        let msg = unsafe { CStr::from_ptr(pc_last_error()) }.to_str().unwrap();
        assert!(
            msg.contains("pc_test") && msg.contains("boom at page 7"),
            "{msg}"
        );
    }

    #[test]
    fn an_error_is_its_negated_errno_with_its_message() {
        let rc = guard("pc_test", || {
            Err(io::Error::from_raw_os_error(libc::ENOSPC))
        });
        assert_eq!(rc, -libc::ENOSPC);
        let rc = guard("pc_test", || {
            Err(io::Error::new(io::ErrorKind::InvalidInput, "bad\0nul"))
        });
        assert_eq!(rc, -libc::EINVAL);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(pc_last_error()) }.to_str().unwrap();
        assert_eq!(msg, "bad nul"); // an interior NUL cannot cut the message
    }
}
