//! The cache-wide arena of index nodes.
//!
//! # Reclamation: type-stable nodes instead of a read-side guard
//!
//! The contract (`docs/contract.md` 5.1) offers three ways to keep lock-free readers safe from
//! freed nodes. We use **type-stable nodes** (the kernel's
//! `SLAB_TYPESAFE_BY_RCU` idea): all nodes of a cache live in one arena that
//! is reserved once (virtual memory, `MAP_NORESERVE`, backed on first touch)
//! and never unmapped while the cache lives. A freed node goes back on a free
//! list and may be reused at once, by any file. A reader that raced with the
//! free therefore reads *valid memory with possibly wrong contents*:
//!
//! * a wrong child id: every id is bounds-checked against the arena, so the
//!   walk stays in mapped memory, and it is bounded by the height it loaded;
//! * a wrong or empty entry: an empty entry is reported as a miss, and the
//!   miss path re-checks under the tree lock (authoritative); a wrong frame
//!   number is pinned and then rejected by the identity re-check of 5.1 step 3
//!   (owner and index are stable while pinned, because identity only changes
//!   with the refcount frozen at zero).
//!
//! Measured on this machine (contract 5.1), a radix walk with a CAS pin
//! costs 16 ns and `crossbeam_epoch::pin()` per lookup adds 9 ns; this choice
//! removes that fence entirely, and a descheduled reader cannot hold back
//! reclamation (epoch-based reclamation's known pitfall: a descheduled
//! reader stalls every free, worst when threads outnumber cores).

use super::Node;
use crate::sync::{AtomicU32, Ordering};
use crate::sync::{LockClass, Mutex};
use std::io;
#[cfg(not(loom))]
use std::ptr::NonNull;

/// The cache-wide arena of index nodes (type-stable, see module docs).
#[derive(Debug)]
pub struct NodeArena {
    /// The reserved mapping: zeroed memory is a valid empty node.
    #[cfg(not(loom))]
    base: NonNull<Node>,
    /// Under loom, nodes are made on first allocation (loom's atomics are
    /// not valid as zeroed memory) and, like the mapping, never freed while
    /// the arena lives.
    #[cfg(loom)]
    nodes: Box<[std::sync::OnceLock<Node>]>,
    max_nodes: u32,
    /// Next never-used id (ids start at 1; 0 means "no node").
    next: AtomicU32,
    /// Freed ids, reused first.
    free: Mutex<Vec<u32>>,
    #[cfg(not(loom))]
    map_len: usize,
}

// SAFETY: nodes are made of atomics only; the arena pointer is valid for the
// arena's life and shared by design.
unsafe impl Send for NodeArena {}
// SAFETY: as above.
unsafe impl Sync for NodeArena {}

impl NodeArena {
    /// Reserves room for `max_nodes` nodes (virtual memory only).
    pub fn new(max_nodes: u32) -> io::Result<Self> {
        #[cfg(not(loom))]
        let map_len = (max_nodes as usize + 1) * std::mem::size_of::<Node>();
        // Huge pages: a random lookup touches a leaf anywhere in the arena.
        #[cfg(not(loom))]
        let base = crate::frame::map_table(map_len, "the index node arena")?;
        Ok(NodeArena {
            // Page aligned, so suitably aligned for `Node` (64).
            #[cfg(not(loom))]
            base: base.cast(),
            #[cfg(loom)]
            nodes: (0..=max_nodes)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            max_nodes,
            next: AtomicU32::new(1),
            free: Mutex::with_class(Vec::new(), LockClass::NodeFreeList),
            #[cfg(not(loom))]
            map_len,
        })
    }

    /// The node with id `id`, or `None` if the id is out of range (a garbage
    /// id read from a recycled node).
    #[inline(always)]
    pub(super) fn get(&self, id: u64) -> Option<&Node> {
        if id == 0 || id > self.max_nodes as u64 {
            return None;
        }
        #[cfg(loom)]
        return self.nodes[id as usize].get();
        // SAFETY: 1 <= id <= max_nodes is inside the mapping, which lives as
        // long as `self`; zeroed memory is a valid `Node` of atomics.
        #[cfg(not(loom))]
        Some(unsafe { &*self.base.as_ptr().add(id as usize) })
    }

    pub(super) fn alloc(&self) -> io::Result<u32> {
        if let Some(id) = self.free.lock().pop() {
            return Ok(id);
        }
        // Relaxed: only allocation under some tree lock bumps it; the id is
        // handed out once. The node's zero contents need no publication:
        // the Release store of the slot that links it publishes them.
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if id > self.max_nodes {
            // Relaxed: undoes our own bump; ids are never handed out past max.
            self.next.fetch_sub(1, Ordering::Relaxed);
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                "index node arena exhausted",
            ));
        }
        #[cfg(loom)]
        let _ = self.nodes[id as usize].set(Node::empty());
        Ok(id)
    }

    /// A fresh node for tree `owner` at `pos` (see [`Node::pos`]).
    /// Publication: the caller links it with a Release store.
    pub(super) fn alloc_at(&self, owner: u64, pos: u64) -> io::Result<u32> {
        let id = self.alloc()?;
        let n = self.get(id as u64).expect("fresh node");
        // Relaxed: published by the Release store that links the node.
        n.pos.store(pos, Ordering::Relaxed);
        n.owner.store(owner, Ordering::Relaxed);
        Ok(id)
    }

    /// Returns an empty node (all slots zero, count zero).
    pub(super) fn free_node(&self, id: u32) {
        let n = self.get(id as u64).expect("freeing a valid node");
        // Relaxed: `count` is only written under the tree lock we hold.
        debug_assert_eq!(n.count.load(Ordering::Relaxed), 0);
        // Relaxed: stray tag bits may have landed (see module docs); clear
        // them so a reused node starts clean. Racing taggers are harmless.
        n.dirty.store(0, Ordering::Relaxed);
        // Relaxed: `retire` already cleared it with an RMW (pins.rs); a
        // node never linked as a leaf is cleared here.
        n.owner.store(0, Ordering::Relaxed);
        self.free.lock().push(id);
    }

    /// Nodes in use (tests).
    #[cfg(all(test, not(loom)))]
    pub fn in_use(&self) -> usize {
        // Relaxed: a statistic.
        (self.next.load(Ordering::Relaxed) as usize - 1) - self.free.lock().len()
    }
}

#[cfg(not(loom))]
impl Drop for NodeArena {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly our mapping; trees borrow the arena
        // through the cache, which outlives them.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}
