//! The "before" design of the lab ([`Coupling::Pin`]): descents with pins
//! of every visited page, latches taken with `page_mut`, splits top-down
//! with latch coupling.

use crate::node::Bytes;
use crate::{corrupt, node, BTree, META, M_ROOT};
use pagecache::PageMut;
use std::io;

impl BTree {
    pub(super) fn get_pinned(&self, key: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
        let leaf = self.pin_leaf(key)?;
        let (pos, found) = node::lower_bound(&leaf[..], key)
            .map_err(|_| corrupt(&self.file, leaf.index(), "inconsistent node"))?;
        if found {
            node::value_at(&leaf[..], pos, out)
                .map_err(|_| corrupt(&self.file, leaf.index(), "inconsistent node"))?;
        }
        Ok(found)
    }

    /// The leaf for `key`, pinned, with pin coupling (each child pinned
    /// before its parent's pin is dropped).
    pub(super) fn pin_leaf(&self, key: &[u8]) -> io::Result<pagecache::PageRef<'_>> {
        let meta = self.file.page(META)?;
        let mut node = self.pin(meta[..].u64(M_ROOT))?;
        drop(meta);
        while !node::is_leaf(&node[..]) {
            let c = node::child_for(&node[..], key)
                .map_err(|_| corrupt(&self.file, node.index(), "inconsistent node"))?;
            node = self.pin(c.pid)?;
        }
        Ok(node)
    }

    pub(super) fn pin(&self, pid: u64) -> io::Result<pagecache::PageRef<'_>> {
        self.file.page(pid).map_err(|e| self.past_end(pid, e))
    }

    pub(super) fn insert_pinned(&self, key: &[u8], value: &[u8]) -> io::Result<bool> {
        loop {
            match self.change_pinned(key, Some(value))? {
                Some(replaced) => return Ok(replaced),
                None => self.split_pinned(key, key.len() + value.len())?,
            }
        }
    }

    /// [`BTree::update`] by pin coupling: pins down to the leaf's parent
    /// (which keeps the leaf from splitting), latches the leaf.
    pub(super) fn update_pinned(&self, key: &[u8], f: impl FnOnce(&mut [u8])) -> io::Result<bool> {
        let bad = |pid| corrupt(&self.file, pid, "inconsistent node");
        let (parent, pid, mut leaf) = self.latch_leaf_pinned(key)?;
        drop(parent);
        if !node::is_leaf(&leaf[..]) {
            return Err(bad(pid));
        }
        let (pos, found) = node::lower_bound(&leaf[..], key).map_err(|_| bad(pid))?;
        if found {
            let (off, klen, vlen) = node::slot(&leaf[..], pos).map_err(|_| bad(pid))?;
            f(&mut leaf[off + klen..off + klen + vlen]);
        }
        Ok(found)
    }

    /// Pin-couples down to the parent of `key`'s leaf and latches the leaf
    /// (not checked to be a leaf): the parent's pin, returned, keeps the
    /// leaf from splitting meanwhile (a split latches the parent).
    pub(super) fn latch_leaf_pinned(
        &self,
        key: &[u8],
    ) -> io::Result<(pagecache::PageRef<'_>, u64, PageMut<'_>)> {
        let bad = |pid| corrupt(&self.file, pid, "inconsistent node");
        let mut parent = self.file.page(META)?;
        let mut pid = parent[..].u64(M_ROOT);
        loop {
            let n = self.pin(pid)?;
            if node::is_leaf(&n[..]) {
                drop(n);
                break;
            }
            pid = node::child_for(&n[..], key).map_err(|_| bad(pid))?.pid;
            parent = n;
        }
        let leaf = self.file.page_mut(pid)?;
        Ok((parent, pid, leaf))
    }

    pub(super) fn remove_pinned(&self, key: &[u8]) -> io::Result<bool> {
        Ok(self.change_pinned(key, None)?.unwrap_or(false))
    }

    /// Pin-couples down to the leaf's parent, latches the leaf, and inserts
    /// (`Some(value)`) or removes (`None`). `None` if the entry does not
    /// fit. The parent's pin keeps the leaf from splitting meanwhile
    /// (a split latches the parent).
    pub(super) fn change_pinned(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> io::Result<Option<bool>> {
        let bad = |pid| corrupt(&self.file, pid, "inconsistent node");
        let (parent, pid, mut leaf) = self.latch_leaf_pinned(key)?;
        if !node::is_leaf(&leaf[..]) {
            return Err(bad(pid));
        }
        let (pos, found) = node::lower_bound(&leaf[..], key).map_err(|_| bad(pid))?;
        let Some(value) = value else {
            if found {
                node::remove_at(&mut leaf, pos).map_err(|_| bad(pid))?;
                self.count(-1);
            }
            return Ok(Some(found));
        };
        let old = if found {
            let (_, k, v) = node::slot(&leaf[..], pos).map_err(|_| bad(pid))?;
            Some(k + v)
        } else {
            None
        };
        if !node::fits(&leaf[..], key.len(), value.len(), old).map_err(|_| bad(pid))? {
            return Ok(None);
        }
        if found {
            node::replace_at(&mut leaf, pos, value).map_err(|_| bad(pid))?;
        } else {
            node::insert_at(&mut leaf, pos, key, value).map_err(|_| bad(pid))?;
            self.count(1);
        }
        drop(parent);
        Ok(Some(found))
    }

    /// Latch coupling from the metadata page down, splitting the first full
    /// node on the way (its parent is latched and has room).
    pub(super) fn split_pinned(&self, key: &[u8], need: usize) -> io::Result<()> {
        let bad = |pid| corrupt(&self.file, pid, "inconsistent node");
        let mut parent = self.file.page_mut(META)?;
        let mut node = self.file.page_mut(parent[..].u64(M_ROOT))?;
        loop {
            let npid = node.index();
            let leaf = node::is_leaf(&node[..]);
            let full = if leaf {
                !node::fits(&node[..], need, 0, None).map_err(|_| bad(npid))?
            } else {
                !node::fits(&node[..], self.max_key_len(), 8, None).map_err(|_| bad(npid))?
            };
            if full {
                let ppid = parent.index();
                return if ppid == META {
                    self.split_root(&mut parent, &mut node, key)
                } else {
                    self.split_child(&mut parent, ppid, &mut node, npid, key)
                };
            }
            if leaf {
                return Ok(());
            }
            let c = node::child_for(&node[..], key).map_err(|_| bad(npid))?;
            let child = self.file.page_mut(c.pid)?;
            parent = node;
            node = child;
        }
    }

    pub(super) fn scan_pinned(
        &self,
        from: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> io::Result<()> {
        let mut leaf = self.pin_leaf(from)?;
        let mut k = Vec::new();
        let mut v = Vec::new();
        let mut first = true;
        loop {
            let pid = leaf.index();
            let b = &leaf[..];
            let start = if first {
                node::lower_bound(b, from)
                    .map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?
                    .0
            } else {
                0
            };
            first = false;
            let n = node::count(b).map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?;
            for i in start..n {
                node::key_at(b, i, &mut k)
                    .map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?;
                node::value_at(b, i, &mut v)
                    .map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?;
                if !f(&k, &v) {
                    return Ok(());
                }
            }
            let next = node::next_leaf(b).pid;
            if next == 0 {
                return Ok(());
            }
            leaf = self.pin(next)?;
        }
    }
}
