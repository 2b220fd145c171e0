//! Optimistic views (`pc_optimistic`): taken by index walk or frame hint,
//! validated (also inline in the header), upgraded to a latch.

use crate::error::{arg, fail, guard, invalid, out};
use crate::file::{pc_file, would_wait};
use crate::pins::{hold, pc_pin, Held};
use std::ffi::c_int;
use std::io;

/// Words of private storage in a `pc_optimistic`.
pub const PC_OPTIMISTIC_PRIVATE_WORDS: usize = 8;

/// Bytes of readable zeros mapped after a cache's last frame (anonymous
/// regions share the frames): a reader of `pc_optimistic::data` that goes
/// past the page through a torn offset, before its validation fails,
/// reads zeros there instead of faulting (any 16-bit offset plus a small
/// read past the last page lands in them).
pub const PC_ARENA_SLACK: usize = 65536;

const _: () = assert!(PC_ARENA_SLACK == pagecache::ARENA_SLACK);

/// An optimistic view of a cached page (`pc_page_optimistic`): no pin, no
/// shared write. Read the page's bytes through `data` (they may be
/// changing: copy what you need, trust none of it, never follow a value
/// read as a pointer or an unchecked offset), then call
/// `pc_optimistic_validate` (or its inline form, `pc_optimistic_valid`): 1
/// means nothing changed the page since the view was taken, so what you
/// read is a consistent snapshot. A view holds nothing: there is no
/// release. It stays usable (validate, upgrade) until its file is closed;
/// `data` stays readable memory for the cache's life.
#[repr(C)]
#[derive(Debug)]
pub struct pc_optimistic {
    /// The page's bytes (`len` of them), read-only, possibly changing.
    pub data: *const u8,
    /// The page size in bytes.
    pub len: usize,
    /// The page's index in its file.
    pub index: u64,
    /// The frame the page is in (see `pc_pin::hint`). (Added in ABI 10.)
    pub hint: u64,
    /// Private, read by `pc_optimistic_valid`: the frame's state word.
    pub state_: *const u64,
    /// Private, read by `pc_optimistic_valid`: the frame's version.
    pub version_word_: *const u64,
    /// Private, read by `pc_optimistic_valid`: the version the view was
    /// taken at.
    pub version_: u64,
    /// Private: `PC_OPTIMISTIC_HELD` while the struct holds a view.
    pub held_: u64,
    /// Private: the file handle, frame and page index of the view
    /// (`pc_page_optimistic_fast` writes them; the rest are zero).
    pub private_: [u64; PC_OPTIMISTIC_PRIVATE_WORDS],
}

/// What a `pc_optimistic`'s private words hold (`pc_page_optimistic_fast`
/// writes them inline, so their layout is part of the ABI): the file
/// handle the view was taken through, the frame, the page's index; the
/// version is `version_`. The rest are zero.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct StoredView {
    pub(crate) file: *const pc_file,
    pub(crate) frame: u64,
    pub(crate) index: u64,
}

/// `pc_optimistic::held_` while a view is stored ("pcVIEW_!").
pub const PC_OPTIMISTIC_HELD: u64 = 0x7063_5649_4557_5f21;

/// The bit of a frame's state word that `pc_optimistic_valid` tests: set
/// while the frame holds a page that truncate or discard removed.
pub const PC_STATE_REMOVED: u64 = 0x0080_0000_0000;

/// The bit of a frame's state word that `pc_page_optimistic_fast` tests:
/// set while the frame's bytes hold its page. (Added in ABI 13.)
pub const PC_STATE_UPTODATE: u64 = 0x0008_0000_0000;

/// The bit of a frame's state word that `pc_page_optimistic_fast` tests:
/// the replacement policy's accessed bit, which a view sets when clear
/// (the inline view takes the call then). (Added in ABI 13.)
pub const PC_STATE_ACCESSED: u64 = 0x0040_0000_0000;

