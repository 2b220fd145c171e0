//! The node format: a slotted page, read through [`Bytes`] (an optimistic
//! view, whose loads may see bytes being changed, or a pinned or latched
//! page), written only through a latched page's `&mut [u8]`.
//!
//! ```text
//!  0        2       4           6        8               16      18       20    24              32
//! +--------+-------+-----------+--------+---------------+-------+--------+-----+---------------+
//! | count  | flags | heap_start| last   | upper / next  | dead  | prefix |(pad)| prefix's bytes|
//! +--------+-------+-----------+--------+---------------+-------+--------+-----+---------------+
//! | slot 0 | slot 1 | ...  -> free space <-  ... heap: key, value | ...|
//! +---------------------------------------------------------------------+
//!  slot (12 bytes): offset u16 | key length u16 | value length u16 |
//!                   (pad) u16 | head u32 (4 bytes after the prefix, big-endian)
//! ```
//!
//! Keys are stored whole; `prefix` is the length of the prefix every key of
//! the node shares (the common prefix of its first and last key), its
//! first eight bytes are kept in the header (zero-padded), and each slot's
//! head is the four bytes after the prefix. A search compares the searched key
//! with the prefix once, then binary-searches the heads, reading a key's
//! bytes only when heads tie (vmcache's and LeanStore's layout, without
//! their truncated storage): keys in key order share long prefixes, so the
//! heads of a node's keys differ and a lookup reads only its slots.
//!
//! Slots are in key order (byte-wise); the heap grows down from the page's
//! end. A leaf's value is the user's; an inner node's value points to the
//! child holding the keys `<=` its key and `>` the previous slot's; `upper`
//! points to the child holding the keys above the last slot. In a leaf,
//! `upper` points to the next leaf (page 0: none) for ordered scans. Every
//! pointer is a [`Ptr`] (8 bytes, little-endian): a page number with a
//! frame hint in its high bits. `dead` counts heap bytes freed by removals
//! and replacements, reclaimed by compaction. `last` is the slot of the
//! latest insert plus one (0: none since the node was last rebuilt): a
//! split uses it to tell a run of inserts in key order in the middle of
//! the key space from random ones (InnoDB's `PAGE_LAST_INSERT`).
//!
//! Every offset read from a page is checked against the page size before
//! it is used, so a torn or corrupt page yields [`Corrupt`], never an
//! access outside the page; a reader acts on it only after validating the
//! view (a torn page then restarts; an unchanged one is really corrupt).

use std::cmp::Ordering;
use std::ops::Range;

pub(crate) const HDR: usize = 32;
/// The bytes a descent prefetches of a node before it knows the node's
/// count: the header and the first slots (29 of them: a leaf of vmcache's
/// 8 + 120-byte tuples whole).
pub(crate) const PREFETCH: usize = 384;
pub(crate) const SLOT: usize = 12;
const LEAF: u16 = 1;

/// A node's bytes were inconsistent (torn, or corrupt on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// Read access to a page: an optimistic view or plain bytes.
pub(crate) trait Bytes {
    fn len(&self) -> usize;
    fn u8(&self, off: usize) -> u8;
    fn u16(&self, off: usize) -> u16;
    fn u32(&self, off: usize) -> u32;
    fn u64(&self, off: usize) -> u64;
    fn copy(&self, off: usize, out: &mut [u8]);
    /// Starts loading `[off, off + len)` into the CPU's caches (a hint).
    #[inline]
    fn prefetch(&self, _off: usize, _len: usize) {}
}

