//! `pc_pin`: a pinned or latched page (of a file or an anonymous region)
//! stored in the caller's struct, and its release; the handles' pin
//! counts that close and free check.

use crate::error::{arg, guard, invalid, out};
use crate::pin_count::PinCount;
use pagecache::{AnonMut, AnonRef, PageMut, PageRef, RawLatch};
use std::ffi::c_int;
use std::io;

/// A page held by the caller: pinned (`pc_page_pin`: read-only, the page
/// stays cached and unchanged) or latched (`pc_page_latch`: writable by
/// this holder only, marked dirty when released). The caller owns the
/// struct (on its stack, say: no allocation per pin); `data` and `len` are
/// valid until `pc_pin_release`. It may be moved or copied, but only one
/// copy may be released.
#[repr(C)]
#[derive(Debug)]
pub struct pc_pin {
    /// The page's bytes (`len` of them; the page size). Writable only for a
    /// latched page. NULL when no page is held.
    pub data: *mut u8,
    /// The page size in bytes; 0 when no page is held.
    pub len: usize,
    /// The page's index in its file.
    pub index: u64,
    /// The frame the page is in: give it to `pc_page_optimistic_hinted` to
    /// find the page again without the index walk while it stays there
    /// (an index structure keeps it beside its child pointers).
    /// `PC_NO_HINT` for an anonymous page (ABI 12; 0 before). (Added in
    /// ABI 10.)
    pub hint: u64,
    /// Private: what is held (0 when nothing is: releasing such a pin
    /// again is `-EINVAL`).
    pub held_: u64,
    /// Private to the library: the pin itself.
    pub private_: [u64; PC_PIN_PRIVATE_WORDS],
}

/// Words of private storage in a `pc_pin`.
pub const PC_PIN_PRIVATE_WORDS: usize = 10;

