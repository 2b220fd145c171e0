//! Ordered scans: leaf by leaf along the next-leaf links, a few entries
//! copied at a time out of each validated view.

use crate::{corrupt, node, BTree, Bytes, Corrupt, Coupling, Done, Restart};
use std::io;

/// Entries copied out of a leaf by a scan: keys and values in one buffer.
#[derive(Default)]
pub(crate) struct Batch {
    bytes: Vec<u8>,
    /// Each entry's offset in `bytes`, key length and value length.
    ents: Vec<(usize, usize, usize)>,
}

impl Batch {
    /// Copies up to `max` entries of `leaf` from `from` (the key itself
    /// only if `inclusive`), replacing the batch. Returns the leaf's next
    /// pointer and whether entries of the leaf are left after the batch.
    fn collect<B: Bytes + ?Sized>(
        &mut self,
        leaf: &B,
        from: &[u8],
        inclusive: bool,
        max: usize,
    ) -> Result<(node::Ptr, bool), Corrupt> {
        self.bytes.clear();
        self.ents.clear();
        let (mut pos, found) = node::lower_bound(leaf, from)?;
        if found && !inclusive {
            pos += 1;
        }
        let n = node::count(leaf)?;
        let end = n.min(pos.saturating_add(max));
        for i in pos..end {
            // A key and its value are adjacent in the node.
            let (off, klen, vlen) = node::slot(leaf, i)?;
            let at = self.bytes.len();
            self.bytes.resize(at + klen + vlen, 0);
            leaf.copy(off, &mut self.bytes[at..]);
            self.ents.push((at, klen, vlen));
        }
        Ok((node::next_leaf(leaf), end < n))
    }

    fn entries(&self) -> impl DoubleEndedIterator<Item = (&[u8], &[u8])> + '_ {
        self.ents
            .iter()
            .map(|&(at, k, v)| (&self.bytes[at..at + k], &self.bytes[at + k..at + k + v]))
    }
}

/// Where a scan is: the key to go on from, whether that key itself is
/// still to be given, the batch buffer and its size.
struct ScanAt {
    from: Vec<u8>,
    inclusive: bool,
    batch: Batch,
    want: usize,
}

impl ScanAt {
    fn new(from: &[u8]) -> ScanAt {
        ScanAt {
            from: from.to_vec(),
            inclusive: true,
            batch: Batch::default(),
            want: 4,
        }
    }
}

impl BTree {
    /// Calls `f` with each entry whose key is `>= from`, in key order,
    /// until it returns false or the entries run out. Entries inserted or
    /// removed during the scan may or may not be seen; every entry seen was
    /// in the tree when its leaf was read, and no key is seen twice.
    pub fn scan(&self, from: &[u8], mut f: impl FnMut(&[u8], &[u8]) -> bool) -> io::Result<()> {
        if self.coupling == Coupling::Pin {
            return self.scan_pinned(from, f);
        }
        match self.scan_as::<true>(&mut ScanAt::new(from), &mut f)? {
            None => Ok(()),
            Some(_) => unreachable!("a waiting scan reads its pages"),
        }
    }

    /// [`BTree::scan`] as a future: a leaf (or a node of the descent) not
    /// in the cache is awaited (`File::page_async`) without blocking the
    /// thread, and the scan goes on after the last entry `f` was given.
    /// Both couplings take the optimistic descent here. Cancel-safe.
    pub async fn scan_async(
        &self,
        from: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> io::Result<()> {
        let mut at = ScanAt::new(from);
        while let Some(pid) = self.scan_as::<false>(&mut at, &mut f)? {
            let page = self.file.page_async(pid).await;
            drop(page.map_err(|e| self.past_end(pid, e))?);
        }
        Ok(())
    }

    /// The scan from `at`; `Some(pid)` (only without `WAIT`) where page
    /// `pid` must be read first: `at` then says where to go on.
    fn scan_as<const WAIT: bool>(
        &self,
        at: &mut ScanAt,
        f: &mut impl FnMut(&[u8], &[u8]) -> bool,
    ) -> io::Result<Option<u64>> {
        // Entries are copied out of a leaf a batch at a time (a scan that
        // wants one entry copies a few, not the leaf), into one buffer
        // reused for the whole scan (no allocation per entry), and handed
        // to `f` once the leaf's view validates.
        'restart: loop {
            let mut leaf = match self.descend_as::<WAIT>(&at.from)? {
                Ok((_, leaf)) => leaf,
                Err(pid) => return Ok(Some(pid)),
            };
            loop {
                let r = at.batch.collect(&leaf, &at.from, at.inclusive, at.want);
                let (next, rest) = match self.checked(&leaf, r)? {
                    Done(n) => n,
                    Restart => continue 'restart,
                };
                for (k, v) in at.batch.entries() {
                    if !f(k, v) {
                        return Ok(None);
                    }
                }
                if let Some((k, _)) = at.batch.entries().last() {
                    at.from.clear();
                    at.from.extend_from_slice(k);
                    at.inclusive = false;
                }
                at.want = (at.want * 4).min(1024);
                if rest {
                    // More of this leaf: the same view again (a change
                    // since fails its validation: restart after `from`).
                    continue;
                }
                if next.pid == 0 {
                    return Ok(None);
                }
                leaf = match self.view_ptr_as::<WAIT>(next)? {
                    Some(o) => o,
                    // Every entry before the link was given: going on from
                    // `from` lands on this leaf's successor.
                    None => return Ok(Some(next.pid)),
                };
                if !node::is_leaf(&leaf) {
                    if !leaf.validate() {
                        continue 'restart;
                    }
                    return Err(corrupt(
                        &self.file,
                        next.pid,
                        "a leaf's next page is not a leaf",
                    ));
                }
            }
        }
    }

    /// The entries with `from <= key < to` (`to`: `None` for no bound), in
    /// order.
    pub fn range(&self, from: &[u8], to: Option<&[u8]>) -> io::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        self.scan(from, |k, v| {
            if to.is_some_and(|t| k >= t) {
                return false;
            }
            out.push((k.to_vec(), v.to_vec()));
            true
        })?;
        Ok(out)
    }
}
