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
//!
//! # Placement
//!
//! The arena keeps all its state in its own memory (its head in the space
//! of node 0, which is never a node: id 0 means "none"), and zeroed memory
//! is an empty arena. So the same code runs over a private mapping
//! ([`NodeArena::new`]) or over a table of a segment that several processes
//! map at different addresses ([`NodeArena::over`]): nothing inside refers
//! to an address.
//!
//! # Protocol 5.12: the free list (a tagged stack)
//!
//! Free ids form a stack threaded through the free nodes' `next_free`, its
//! top in `Head::free` beside a tag that every push and pop bumps. No lock:
//! in a segment the callers are in several processes, and a process killed
//! inside a lock would leave it held for the others.
//!
//! ```text
//!  push(id) (free_node)                    pop (alloc)
//!  F1. h = load(free)                      P1. h = load(free), Acquire;
//!  F2. node(id).next_free = top(h)             top(h) == 0 -> a fresh id
//!  F3. CAS(free, h -> (tag(h)+1, id)),     P2. n = node(top(h)).next_free
//!      Release; failed -> F1               P3. CAS(free, h -> (tag(h)+1, n)),
//!                                              Acquire; failed -> P1
//! ```
//!
//! * The tag makes P3 fail whenever the stack changed after P1, even when
//!   the same id is back on top (ABA): `n`, read in P2 from a node that
//!   another thread may have popped, reused and pushed meanwhile, is used
//!   only if nothing happened in between. A wrong success needs 2^32
//!   operations on the stack between one thread's P1 and its P3.
//! * P2 may read a node in use by then: type-stable memory and an atomic,
//!   so at worst a stale value, which P3's failure discards.
//! * F3's Release publishes F2 and `free_node`'s reset of the node to the
//!   P1 that loads its value or any later value (every later change is an
//!   RMW of the same word, so in F3's release sequence).
//! * A process killed between P3 and linking the node loses that node (640
//!   bytes of the arena), never the list; fresh ids come from a counter
//!   (`Head::used`) bumped by one RMW.
//!
//! The loom model `node_free_list` checks that no id is handed out twice
//! and none is lost.

use super::Node;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use std::io;
#[cfg(not(loom))]
use std::ptr::NonNull;

/// The arena's own state, in the space of node 0. All zeros is an empty
/// arena.
#[derive(Debug)]
#[repr(C)]
struct Head {
    /// Ids handed out from never-used memory so far (the next fresh id is
    /// this plus 1).
    used: AtomicU32,
    /// The free list: tag in the high 32 bits, top id in the low (0: empty).
    free: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Head>() <= std::mem::size_of::<Node>());

#[inline]
fn top(h: u64) -> u32 {
    h as u32
}

#[inline]
fn bumped(h: u64, id: u32) -> u64 {
    ((h >> 32).wrapping_add(1) << 32) | id as u64
}

/// The cache-wide arena of index nodes (type-stable, see module docs).
#[derive(Debug)]
pub struct NodeArena {
    /// The arena's memory: node 0 holds the head; zeroed memory is a valid
    /// empty node.
    #[cfg(not(loom))]
    base: NonNull<Node>,
    /// Under loom, nodes are made on first allocation (loom's atomics are
    /// not valid as zeroed memory) and, like the mapping, never freed while
    /// the arena lives.
    #[cfg(loom)]
    nodes: Box<[std::sync::OnceLock<Node>]>,
    #[cfg(loom)]
    head: Head,
    max_nodes: u32,
    /// Bytes to unmap on drop (0: the memory is someone else's).
    #[cfg(not(loom))]
    map_len: usize,
}

// SAFETY: nodes are made of atomics only; the arena pointer is valid for the
// arena's life and shared by design.
unsafe impl Send for NodeArena {}
// SAFETY: as above.
unsafe impl Sync for NodeArena {}

impl NodeArena {
    /// Bytes of memory an arena of `max_nodes` nodes occupies (node 0, the
    /// head, included).
    pub fn bytes(max_nodes: u32) -> usize {
        (max_nodes as usize + 1) * std::mem::size_of::<Node>()
    }

