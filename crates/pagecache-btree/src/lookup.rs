//! Views of nodes (through frame hints), the optimistic descent (L1-L3 of
//! the protocol in `lib.rs`) and point lookups.

use crate::node::Bytes;
use crate::{corrupt, node, BTree, Corrupt, Coupling, Done, Restart, Step, META, M_ROOT};
use pagecache::{Optimistic, PageMut};
use std::io::{self, ErrorKind};

impl BTree {
    /// A view of node `pid`, read in if needed; a page past the end of the
    /// file (a corrupt pointer, followed only after validation) is
    /// `InvalidData`.
    pub(super) fn view(&self, pid: u64) -> io::Result<Optimistic<'_>> {
        match self.file.optimistic_hinted(pid, self.hints.get(pid)) {
            Some(o) => Ok(o),
            None => self.view_unhinted(pid),
        }
    }

    /// A view of the page `p` points to, through the frame the pointer
    /// recorded if the page is still there (no side-table lookup), else as
    /// [`BTree::view`]. Only for a pointer read from a validated view.
    pub(super) fn view_ptr(&self, p: node::Ptr) -> io::Result<Optimistic<'_>> {
        match self.file.optimistic_hinted(p.pid, p.hint) {
            Some(o) => Ok(o),
            None => self.view(p.pid),
        }
    }

    /// [`BTree::view`] past a missing or stale hint: the cache's index
    /// walk (or a read), and the hint refreshed.
    pub(super) fn view_unhinted(&self, pid: u64) -> io::Result<Optimistic<'_>> {
        let o = self
            .file
            .optimistic(pid)
            .map_err(|e| self.past_end(pid, e))?;
        self.hints.set(pid, o.frame_hint());
        Ok(o)
    }

    /// `e` from following a pointer to page `pid`: past the end of the
    /// file, the pointer is corrupt (it was validated before it was
    /// followed).
    pub(super) fn past_end(&self, pid: u64, e: io::Error) -> io::Error {
        if e.kind() == ErrorKind::UnexpectedEof {
            corrupt(
                &self.file,
                pid,
                "a pointer to a page past the end of the file",
            )
        } else {
            e
        }
    }

    /// L2: from inner node `node` to its child for `key`. The child's
    /// number is read from a view not yet validated: it is followed through
    /// its frame hint if the child is still cached there (no I/O: a torn
    /// number costs nothing), else only after validating `node` (a real
    /// page number), reading the child in if needed. The node is validated
    /// again once the child's view began, so the child was its child then.
    /// `Restart` if `node` changed.
    #[inline]
    pub(super) fn step<'a>(
        &'a self,
        node: &Optimistic<'a>,
        key: &[u8],
    ) -> io::Result<Step<Optimistic<'a>>> {
        let ptr = match node::child_for(node, key) {
            Ok(ptr) => ptr,
            Err(e) => return self.checked(node, Err(e)),
        };
        let pid = ptr.pid;
        // The child's header and first slots on their way while the cache
        // checks its descriptor.
        self.file.prefetch_hinted(ptr.hint, 0, node::PREFETCH);
        let child = match self
            .file
            .optimistic_hinted(pid, ptr.hint)
            .or_else(|| self.file.optimistic_hinted(pid, self.hints.get(pid)))
        {
            Some(o) => o,
            None => {
                if !node.validate() {
                    self.restarted();
                    return Ok(Restart);
                }
                self.view_unhinted(pid)?
            }
        };
        if !node.validate() {
            self.restarted();
            return Ok(Restart);
        }
        Ok(Done(child))
    }

    /// I3 / S2: the view's page latched if it is unchanged since the view
    /// (`None`: it changed, restart).
    #[inline]
    pub(super) fn latch_view<'a>(&self, o: Optimistic<'a>) -> io::Result<Option<PageMut<'a>>> {
        match o.upgrade() {
            Ok(m) => Ok(Some(m)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                self.restarted();
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// What a read of a view gave: its result if the view validates,
    /// `Restart` if it does not, an error if an unchanged page is corrupt.
    pub(super) fn checked<T>(
        &self,
        o: &Optimistic<'_>,
        r: Result<T, Corrupt>,
    ) -> io::Result<Step<T>> {
        if !o.validate() {
            self.restarted();
            return Ok(Restart);
        }
        r.map(Done)
            .map_err(|_| corrupt(&self.file, o.index(), "inconsistent node"))
    }

    /// L1: views of the metadata page and of the root it names, both
    /// current when taken.
    #[inline]
    pub(super) fn root_views(&self) -> io::Result<Step<(Optimistic<'_>, Optimistic<'_>)>> {
        let meta = self.view(META)?;
        let root = meta.u64(M_ROOT);
        if !meta.validate() {
            self.restarted();
            return Ok(Restart);
        }
        let node = self.view(root)?;
        if !meta.validate() {
            self.restarted();
            return Ok(Restart);
        }
        Ok(Done((meta, node)))
    }

    /// L1-L2: views of the leaf for `key` and of its parent (the metadata
    /// page when the root is a leaf), both current when taken.
    pub(super) fn descend(&self, key: &[u8]) -> io::Result<(Optimistic<'_>, Optimistic<'_>)> {
        'restart: loop {
            let Done((mut parent, mut node)) = self.root_views()? else {
                continue;
            };
            loop {
                if node::is_leaf(&node) {
                    return Ok((parent, node));
                }
                let Done(child) = self.step(&node, key)? else {
                    continue 'restart;
                };
                parent = node;
                node = child;
            }
        }
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let mut v = Vec::new();
        Ok(self.get_into(key, &mut v)?.then_some(v))
    }

    /// Copies the value of `key` into `out` (replacing its contents) and
    /// returns true, or returns false if `key` is absent.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
        if self.coupling == Coupling::Pin {
            return self.get_pinned(key, out);
        }
        loop {
            let (_, leaf) = self.descend(key)?;
            let r = node::lower_bound(&leaf, key).and_then(|(pos, found)| {
                if found {
                    node::value_at(&leaf, pos, out)?;
                }
                Ok(found)
            });
            if let Done(found) = self.checked(&leaf, r)? {
                return Ok(found);
            }
        }
    }
}