/// What a `pc_pin`'s private words hold, in place.
pub(crate) enum Held {
    Pin(PageRef<'static>),
    /// A file page's latch, already taken apart (`Held::latch`).
    Latch(LatchParts),
    AnonPin(AnonRef<'static>),
    AnonLatch(AnonMut<'static>),
}

/// A file page's latch as its parts (`PageMut::into_raw`) and what the
/// `pc_pin` shows of it: taken apart as soon as the core returns the
/// guard, so that only these words move between the layers.
pub(crate) struct LatchParts {
    data: *mut u8,
    len: usize,
    hint: u64,
    file: *const pagecache::File,
    index: u64,
    raw: RawLatch,
}

impl Held {
    /// A file page's latch, taken apart.
    #[inline(always)]
    pub(crate) fn latch(mut m: PageMut<'static>) -> Held {
        Held::Latch(LatchParts {
            data: m.as_mut_ptr(),
            len: m.len(),
            hint: m.frame_hint().into(),
            file: m.file(),
            index: m.index(),
            raw: m.into_raw(),
        })
    }
}

impl Drop for LatchParts {
    /// Never stored (`store_latch` forgets what it stores): the latch is
    /// given back, as dropping its guard would.
    fn drop(&mut self) {
        // SAFETY: the parts of a latch of page `index` of `file`, which is
        // alive (its handle counted this pin); given back once (this is
        // their only owner).
        drop(unsafe { PageMut::from_raw(&*self.file, self.index, self.raw) });
    }
}

/// Any held guard but a file page's latch (a `StoredLatch`), in a
/// `pc_pin`'s private words.
pub(crate) struct Stored {
    pub(crate) held: Held,
    /// The count of the handle (`pc_file` or `pc_anon`) it was taken
    /// through.
    pub(crate) pins: *const PinCount,
}

/// A file page's latch in a `pc_pin`: its parts, not its guard (a few
/// words written and read back). The index is kept here too: the
/// struct's public `index` is the caller's to overwrite.
struct StoredLatch {
    file: *const pagecache::File,
    index: u64,
    raw: RawLatch,
    /// The count of the `pc_file` it was taken through.
    pins: *const PinCount,
}

/// `pc_pin::held_` values: a pin or a latch is stored (anything else, 0
/// included, is not a held page).
const HELD_PIN: u64 = 0x7063_5049_4e5f_5245; // "pcPIN_RE"

/// A file page's latch (a `StoredLatch`).
const HELD_LATCH: u64 = 0x7063_4c41_5443_4821; // "pcLATCH!"

/// An anonymous page's latch (a `Stored`).
const HELD_ANON_LATCH: u64 = 0x7063_414c_4154_4348; // "pcALATCH"

// The stored pin and latch fit the private words and their alignment.
const _: () = assert!(
    std::mem::size_of::<Stored>() <= PC_PIN_PRIVATE_WORDS * 8
        && std::mem::align_of::<Stored>() <= 8
        && std::mem::size_of::<StoredLatch>() <= PC_PIN_PRIVATE_WORDS * 8
        && std::mem::align_of::<StoredLatch>() <= 8
);

/// A handle pins are taken through (`pc_file`, `pc_anon`): its count.
pub(crate) trait Pinned: 'static {
    fn pins(&self) -> &PinCount;
}

/// Takes page `index` of the handle `h` (named `name` in errors) with
/// `get` into `*pin`, counted on the handle until `pc_pin_release`.
#[inline(always)]
pub(crate) fn hold<H: Pinned>(
    h: *const H,
    index: u64,
    pin: *mut pc_pin,
    what: &str,
    name: &str,
    get: impl FnOnce(&'static H) -> io::Result<Held>,
) -> io::Result<()> {
    // SAFETY: the contract: null or a live handle of this library.
    let r = unsafe { arg(h, what, name) }?;
    let p = out(pin, what, "pin")?;
    // SAFETY: the handle lives until its close or free, which refuses
    // while this pin is counted (module docs), so 'static is never
    // outlived.
    let held = get(unsafe { &*(r as *const H) })?;
    r.pins().add();
    store_pin(p, held, index, r.pins());
    Ok(())
}

/// `pc_file_close`'s, `pc_file_discard`'s and `pc_anon_free`'s check:
/// `-EBUSY` with `msg(n)` while `n` pins are held through the handle.
pub(crate) fn refuse_if_pinned(
    pins: &PinCount,
    msg: impl FnOnce(isize) -> String,
) -> io::Result<()> {
    // (Acquire inside: pairs with each release's decrement, so every
    // pin's drop happened before the caller frees the handle.)
    match pins.outstanding() {
        0 => Ok(()),
        n => Err(io::Error::new(io::ErrorKind::ResourceBusy, msg(n))),
    }
}

/// Writes the fields the caller reads (`data`, `len`, `index`, `hint`) and
/// the tag into `*p`, field by field: no copy of the struct on the way.
///
/// # Safety
/// `p` is non-null and writable (the caller's contract); `data` stays the
/// page's bytes while it is held (frames never move).
#[inline(always)]
unsafe fn show(p: *mut pc_pin, data: *mut u8, len: usize, index: u64, hint: u64, tag: u64) {
    // SAFETY: as the function's contract.
    unsafe {
        (&raw mut (*p).data).write(data);
        (&raw mut (*p).len).write(len);
        (&raw mut (*p).index).write(index);
        (&raw mut (*p).hint).write(hint);
        (&raw mut (*p).held_).write(tag);
    }
}

/// Writes a held page into `*p` (the caller counted it in `pins`): a file
/// page's latch as its parts (a `StoredLatch`), any other guard whole (a
/// `Stored`); the private words past it are left as they are.
#[inline(always)]
pub(crate) fn store_pin(p: *mut pc_pin, held: Held, index: u64, pins: &PinCount) {
    // The latch moved out first: matched by reference below, it would be
    // kept in memory and copied again (5-15 ns of a C latch, measured).
    let mut held = match held {
        Held::Latch(parts) => return store_latch(p, parts, pins),
        h => h,
    };
    let ro = |b: &[u8]| (b.as_ptr() as *mut u8, b.len());
    let (data, len, hint, tag) = match &mut held {
        Held::Pin(r) => {
            let (d, l) = ro(r);
            (d, l, r.frame_hint().into(), HELD_PIN)
        }
        Held::AnonPin(r) => {
            let (d, l) = ro(r);
            (d, l, crate::PC_NO_HINT, HELD_PIN)
        }
        Held::AnonLatch(m) => (m.as_mut_ptr(), m.len(), crate::PC_NO_HINT, HELD_ANON_LATCH),
        Held::Latch(_) => unreachable!("a latch is stored by store_latch"),
    };
    // SAFETY: non-null, writable (the caller's contract); the private
    // words are large and aligned enough (asserted at compile time);
    // `pc_pin_release` reads the value back exactly once (it clears
    // `held_`).
    unsafe {
        show(p, data, len, index, hint, tag);
        (&raw mut (*p).private_)
            .cast::<Stored>()
            .write(Stored { held, pins });
    }
}

/// `store_pin` of a file page's latch: its parts (`PageMut::into_raw`).
#[inline(always)]
fn store_latch(p: *mut pc_pin, parts: LatchParts, pins: &PinCount) {
    let parts = std::mem::ManuallyDrop::new(parts);
    let LatchParts {
        data,
        len,
        hint,
        file,
        index,
        raw,
    } = *parts;
    // SAFETY: as in `store_pin`; `pc_pin_release` gives the parts back to
    // `PageMut::from_raw` exactly once (it clears `held_`), and they are
    // not dropped here (`ManuallyDrop`).
    unsafe {
        show(p, data, len, index, hint, HELD_LATCH);
        (&raw mut (*p).private_)
            .cast::<StoredLatch>()
            .write(StoredLatch {
                file,
                index,
                raw,
                pins,
            });
    }
}

/// Releases a pinned or latched page and clears `*pin` (`data` NULL). A
/// latched page is marked dirty (see `pc_latch_release_clean`).
/// Releasing a cleared pin again is `-EINVAL` (a copy of the struct
/// released twice cannot be detected: don't).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_pin_release(pin: *mut pc_pin) -> c_int {
    guard("pc_pin_release", || {
        release_held(pin, "pc_pin_release", true)
    })
}

/// Releases a latch whose bytes the holder did not change: the page is
/// not marked dirty (it stays clean if it was). Also releases a pin, as
/// `pc_pin_release` does. Writing through `pin->data` and then releasing
/// with this call loses the write at the page's eviction: don't.
///
/// # Safety
/// As `pc_pin_release`.
#[no_mangle]
pub unsafe extern "C" fn pc_latch_release_clean(pin: *mut pc_pin) -> c_int {
    guard("pc_latch_release_clean", || {
        release_held(pin, "pc_latch_release_clean", false)
    })
}

/// `pc_pin_release` and `pc_latch_release_clean`: `dirty` marks a latched
/// file page dirty.
#[inline(always)]
pub(crate) fn release_held(pin: *mut pc_pin, what: &str, dirty: bool) -> io::Result<()> {
    let p = out(pin, what, "pin")?;
    // SAFETY: non-null, a pc_pin (the contract).
    let pin = unsafe { &mut *p };
    let tag = pin.held_;
    if tag != HELD_PIN && tag != HELD_LATCH && tag != HELD_ANON_LATCH {
        return Err(invalid(format!(
            "{what}: no page held (page {} released already, or never pinned)",
            pin.index
        )));
    }
    pin.held_ = 0;
    pin.data = std::ptr::null_mut();
    pin.len = 0;
    let pins = if tag == HELD_LATCH {
        // SAFETY: the tag says `store_latch` stored a `StoredLatch` there,
        // and it was cleared above, so this is its only read.
        let s = unsafe { pin.private_.as_ptr().cast::<StoredLatch>().read() };
        let mut raw = s.raw;
        raw.touched |= dirty;
        // SAFETY: the parts of a latch of page `s.index` of that file,
        // given back once; the file is alive (its handle's close refuses
        // while this pin counts).
        drop(unsafe { PageMut::from_raw(&*s.file, s.index, raw) });
        s.pins
    } else {
        // SAFETY: the tag says `store_pin` stored a `Stored` there, and it
        // was cleared above, so this is its only read.
        let s = unsafe { pin.private_.as_ptr().cast::<Stored>().read() };
        drop(s.held);
        s.pins
    };
    // SAFETY: the handle is alive: its close or free refuses while
    // this pin counts.
    unsafe { &*pins }.sub();
    Ok(())
}
