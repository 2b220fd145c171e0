//! The write-back hook: what a storage engine registers to keep the
//! write-ahead rule (a page reaches the disk only after the log records of
//! its changes), and to hold pages back.

use std::sync::Arc;

/// Why a page is being written back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WritebackCause {
    /// Eviction needs its frame (or the flusher writes pages reclaim
    /// passed over).
    Eviction,
    /// The background flusher (the page is older than
    /// `Config::dirty_expire`, or the dirty count is past its limit).
    Background,
    /// `sync` or `close`.
    Sync,
}

/// What a write-back hook is shown: the page about to be written.
#[derive(Debug)]
pub struct WritebackPage<'a> {
    /// The page's index in its file.
    pub index: u64,
    /// The bytes that will be written. They do not change until the write
    /// ends: while a hook is registered, write-back of the file keeps its
    /// pages stable (writers of a page wait for its write).
    pub bytes: &'a [u8],
    /// Who is writing it.
    pub cause: WritebackCause,
}

/// A write-back hook's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritebackDecision {
    /// Write the page (the hook made whatever it needs durable first: the
    /// log up to the page's LSN).
    Write,
    /// Not now: the page stays dirty and is skipped. Eviction takes another
    /// page, the flusher tries it in a later pass, and a `sync` fails with
    /// `WouldBlock` naming the page (the pages stay dirty: nothing is lost).
    Defer,
}

/// A function called before every write-back of a page of a file
/// ([`crate::File::set_writeback_hook`]): by eviction, the background
/// flusher and `sync` alike, on the thread doing the write-back, with no
/// lock of the cache held but the page's write-back pin. It must not wait
/// for a page of the same cache (a `PageMut`, or a pin of a page being
/// written): it may run on the thread that evicts for a `write_at`, and the
/// flusher waits for it. Typically it reads the page's LSN from its bytes
/// and makes its log durable up to it.
#[derive(Clone)]
pub struct WritebackHook(
    pub(crate) Arc<dyn Fn(&WritebackPage<'_>) -> WritebackDecision + Send + Sync>,
);

impl WritebackHook {
    /// A hook calling `f`.
    pub fn new(
        f: impl Fn(&WritebackPage<'_>) -> WritebackDecision + Send + Sync + 'static,
    ) -> WritebackHook {
        WritebackHook(Arc::new(f))
    }
}

impl std::fmt::Debug for WritebackHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WritebackHook")
    }
}
