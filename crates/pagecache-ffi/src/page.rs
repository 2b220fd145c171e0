//! Pins and latches of file pages by index (`pc_page_pin`,
//! `pc_page_latch`, their `try_` forms, `pc_page_new`), into a `pc_pin`.

use crate::error::guard;
use crate::file::{pc_file, would_wait};
use crate::pins::{hold, pc_pin, Held};
use std::ffi::c_int;

/// Pins page `index` of the file into `*pin`: `pin->data` points to its
/// `pin->len` bytes, read-only, unchanged and cached until
/// `pc_pin_release`. Bytes past the end of file read as zero. Blocks on a
/// miss and while a writer holds the page. `-ENXIO` past the last page.
/// A pin delays writers of the page and `pc_file_set_len` cutting it;
/// holding one while waiting for such a writer deadlocks.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_pin(file_: *const pc_file, index: u64, pin: *mut pc_pin) -> c_int {
    guard("pc_page_pin", || {
        hold(file_, index, pin, "pc_page_pin", "file", |f| {
            Ok(Held::Pin(f.file.page(index)?))
        })
    })
}

/// Latches page `index` for writing into `*pin`: `pin->data` is writable
/// by this holder alone until `pc_pin_release`, which marks the page
/// dirty. Waits until no one else pins or latches the page; others wait
/// for this latch. `-EACCES` through a read-only handle.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_latch(
    file_: *const pc_file,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_page_latch", || {
        hold(file_, index, pin, "pc_page_latch", "file", |f| {
            Ok(Held::latch(f.file.page_mut(index)?))
        })
    })
}

/// Pins page `index` into `*pin` as `pc_page_pin` does, but never waits
/// for another holder: `-EAGAIN` (and `*pin` untouched) if a writer holds
/// the page or is reading it in. A miss is read (waits for the read
/// only). For index structures that hold other pages and must back off.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_try_pin(
    file_: *const pc_file,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_page_try_pin", || {
        hold(file_, index, pin, "pc_page_try_pin", "file", |f| {
            match f.file.try_pin(index)? {
                Some(p) => Ok(Held::Pin(p)),
                None => Err(would_wait(
                    "pc_page_try_pin",
                    f,
                    index,
                    "latched by another holder",
                )),
            }
        })
    })
}

/// Latches page `index` into `*pin` as `pc_page_latch` does, but never
/// waits for another holder: `-EAGAIN` (and `*pin` untouched) if another
/// thread latches or pins the page, or a run holds it. A miss is read.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_try_latch(
    file_: *const pc_file,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_page_try_latch", || {
        hold(
            file_,
            index,
            pin,
            "pc_page_try_latch",
            "file",
            |f| match f.file.try_latch(index)? {
                Some(m) => Ok(Held::latch(m)),
                None => Err(would_wait(
                    "pc_page_try_latch",
                    f,
                    index,
                    "pinned or latched by another holder",
                )),
            },
        )
    })
}

/// Latches a new page at `index` that nobody has written into `*pin`: at
/// or past the end of file, or in a hole past every byte that may be on
/// disk and not cached (another thread's `pc_page_new` of a later page, or
/// `pc_file_set_len`, grew the file over it; since ABI 10). Zeroed,
/// writable, dirty when released (even by `pc_latch_release_clean`); the
/// file grows to cover it at once, with no read and no system call.
/// `-EEXIST` if the page is cached (another thread created it first) or
/// its bytes may be on disk (below the file's length when it was opened,
/// or written back since), `-EACCES` through a read-only handle.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_new(file_: *const pc_file, index: u64, pin: *mut pc_pin) -> c_int {
    guard("pc_page_new", || {
        hold(file_, index, pin, "pc_page_new", "file", |f| {
            Ok(Held::latch(f.file.page_new(index)?))
        })
    })
}
