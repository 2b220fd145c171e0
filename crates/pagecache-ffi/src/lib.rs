//! The C ABI of `pagecache`: `libpagecache.so` and `libpagecache.a`, with
//! the header `include/pagecache.h` generated from this crate by `cbindgen`
//! (checked in; `tests/header.rs` fails when they differ, and
//! `UPDATE_HEADER=1 cargo test -p pagecache-ffi` rewrites it).
//!
//! Conventions, for every function:
//! * the return value is 0 on success or a negative `errno`: the OS error
//!   where an OS call failed (`-ENOSPC`, `-EIO`, `-ENOENT`, ...), else one
//!   mapped from the error's kind (`pagecache::errno`); results come back
//!   through out-pointers;
//! * on failure, `pc_last_error()` returns the message of the calling
//!   thread's last error (which file, which page, what was wrong);
//! * null pointers, bad sizes and bad flags are `-EINVAL`, never a crash;
//! * no panic crosses the boundary: one is caught and returned as `-EIO`
//!   with its message.
//!
//! Handles: a `pc_cache`, a `pc_file` and a `pc_anon` (an anonymous region)
//! are opaque and may be used from any number of threads at once; a
//! `pc_pin` is a small struct the caller
//! owns (on its stack, say) that holds one pinned (read-only) or latched
//! (writable) page until `pc_pin_release`; a `pc_run` likewise holds up to
//! `PC_RUN_MAX` consecutive pages until `pc_run_release`.
//!
//! Soundness of the handles: a `pc_file` is a `Box` whose address never
//! changes until `pc_file_close`/`pc_file_discard`, and those refuse
//! (`-EBUSY`) while any pin or run taken through it is held; so the
//! `'static` lifetime given to a pin's `PageRef`/`PageMut` or a run's
//! `PageRun` (which borrow the file) is never outlived. A `pc_anon` is the
//! same for its pins (`AnonRef`/`AnonMut`) until `pc_anon_free`.
#![allow(non_camel_case_types)]

// The modules in the header's order (cbindgen follows these
// declarations; one per line group so that rustfmt keeps the order).
mod config;

mod error;

mod cache;

mod file;

mod hook;

mod pin_count;

mod pins;

mod page;

mod optimistic;

mod run;

mod anon;

mod queue;

// The C-visible items of each module, at the crate root (where the
// linker and cbindgen see them).
pub use anon::*;
pub use cache::*;
pub use config::*;
pub use error::*;
pub use file::*;
pub use hook::*;
pub use optimistic::*;
pub use page::*;
pub use pins::*;
pub use queue::*;
pub use run::*;

/// The version of this ABI: bumped when a struct's layout or a function's
/// meaning changes, or functions are added (3: `pc_file_run`; 4:
/// `pc_config.populate`; 5: anonymous regions, `pc_anon_*`; 6: optimistic
/// views `pc_page_optimistic`, `pc_optimistic_validate`,
/// `pc_optimistic_upgrade`; `pc_page_new`, `pc_page_try_pin`,
/// `pc_page_try_latch`, `pc_latch_release_clean`; 7:
/// `pc_config.stream_reads`, `pc_cache_stream_choices`; 8:
/// `pc_stats.streamed_pages`; 9: `pc_config_default` sets
/// `stream_reads` to `PC_STREAM_MEASURE`, not `PC_STREAM_DIRECT`; 10:
/// `pc_config.dirty_expire_ms`, `pc_pin.hint` and `pc_optimistic.hint`
/// (and the fields `pc_optimistic_valid` reads), `pc_page_optimistic_hinted`,
/// `pc_file_set_writeback_hook`, and `pc_page_new` of an unwritten hole;
/// 11: the completion queue, `pc_queue_*`, `pc_completion`, `PC_PENDING`;
/// 12: `PC_NO_HINT`, the `hint` of a pin of an anonymous page or of none,
/// which was 0, also a frame; 13: `pc_file_fast` and the inline
/// `pc_page_optimistic_fast`, `PC_STATE_UPTODATE`, `PC_STATE_ACCESSED`,
/// `PC_DESC_WORDS`; a view's private words are documented numbers; 14:
/// `pc_optimistic_upgrade_wait`, `PC_STATE_LATCHED`, and the inline view
/// takes the call for a latched page; 15: `pc_cache_open_shared`,
/// `pc_cache_remove_shared`; 16: `pc_config.drop_behind_writes`).
pub const PC_ABI_VERSION: u32 = 16;

/// The `hint` of a pin that holds no page of a file (an anonymous page,
/// a failed completion): no frame. Handed to `pc_page_optimistic_hinted`
/// it costs the walk a plain `pc_page_optimistic` pays. (Added in ABI 12;
/// before, such hints were 0, which is also a frame.)
pub const PC_NO_HINT: u64 = u64::MAX;

/// The `PC_ABI_VERSION` this library was built with: compare it with the
/// header's to catch a stale library.
#[no_mangle]
pub extern "C" fn pc_abi_version() -> u32 {
    PC_ABI_VERSION
}
