//! Layer 3, index: one 64-way radix tree per file, read without locks.
//!
//! Entries of a leaf are `frame number + 1` (0 is empty); entries of an
//! interior node are child node ids (0 is empty). The root word packs the
//! root node id and the height, so a reader loads both in one atomic load.
//! Height grows with the largest index and never shrinks; empty nodes are
//! freed as soon as their last entry goes.
//!
//! # Reclamation
//!
//! Nodes are type-stable: see `arena.rs`.
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
//! Each node has a `dirty` bitmap of children that may hold dirty pages;
//! the protocol (D1-D2 against S1-S2) is in `dirty.rs`.

mod arena;
mod dirty;
mod pins;
pub use arena::NodeArena;
pub(crate) use pins::SlotRuns;
#[cfg(not(loom))]
pub(crate) use pins::PIN_WORDS;

use crate::frame::FrameNo;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use crate::sync::{LockClass, Mutex, MutexGuard};
use std::io;

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
    /// The next id on the arena's free list while the node is free
    /// (`arena.rs`, protocol 5.12); meaningless while it is linked.
    next_free: AtomicU32,
    /// (T) the owning tree's id while the node is linked; 0 once it is
    /// retired (see `pins.rs`: how a run knows its pinned leaf is real).
    owner: AtomicU64,
    /// (T) where the node sits: the first index it covers, plus its level
    /// (a leaf's low [`SHIFT`] bits are 0). Fixed while linked.
    pos: AtomicU64,
    /// (A) run pins, 4 bits per slot (slot `s` is nibble `s % 16` of word
    /// `s / 16`: a 2-bit count, a recount's `MARK` and `STALE`), see
    /// `pins.rs`.
    pins: [AtomicU64; pins::PIN_WORDS],
    /// (A) slots whose writer waits for their run pins to go.
    pin_waiters: AtomicU64,
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

    /// Whether the index holds no node (every page removed, every node
    /// freed). A hint without the tree lock. Context: any.
    #[inline]
    pub fn is_empty(&self) -> bool {
        // Acquire: pairs with the Release stores that link nodes.
        self.root.load(Ordering::Acquire) == 0
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
}

impl Node {
    /// An empty node, not linked anywhere.
    #[cfg(any(loom, test))]
    pub fn empty() -> Node {
        Node {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            dirty: AtomicU64::new(0),
            count: AtomicU32::new(0),
            next_free: AtomicU32::new(0),
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
