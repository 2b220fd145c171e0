//! Splits (S1-S4): the first full node on the way down, its parent and
//! itself upgraded top-down, its upper half moved to a new page.

use crate::{corrupt, node, BTree, Done, Restart, META, M_ROOT};
use pagecache::PageMut;
use std::io::{self, ErrorKind};
use std::sync::atomic::Ordering;

impl BTree {
    /// S1-S4: splits the first node on the way to `key` that is full (a
    /// leaf that cannot take an entry of `need` bytes, an inner node that
    /// cannot take any separator). Returns when one split was made, or when
    /// none was needed any more (another thread split first).
    pub(super) fn split_for(&self, key: &[u8], need: usize) -> io::Result<()> {
        'restart: loop {
            // S1.
            let Done((mut parent, mut node)) = self.root_views()? else {
                continue;
            };
            loop {
                let leaf = node::is_leaf(&node);
                let full = if leaf {
                    node::fits(&node, need, 0, None).map(|f| !f)
                } else {
                    node::fits(&node, self.max_key_len(), 8, None).map(|f| !f)
                };
                let full = match self.checked(&node, full)? {
                    Done(f) => f,
                    Restart => continue 'restart,
                };
                if full {
                    // S2: parent first, then the node.
                    let (ppid, npid) = (parent.index(), node.index());
                    let Some(mut p) = self.latch_view(parent, true)? else {
                        continue 'restart;
                    };
                    let Some(mut n) = self.latch_view(node, false)? else {
                        continue 'restart;
                    };
                    // S3 (S4: the guards' drops).
                    return if ppid == META {
                        self.split_root(&mut p, &mut n, key)
                    } else {
                        self.split_child(&mut p, ppid, &mut n, npid, key)
                    };
                }
                if leaf {
                    return Ok(()); // not full any more
                }
                let Done(child) = self.step(&node, key)? else {
                    continue 'restart;
                };
                parent = node;
                node = child;
            }
        }
    }

    /// A new page for a node.
    pub(super) fn new_page(&self) -> io::Result<(u64, PageMut<'_>)> {
        loop {
            let pid = self.next_page.fetch_add(1, Ordering::Relaxed);
            if pid > node::PID_MAX {
                self.next_page.fetch_sub(1, Ordering::Relaxed);
                return Err(io::Error::new(
                    ErrorKind::StorageFull,
                    format!(
                        "{}: the tree has {} pages, the most a node can point to",
                        self.file.path().display(),
                        node::PID_MAX + 1
                    ),
                ));
            }
            match self.file.page_new(pid) {
                Ok(m) => return Ok((pid, m)),
                // A page past the recorded next page (a tree reopened
                // after a crash): skip it.
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// S3 for the root: a new inner root above it, then the split.
    pub(super) fn split_root(
        &self,
        meta: &mut PageMut<'_>,
        root: &mut PageMut<'_>,
        key: &[u8],
    ) -> io::Result<()> {
        let old = root.index();
        let (pid, mut new_root) = self.new_page()?;
        node::init(
            &mut new_root,
            false,
            node::Ptr::encode(old, root.frame_hint()),
        );
        self.split_child(&mut new_root, pid, root, old, key)?;
        meta[M_ROOT..M_ROOT + 8].copy_from_slice(&pid.to_le_bytes());
        Ok(())
    }

    /// S3: splits latched `child` (page `cpid`) under latched `parent`
    /// (page `ppid`), which has room for any separator, to make room for
    /// `key`.
    pub(super) fn split_child(
        &self,
        parent: &mut [u8],
        ppid: u64,
        child: &mut PageMut<'_>,
        cpid: u64,
        key: &[u8],
    ) -> io::Result<()> {
        let bad = |pid| corrupt(&self.file, pid, "inconsistent node");
        // One copy of the node to rebuild both halves from (no entry is
        // decoded into an allocation of its own).
        let src = child.to_vec();
        let n = node::check_slots(&src).map_err(|_| bad(cpid))?;
        let leaf = node::is_leaf(&src[..]);
        let up = node::upper(&src[..]);
        if n < 2 {
            return Err(bad(cpid));
        }
        let entry = |i| node::entry(&src, i).expect("slots checked");
        let size = |i| {
            let (k, v) = entry(i);
            k.len() + v.len() + node::SLOT
        };
        // The split point: half the bytes on each side; but
        // - an append (a key past the node's last, as in a load in key
        //   order) leaves the node full and starts the new one with its
        //   last entry, so that a sequential load fills its nodes
        //   (vmcache's `splitOrdered`);
        // - an insert right after the leaf's latest insert (a run in key
        //   order in the middle of the key space, as a load in key order
        //   by several threads, each its range, makes) splits the same
        //   way, and the leaf keeps the run's position: the run goes on in
        //   the leaf, each split moving one of the keys above it out,
        //   until it passes them and fills nodes of its own (an append
        //   split would move none, a split in the middle would leave the
        //   keys above in every node the run fills, half of each). Not in
        //   the node's first quarter, where random inserts that happen to
        //   follow the last one should not split unevenly.
        let pos = node::lower_bound(&src[..], key).map_err(|_| bad(cpid))?.0;
        let run = leaf && pos >= n / 4 && node::after_last_insert(&src[..]) == Some(pos);
        let m = if run || entry(n - 1).0 < key {
            n - 1
        } else {
            let total: usize = (0..n).map(size).sum();
            let mut m = 0;
            let mut acc = 0;
            while m < n - 1 && acc < total / 2 {
                acc += size(m);
                m += 1;
            }
            m
        };
        let m = m.clamp(1, n - 1);
        let (npid, mut new) = self.new_page()?;
        let (new_at, child_at) = (
            node::Ptr::encode(npid, new.frame_hint()),
            node::Ptr::encode(cpid, child.frame_hint()),
        );
        let sep = if leaf {
            node::rebuild(&mut new, true, &src, m..n, up);
            node::rebuild(child, true, &src, 0..m, new_at);
            if run && pos < m {
                node::set_after_last_insert(child, pos);
            }
            entry(m - 1).0
        } else {
            // (Stored form, hint included.)
            let mid_child = u64::from_le_bytes(entry(m).1.try_into().map_err(|_| bad(cpid))?);
            node::rebuild(&mut new, false, &src, m + 1..n, up);
            node::rebuild(child, false, &src, 0..m, mid_child);
            entry(m).0
        };
        drop(new);
        let (pos, _) = node::lower_bound(parent, sep).map_err(|_| bad(ppid))?;
        let here = if pos == node::count(parent).map_err(|_| bad(ppid))? {
            node::Ptr::decode(node::upper(parent))
        } else {
            node::child_at(parent, pos).map_err(|_| bad(ppid))?
        };
        if here.pid != cpid {
            return Err(corrupt(
                &self.file,
                ppid,
                &format!("does not point to its child {cpid}"),
            ));
        }
        node::insert_at(parent, pos, sep, &child_at.to_le_bytes()).map_err(|_| bad(ppid))?;
        node::set_child(parent, pos + 1, new_at).map_err(|_| bad(ppid))?;
        Ok(())
    }
}
