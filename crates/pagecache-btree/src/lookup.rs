//! Views of nodes (through frame hints), the optimistic descent (L1-L3 of
//! the protocol in `lib.rs`) and point lookups.

use crate::node::Bytes;
use crate::{corrupt, node, BTree, Corrupt, Coupling, Done, Reach, Restart, Step, META, M_ROOT};
use pagecache::{Optimistic, PageMut};
use std::io::{self, ErrorKind};

impl BTree {
    /// A view of node `pid` (through its frame hint, else the cache's index
    /// walk, the hint refreshed), read in if needed; a page past the end
    /// of the file (a corrupt pointer, followed only after validation) is
    /// `InvalidData`. With `WAIT` false, `None` where the page would have
    /// to be read (or a latch holder waited for): no I/O, no wait.
    #[inline]
    pub(super) fn view_as<const WAIT: bool>(&self, pid: u64) -> io::Result<Option<Optimistic<'_>>> {
        if let Some(o) = self.file.optimistic_hinted(pid, self.hints.get(pid)) {
            return Ok(Some(o));
        }
        if WAIT {
            return self.view_unhinted(pid).map(Some);
        }
        let o = self
            .file
            .try_optimistic(pid)
            .map_err(|e| self.past_end(pid, e))?;
        if let Some(o) = &o {
            self.hints.set(pid, o.frame_hint());
        }
        Ok(o)
    }

    /// A view of the page `p` points to, through the frame the pointer
    /// recorded if the page is still there (no side-table lookup), else as
    /// [`BTree::view_as`]. Only for a pointer read from a validated view.
    pub(super) fn view_ptr_as<const WAIT: bool>(
        &self,
        p: node::Ptr,
    ) -> io::Result<Option<Optimistic<'_>>> {
        match self.file.optimistic_hinted(p.pid, p.hint) {
            Some(o) => Ok(Some(o)),
            None => self.view_as::<WAIT>(p.pid),
        }
    }

    /// [`BTree::view_as`] past a missing or stale hint: the cache's index
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
        Ok(match self.step_as::<true>(node, key)? {
            Reach::Done(c) => Done(c),
            Reach::Restart => Restart,
            Reach::Missing(_) => unreachable!("a waiting step reads its child"),
        })
    }

    /// [`BTree::step`]; with `WAIT` false, `Missing(pid)` (the node
    /// validated: a real page number) where the child would have to be
    /// read.
    #[inline]
    pub(super) fn step_as<'a, const WAIT: bool>(
        &'a self,
        node: &Optimistic<'a>,
        key: &[u8],
    ) -> io::Result<Reach<Optimistic<'a>>> {
        let ptr = match node::child_for(node, key) {
            Ok(ptr) => ptr,
            Err(e) => {
                return Ok(match self.checked::<()>(node, Err(e))? {
                    Restart => Reach::Restart,
                    Done(()) => unreachable!("an error is never done"),
                })
            }
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
                    return Ok(Reach::Restart);
                }
                match self.view_as::<WAIT>(pid)? {
                    Some(o) => o,
                    None => return Ok(Reach::Missing(pid)),
                }
            }
        };
        if !node.validate() {
            self.restarted();
            return Ok(Reach::Restart);
        }
        Ok(Reach::Done(child))
    }

    /// I3 / S2: the view's page latched if it is unchanged since the view
    /// (`None`: it changed, restart). With `wait` (the caller holds no
    /// latch), a page latched by another thread is waited for before the
    /// restart (`Optimistic::upgrade_or_wait`): with more threads than
    /// CPUs, a preempted holder of a hot leaf would otherwise have every
    /// other writer of it restart until it runs again.
    #[inline]
    pub(super) fn latch_view<'a>(
        &self,
        o: Optimistic<'a>,
        wait: bool,
    ) -> io::Result<Option<PageMut<'a>>> {
        let r = if wait {
            o.upgrade_or_wait()
        } else {
            o.upgrade()
        };
        match r {
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
        Ok(match self.root_views_as::<true>()? {
            Reach::Done(v) => Done(v),
            Reach::Restart => Restart,
            Reach::Missing(_) => unreachable!("a waiting descent reads its pages"),
        })
    }

    /// [`BTree::root_views`], or `Missing` as [`BTree::step_as`].
    #[inline]
    fn root_views_as<const WAIT: bool>(
        &self,
    ) -> io::Result<Reach<(Optimistic<'_>, Optimistic<'_>)>> {
        let Some(meta) = self.view_as::<WAIT>(META)? else {
            return Ok(Reach::Missing(META));
        };
        let root = meta.u64(M_ROOT);
        if !meta.validate() {
            self.restarted();
            return Ok(Reach::Restart);
        }
        let Some(node) = self.view_as::<WAIT>(root)? else {
            return Ok(if meta.validate() {
                Reach::Missing(root)
            } else {
                Reach::Restart
            });
        };
        if !meta.validate() {
            self.restarted();
            return Ok(Reach::Restart);
        }
        Ok(Reach::Done((meta, node)))
    }

    /// L1-L2: views of the leaf for `key` and of its parent (the metadata
    /// page when the root is a leaf), both current when taken.
    pub(super) fn descend(&self, key: &[u8]) -> io::Result<(Optimistic<'_>, Optimistic<'_>)> {
        match self.descend_as::<true>(key)? {
            Ok(v) => Ok(v),
            Err(_) => unreachable!("a waiting descent reads its pages"),
        }
    }

    /// [`BTree::descend`]; with `WAIT` false, `Err(pid)` where a page of
    /// the path would have to be read (the node that points to it
    /// validated: a real page number), with no I/O and no wait.
    #[inline]
    pub(super) fn descend_as<const WAIT: bool>(
        &self,
        key: &[u8],
    ) -> io::Result<Result<(Optimistic<'_>, Optimistic<'_>), u64>> {
        'restart: loop {
            let (mut parent, mut node) = match self.root_views_as::<WAIT>()? {
                Reach::Done(v) => v,
                Reach::Restart => continue,
                Reach::Missing(pid) => return Ok(Err(pid)),
            };
            loop {
                if node::is_leaf(&node) {
                    return Ok(Ok((parent, node)));
                }
                let child = match self.step_as::<WAIT>(&node, key)? {
                    Reach::Done(c) => c,
                    Reach::Restart => continue 'restart,
                    Reach::Missing(pid) => return Ok(Err(pid)),
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
        match self.get_as::<true>(key, out)? {
            Ok(found) => Ok(found),
            Err(_) => unreachable!("a waiting descent reads its pages"),
        }
    }

    /// [`BTree::get`] as a future: a descent that meets a node not in the
    /// cache does not block its thread: it awaits the node's read
    /// (`File::page_async`) and descends again from the root (the upper
    /// levels are cached, so a descent costs little next to a read), so
    /// one thread keeps as many lookups in flight as it has tasks, as
    /// LeanStore's user-level threads do. Cancel-safe. Both couplings take
    /// the optimistic descent here.
    pub async fn get_async(&self, key: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let mut v = Vec::new();
        Ok(self.get_into_async(key, &mut v).await?.then_some(v))
    }

    /// [`BTree::get_into`] as a future (see [`BTree::get_async`]).
    pub async fn get_into_async(&self, key: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
        loop {
            match self.get_as::<false>(key, out)? {
                Ok(found) => return Ok(found),
                Err(pid) => {
                    let page = self.file.page_async(pid).await;
                    drop(page.map_err(|e| self.past_end(pid, e))?);
                }
            }
        }
    }

    /// A lookup; with `WAIT` false, `Err(pid)` where page `pid` would have
    /// to be read first.
    #[inline]
    fn get_as<const WAIT: bool>(
        &self,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> io::Result<Result<bool, u64>> {
        loop {
            let leaf = match self.descend_as::<WAIT>(key)? {
                Ok((_, leaf)) => leaf,
                Err(pid) => return Ok(Err(pid)),
            };
            let r = node::lower_bound(&leaf, key).and_then(|(pos, found)| {
                if found {
                    node::value_at(&leaf, pos, out)?;
                }
                Ok(found)
            });
            if let Done(found) = self.checked(&leaf, r)? {
                return Ok(Ok(found));
            }
        }
    }
}
