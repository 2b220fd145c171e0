//! Copies between frames and user buffers with per-word relaxed atomic
//! accesses on the frame side.
//!
//! Optimistic readers (protocol 5.4) copy bytes that a writer may be changing
//! at the same moment; with plain loads that is a data race, undefined
//! behaviour in Rust. Relaxed atomic loads of aligned words (and single bytes
//! at unaligned edges) race soundly; the seqlock version decides afterwards
//! whether the snapshot is kept. Writers use the matching atomic stores. On
//! x86-64 both compile to ordinary moves.
//!
//! On x86-64 the frame side goes through inline assembly instead: copies of
//! [`ASM_MIN`] bytes or more use one `rep movsb` (or `rep stosb` to zero),
//! the fastest way to move a page on current CPUs (word loops of relaxed
//! atomics cost 2x on a 4 KiB write); shorter loads and the optimistic
//! views' loads use one `mov` per 1-8 bytes at any alignment
//! ([`atomic_load_small`]; relaxed atomics need aligned words, so a
//! byte loop at each unaligned edge: with it the B-tree did 556 k lookups/s
//! at 1 M tuples, with word loads 667 k, `docs/benchmarks.md`). The argument for soundness is the one the `atomic-memcpy` crate
//! makes: the assembly block is opaque to the compiler, which cannot assume
//! anything about the bytes it reads or writes and so cannot miscompile a
//! race with it; in hardware every byte it moves is moved by a
//! single-copy-atomic access, exactly what the per-byte relaxed atomics
//! would do; a copy torn by a concurrent writer is discarded by the seqlock
//! as before. Not under loom or Miri (which cannot run assembly) and not on
//! other architectures: there the atomic loops stay.

use crate::sync::unmodelled::{AtomicU64, AtomicU8, Ordering};
use crate::sync::Witness;

const W: usize = std::mem::size_of::<u64>();

/// Copies at least this long use the assembly copy (x86-64): below it
/// `rep movsb`'s start-up costs more than the word loop.
pub(crate) const ASM_MIN: usize = 256;

/// Whether this build has the assembly copies.
pub(crate) const ASM: bool = cfg!(all(target_arch = "x86_64", not(loom), not(miri)));

/// `n` bytes from `src` to `dst` with one `rep movsb`.
///
/// # Safety
/// Both ranges valid for `n` bytes and not overlapping.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline(always)]
unsafe fn asm_copy(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the caller's ranges; the direction flag is clear (the ABI
    // guarantees it at every call), so the copy runs forwards; `rep movsb`
    // touches no stack and no flags.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        )
    }
}

/// `n` zero bytes at `dst` with one `rep stosb`.
///
/// # Safety
/// The range valid for writes of `n` bytes.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline(always)]
unsafe fn asm_zero(dst: *mut u8, n: usize) {
    // SAFETY: as `asm_copy`.
    unsafe {
        std::arch::asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            in("al") 0u8,
            options(nostack, preserves_flags)
        )
    }
}

#[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
unsafe fn asm_copy(_: *mut u8, _: *const u8, _: usize) {
    unreachable!("no assembly copies in this build")
}

#[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
unsafe fn asm_zero(_: *mut u8, _: usize) {
    unreachable!("no assembly copies in this build")
}

/// Copies `dst.len()` bytes from `src` into `dst`; `w` is the frame's
/// witness (see `crate::sync::Witness`). Context: any, no sleep, no lock.
///
/// # Safety
/// `src .. src + dst.len()` must lie inside one live frame of the arena.
#[inline]
pub(crate) unsafe fn atomic_load_copy(w: &Witness, dst: &mut [u8], src: *const u8) {
    // Under loom: two halves, each marked on the witness (`crate::sync`),
    // so a model can see a copy torn by a writer.
    if cfg!(loom) {
        let h = dst.len() / 2;
        let (a, b) = dst.split_at_mut(h);
        w.touch();
        // SAFETY: the two halves of the caller's range.
        unsafe { load_copy(a, src) };
        w.touch();
        // SAFETY: as above.
        unsafe { load_copy(b, src.add(h)) };
    } else {
        let _ = w;
        // SAFETY: the caller's contract.
        unsafe { load_copy(dst, src) }
    }
}