impl Bytes for pagecache::Optimistic<'_> {
    #[inline]
    fn len(&self) -> usize {
        pagecache::Optimistic::len(self)
    }
    #[inline]
    fn u8(&self, off: usize) -> u8 {
        self.load_u8(off)
    }
    #[inline]
    fn u16(&self, off: usize) -> u16 {
        u16::from_le(self.load_u16(off))
    }
    #[inline]
    fn u32(&self, off: usize) -> u32 {
        u32::from_le(self.load_u32(off))
    }
    #[inline]
    fn u64(&self, off: usize) -> u64 {
        u64::from_le(self.load_u64(off))
    }
    #[inline]
    fn copy(&self, off: usize, out: &mut [u8]) {
        self.copy_to(off, out)
    }
    #[inline]
    fn prefetch(&self, off: usize, len: usize) {
        pagecache::Optimistic::prefetch(self, off, len)
    }
}

impl Bytes for [u8] {
    #[inline]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    #[inline]
    fn u8(&self, off: usize) -> u8 {
        self[off]
    }
    #[inline]
    fn u16(&self, off: usize) -> u16 {
        u16::from_le_bytes(self[off..off + 2].try_into().unwrap())
    }
    #[inline]
    fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self[off..off + 4].try_into().unwrap())
    }
    #[inline]
    fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self[off..off + 8].try_into().unwrap())
    }
    #[inline]
    fn copy(&self, off: usize, out: &mut [u8]) {
        out.copy_from_slice(&self[off..off + out.len()])
    }
}

/// The head of a key: its first four bytes, big-endian, zero-padded. Keys
/// with different heads compare as their heads do.
#[inline]
pub(crate) fn head(key: &[u8]) -> u32 {
    match *key {
        [] => 0,
        [a] => (a as u32) << 24,
        [a, b] => (a as u32) << 24 | (b as u32) << 16,
        [a, b, c] => (a as u32) << 24 | (b as u32) << 16 | (c as u32) << 8,
        [a, b, c, d, ..] => u32::from_be_bytes([a, b, c, d]),
    }
}

/// Slot `i`: (offset, key length, value length), checked in bounds.
#[inline]
pub(crate) fn slot<B: Bytes + ?Sized>(b: &B, i: usize) -> Result<(usize, usize, usize), Corrupt> {
    let s = HDR + i * SLOT;
    if s + SLOT > b.len() {
        return Err(Corrupt);
    }
    let w = b.u64(s);
    let (off, klen, vlen) = (
        (w & 0xffff) as usize,
        ((w >> 16) & 0xffff) as usize,
        ((w >> 32) & 0xffff) as usize,
    );
    if off < HDR || off + klen + vlen > b.len() {
        return Err(Corrupt);
    }
    Ok((off, klen, vlen))
}

#[inline]
pub(crate) fn count<B: Bytes + ?Sized>(b: &B) -> Result<usize, Corrupt> {
    let n = b.u16(0) as usize;
    if HDR + n * SLOT > b.len() {
        return Err(Corrupt);
    }
    Ok(n)
}

#[inline]
pub(crate) fn is_leaf<B: Bytes + ?Sized>(b: &B) -> bool {
    b.u16(2) & LEAF != 0
}

/// A leaf's next leaf, or an inner node's rightmost child, as stored (a
/// [`Ptr`]'s encoding).
#[inline]
pub(crate) fn upper<B: Bytes + ?Sized>(b: &B) -> u64 {
    b.u64(8)
}

/// The largest page number a node can point to (2^40 - 1: 4 PiB of 4 KiB
/// pages).
pub(crate) const PID_MAX: u64 = (1 << 40) - 1;

/// A pointer to a page as a node stores it (8 bytes, little-endian): the
/// page number in the low 40 bits and, in the high 24, one plus the frame
/// the page was in when the pointer was written (0: none recorded).
///
/// The frame is a hint (LeanStore's swizzled pointers, kept as a hint
/// rather than a promise): a descent tries it first with
/// `optimistic_hinted`, which checks the frame's identity, so a stale hint
/// (the page was evicted and read into another frame, or the file was
/// reopened) costs one descriptor check and nothing else. It is written
/// only when the node is latched for a change anyway (a split records the
/// frames of both halves), never on a read. Its use: the child's frame is
/// known from the bytes just read, so the child's descriptor and first
/// line load in parallel, with no side-table lookup (a dependent cache
/// miss per level) in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ptr {
    pub pid: u64,
    /// The frame hint (`u32::MAX`: none, which no frame number matches).
    pub hint: u32,
}

