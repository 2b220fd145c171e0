//! The write-back hook in C: a callback with a context pointer that
//! decides, as Rust's `WritebackHook` does, whether a dirty page may be
//! written now.

use crate::error::guard;
use crate::file::{file, pc_file};
use pagecache::{WritebackCause, WritebackDecision, WritebackHook, WritebackPage};
use std::ffi::{c_int, c_void};

/// `pc_writeback_fn` cause: eviction needs the page's frame (or the
/// flusher writes pages reclaim passed over).
pub const PC_WB_EVICTION: u32 = 0;

/// `pc_writeback_fn` cause: the background flusher (the page's age, or
/// the dirty count past its limit).
pub const PC_WB_BACKGROUND: u32 = 1;

/// `pc_writeback_fn` cause: `pc_file_sync` or `pc_file_close`.
pub const PC_WB_SYNC: u32 = 2;

/// `pc_writeback_fn` answer: write the page.
pub const PC_WB_WRITE: c_int = 0;

/// `pc_writeback_fn` answer: not now (the page stays dirty: eviction takes
/// another page, the flusher tries it later, a sync fails with `-EAGAIN`
/// naming it).
pub const PC_WB_DEFER: c_int = 1;

/// A write-back hook (`pc_file_set_writeback_hook`): called with the
/// registered `ctx` before every write-back of a page of the file, by
/// eviction, the flusher and sync alike, on the thread doing it, with
/// page `index`'s `len` bytes (unchanging until the write ends) and why
/// (`PC_WB_EVICTION`, `PC_WB_BACKGROUND`, `PC_WB_SYNC`). Returns
/// `PC_WB_WRITE` or `PC_WB_DEFER`; any other value defers. It must not
/// wait for a page of the same cache (a latch, or a pin of a page being
/// written) and must not call into the cache: it may run on a thread that
/// evicts for a write. Typically it reads the page's LSN from its bytes
/// and makes the log durable up to it.
pub type pc_writeback_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        index: u64,
        bytes: *const u8,
        len: usize,
        cause: u32,
    ) -> c_int,
>;

/// The context pointer of a C hook, passed back to it on any thread (the
/// caller's contract makes that sound).
pub(crate) struct HookCtx(*mut c_void);

impl HookCtx {
    /// The pointer (a method, so that closures capture the whole struct,
    /// not its non-`Send` field).
    fn get(&self) -> *mut c_void {
        self.0
    }
}

// SAFETY: `pc_file_set_writeback_hook`'s contract: `ctx` may be used from
// any thread while the hook is registered.
unsafe impl Send for HookCtx {}

// SAFETY: as above.
unsafe impl Sync for HookCtx {}

/// Registers `hook` with `ctx` as the file's write-back hook (for every
/// handle of the file), or removes it (`hook` NULL). While one is set,
/// write-back keeps the file's pages stable (a writer of a page waits for
/// its write in flight), so the bytes the hook approved are the bytes
/// written. (Added in ABI 10.)
///
/// # Safety
/// `file_` is NULL (`-EINVAL`) or a live handle of this library. `hook`,
/// if not NULL, may be called from any thread with `ctx` until it is
/// removed or replaced and, if the file then has dirty pages, until they
/// are written (or the cache is freed): `ctx` must stay valid that long.
#[no_mangle]
pub unsafe extern "C" fn pc_file_set_writeback_hook(
    file_: *const pc_file,
    hook: pc_writeback_fn,
    ctx: *mut c_void,
) -> c_int {
    guard("pc_file_set_writeback_hook", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_set_writeback_hook") }?;
        let h = hook.map(|h| {
            let ctx = HookCtx(ctx);
            WritebackHook::new(move |p: &WritebackPage<'_>| {
                let cause = match p.cause {
                    WritebackCause::Eviction => PC_WB_EVICTION,
                    WritebackCause::Background => PC_WB_BACKGROUND,
                    WritebackCause::Sync => PC_WB_SYNC,
                };
                // SAFETY: the caller's contract for `hook` and `ctx`; the
                // bytes are valid for the call.
                let r = unsafe { h(ctx.get(), p.index, p.bytes.as_ptr(), p.bytes.len(), cause) };
                if r == PC_WB_WRITE {
                    WritebackDecision::Write
                } else {
                    WritebackDecision::Defer
                }
            })
        });
        f.file.set_writeback_hook(h);
        Ok(())
    })
}