/// The `N` bytes (`N` at most 8) at `src` as a native-endian integer of
/// those bytes (the low `8 * N` bits). `w` is the frame's witness. On
/// x86-64: one load instruction of that width in inline assembly, whatever
/// the alignment (the argument of the module docs: opaque to the compiler,
/// and every byte read by a single-copy-atomic access in hardware, which is
/// all the per-byte relaxed loads it replaces would give; a torn value is
/// discarded by the seqlock). Elsewhere, and under loom or Miri: relaxed
/// atomic loads of the one or two aligned words that cover the bytes.
/// Context: any, no sleep, no lock.
///
/// # Safety
/// `src .. src + N` must lie inside one live frame of the arena.
#[inline(always)]
pub(crate) unsafe fn atomic_load_small<const N: usize>(w: &Witness, src: *const u8) -> u64 {
    const { assert!(N == 1 || N == 2 || N == 4 || N == 8) };
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    {
        let _ = w;
        let v: u64;
        // SAFETY: the caller's range (N bytes at src); a plain load of N
        // bytes, no stack, flags preserved. Zero-extended into v.
        unsafe {
            match N {
                1 => {
                    std::arch::asm!("movzx {v:e}, byte ptr [{p}]", v = out(reg) v, p = in(reg) src, options(nostack, preserves_flags, readonly))
                }
                2 => {
                    std::arch::asm!("movzx {v:e}, word ptr [{p}]", v = out(reg) v, p = in(reg) src, options(nostack, preserves_flags, readonly))
                }
                4 => {
                    std::arch::asm!("mov {v:e}, dword ptr [{p}]", v = out(reg) v, p = in(reg) src, options(nostack, preserves_flags, readonly))
                }
                _ => {
                    std::arch::asm!("mov {v}, qword ptr [{p}]", v = out(reg) v, p = in(reg) src, options(nostack, preserves_flags, readonly))
                }
            }
        }
        v
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    {
        if cfg!(loom) || cfg!(target_endian = "big") {
            let mut b = [0u8; 8];
            // SAFETY: the caller's range.
            unsafe { atomic_load_copy(w, &mut b[..N], src) };
            return u64::from_le_bytes(b);
        }
        let a = src as usize;
        let lo = (a & !(W - 1)) as *const AtomicU64;
        let shift = (a & (W - 1)) * 8;
        // SAFETY: `lo` is the aligned word holding the first byte, inside
        // the frame (frames are 8-byte aligned). Relaxed: validated by the
        // seqlock version, as every optimistic load.
        let w0 = unsafe { (*lo).load(Ordering::Relaxed) };
        let v = if (a & (W - 1)) + N <= W {
            w0 >> shift
        } else {
            // SAFETY: the bytes cross into the next aligned word, so it
            // holds their last byte: inside the frame.
            let w1 = unsafe { (*lo.add(1)).load(Ordering::Relaxed) };
            (w0 >> shift) | (w1 << (64 - shift))
        };
        if N == 8 {
            v
        } else {
            v & ((1u64 << (8 * N)) - 1)
        }
    }
}

/// A short copy on x86-64: eight bytes at a time whatever the alignment
/// (one load instruction each, see [`atomic_load_small`]), then the tail.
///
/// # Safety
/// As for [`atomic_load_copy`], `n` bytes.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
#[inline(always)]
unsafe fn asm_load_words(d: *mut u8, src: *const u8, n: usize) {
    let mut i = 0;
    while i + W <= n {
        // SAFETY: in bounds of both (caller); the destination is ours.
        unsafe {
            let v = atomic_load_small::<8>(&Witness::NONE, src.add(i));
            std::ptr::write_unaligned(d.add(i) as *mut u64, v);
        }
        i += W;
    }
    while i < n {
        // SAFETY: as above, one byte.
        unsafe { *d.add(i) = atomic_load_small::<1>(&Witness::NONE, src.add(i)) as u8 };
        i += 1;
    }
}

#[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
unsafe fn asm_load_words(_: *mut u8, _: *const u8, _: usize) {
    unreachable!("no assembly copies in this build")
}

/// [`atomic_load_copy`] without the loom scheduling point.
///
/// # Safety
/// As for [`atomic_load_copy`].
#[inline(always)]
unsafe fn load_copy(dst: &mut [u8], src: *const u8) {
    let n = dst.len();
    let d = dst.as_mut_ptr();
    if ASM && n >= ASM_MIN {
        // SAFETY: the caller's range; `dst` is our own slice.
        return unsafe { asm_copy(d, src, n) };
    }
    if ASM {
        // SAFETY: the caller's contract.
        return unsafe { asm_load_words(d, src, n) };
    }
    let mut i = 0;
    while i < n && (src as usize + i) % W != 0 {
        // SAFETY: i < n, in bounds of both (caller); AtomicU8 has u8's
        // alignment.
        unsafe { *d.add(i) = (*(src.add(i) as *const AtomicU8)).load(Ordering::Relaxed) };
        i += 1;
    }
    // Four words per step: fewer instructions in flight per copy lets the
    // next lookup's cache miss start sooner (see docs/benchmarks.md).
    while i + 4 * W <= n {
        // SAFETY: in bounds (caller) and 8-byte aligned by the loop above;
        // destination writes are unaligned-safe. Relaxed: validated by the
        // seqlock version (Acquire fence after).
        unsafe {
            let s = src.add(i) as *const AtomicU64;
            let w0 = (*s).load(Ordering::Relaxed);
            let w1 = (*s.add(1)).load(Ordering::Relaxed);
            let w2 = (*s.add(2)).load(Ordering::Relaxed);
            let w3 = (*s.add(3)).load(Ordering::Relaxed);
            let p = d.add(i) as *mut u64;
            std::ptr::write_unaligned(p, w0);
            std::ptr::write_unaligned(p.add(1), w1);
            std::ptr::write_unaligned(p.add(2), w2);
            std::ptr::write_unaligned(p.add(3), w3);
        }
        i += 4 * W;
    }
    while i + W <= n {
        // SAFETY: as above, one word.
        unsafe {
            let w = (*(src.add(i) as *const AtomicU64)).load(Ordering::Relaxed);
            std::ptr::write_unaligned(d.add(i) as *mut u64, w);
        }
        i += W;
    }
    while i < n {
        // SAFETY: i < n, in bounds of both (caller).
        unsafe { *d.add(i) = (*(src.add(i) as *const AtomicU8)).load(Ordering::Relaxed) };
        i += 1;
    }
}

/// Copies `src` to `dst`. Context: no sleep.
///
/// # Safety
/// `dst .. dst + src.len()` must lie inside one frame the caller owns
/// exclusively (latched and drained, or unpublished) with its version odd.
#[inline]
pub(crate) unsafe fn atomic_store_copy(w: &Witness, dst: *mut u8, src: &[u8]) {
    if cfg!(loom) {
        let h = src.len() / 2;
        w.touch();
        // SAFETY: the two halves of the caller's range.
        unsafe { store_copy(dst, &src[..h]) };
        w.touch();
        // SAFETY: as above.
        unsafe { store_copy(dst.add(h), &src[h..]) };
    } else {
        let _ = w;
        // SAFETY: the caller's contract.
        unsafe { store_copy(dst, src) }
    }
}

/// [`atomic_store_copy`] without the loom scheduling point.
///
/// # Safety
/// As for [`atomic_store_copy`].
#[inline(always)]
unsafe fn store_copy(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    if ASM && n >= ASM_MIN {
        // SAFETY: the caller's range; `src` is a slice.
        return unsafe { asm_copy(dst, src.as_ptr(), n) };
    }
    let mut i = 0;
    while i < n && (dst as usize + i) % W != 0 {
        // SAFETY: in bounds and exclusively owned (caller).
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(src[i], Ordering::Relaxed) };
        i += 1;
    }
    while i + W <= n {
        let mut b = [0u8; W];
        b.copy_from_slice(&src[i..i + W]);
        // SAFETY: in bounds, aligned by the loop above, exclusively owned.
        // Relaxed: published by the version's Release store (end_change).
        unsafe {
            (*(dst.add(i) as *const AtomicU64)).store(u64::from_ne_bytes(b), Ordering::Relaxed)
        };
        i += W;
    }
    while i < n {
        // SAFETY: in bounds and exclusively owned (caller).
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(src[i], Ordering::Relaxed) };
        i += 1;
    }
}

