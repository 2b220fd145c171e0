//! The counts of what a thread adds to counters in a shared cache's
//! segment (protocol 5.15, `ledger.rs`).

use super::*;

/// Counts `delta` added to the counter at `word` (8-byte aligned, in a
/// shared cache's segment) as this thread's: after an increment, before a
/// decrement (5.15 P3), so that what a dead process added can be taken
/// back. Nothing outside a segment.
pub(crate) fn count_word(word: usize, delta: i64) {
    if AREAS_N.load(Relaxed) == 0 || delta == 0 {
        return;
    }
    let Some(reg) = find_by(|r| word.wrapping_sub(r.seg) < r.seg_len) else {
        return;
    };
    let off = word - reg.seg;
    if (off / 64) as u64 >= WORD_KEY || off % 8 != 0 {
        return;
    }
    compiler_fence(Ordering::SeqCst);
    let key = (WORD_KEY | (off / 64) as u64) << 32 | WORD | ((off % 64 / 8) as u64) << 24;
    let delta = delta.clamp(-(1 << 22), 1 << 22) as i32;
    with_table(reg, |t| t.is_none_or(|t| add_word(t, key, delta)));
    compiler_fence(Ordering::SeqCst);
}

/// Adds `delta` to the thread's entry of counter `key` (one entry per
/// counter: appended if none, removed at 0). False if the table is full.
fn add_word(table: &Table, key: u64, delta: i32) -> bool {
    let n = table.used.load(Relaxed) as usize;
    let mask = 0xffff_ffff_ff00_0000u64;
    for i in (0..n).rev() {
        let v = table.entries[i].load(Relaxed);
        if v & mask != key {
            continue;
        }
        let c = (((v as u32) << 8) as i32 >> 8) + delta;
        if c == 0 {
            remove(table, i, n);
        } else {
            table.entries[i].store(key | (c as u32 & 0xff_ffff) as u64, Relaxed);
        }
        return true;
    }
    if n >= ENTRIES {
        return false;
    }
    table.entries[n].store(key | (delta as u32 & 0xff_ffff) as u64, Relaxed);
    table.used.store(n as u32 + 1, Relaxed);
    true
}