impl Ptr {
    #[inline]
    pub(crate) fn decode(v: u64) -> Ptr {
        let h = v >> 40;
        Ptr {
            pid: v & PID_MAX,
            hint: if h == 0 { u32::MAX } else { (h - 1) as u32 },
        }
    }

    /// The stored form of page `pid` (at most [`PID_MAX`]) in frame
    /// `frame` (recorded if it fits in 24 bits).
    #[inline]
    pub(crate) fn encode(pid: u64, frame: u32) -> u64 {
        debug_assert!(pid <= PID_MAX);
        let h = frame as u64 + 1;
        if h < 1 << 24 {
            pid | h << 40
        } else {
            pid
        }
    }
}

/// Compares the key at `off` (`klen` bytes, in bounds) with `key`, eight
/// bytes at a time, without copying it out.
#[inline]
fn cmp_key<B: Bytes + ?Sized>(b: &B, off: usize, klen: usize, key: &[u8]) -> Ordering {
    let n = klen.min(key.len());
    let mut i = 0;
    while i + 8 <= n {
        let a = u64::from_be_bytes(b.u64(off + i).to_le_bytes());
        let k = u64::from_be_bytes(key[i..i + 8].try_into().unwrap());
        if a != k {
            return a.cmp(&k);
        }
        i += 8;
    }
    while i < n {
        let a = b.u8(off + i);
        if a != key[i] {
            return a.cmp(&key[i]);
        }
        i += 1;
    }
    klen.cmp(&key.len())
}

/// The slot just after the latest insert into the node, if it had one
/// since it was last rebuilt (a hint for splits and for I0).
#[inline]
pub(crate) fn after_last_insert<B: Bytes + ?Sized>(p: &B) -> Option<usize> {
    match p.u16(6) {
        0 => None,
        n => Some(n as usize),
    }
}

/// Sets the hint [`after_last_insert`] reads (a split that keeps a run's
/// position in the node it rebuilt).
pub(crate) fn set_after_last_insert(p: &mut [u8], slot: usize) {
    put_u16(p, 6, slot as u16);
}

/// The length of the prefix the node's keys share.
#[inline]
pub(crate) fn prefix_len<B: Bytes + ?Sized>(b: &B) -> usize {
    b.u16(18) as usize
}

/// The first slot whose key is `>= key`, and whether it is equal.
pub(crate) fn lower_bound<B: Bytes + ?Sized>(b: &B, key: &[u8]) -> Result<(usize, bool), Corrupt> {
    let n = count(b)?;
    if n == 0 {
        return Ok((0, false));
    }
    // The slots past what the descent prefetched: all on their way at
    // once, rather than one miss per probe of the search.
    if HDR + n * SLOT > PREFETCH {
        b.prefetch(PREFETCH, HDR + n * SLOT - PREFETCH);
    }
    // The prefix: every key of the node starts with it. A key that does
    // not sorts before or after all of them.
    let p = prefix_len(b);
    if p > 0 {
        // The first eight bytes from the header (no heap access), the rest
        // (long prefixes only) from the first key.
        let m = p.min(key.len());
        let h = m.min(8);
        let mut ord = cmp_key(b, 24, h, &key[..h]);
        if ord == Ordering::Equal && m > 8 {
            let (off0, klen0, _) = slot(b, 0)?;
            if p > klen0 {
                return Err(Corrupt);
            }
            ord = cmp_key(b, off0 + 8, m - 8, &key[8..m]);
        }
        match ord {
            Ordering::Equal if key.len() < p => return Ok((0, false)),
            Ordering::Equal => {}
            Ordering::Greater => return Ok((0, false)),
            Ordering::Less => return Ok((n, false)),
        }
    }
    let rest = &key[p..];
    let h = head(rest);
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        let sh = b.u32(HDR + mid * SLOT + 8);
        let ord = match sh.cmp(&h) {
            Ordering::Equal => {
                let (off, klen, _) = slot(b, mid)?;
                if klen < p {
                    return Err(Corrupt);
                }
                if klen - p <= 4 && rest.len() <= 4 {
                    // The heads hold both remainders whole (zero-padded):
                    // equal heads, so the shorter one is the smaller.
                    (klen - p).cmp(&rest.len())
                } else {
                    cmp_key(b, off + p, klen - p, rest)
                }
            }
            o => o,
        };
        match ord {
            Ordering::Less => lo = mid + 1,
            Ordering::Greater => hi = mid,
            Ordering::Equal => return Ok((mid, true)),
        }
    }
    Ok((lo, false))
}

