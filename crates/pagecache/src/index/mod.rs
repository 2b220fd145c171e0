//! Layer 3, index: one 64-way radix tree per file, read without locks.
//!
//! Entries of a leaf are `frame number + 1` (0 is empty); entries of an
//! interior node are child node ids (0 is empty). The root word packs the
//! root node id and the height, so a reader loads both in one atomic load.
//! Height grows with the largest index and never shrinks; empty nodes are
//! freed as soon as their last entry goes.
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
//! # Locks and guards
//!
//! Writers (insert, remove, grow, tag collection for `sync`) hold the file's
//! tree lock, proved by a [`TreeLocked`] token. Lock-free readers (`lookup`,
//! `leaf`, `tag_dirty`) need nothing. Fields: (T) written under the tree lock,
//! read by anyone; (A) atomic RMW from any context.
//!
//! # Dirty tags
//!
//! Each node has a `dirty` bitmap: bit `c` set means "child/slot `c` may hold
//! a dirty page". Protocol (ordering argument):
//!
//! ```text
//!   dirtier (any context)                 sync (tree lock)
//!   D1 set DIRTY on the page (RMW)        S1 clear the tag bit (RMW) top-down,
//!      only a 0->1 transition goes on        each level before scanning below
//!   D2 fetch_or the tag bits (RMW),       S2 start_writeback: test-and-clear
//!      leaf first, then each ancestor        DIRTY on the page (RMW)
//! ```
//!
//! D2 and S1 are AcqRel RMWs on the tag word; D1 (`unlatch_dirty`, or a
//! failed write-back's `end_writeback`, Release) is sequenced before D2 in the dirtier, and S2
//! after S1 in the syncer. If D2 precedes S1 on a tag word, S1 reads from D2
//! (synchronizes-with), so D1 happens-before S2, and S2, an RMW on the same
//! state word, sees DIRTY: this sync writes the page. If S1 precedes D2, the bit stays set and the
//! next sync finds the page. A failed write-back sets DIRTY again (0->1) and
//! re-tags. The flusher, which takes tags as sync does but never waits for
//! a latched page, puts back (D2, under the tree lock) the tag of each page
//! it took and did not write if the page is still DIRTY: the latch holder
//! unlatches an already dirty page without tagging it. Its load of DIRTY
//! reads D1's value, and only S2 (which needs a pin, so not before the
//! latch is dropped) clears it. Its bounded take (`take_dirty_range`)
//! clears a node's bits (S1) and, before releasing the tree lock, sets
//! back (D2) those of subtrees and pages it did not take, children before
//! parents: only a sync, which needs the same lock, could have seen them
//! clear. Spurious tag bits are harmless (sync filters on DIRTY).
//!
//! Growth vs. tagging: the grower stores the new root, then ORs the old
//! root's bitmap into the new root with an RMW on the old root's `dirty`
//! (`fetch_or(0)`, AcqRel); a dirtier re-loads the root after D2 and re-tags
//! from the new root if it changed. Either the grower's RMW reads the
//! dirtier's bit, or the dirtier's RMW reads from the grower's and then sees
//! the new root.

mod pins;
pub(crate) use pins::SlotRuns;

use crate::frame::FrameNo;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{LockClass, Mutex, MutexGuard};
use std::io;
#[cfg(not(loom))]
use std::ptr::NonNull;

/// Fan-out bits per level.
pub const SHIFT: u32 = 6;
/// Slots per node.
pub const FANOUT: usize = 1 << SHIFT;
const MASK: u64 = FANOUT as u64 - 1;

