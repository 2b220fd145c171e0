//! The error type behind every error the cache returns: the OS error (or
//! the cache's own) with the file, page and operation it came from.

use std::io;

/// An error with the file, page and operation it came from; the OS error is
/// kept as the source and its kind is the error's kind.
#[derive(Debug)]
pub struct PageError {
    msg: String,
    source: io::Error,
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