/// Zeroes `n` bytes at `dst` (a writer of the frame: `w` is touched first).
///
/// Context: no sleep.
///
/// # Safety
/// As for [`atomic_store_copy`].
pub(crate) unsafe fn atomic_zero(w: &Witness, dst: *mut u8, n: usize) {
    w.touch();
    if ASM && n >= ASM_MIN {
        // SAFETY: the caller's range.
        return unsafe { asm_zero(dst, n) };
    }
    let mut i = 0;
    while i < n && (dst as usize + i) % 64 != 0 {
        // SAFETY: in bounds and exclusively owned (caller).
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(0, Ordering::Relaxed) };
        i += 1;
    }
    // One cache line per step (eight word stores), the common whole-page
    // case: fewer loop branches and address updates than word by word.
    while i + 64 <= n {
        // SAFETY: in bounds, 64-byte aligned by the loop above, exclusively
        // owned. Relaxed: published by the caller's version/state Release.
        unsafe {
            let p = dst.add(i) as *const AtomicU64;
            for k in 0..8 {
                (*p.add(k)).store(0, Ordering::Relaxed);
            }
        }
        i += 64;
    }
    while i < n {
        // SAFETY: in bounds and exclusively owned (caller).
        unsafe { (*(dst.add(i) as *const AtomicU8)).store(0, Ordering::Relaxed) };
        i += 1;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn small_loads_read_every_alignment() {
        let src: Vec<u64> = (0..8u64).map(|i| 0x0102_0304_0506_0708 * (i + 1)).collect();
        let bytes: Vec<u8> = src.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let p = src.as_ptr() as *const u8;
        for off in 0..56 {
            let want = |n: usize| {
                let mut b = [0u8; 8];
                b[..n].copy_from_slice(&bytes[off..off + n]);
                u64::from_le_bytes(b)
            };
            // SAFETY: off + 8 <= 64 bytes of `src`, 8-byte aligned.
            unsafe {
                assert_eq!(atomic_load_small::<1>(&Witness::NONE, p.add(off)), want(1));
                assert_eq!(atomic_load_small::<2>(&Witness::NONE, p.add(off)), want(2));
                assert_eq!(atomic_load_small::<4>(&Witness::NONE, p.add(off)), want(4));
                assert_eq!(atomic_load_small::<8>(&Witness::NONE, p.add(off)), want(8));
            }
        }
    }

    #[test]
    fn copies_every_alignment_and_length() {
        let src: Vec<u8> = (0..4100u32).map(|i| (i * 7) as u8).collect();
        for off in 0..9 {
            for len in [
                0, 1, 7, 8, 9, 15, 16, 17, 64, 100, 255, 256, 257, 1000, 4000,
            ] {
                let mut dst = vec![0xAA; len];
                // SAFETY: off + len <= 4100, inside `src`.
                unsafe { atomic_load_copy(&Witness::NONE, &mut dst, src.as_ptr().add(off)) };
                assert_eq!(&dst[..], &src[off..off + len]);
                let mut back = vec![0u8; 4100];
                // SAFETY: inside `back`, which we own.
                unsafe { atomic_store_copy(&Witness::NONE, back.as_mut_ptr().add(off), &dst) };
                assert_eq!(&back[off..off + len], &src[off..off + len]);
                // SAFETY: as above.
                unsafe { atomic_zero(&Witness::NONE, back.as_mut_ptr().add(off), len) };
                assert!(back.iter().all(|&b| b == 0));
            }
        }
    }
}