/// A radix tree node. Zeroed memory is a valid empty node.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Node {
    /// (T) entries; read lock-free.
    slots: [AtomicU64; FANOUT],
    /// (A) dirty tag bitmap, see the module docs.
    dirty: AtomicU64,
    /// (T) number of non-empty slots; a run's drop reads it (`retire`).
    count: AtomicU32,
    /// (T) the owning tree's id while the node is linked; 0 once it is
    /// retired (see `pins.rs`: how a run knows its pinned leaf is real).
    owner: AtomicU64,
    /// (T) where the node sits: the first index it covers, plus its level
    /// (a leaf's low [`SHIFT`] bits are 0). Fixed while linked.
    pos: AtomicU64,
    /// (A) run pins, 4 bits per slot (slot `s` is nibble `s % 16` of word
    /// `s / 16`: a 3-bit count and `STALE`), see `pins.rs`.
    pins: [AtomicU64; 4],
    /// (A) slots whose writer waits for their run pins to go.
    pin_waiters: AtomicU64,
}

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
        let base = crate::frame::map_huge(map_len, "the index node arena")?;
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
    fn get(&self, id: u64) -> Option<&Node> {
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

    fn alloc(&self) -> io::Result<u32> {
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
    fn alloc_at(&self, owner: u64, pos: u64) -> io::Result<u32> {
        let id = self.alloc()?;
        let n = self.get(id as u64).expect("fresh node");
        // Relaxed: published by the Release store that links the node.
        n.pos.store(pos, Ordering::Relaxed);
        n.owner.store(owner, Ordering::Relaxed);
        Ok(id)
    }

    /// Returns an empty node (all slots zero, count zero).
    fn free_node(&self, id: u32) {
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

/// Proof that the caller holds a tree's lock.
#[derive(Debug)]
pub struct TreeLocked<'a> {
    _g: MutexGuard<'a, ()>,
    tree: &'a Tree,
}

/// One file's index.
#[derive(Debug)]
pub struct Tree {
    /// (T) root node id in the low 32 bits, height in the high 32 (0 = empty).
    root: AtomicU64,
    lock: Mutex<()>,
    /// The id its nodes carry while linked (the file's id; never 0).
    owner: u64,
}

impl Default for Tree {
    fn default() -> Self {
        Tree::new(u64::MAX)
    }
}

#[inline]
fn pack(id: u32, height: u32) -> u64 {
    ((height as u64) << 32) | id as u64
}

#[inline]
fn unpack(r: u64) -> (u64, u32) {
    (r & 0xffff_ffff, (r >> 32) as u32)
}

/// Largest index + 1 a tree of `height` levels can hold.
#[inline]
fn capacity(height: u32) -> u64 {
    if height * SHIFT >= 64 {
        u64::MAX
    } else {
        1u64 << (height * SHIFT)
    }
}

/// The first index a node at `level` (0 = leaf) on `index`'s path covers.
#[inline]
fn node_base(index: u64, level: u32) -> u64 {
    let bits = (level + 1) * SHIFT;
    if bits >= 64 {
        0
    } else {
        index & !((1u64 << bits) - 1)
    }
}

#[inline]
fn slot_at(index: u64, level: u32) -> usize {
    if level * SHIFT >= 64 {
        0
    } else {
        ((index >> (level * SHIFT)) & MASK) as usize
    }
}

impl Tree {
    /// An empty index whose nodes carry `owner` (not 0).
    pub fn new(owner: u64) -> Self {
        assert_ne!(owner, 0, "tree owner 0 marks retired nodes");
        Tree {
            root: AtomicU64::new(0),
            lock: Mutex::with_class((), LockClass::Tree),
            owner,
        }
    }

    /// The id its nodes carry.
    #[inline]
    pub fn owner(&self) -> u64 {
        self.owner
    }

    /// Takes the tree lock.
    pub fn lock(&self) -> TreeLocked<'_> {
        TreeLocked {
            _g: self.lock.lock(),
            tree: self,
        }
    }

    /// Lock-free: the leaf node that would hold `index`, if the path exists.
    /// Context: any. The result may be stale (see module docs).
    #[inline(always)]
    pub fn leaf<'a>(&self, arena: &'a NodeArena, index: u64) -> Option<&'a Node> {
        // Acquire: pairs with the Release stores that link nodes, so their
        // zeroed/initialised slots are visible.
        let (mut id, height) = unpack(self.root.load(Ordering::Acquire));
        // Height 0 (empty) fails the first check; the shift is < 64 for any
        // height a real index reaches below 11 levels.
        if height == 0 || (height < 11 && index >> (height * SHIFT) != 0) {
            return None;
        }
        let mut shift = (height - 1) * SHIFT;
        loop {
            let node = arena.get(id)?;
            if shift == 0 {
                return Some(node);
            }
            // Acquire: as above, for the child's publication.
            id = node.slots[((index >> shift) & MASK) as usize].load(Ordering::Acquire);
            shift -= SHIFT;
        }
    }

    /// Lock-free: the frame recorded for `index`, if any (5.1 step 1).
    /// Context: any; the caller must pin and re-check identity.
    #[inline(always)]
    pub fn lookup(&self, arena: &NodeArena, index: u64) -> Option<FrameNo> {
        let leaf = self.leaf(arena, index)?;
        Node::entry(leaf, index)
    }

    /// Lock-free: sets the dirty tag path for `index` (steps D2 of the
    /// module's tag protocol). Context: any; the caller just moved the page
    /// from clean to dirty while holding a pin on it.
    pub fn tag_dirty(&self, arena: &NodeArena, index: u64) {
        loop {
            // Acquire: see `leaf`.
            let root = self.root.load(Ordering::Acquire);
            let (root_id, height) = unpack(root);
            if height == 0 || index >= capacity(height) {
                return; // the page left the tree (truncated): nothing to tag
            }
            let mut path = [0u64; 12];
            let mut id = root_id;
            let mut level = height - 1;
            let mut depth = 0;
            loop {
                let Some(node) = arena.get(id) else { return };
                path[depth] = id;
                depth += 1;
                if level == 0 {
                    break;
                }
                // Acquire: see `leaf`.
                id = node.slots[slot_at(index, level)].load(Ordering::Acquire);
                level -= 1;
            }
            // Bottom-up: leaf first, so a sync that sees an ancestor bit
            // finds the leaf bit too.
            for (d, &nid) in path[..depth].iter().enumerate().rev() {
                let lvl = height - 1 - d as u32;
                if let Some(n) = arena.get(nid) {
                    // AcqRel: step D2, see the module docs.
                    n.dirty.fetch_or(1 << slot_at(index, lvl), Ordering::AcqRel);
                }
            }
            // Acquire: if a grower replaced the root, re-tag from the new one.
            if self.root.load(Ordering::Acquire) == root {
                return;
            }
        }
    }
}

