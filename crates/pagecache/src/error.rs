//! The errors the cache returns, and how to get at the OS error inside.
//!
//! Every error is an `std::io::Error` whose kind is the kind users match on
//! (`NotFound`, `InvalidInput`, `PermissionDenied`, `UnexpectedEof`,
//! `OutOfMemory`, `StorageFull`, `FileTooLarge`, ...) and whose message
//! names the file, the page and the operation. An error that came from the
//! OS keeps its error number: [`os_error`] returns it, however deep the
//! context around it (an `io::Error` built with context has no
//! `raw_os_error()` of its own).
//!
//! ```
//! use pagecache::{Config, OpenOptions, PageCache};
//! # let dir = std::env::temp_dir().join(format!("pagecache-doc-err-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! let cache = PageCache::new(Config::default()).unwrap();
//! let e = cache.open(dir.join("missing")).unwrap_err();
//! assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
//! assert_eq!(pagecache::os_error(&e), Some(libc::ENOENT));
//! assert!(e.to_string().contains("missing"));
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::io;

/// The inner error of every error the cache wraps with context: a message
/// (which file, page, operation) around the error that caused it, whose
/// kind the outer `io::Error` carries.
#[derive(Debug)]
pub struct PageError {
    msg: String,
    source: io::Error,
}

impl PageError {
    /// What was being done: the file, the page, the operation.
    pub fn message(&self) -> &str {
        &self.msg
    }

    /// The error that caused it.
    pub fn cause(&self) -> &io::Error {
        &self.source
    }
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.msg, self.source)
    }
}

impl std::error::Error for PageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The OS error number (`errno`) behind an error the cache returned, if an
/// OS call caused it: `ENOSPC`, `EIO`, `EFBIG`, `ENOENT`, ... `None` for the
/// cache's own errors (a bad argument, every frame pinned, a page past the
/// end of the file).
pub fn os_error(e: &io::Error) -> Option<i32> {
    if let Some(n) = e.raw_os_error() {
        return Some(n);
    }
    let inner = e.get_ref()?.downcast_ref::<PageError>()?;
    os_error(&inner.source)
}

/// An error number for any error the cache returned, for callers that
/// speak errno (the C ABI and the Python package): the OS error where an OS
/// call caused it ([`os_error`]), else one mapped from its kind:
/// `InvalidInput` → `EINVAL`, `NotFound` → `ENOENT`, `PermissionDenied` →
/// `EACCES`, `UnexpectedEof` (a page past the end of file) → `ENXIO`,
/// `OutOfMemory` → `ENOMEM`, `FileTooLarge` → `EFBIG`, `StorageFull` →
/// `ENOSPC`, `AlreadyExists` → `EEXIST`, `Unsupported` → `EOPNOTSUPP`,
/// `TimedOut` → `ETIMEDOUT`, `WouldBlock` → `EAGAIN`, `Interrupted` →
/// `EINTR`, `ResourceBusy` → `EBUSY`, anything else → `EIO`. Always positive.
///
/// ```
/// use std::io::{Error, ErrorKind};
/// assert_eq!(pagecache::errno(&Error::from_raw_os_error(libc::ENOSPC)), libc::ENOSPC);
/// assert_eq!(pagecache::errno(&Error::new(ErrorKind::OutOfMemory, "pinned")), libc::ENOMEM);
/// ```
pub fn errno(e: &io::Error) -> i32 {
    if let Some(n) = os_error(e).filter(|&n| n > 0) {
        return n;
    }
    use io::ErrorKind as K;
    match e.kind() {
        K::InvalidInput | K::InvalidData => libc::EINVAL,
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EACCES,
        K::UnexpectedEof => libc::ENXIO,
        K::OutOfMemory => libc::ENOMEM,
        K::FileTooLarge => libc::EFBIG,
        K::StorageFull => libc::ENOSPC,
        K::AlreadyExists => libc::EEXIST,
        K::Unsupported => libc::EOPNOTSUPP,
        K::TimedOut => libc::ETIMEDOUT,
        K::WouldBlock => libc::EAGAIN,
        K::Interrupted => libc::EINTR,
        K::ResourceBusy => libc::EBUSY,
        _ => libc::EIO,
    }
}

/// Wraps `e` with `msg` (which file, page, operation), keeping its kind.
pub(crate) fn context(e: io::Error, msg: impl Into<String>) -> io::Error {
    io::Error::new(
        e.kind(),
        PageError {
            msg: msg.into(),
            source: e,
        },
    )
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn os_error_is_found_through_context() {
        let e = context(
            context(io::Error::from_raw_os_error(libc::ENOSPC), "inner"),
            "outer",
        );
        assert_eq!(e.kind(), io::ErrorKind::StorageFull);
        assert_eq!(e.raw_os_error(), None);
        assert_eq!(os_error(&e), Some(libc::ENOSPC));
        let own = io::Error::new(io::ErrorKind::OutOfMemory, "all pinned");
        assert_eq!(os_error(&context(own, "x")), None);
    }
}