/// The bit of a frame's state word that `pc_page_optimistic_fast` tests:
/// set while a writer holds the page's latch (the view then takes the
/// call, which waits for the writer: a view taken meanwhile would fail
/// validation). (Added in ABI 14.)
pub const PC_STATE_LATCHED: u64 = 0x0001_0000_0000;

/// A frame descriptor's size in 64-bit words (`pc_fast::descs`): its state
/// word is word 0, its version word 1, its owner word 2 (`pc_fast::owner`
/// for a page of the file), its page index word 3. (Added in ABI 13.)
pub const PC_DESC_WORDS: u64 = 8;

const _: () = assert!(PC_STATE_REMOVED == pagecache::internals::STATE_REMOVED);
const _: () = assert!(PC_STATE_UPTODATE == pagecache::internals::STATE_UPTODATE);
const _: () = assert!(PC_STATE_ACCESSED == pagecache::internals::STATE_ACCESSED);
const _: () = assert!(PC_STATE_LATCHED == pagecache::internals::STATE_LATCHED);
const _: () = assert!(PC_DESC_WORDS as usize == pagecache::internals::DESC_WORDS);

const _: () = assert!(
    std::mem::size_of::<StoredView>() <= PC_OPTIMISTIC_PRIVATE_WORDS * 8
        && std::mem::align_of::<StoredView>() <= 8
);

/// The `pc_optimistic` of view `o` of page `index`, taken through `r`.
pub(crate) fn view_out(
    o: &pagecache::Optimistic<'_>,
    index: u64,
    r: *const pc_file,
) -> pc_optimistic {
    let (state, version_word, version) = o.validation_words();
    let mut out = pc_optimistic {
        data: o.as_ptr(),
        len: o.len(),
        index,
        hint: o.frame_hint().into(),
        state_: state,
        version_word_: version_word,
        version_: version,
        held_: PC_OPTIMISTIC_HELD,
        private_: [0; PC_OPTIMISTIC_PRIVATE_WORDS],
    };
    // SAFETY: large and aligned enough (asserted at compile time); plain
    // words, no destructor.
    unsafe {
        out.private_
            .as_mut_ptr()
            .cast::<StoredView>()
            .write(StoredView {
                file: r,
                frame: o.frame_hint().into(),
                index,
            })
    };
    out
}

/// Where `pc_page_optimistic_fast` reads (`pc_file_fast`): frame `f`'s
/// descriptor is the `PC_DESC_WORDS` words from `descs + f *
/// PC_DESC_WORDS`, its bytes the `page_size` from `frames + (f <<
/// page_shift)`. Valid while the file is open. (Added in ABI 13.)
#[repr(C)]
#[derive(Debug)]
pub struct pc_fast {
    /// The file the views are of.
    pub file: *const pc_file,
    /// Frame 0's descriptor.
    pub descs: *const u64,
    /// Frame 0's bytes.
    pub frames: *const u8,
    /// Frames in the cache: a hint at or past it takes the call.
    pub nframes: u64,
    /// The owner word of the file's pages' descriptors.
    pub owner: u64,
    /// The page size in bytes.
    pub page_size: usize,
    /// log2 of `page_size`.
    pub page_shift: u32,
    /// 0 when the inline view must always take the call (a cache with hit
    /// hooks); else 1.
    pub usable: u32,
}

/// Fills `*fast` for `pc_page_optimistic_fast` of the file's pages. Each
/// view it takes inline is one `pc_page_optimistic_hinted` would take on
/// the same frame, read without a call.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_file_fast(file_: *const pc_file, fast: *mut pc_fast) -> c_int {
    guard("pc_file_fast", || {
        // SAFETY: the contract: null or a live handle of this library.
        let r = unsafe { arg(file_, "pc_file_fast", "file") }?;
        let o = out(fast, "pc_file_fast", "fast")?;
        let v = r.file.fast_view();
        let f = pc_fast {
            file: file_,
            descs: v.descs,
            frames: v.frames,
            nframes: v.nframes,
            owner: v.owner,
            page_size: 1 << v.page_shift,
            page_shift: v.page_shift,
            usable: v.usable.into(),
        };
        // SAFETY: non-null, writable (the contract).
        unsafe { o.write(f) };
        Ok(())
    })
}