impl Node {
    /// An empty node, not linked anywhere.
    #[cfg(any(loom, test))]
    pub(crate) fn empty() -> Node {
        Node {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            dirty: AtomicU64::new(0),
            count: AtomicU32::new(0),
            owner: AtomicU64::new(0),
            pos: AtomicU64::new(0),
            pins: std::array::from_fn(|_| AtomicU64::new(0)),
            pin_waiters: AtomicU64::new(0),
        }
    }

    #[inline]
    fn entry(node: &Node, index: u64) -> Option<FrameNo> {
        // Acquire: pairs with the Release store in `insert`, so the frame's
        // identity and state published before are visible to the pinner.
        let e = node.slots[(index & MASK) as usize].load(Ordering::Acquire);
        if e == 0 {
            None
        } else {
            Some((e - 1) as FrameNo)
        }
    }

    /// Entry of slot `i` of a leaf (gang lookups walk a leaf's slots).
    #[inline]
    pub fn slot(&self, i: usize) -> Option<FrameNo> {
        // Acquire: as in `entry`.
        let e = self.slots[i].load(Ordering::Acquire);
        if e == 0 {
            None
        } else {
            Some((e - 1) as FrameNo)
        }
    }
}

impl<'a> TreeLocked<'a> {
    /// Authoritative lookup under the lock.
    pub fn get(&self, arena: &NodeArena, index: u64) -> Option<FrameNo> {
        self.tree.lookup(arena, index)
    }

    fn root(&self) -> (u64, u32) {
        // Relaxed: the root only changes under the lock we hold.
        unpack(self.tree.root.load(Ordering::Relaxed))
    }