/// An inner node's child for `key`.
pub(crate) fn child_for<B: Bytes + ?Sized>(b: &B, key: &[u8]) -> Result<Ptr, Corrupt> {
    let (pos, _) = lower_bound(b, key)?;
    if pos == count(b)? {
        Ok(Ptr::decode(upper(b)))
    } else {
        child_at(b, pos)
    }
}

/// An inner node's child in slot `pos`.
pub(crate) fn child_at<B: Bytes + ?Sized>(b: &B, pos: usize) -> Result<Ptr, Corrupt> {
    let (off, klen, vlen) = slot(b, pos)?;
    if vlen != 8 {
        return Err(Corrupt);
    }
    Ok(Ptr::decode(b.u64(off + klen)))
}

/// A leaf's next leaf (page 0: none).
#[inline]
pub(crate) fn next_leaf<B: Bytes + ?Sized>(b: &B) -> Ptr {
    Ptr::decode(upper(b))
}

/// Copies the key of slot `i` into `out` (cleared first).
pub(crate) fn key_at<B: Bytes + ?Sized>(b: &B, i: usize, out: &mut Vec<u8>) -> Result<(), Corrupt> {
    let (off, klen, _) = slot(b, i)?;
    out.clear();
    out.resize(klen, 0);
    b.copy(off, out);
    Ok(())
}

/// Copies the value of slot `i` into `out` (cleared first).
pub(crate) fn value_at<B: Bytes + ?Sized>(
    b: &B,
    i: usize,
    out: &mut Vec<u8>,
) -> Result<(), Corrupt> {
    let (off, klen, vlen) = slot(b, i)?;
    out.clear();
    out.resize(vlen, 0);
    b.copy(off + klen, out);
    Ok(())
}

/// Free bytes, counting what compaction would reclaim.
pub(crate) fn free_space<B: Bytes + ?Sized>(b: &B) -> Result<usize, Corrupt> {
    let n = count(b)?;
    let heap = b.u16(4) as usize;
    let dead = b.u16(16) as usize;
    let used = HDR + n * SLOT;
    if heap < used || heap > b.len() {
        return Err(Corrupt);
    }
    Ok(heap - used + dead)
}

/// Whether an entry of `klen + vlen` bytes fits, replacing `old` bytes of
/// an existing entry with the same key (0 if new).
pub(crate) fn fits<B: Bytes + ?Sized>(
    b: &B,
    klen: usize,
    vlen: usize,
    replacing: Option<usize>,
) -> Result<bool, Corrupt> {
    let free = free_space(b)?;
    Ok(match replacing {
        Some(old) => free + old >= klen + vlen,
        None => free >= SLOT + klen + vlen,
    })
}

// ----- writes (latched pages) --------------------------------------------------