    /// Nodes a cache of `frames` frames of `page_size` bytes may need: pages
    /// in the index times the height of a tree that reaches the largest
    /// page index, plus slack. An error if that does not fit in a `u32`.
    pub fn max_nodes(frames: usize, page_size: usize) -> io::Result<u32> {
        let height = (64 - page_size.trailing_zeros()).div_ceil(super::SHIFT);
        frames
            .checked_mul(height as usize)
            .and_then(|n| n.checked_add(64))
            .filter(|&n| n < u32::MAX as usize)
            .map(|n| n as u32)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "capacity too large"))
    }

    /// Reserves room for `max_nodes` nodes (virtual memory only).
    pub fn new(max_nodes: u32) -> io::Result<Self> {
        #[cfg(not(loom))]
        {
            let map_len = Self::bytes(max_nodes);
            // Huge pages: a random lookup touches a leaf anywhere in the arena.
            let base = crate::frame::map_table(map_len, "the index node arena")?;
            // SAFETY: a fresh zeroed mapping of the right size, page aligned,
            // unmapped only by our Drop.
            let mut a = unsafe { Self::over(base, max_nodes) };
            a.map_len = map_len;
            Ok(a)
        }
        #[cfg(loom)]
        Ok(NodeArena {
            nodes: (0..=max_nodes)
                .map(|_| std::sync::OnceLock::new())
                .collect(),
            head: Head {
                used: AtomicU32::new(0),
                free: AtomicU64::new(0),
            },
            max_nodes,
        })
    }

    /// An arena over `base`: [`NodeArena::bytes`]`(max_nodes)` bytes, 64-byte
    /// aligned, all zeros when first used by any arena, and used by arenas
    /// of this `max_nodes` only (other processes' included).
    ///
    /// # Safety
    ///
    /// The memory stays mapped, and is not written other than through
    /// arenas, for as long as the returned arena lives.
    #[cfg(not(loom))]
    pub unsafe fn over(base: NonNull<u8>, max_nodes: u32) -> Self {
        debug_assert_eq!(base.as_ptr() as usize % std::mem::align_of::<Node>(), 0);
        NodeArena {
            base: base.cast(),
            max_nodes,
            map_len: 0,
        }
    }

    #[inline]
    fn head(&self) -> &Head {
        #[cfg(loom)]
        return &self.head;
        // SAFETY: node 0's space is the head's (module docs), inside the
        // memory that lives as long as `self`; zeroed memory is a valid head.
        #[cfg(not(loom))]
        unsafe {
            &*self.base.as_ptr().cast::<Head>()
        }
    }

    /// The node with id `id`, or `None` if the id is out of range (a garbage
    /// id read from a recycled node).
    #[inline(always)]
    pub(crate) fn get(&self, id: u64) -> Option<&Node> {
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

    /// The id of `n`, a node of this arena.
    pub(crate) fn id_of(&self, n: &Node) -> u32 {
        #[cfg(not(loom))]
        {
            let at = n as *const Node as usize - self.base.as_ptr() as usize;
            (at / std::mem::size_of::<Node>()) as u32
        }
        #[cfg(loom)]
        {
            self.nodes
                .iter()
                .position(|c| c.get().is_some_and(|x| std::ptr::eq(x, n)))
                .expect("a node of this arena") as u32
        }
    }

    /// A node id: a freed one first (5.12 P1-P3), else a fresh one. Its
    /// slots and count are zero. Context: no sleep, no lock.
    pub fn alloc(&self) -> io::Result<u32> {
        let head = self.head();
        // P1. Acquire: pairs with F3's Release, so P2 reads the pusher's link.
        let mut h = head.free.load(Ordering::Acquire);
        while top(h) != 0 {
            // P2. Relaxed: validated by P3 (module docs); a garbage id is
            // out of range or caught by P3's tag.
            let n = self
                .get(top(h) as u64)
                .map_or(0, |n| n.next_free.load(Ordering::Relaxed));
            // P3. Acquire on success: as P1; on failure: the new top's link.
            match head.free.compare_exchange_weak(
                h,
                bumped(h, n),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(top(h)),
                Err(now) => h = now,
            }
        }
        // Relaxed: the id is handed out once by this RMW. The node's zero
        // contents need no publication: the Release store of the slot that
        // links it publishes them.
        let id = head.used.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if id == 0 || id > self.max_nodes {
            // Relaxed: undoes our own bump; ids are never handed out past max.
            head.used.fetch_sub(1, Ordering::Relaxed);
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

    /// Returns node `id`, empty (all slots zero, count zero), unlinked and
    /// owned by the caller (5.12 F1-F3). Context: no sleep, no lock.
    pub fn free_node(&self, id: u32) {
        let n = self.get(id as u64).expect("freeing a valid node");
        // Relaxed: `count` is only written under the tree lock we hold.
        debug_assert_eq!(n.count.load(Ordering::Relaxed), 0);
        // Relaxed: stray tag bits may have landed (see module docs); clear
        // them so a reused node starts clean. Racing taggers are harmless.
        n.dirty.store(0, Ordering::Relaxed);
        // Relaxed: `retire` already cleared it with an RMW (pins.rs); a
        // node never linked as a leaf is cleared here.
        n.owner.store(0, Ordering::Relaxed);
        let head = self.head();
        // F1. Relaxed: F3 validates it.
        let mut h = head.free.load(Ordering::Relaxed);
        loop {
            // F2. Relaxed: published by F3's Release.
            n.next_free.store(top(h), Ordering::Relaxed);
            // F3. Release: publishes F2 and the resets above to P1.
            match head.free.compare_exchange_weak(
                h,
                bumped(h, id),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => h = now,
            }
        }
    }

    /// Nodes in use: ids handed out minus those on the free list. Call with
    /// no allocation or free in flight (tests, diagnostics).
    pub fn in_use(&self) -> usize {
        let head = self.head();
        // Relaxed: quiescent by the caller's promise.
        let mut free = 0;
        let mut id = top(head.free.load(Ordering::Acquire));
        while id != 0 && free <= self.max_nodes as usize {
            free += 1;
            id = self
                .get(id as u64)
                .map_or(0, |n| n.next_free.load(Ordering::Relaxed));
        }
        head.used.load(Ordering::Relaxed) as usize - free
    }
}

#[cfg(not(loom))]
impl Drop for NodeArena {
    fn drop(&mut self) {
        if self.map_len == 0 {
            return;
        }
        // SAFETY: unmapping exactly our mapping; trees borrow the arena
        // through the cache, which outlives them.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}