    /// Inserts `frame` at `index`. Fails with `Ok(Err(existing))` if the slot
    /// is taken, `Err` if the node arena is exhausted. Publication: the slot
    /// store is Release, so the frame's identity and state set before the
    /// call are visible to any reader that loads the entry.
    pub fn insert(
        &mut self,
        arena: &NodeArena,
        index: u64,
        frame: FrameNo,
    ) -> io::Result<Result<(), FrameNo>> {
        let (mut root_id, mut height) = self.root();
        let owner = self.tree.owner;
        if height == 0 {
            height = 1;
            while index >= capacity(height) {
                height += 1;
            }
            root_id = arena.alloc_at(owner, (height - 1) as u64)? as u64;
            // Release: publishes the new (zeroed) root node.
            self.tree
                .root
                .store(pack(root_id as u32, height), Ordering::Release);
        }
        while index >= capacity(height) {
            // Grow: a new root whose slot 0 is the old root.
            let new_id = arena.alloc_at(owner, height as u64)?;
            let new = arena.get(new_id as u64).expect("fresh node");
            let old = arena.get(root_id).expect("root node");
            // Relaxed: the new node is unpublished until the root store.
            new.slots[0].store(root_id, Ordering::Relaxed);
            new.count.store(1, Ordering::Relaxed);
            if old.dirty.load(Ordering::Relaxed) != 0 {
                new.dirty.store(1, Ordering::Relaxed);
            }
            height += 1;
            root_id = new_id as u64;
            // Release: publishes the new root's contents.
            self.tree
                .root
                .store(pack(new_id, height), Ordering::Release);
            // AcqRel RMW on the old root's bitmap: see "Growth vs. tagging".
            if old.dirty.fetch_or(0, Ordering::AcqRel) != 0 {
                new.dirty.fetch_or(1, Ordering::AcqRel);
            }
        }
        let mut node = arena.get(root_id).expect("root node");
        let mut level = height - 1;
        while level > 0 {
            let s = slot_at(index, level);
            // Relaxed: under the lock, we are the only writer.
            let child = node.slots[s].load(Ordering::Relaxed);
            let child = if child == 0 {
                let cl = level - 1;
                let base = node_base(index, cl);
                let id = arena.alloc_at(owner, base | cl as u64)? as u64;
                // Release: publishes the zeroed child to lock-free readers.
                node.slots[s].store(id, Ordering::Release);
                node.count.fetch_add(1, Ordering::Relaxed);
                id
            } else {
                child
            };
            node = arena.get(child).expect("child node");
            level -= 1;
        }
        let s = (index & MASK) as usize;
        // Relaxed: under the tree lock, the only writer.
        let cur = node.slots[s].load(Ordering::Relaxed);
        if cur != 0 {
            return Ok(Err((cur - 1) as FrameNo));
        }
        // Release: 5.3 publication of the new page (identity, LATCHED state).
        node.slots[s].store(frame as u64 + 1, Ordering::Release);
        node.count.fetch_add(1, Ordering::Relaxed);
        Ok(Ok(()))
    }