fn put_u16(p: &mut [u8], off: usize, v: u16) {
    p[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(p: &mut [u8], off: usize, v: u64) {
    p[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Formats `p` as an empty node.
pub(crate) fn init(p: &mut [u8], leaf: bool, upper: u64) {
    p[..HDR].fill(0);
    put_u16(p, 2, if leaf { LEAF } else { 0 });
    put_u16(p, 4, p.len() as u16);
    put_u64(p, 8, upper);
}

pub(crate) fn set_upper(p: &mut [u8], v: u64) {
    put_u64(p, 8, v);
}

/// A decoded entry: key and value (tests).
#[cfg(test)]
pub(crate) type Entry = (Vec<u8>, Vec<u8>);

/// Every entry of a node, decoded (tests).
#[cfg(test)]
pub(crate) fn entries(p: &[u8]) -> Result<Vec<Entry>, Corrupt> {
    (0..count(p)?)
        .map(|i| entry(p, i).map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect()
}

/// Entry `i` of a node in plain bytes: its key and value.
pub(crate) fn entry(p: &[u8], i: usize) -> Result<(&[u8], &[u8]), Corrupt> {
    let (off, klen, vlen) = slot(p, i)?;
    Ok((&p[off..off + klen], &p[off + klen..off + klen + vlen]))
}

/// Checks every slot of a node in plain bytes (before a rebuild trusts
/// them).
pub(crate) fn check_slots(p: &[u8]) -> Result<usize, Corrupt> {
    let n = count(p)?;
    for i in 0..n {
        slot(p, i)?;
    }
    Ok(n)
}

/// Rewrites `p` as a node of the given kind holding entries `range` of
/// node `src` (a copy, whose slots [`check_slots`] accepted), with `upper`.
/// The caller checked that they fit. No allocation: splits and
/// compactions copy straight from `src`.
pub(crate) fn rebuild(p: &mut [u8], leaf: bool, src: &[u8], range: Range<usize>, upper: u64) {
    init(p, leaf, upper);
    if range.is_empty() {
        return;
    }
    let key = |i| entry(src, i).expect("slots checked").0;
    let np = lcp(key(range.start), key(range.end - 1));
    put_prefix(p, np, key(range.start));
    for (j, i) in range.enumerate() {
        let (k, v) = entry(src, i).expect("slots checked");
        append(p, j, k, v);
    }
}

/// The length of the longest common prefix of `a` and `b`.
fn lcp(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The head of `k` under prefix length `p`.
fn head_after(k: &[u8], p: usize) -> u32 {
    head(&k[p.min(k.len())..])
}

/// Records prefix `pre` (its length and first eight bytes) in the header.
fn put_prefix(p: &mut [u8], np: usize, pre: &[u8]) {
    put_u16(p, 18, np as u16);
    p[24..32].fill(0);
    let h = np.min(8);
    p[24..24 + h].copy_from_slice(&pre[..h]);
}

/// Sets the prefix to the first `np` bytes of `key` (which every key of
/// the node shares) and recomputes every slot's head.
fn set_prefix(p: &mut [u8], np: usize, key: &[u8]) -> Result<(), Corrupt> {
    put_prefix(p, np, &key[..np]);
    for i in 0..count(p)? {
        let (off, klen, _) = slot(p, i)?;
        let h = head_after(&p[off..off + klen], np);
        let s = HDR + i * SLOT;
        p[s + 8..s + 12].copy_from_slice(&h.to_le_bytes());
    }
    Ok(())
}

/// Writes entry `(k, v)` into slot `i` (slots `>= i` already moved) from
/// the heap's free space.
fn append(p: &mut [u8], i: usize, k: &[u8], v: &[u8]) {
    let heap = p.u16(4) as usize - k.len() - v.len();
    p[heap..heap + k.len()].copy_from_slice(k);
    p[heap + k.len()..heap + k.len() + v.len()].copy_from_slice(v);
    put_u16(p, 4, heap as u16);
    let s = HDR + i * SLOT;
    put_u16(p, s, heap as u16);
    put_u16(p, s + 2, k.len() as u16);
    put_u16(p, s + 4, v.len() as u16);
    put_u16(p, s + 6, 0);
    let h = head_after(k, prefix_len(p));
    p[s + 8..s + 12].copy_from_slice(&h.to_le_bytes());
    let n = p.u16(0);
    put_u16(p, 0, n.max(i as u16 + 1));
}

/// Compacts the heap (drops dead bytes) if the contiguous free space is
/// short of `need`.
fn make_room(p: &mut [u8], need: usize) -> Result<(), Corrupt> {
    let n = count(p)?;
    let contiguous = p.u16(4) as usize - (HDR + n * SLOT);
    if contiguous >= need {
        return Ok(());
    }
    let src = p.to_vec();
    let n = check_slots(&src)?;
    rebuild(p, is_leaf(&src[..]), &src, 0..n, upper(&src[..]));
    Ok(())
}

/// Inserts `(k, v)` at slot `pos` (the caller checked it fits and that
/// `pos` keeps the order).
pub(crate) fn insert_at(p: &mut [u8], pos: usize, k: &[u8], v: &[u8]) -> Result<(), Corrupt> {
    make_room(p, SLOT + k.len() + v.len())?;
    let n = count(p)?;
    // The prefix shared with the new key: the common prefix of the new
    // first and last keys (keys are sorted).
    let np = if n == 0 {
        k.len()
    } else {
        let key = |i| entry(p, i).map(|(k, _)| k);
        let first = if pos == 0 { k } else { key(0)? };
        let last = if pos == n { k } else { key(n - 1)? };
        lcp(first, last).min(prefix_len(p))
    };
    if np != prefix_len(p) || n == 0 {
        set_prefix(p, np, k)?;
    }
    let s = HDR + pos * SLOT;
    p.copy_within(s..HDR + n * SLOT, s + SLOT);
    put_u16(p, 0, n as u16 + 1);
    append(p, pos, k, v);
    put_u16(p, 6, pos as u16 + 1);
    Ok(())
}

/// Removes slot `pos`.
pub(crate) fn remove_at(p: &mut [u8], pos: usize) -> Result<(), Corrupt> {
    let n = count(p)?;
    let (_, klen, vlen) = slot(p, pos)?;
    let s = HDR + pos * SLOT;
    p.copy_within(s + SLOT..HDR + n * SLOT, s);
    put_u16(p, 0, n as u16 - 1);
    if n == 1 {
        put_prefix(p, 0, &[]); // empty: no prefix
    }
    let dead = p.u16(16) as usize + klen + vlen;
    put_u16(p, 16, dead as u16);
    Ok(())
}

/// Replaces the value of slot `pos` (the caller checked it fits).
pub(crate) fn replace_at(p: &mut [u8], pos: usize, v: &[u8]) -> Result<(), Corrupt> {
    let (off, klen, vlen) = slot(p, pos)?;
    if vlen == v.len() {
        p[off + klen..off + klen + vlen].copy_from_slice(v);
        return Ok(());
    }
    let k = p[off..off + klen].to_vec();
    remove_at(p, pos)?;
    insert_at(p, pos, &k, v)
}

/// Sets an inner node's child in slot `pos` (or `upper` at `count`).
pub(crate) fn set_child(p: &mut [u8], pos: usize, child: u64) -> Result<(), Corrupt> {
    if pos == count(p)? {
        set_upper(p, child);
        return Ok(());
    }
    let (off, klen, vlen) = slot(p, pos)?;
    if vlen != 8 {
        return Err(Corrupt);
    }
    put_u64(p, off + klen, child);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_removes_and_compacts_in_order() {
        let mut p = vec![0u8; 4096];
        init(&mut p, true, 0);
        let keys: Vec<Vec<u8>> = (0..40u32)
            .rev()
            .map(|i| format!("key{i:03}").into_bytes())
            .collect();
        for k in &keys {
            let (pos, found) = lower_bound(&p[..], k).unwrap();
            assert!(!found);
            assert!(fits(&p[..], k.len(), 50, None).unwrap());
            insert_at(&mut p, pos, k, &[k[5]; 50]).unwrap();
        }
        assert_eq!(count(&p[..]).unwrap(), 40);
        let es = entries(&p).unwrap();
        assert!(es.windows(2).all(|w| w[0].0 < w[1].0));
        for k in &keys {
            let (pos, found) = lower_bound(&p[..], k).unwrap();
            assert!(found);
            let mut v = Vec::new();
            value_at(&p[..], pos, &mut v).unwrap();
            assert_eq!(v, vec![k[5]; 50]);
        }
        // Remove half, then fill the freed space (compaction).
        for k in keys.iter().step_by(2) {
            let (pos, found) = lower_bound(&p[..], k).unwrap();
            assert!(found);
            remove_at(&mut p, pos).unwrap();
        }
        let mut extra = 0;
        loop {
            let k = format!("zz{extra:04}").into_bytes();
            if !fits(&p[..], k.len(), 50, None).unwrap() {
                break;
            }
            let (pos, _) = lower_bound(&p[..], &k).unwrap();
            insert_at(&mut p, pos, &k, &[1; 50]).unwrap();
            extra += 1;
        }
        assert!(extra >= 20, "compaction reclaimed the removed entries");
        let es = entries(&p).unwrap();
        assert!(es.windows(2).all(|w| w[0].0 < w[1].0));
        // Replace with a longer value.
        let k = &keys[1];
        let (pos, _) = lower_bound(&p[..], k).unwrap();
        replace_at(&mut p, pos, &[7; 40]).unwrap();
        let mut v = Vec::new();
        value_at(&p[..], pos, &mut v).unwrap();
        assert_eq!(v, vec![7; 40]);
    }

    #[test]
    fn keys_compare_bytewise_whatever_their_heads() {
        let mut p = vec![0u8; 4096];
        init(&mut p, true, 0);
        let keys: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"a\0",
            b"ab",
            b"abcd",
            b"abcd\0",
            b"abcde",
            b"abce",
            b"b",
            b"\xff\xff\xff\xff\xff",
        ];
        for k in keys.iter().rev() {
            let (pos, _) = lower_bound(&p[..], k).unwrap();
            insert_at(&mut p, pos, k, b"v").unwrap();
        }
        let got: Vec<Vec<u8>> = entries(&p).unwrap().into_iter().map(|e| e.0).collect();
        let want: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn pointers_carry_a_frame_hint_when_it_fits() {
        let v = Ptr::encode(PID_MAX, 7);
        assert_eq!(
            Ptr::decode(v),
            Ptr {
                pid: PID_MAX,
                hint: 7
            }
        );
        assert_eq!(Ptr::decode(Ptr::encode(5, 0)), Ptr { pid: 5, hint: 0 });
        // A frame past 24 bits is not recorded; a plain page number (a
        // file written before hints) has none.
        let none = Ptr {
            pid: 9,
            hint: u32::MAX,
        };
        assert_eq!(Ptr::decode(Ptr::encode(9, (1 << 24) - 1)), none);
        assert_eq!(Ptr::decode(9), none);
        assert_eq!(
            Ptr::decode(Ptr::encode(9, (1 << 24) - 2)).hint,
            (1 << 24) - 2
        );
    }

    #[test]
    fn corrupt_offsets_are_reported_not_followed() {
        let mut p = vec![0u8; 4096];
        init(&mut p, true, 0);
        insert_at(&mut p, 0, b"key", b"value").unwrap();
        put_u16(&mut p, HDR, 4094); // offset past the page's end with the lengths
        assert_eq!(slot(&p[..], 0), Err(Corrupt));
        put_u16(&mut p, 0, 5000); // count past the page
        assert_eq!(count(&p[..]), Err(Corrupt));
    }
}
