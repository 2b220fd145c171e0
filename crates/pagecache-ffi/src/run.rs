//! Runs (`pc_run`): up to `PC_RUN_MAX` consecutive pages held by one pin
//! of their index leaf.

use crate::error::{guard, invalid, out};
use crate::file::{file, pc_file};
use pagecache::PageRun;
use std::ffi::c_int;

/// The most pages a `pc_run` holds.
pub const PC_RUN_MAX: usize = 16;

/// Words of private storage in a `pc_run`.
pub const PC_RUN_PRIVATE_WORDS: usize = 14;

/// Up to `PC_RUN_MAX` consecutive pages of one file, pinned together by
/// `pc_file_run` (one pin of their index leaf when they are cached) until
/// `pc_run_release`. Caller-owned, like `pc_pin`; only one copy may be
/// released.
#[repr(C)]
#[derive(Debug)]
pub struct pc_run {
    /// `pages[k]` is page `start + k`'s bytes (`page_size` of them,
    /// read-only) for `k < count`; the rest are NULL.
    pub pages: [*const u8; PC_RUN_MAX],
    /// Pages held: 0 only at or past end of file.
    pub count: usize,
    /// The page size in bytes.
    pub page_size: usize,
    /// The first page's index.
    pub start: u64,
    /// 1 if one pin of the index leaf holds the pages (they were cached),
    /// 0 if each has its own pin (some had to be read).
    pub one_pin: u32,
    /// Private: padding.
    pub pad_: u32,
    /// Private: whether a run is held (0 when not: releasing again is
    /// `-EINVAL`).
    pub held_: u64,
    /// Private to the library: the run itself.
    pub private_: [u64; PC_RUN_PRIVATE_WORDS],
}

pub(crate) struct StoredRun {
    #[allow(dead_code)]
    pub(crate) run: PageRun<'static>,
    pub(crate) file: *const pc_file,
}

/// `pc_run::held_` while a run is stored.
const HELD_RUN: u64 = 0x7063_5255_4e5f_5f21; // "pcRUN__!"

const _: () = assert!(
    std::mem::size_of::<StoredRun>() <= PC_RUN_PRIVATE_WORDS * 8
        && std::mem::align_of::<StoredRun>() <= 8
);

/// Pins up to `max` consecutive pages from `start` (at most `PC_RUN_MAX`)
/// into `*run`: `run->pages[k]` points to page `start + k`, read-only,
/// unchanged and cached until `pc_run_release`. Cached pages are held by
/// one pin of their index leaf (two atomic operations for the whole run,
/// `run->one_pin` is 1); the run then ends at the first page not cached
/// and idle. When `start` is not cached, the pages up to `max` are read
/// and each pinned (`one_pin` 0). A run never crosses a multiple of 64
/// pages, and `count` is 0 only at or past end of file (release it all the
/// same). Like pins, a run delays writers of its pages: holding one while
/// waiting for such a writer deadlocks.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_run(
    file_: *const pc_file,
    start: u64,
    max: usize,
    run: *mut pc_run,
) -> c_int {
    guard("pc_file_run", || {
        // SAFETY: the contract.
        let f = unsafe { file(file_, "pc_file_run") }?;
        let out = out(run, "pc_file_run", "run")?;
        // SAFETY: the handle lives until close, and close refuses while
        // this run is counted (module docs), so 'static is never outlived.
        let fs: &'static pc_file = unsafe { &*(f as *const pc_file) };
        let r = fs.file.run(start, max.min(PC_RUN_MAX))?;
        f.pins.add();
        let mut v = pc_run {
            pages: [std::ptr::null(); PC_RUN_MAX],
            count: r.len(),
            page_size: fs.file.page_size(),
            start,
            one_pin: r.one_pin() as u32,
            pad_: 0,
            held_: HELD_RUN,
            private_: [0; PC_RUN_PRIVATE_WORDS],
        };
        for (k, p) in r.iter().enumerate() {
            v.pages[k] = p.as_ptr();
        }
        // SAFETY: the private words are large and aligned enough (asserted
        // at compile time); `pc_run_release` reads the value back exactly
        // once (it clears `held_`). Frames never move, so `pages` stay
        // valid while the run is held.
        unsafe {
            v.private_
                .as_mut_ptr()
                .cast::<StoredRun>()
                .write(StoredRun { run: r, file: f })
        };
        // SAFETY: non-null, writable (the contract).
        unsafe { out.write(v) };
        Ok(())
    })
}

/// Releases a run and clears `*run` (`count` 0, `pages` NULL). Releasing a
/// cleared run again is `-EINVAL`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_run_release(run: *mut pc_run) -> c_int {
    guard("pc_run_release", || {
        let p = out(run, "pc_run_release", "run")?;
        // SAFETY: non-null, a pc_run (the contract).
        let run = unsafe { &mut *p };
        if run.held_ != HELD_RUN {
            return Err(invalid(format!(
                "pc_run_release: no run held (run from page {} released already, or never taken)",
                run.start
            )));
        }
        // SAFETY: `held_` says `pc_file_run` stored a `StoredRun` there,
        // and it is cleared below, so this is its only read.
        let stored = unsafe { run.private_.as_ptr().cast::<StoredRun>().read() };
        run.held_ = 0;
        run.count = 0;
        run.pages = [std::ptr::null(); PC_RUN_MAX];
        let f = stored.file;
        drop(stored.run);
        // SAFETY: the file is alive: close refuses while this run counts.
        unsafe { &*f }.pins.sub();
        Ok(())
    })
}