/// As `pc_page_optimistic`, first trying frame `hint` (a `pc_pin::hint` or
/// `pc_optimistic::hint` of the same page from earlier): while the page is
/// still in that frame the view is taken without the index walk (two
/// dependent loads fewer); otherwise, or for a hint that is no frame, as
/// `pc_page_optimistic`. A wrong hint costs a look, never a wrong page.
/// (Added in ABI 10.)
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_optimistic_hinted(
    file_: *const pc_file,
    index: u64,
    hint: u64,
    view: *mut pc_optimistic,
) -> c_int {
    guard("pc_page_optimistic_hinted", || {
        // SAFETY: the contract.
        unsafe { take_view(file_, index, Some(hint), view, "pc_page_optimistic_hinted") }
    })
}

/// `pc_page_optimistic` and `pc_page_optimistic_hinted`: a view of page
/// `index` into `*view`, first through frame `hint` if given.
///
/// # Safety
/// As theirs.
pub(crate) unsafe fn take_view(
    file_: *const pc_file,
    index: u64,
    hint: Option<u64>,
    view: *mut pc_optimistic,
    what: &str,
) -> io::Result<()> {
    // SAFETY: the contract: null or a live handle of this library.
    let r = unsafe { arg(file_, what, "file") }?;
    let v = out(view, what, "view")?;
    // SAFETY: the view borrows the handle, which the caller must not close
    // while it uses the view (`pc_optimistic`'s contract).
    let f: &'static pc_file = unsafe { &*(r as *const pc_file) };
    let hinted = hint
        .and_then(|h| u32::try_from(h).ok())
        .and_then(|h| f.file.optimistic_hinted(index, h));
    let o = match hinted {
        Some(o) => o,
        None => f.file.optimistic(index)?,
    };
    let out = view_out(&o, index, r);
    // SAFETY: non-null, writable (the contract).
    unsafe { v.write(out) };
    Ok(())
}

/// Takes an optimistic view of page `index` into `*view` (see
/// `pc_optimistic`): on a cached page no pin and no shared write (the
/// page's accessed bit only when clear); a miss reads the page in first,
/// and a page being written is waited for. `-ENXIO` past the last page.
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_page_optimistic(
    file_: *const pc_file,
    index: u64,
    view: *mut pc_optimistic,
) -> c_int {
    guard("pc_page_optimistic", || {
        // SAFETY: the contract.
        unsafe { take_view(file_, index, None, view, "pc_page_optimistic") }
    })
}

/// The view stored in `*view`, or `-EINVAL`.
///
/// # Safety
/// `view` is NULL or points to a `pc_optimistic`.
pub(crate) unsafe fn stored_view(
    view: *const pc_optimistic,
    what: &str,
) -> io::Result<(StoredView, u64)> {
    // SAFETY: the caller's contract.
    let v = unsafe { arg(view, what, "view") }?;
    if v.held_ != PC_OPTIMISTIC_HELD {
        return Err(invalid(format!(
            "{what}: not a view taken by pc_page_optimistic"
        )));
    }
    // SAFETY: `held_` says a view stored a `StoredView` (plain words).
    let s = unsafe { v.private_.as_ptr().cast::<StoredView>().read() };
    if s.file.is_null() {
        return Err(invalid(format!("{what}: a view with no file")));
    }
    Ok((s, v.version_))
}

