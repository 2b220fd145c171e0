//! Anonymous regions (`pc_anon`): pages of the cache's budget that belong
//! to no file.

use crate::cache::pc_cache;
use crate::error::{arg, guard, out};
use crate::pin_count::PinCount;
use crate::pins::{hold, pc_pin, refuse_if_pinned, Held, Pinned};
use pagecache::AnonRegion;
use std::ffi::c_int;

/// An anonymous region: pages of a cache's budget that belong to no file,
/// zero-filled on first touch, written nowhere (`pc_anon_new`).
#[derive(Debug)]
pub struct pc_anon {
    pub(crate) region: AnonRegion,
    /// Pins and latches held in it: `pc_anon_free` refuses while any is.
    pub(crate) pins: PinCount,
}

/// Creates an anonymous region of `len` bytes (spanning whole pages) from
/// the cache's budget into `*region`: pages that belong to no file,
/// zero-filled on first touch, never written anywhere (scratch memory, a
/// hash table's buckets). Touched pages count against the capacity until
/// freed; they are never evicted. `-ENOMEM` when a first touch finds every
/// frame pinned, latched or anonymous.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_new(
    cache: *const pc_cache,
    len: u64,
    region: *mut *mut pc_anon,
) -> c_int {
    guard("pc_anon_new", || {
        // SAFETY: the contract: null or from pc_cache_new.
        let c = &unsafe { arg(cache, "pc_anon_new", "cache") }?.cache;
        let out = out(region, "pc_anon_new", "region")?;
        let r = Box::new(pc_anon {
            region: c.anon(len)?,
            pins: PinCount::default(),
        });
        // SAFETY: non-null, writable (the contract).
        unsafe { out.write(Box::into_raw(r)) };
        Ok(())
    })
}

/// Frees the region and returns its frames to the cache. `-EBUSY` (and
/// nothing done) while pages of it are pinned or latched.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_free(region: *mut pc_anon) -> c_int {
    guard("pc_anon_free", || {
        // SAFETY: the contract: null or from pc_anon_new.
        let r = unsafe { arg(region, "pc_anon_free", "region") }?;
        refuse_if_pinned(&r.pins, |n| {
            format!("pc_anon_free: {n} page(s) of the region still pinned or latched: release them first")
        })?;
        // SAFETY: from pc_anon_new (the contract), and no pin borrows it.
        drop(unsafe { Box::from_raw(region) });
        Ok(())
    })
}

/// Stores the region's length in bytes (as created) in `*len`.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_len(region: *const pc_anon, len: *mut u64) -> c_int {
    guard("pc_anon_len", || {
        // SAFETY: the contract.
        let r = unsafe { arg(region, "pc_anon_len", "region") }?;
        let out = out(len, "pc_anon_len", "len")?;
        // SAFETY: non-null, writable (the contract).
        unsafe { out.write(r.region.len()) };
        Ok(())
    })
}

/// Pins page `index` of the region into `*pin` (read-only; zeros if never
/// written) until `pc_pin_release`. Blocks while a latch holder has it.
/// `-ENXIO` past the region's end.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_pin(
    region: *const pc_anon,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_anon_pin", || {
        hold(region, index, pin, "pc_anon_pin", "region", |r| {
            Ok(Held::AnonPin(r.region.page(index)?))
        })
    })
}

/// Latches page `index` of the region for writing into `*pin` (writable by
/// this holder alone until `pc_pin_release`). Waits until no one else pins
/// or latches the page.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_latch(
    region: *const pc_anon,
    index: u64,
    pin: *mut pc_pin,
) -> c_int {
    guard("pc_anon_latch", || {
        hold(region, index, pin, "pc_anon_latch", "region", |r| {
            Ok(Held::AnonLatch(r.region.page_mut(index)?))
        })
    })
}

/// Frees pages `start..end` of the region (clamped to it): their frames go
/// back to the cache now, or when their last pin is released; they read
/// as zeros when touched again. Never blocks.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_anon_release_pages(
    region: *const pc_anon,
    start: u64,
    end: u64,
) -> c_int {
    guard("pc_anon_release_pages", || {
        // SAFETY: the contract.
        let r = unsafe { arg(region, "pc_anon_release_pages", "region") }?;
        r.region.free(start..end);
        Ok(())
    })
}

impl Pinned for pc_anon {
    fn pins(&self) -> &PinCount {
        &self.pins
    }
}