    /// Clears the slot of `index` if it holds `frame` (5.2 step C, first
    /// half), freeing nodes that become empty. Returns whether it did.
    pub fn remove(&mut self, arena: &NodeArena, index: u64, frame: FrameNo) -> bool {
        let Some((path, depth)) = self.leaf_path(arena, index) else {
            return false;
        };
        let (leaf_id, s) = path[depth - 1];
        let leaf = arena.get(leaf_id).expect("leaf");
        // Relaxed: under the tree lock, the only writer.
        if leaf.slots[s].load(Ordering::Relaxed) != frame as u64 + 1 {
            return false;
        }
        // Release: readers that still load the old entry pin and re-check
        // identity; those that load 0 go to the locked miss path.
        leaf.slots[s].store(0, Ordering::Release);
        leaf.dirty.fetch_and(!(1 << s), Ordering::AcqRel);
        // AcqRel: a run's drop reads `count` after its unpin and fence
        // (`cache/run.rs` R4) to prune a leaf `retire` had to keep; the
        // handshake rests on the fences (here: `retire`'s, after this).
        if leaf.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.free_path(arena, &path[..depth]);
        }
        true
    }

    /// Frees the empty node at the end of `path` (root first) and every
    /// ancestor left empty by unlinking it; stops at a node a run still
    /// pins (it stays linked, empty, until the run's drop prunes it).
    fn free_path(&mut self, arena: &NodeArena, path: &[(u64, usize)]) {
        for d in (0..path.len()).rev() {
            let nid = path[d].0;
            let node = arena.get(nid).expect("node on a locked path");
            if !arena.retire(node, d == path.len() - 1) {
                return; // pinned: stays linked (and its ancestors with it)
            }
            if d == 0 {
                // Release: readers of the old root see height 0 or a root
                // whose slots are all empty; both are misses.
                self.tree.root.store(0, Ordering::Release);
                arena.free_node(nid as u32);
                return;
            }
            let (pid, ps) = path[d - 1];
            let parent = arena.get(pid).expect("node on a locked path");
            // Release: unlinks the freed child; readers that still reach it
            // read a recycled node (see module docs).
            parent.slots[ps].store(0, Ordering::Release);
            // AcqRel: the tag protocol's RMW discipline (module docs).
            parent.dirty.fetch_and(!(1 << ps), Ordering::AcqRel);
            arena.free_node(nid as u32);
            // AcqRel: as in `remove`.
            if parent.count.fetch_sub(1, Ordering::AcqRel) != 1 {
                return;
            }
        }
    }

    /// The path (root first) to the leaf covering `index`, and its length;
    /// `None` if there is none.
    fn leaf_path(&self, arena: &NodeArena, index: u64) -> Option<([(u64, usize); 12], usize)> {
        let (root_id, height) = self.root();
        if height == 0 || index >= capacity(height) {
            return None;
        }
        let mut path: [(u64, usize); 12] = [(0, 0); 12];
        let mut id = root_id;
        let mut level = height - 1;
        let mut depth = 0;
        loop {
            let node = arena.get(id).expect("node on a locked path");
            let s = slot_at(index, level);
            path[depth] = (id, s);
            depth += 1;
            if level == 0 {
                return Some((path, depth));
            }
            // Relaxed: under the tree lock, the only writer.
            id = node.slots[s].load(Ordering::Relaxed);
            if id == 0 {
                return None;
            }
            level -= 1;
        }
    }

    /// The leaf covering `index` and `index`'s slot in it, found under the
    /// tree lock. Context: the tree lock held (proved by `self`).
    fn leaf_slot(&self, arena: &'a NodeArena, index: u64) -> Option<(&'a Node, usize)> {
        let (path, depth) = self.leaf_path(arena, index)?;
        Some((arena.get(path[depth - 1].0)?, (index & MASK) as usize))
    }

    /// The leaf covering `index` if a run pins `index`'s slot. The caller
    /// has just changed the page's state word and issued a SeqCst fence
    /// (protocol 5.7 E2, `cache/run.rs`).
    pub fn run_pinned(&self, arena: &'a NodeArena, index: u64) -> Option<&'a Node> {
        let (leaf, s) = self.leaf_slot(arena, index)?;
        leaf.slot_pinned(s).then_some(leaf)
    }

    /// Protocol 5.7 T2-T3 for the page at `index`, which truncate marked
    /// REMOVED and fenced: the leaf covering it if a run pins its slot, the
    /// slot then marked `STALE` (its runs may hold this page, which is
    /// leaving the slot: no writer of the slot's next page waits for them).
    pub fn mark_run_stale(&self, arena: &'a NodeArena, index: u64) -> Option<&'a Node> {
        let (leaf, s) = self.leaf_slot(arena, index)?;
        leaf.mark_stale(s).then_some(leaf)
    }

    /// Frees the leaf covering `index` if it is empty and no run pins it
    /// any more (a run's drop, after it unpinned an empty leaf).
    pub fn prune(&mut self, arena: &NodeArena, index: u64) {
        let Some((path, depth)) = self.leaf_path(arena, index) else {
            return;
        };
        let leaf = arena.get(path[depth - 1].0).expect("leaf");
        // Relaxed: `count` only changes under the tree lock we hold.
        if leaf.count.load(Ordering::Relaxed) == 0 {
            self.free_path(arena, &path[..depth]);
        }
    }

    /// Every `(index, frame)` with `index >= start`, in index order.
    pub fn entries_from(&self, arena: &NodeArena, start: u64, out: &mut Vec<(u64, FrameNo)>) {
        let (root_id, height) = self.root();
        if height == 0 {
            return;
        }
        walk(arena, root_id, height - 1, 0, start, out);
    }

    /// Sync's collection (steps S1 of the tag protocol): clears every dirty
    /// tag top-down and returns the pages that were tagged, in index order.
    pub fn take_dirty(&self, arena: &NodeArena, out: &mut Vec<(u64, FrameNo)>) {
        self.take_dirty_range(arena, 0, u64::MAX, usize::MAX, out);
    }

    /// The flusher's bounded collection: takes (S1) the tags of the pages
    /// in `start..end`, in index order, until `out` holds `max` pages, and
    /// leaves every other tag set. Its work under the tree lock is the
    /// pages it takes plus one path, not the file's whole dirty set: a
    /// writer inserting a page waits for that lock. A tag it cleared on
    /// the way down and did not consume (a subtree it stopped in, bits out
    /// of range) is put back with a D2 RMW before the lock is released,
    /// bottom-up, so no sync ever sees it missing.
    pub fn take_dirty_range(
        &self,
        arena: &NodeArena,
        start: u64,
        end: u64,
        max: usize,
        out: &mut Vec<(u64, FrameNo)>,
    ) {
        let mut visits = usize::MAX;
        self.take_dirty_if(arena, (start, end), max, &mut visits, &mut |_| true, out);
    }

    /// [`TreeLocked::take_dirty_range`] that takes only the tagged pages whose
    /// frame `keep` accepts (the others keep their tags, put back as
    /// above) and looks at no more than `visits` tagged pages. Returns the
    /// last tagged page it looked at, if any: a caller resuming after it
    /// looks at every tagged page once. `keep` runs under the tree lock:
    /// it may read the frame's descriptor, nothing more.
    pub fn take_dirty_if(
        &self,
        arena: &NodeArena,
        (start, end): (u64, u64),
        max: usize,
        visits: &mut usize,
        keep: &mut dyn FnMut(FrameNo) -> bool,
        out: &mut Vec<(u64, FrameNo)>,
    ) -> Option<u64> {
        let (root_id, height) = self.root();
        if height == 0 || start >= end || out.len() >= max || *visits == 0 {
            return None;
        }
        let mut t = Take {
            start,
            end,
            max,
            visits: *visits,
            keep,
            last: None,
        };
        take(arena, root_id, height - 1, 0, &mut t, out);
        *visits = t.visits;
        t.last
    }

    /// Checks the tree's invariants (tests): counts match occupied slots,
    /// every child is a valid node, every leaf entry's frame satisfies
    /// `check(index, frame)`.
    pub fn validate(&self, arena: &NodeArena, mut check: impl FnMut(u64, FrameNo, bool)) -> usize {
        let (root_id, height) = self.root();
        if height == 0 {
            return 0;
        }
        fn rec(
            arena: &NodeArena,
            id: u64,
            level: u32,
            base: u64,
            tagged_above: bool,
            check: &mut dyn FnMut(u64, FrameNo, bool),
        ) -> usize {
            let node = arena.get(id).expect("valid node id");
            let mut n = 0;
            let mut pages = 0;
            let tags = node.dirty.load(Ordering::Relaxed);
            for s in 0..FANOUT {
                let e = node.slots[s].load(Ordering::Relaxed);
                if e == 0 {
                    continue;
                }
                n += 1;
                let tagged = tagged_above && tags & (1 << s) != 0;
                let idx = base | ((s as u64) << (level * SHIFT).min(63));
                if level == 0 {
                    check(idx, (e - 1) as FrameNo, tagged);
                    pages += 1;
                } else {
                    pages += rec(arena, e, level - 1, idx, tagged, check);
                }
            }
            assert_eq!(n, node.count.load(Ordering::Relaxed), "node {id} count");
            assert!(n > 0, "empty node {id} left in the tree");
            assert!(!node.any_pinned(), "node {id} run-pinned with no run alive");
            assert!(
                node.owner.load(Ordering::Relaxed) != 0,
                "linked node {id} retired"
            );
            pages
        }
        rec(arena, root_id, height - 1, 0, true, &mut check)
    }
}

/// The first index of slot `s` of a node at `level` covering from `base`,
/// and the last index its span covers.
#[inline]
fn span(base: u64, level: u32, s: u64) -> (u64, u64) {
    let span_shift = level * SHIFT;
    let idx = base | (s << span_shift.min(63));
    let last = if span_shift >= 64 {
        u64::MAX
    } else {
        idx.saturating_add((1u64 << span_shift) - 1)
    };
    (idx, last)
}

/// A bounded, filtered take's bounds and what it has looked at.
struct Take<'k> {
    start: u64,
    end: u64,
    /// Stop once `out` holds this many.
    max: usize,
    /// Tagged pages still to look at.
    visits: usize,
    keep: &'k mut dyn FnMut(FrameNo) -> bool,
    /// The last tagged page looked at.
    last: Option<u64>,
}