/// The library's view of a stored one (`None`: the frame holds another
/// page now, so the view no longer validates).
///
/// # Safety
/// `s.file` is a live handle (the view's file is not closed: the
/// contract of every call taking a view).
unsafe fn rebuilt<'a>(s: &StoredView, version: u64) -> Option<pagecache::Optimistic<'a>> {
    // SAFETY: the caller's contract.
    let f: &'a pc_file = unsafe { &*s.file };
    let frame = u32::try_from(s.frame).ok()?;
    f.file.view_at(frame, version, s.index)
}

/// 1 if nothing changed the page since `*view` was taken (what the caller
/// read through `view->data` before this call is a consistent snapshot),
/// 0 if something did (restart): a writer, the frame's reuse, or a
/// truncate that cut the page off (even one the file has since grown back
/// over), `-EINVAL` for NULL or a struct that holds
/// no view. Writes nothing shared. Reads must come before the call: the
/// call orders them (an acquire fence) before its re-check.
///
/// # Safety
/// `view` is NULL or points to a `pc_optimistic`; the view's file is not
/// closed.
#[no_mangle]
pub unsafe extern "C" fn pc_optimistic_validate(view: *const pc_optimistic) -> c_int {
    // SAFETY: the contract.
    match unsafe { stored_view(view, "pc_optimistic_validate") } {
        // SAFETY: the view's file is not closed (the contract).
        Ok((s, v)) => unsafe { rebuilt(&s, v) }.is_some_and(|o| o.validate()) as c_int,
        Err(e) => fail(&e),
    }
}

/// Latches the viewed page into `*pin` (as `pc_page_latch`) if and only if
/// nothing changed it since `*view` was taken; else `-EAGAIN`: restart. Of
/// two upgrades racing, at most one succeeds; waits for pins of the page
/// to drain, never for another latch holder. `-EACCES` through a read-only
/// handle. The view stays in `*view` (it will no longer validate once the
/// page is changed).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above; the
/// view's file is not closed.
#[no_mangle]
pub unsafe extern "C" fn pc_optimistic_upgrade(
    view: *const pc_optimistic,
    pin: *mut pc_pin,
) -> c_int {
    // SAFETY: the contract.
    unsafe { upgrade_as(view, pin, false, "pc_optimistic_upgrade") }
}

/// `pc_optimistic_upgrade`, but refused because another holder has the
/// page latched, it first waits for that latch's release (a short spin,
/// then a sleep), then returns `-EAGAIN`: for a caller that would restart
/// at once and meet the same latch again (with more threads than CPUs, a
/// preempted latch holder would have every other thread restart until it
/// runs again). The caller must hold no pin or latch of any page: the
/// holder it waits for may be waiting for one of them. (Added in ABI 14.)
///
/// # Safety
/// As `pc_optimistic_upgrade`.
#[no_mangle]
pub unsafe extern "C" fn pc_optimistic_upgrade_wait(
    view: *const pc_optimistic,
    pin: *mut pc_pin,
) -> c_int {
    // SAFETY: the contract.
    unsafe { upgrade_as(view, pin, true, "pc_optimistic_upgrade_wait") }
}

/// The two upgrades.
///
/// # Safety
/// As `pc_optimistic_upgrade`.
unsafe fn upgrade_as(
    view: *const pc_optimistic,
    pin: *mut pc_pin,
    wait: bool,
    what: &'static str,
) -> c_int {
    guard(what, || {
        // SAFETY: the contract.
        let (s, v) = unsafe { stored_view(view, what) }?;
        let index = s.index;
        hold(s.file, index, pin, what, "file", |f| {
            let changed =
                |f| would_wait(what, f, index, "changed since the view was taken: restart");
            // SAFETY: the view's file is not closed (the contract); the
            // view borrows the handle as `hold` does.
            let Some(o) = (unsafe { rebuilt(&s, v) }) else {
                return Err(changed(f));
            };
            let r = if wait {
                o.upgrade_or_wait()
            } else {
                o.upgrade()
            };
            r.map(Held::latch).map_err(|e| {
                if e.kind() == io::ErrorKind::Interrupted {
                    changed(f)
                } else {
                    e
                }
            })
        })
    })
}