/// [`TreeLocked::take_dirty_if`] below node `id`: returns whether every
/// tag it cleared here was consumed (its parent's bit may stay clear).
fn take(
    arena: &NodeArena,
    id: u64,
    level: u32,
    base: u64,
    t: &mut Take<'_>,
    out: &mut Vec<(u64, FrameNo)>,
) -> bool {
    let node = arena.get(id).expect("node on a locked path");
    // AcqRel: step S1, see module docs. Clear-then-scan.
    let mut bits = node.dirty.swap(0, Ordering::AcqRel);
    let mut back = 0u64;
    while bits != 0 {
        let s = bits.trailing_zeros() as u64;
        bits &= bits - 1;
        let (idx, last) = span(base, level, s);
        if last < t.start || idx >= t.end || out.len() >= t.max || t.visits == 0 {
            back |= 1 << s;
            continue;
        }
        // Relaxed: under the tree lock, the only writer.
        let e = node.slots[s as usize].load(Ordering::Relaxed);
        if e == 0 {
            continue; // a stray tag: dropped
        }
        if level == 0 {
            t.visits -= 1;
            t.last = Some(idx);
            let f = (e - 1) as FrameNo;
            if (t.keep)(f) {
                out.push((idx, f));
            } else {
                back |= 1 << s;
            }
        } else if !take(arena, e, level - 1, idx, t, out) {
            back |= 1 << s;
        }
    }
    if back != 0 {
        // AcqRel: a put-back is a D2 (module docs); the children's bits
        // were put back before this one, as a dirtier sets them.
        node.dirty.fetch_or(back, Ordering::AcqRel);
    }
    back == 0
}

fn walk(
    arena: &NodeArena,
    id: u64,
    level: u32,
    base: u64,
    start: u64,
    out: &mut Vec<(u64, FrameNo)>,
) {
    let node = arena.get(id).expect("node on a locked path");
    for s in 0..FANOUT as u64 {
        let (idx, last) = span(base, level, s);
        if last < start {
            continue;
        }
        // Relaxed: under the tree lock, the only writer.
        let e = node.slots[s as usize].load(Ordering::Relaxed);
        if e == 0 {
            continue;
        }
        if level == 0 {
            out.push((idx, (e - 1) as FrameNo));
        } else {
            walk(arena, e, level - 1, idx, start, out);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
