//! A concurrent B+tree in one file of a [`pagecache`] cache: byte-string
//! keys and values, point lookups, upserts, removals and ordered scans,
//! descending with optimistic lock coupling (as vmcache's and LeanStore's
//! trees do) over the cache's optimistic views ([`File::optimistic`]).
//!
//! ```
//! use pagecache::{Config, OpenOptions, PageCache};
//! use pagecache_btree::BTree;
//! # fn main() -> std::io::Result<()> {
//! # let dir = std::env::temp_dir().join(format!("pagecache-btree-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! let cache = PageCache::new(Config::default())?;
//! let file = cache.open_with(dir.join("tree"), OpenOptions::new().read(true).write(true).create(true))?;
//! let tree = BTree::open(file)?; // an empty file becomes an empty tree
//! tree.insert(b"apple", b"red")?;
//! tree.insert(b"banana", b"yellow")?;
//! assert_eq!(tree.get(b"apple")?.as_deref(), Some(&b"red"[..]));
//! let mut keys = Vec::new();
//! tree.scan(b"a", |k, _| { keys.push(k.to_vec()); true })?;
//! assert_eq!(keys, [b"apple".to_vec(), b"banana".to_vec()]);
//! tree.sync()?; // reopening the file now gives exactly these two entries
//! # drop(tree); std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! ```
//!
//! # Layout
//!
//! Page 0 is the metadata page (magic, format, page size, the root's page,
//! the next page to allocate, the number of entries); every other page is
//! a node (`node.rs`: a slotted page, keys in byte order). Inner nodes map
//! separator keys to children; leaves hold the entries and link to the next
//! leaf, which ordered scans follow. New nodes come from
//! [`File::page_new`]: a zeroed, latched page past the end of the file,
//! with no read and no system call.
//!
//! Limits: a key is at most [`BTree::max_key_len`] bytes and a key plus its
//! value at most [`BTree::max_entry_len`] (996 and 1004 bytes with 4 KiB
//! pages: at least four entries fit a node); page sizes from 4 to 32 KiB.
//! Nodes split when full and are **never merged**: a node may become empty
//! after removals and stays in the tree (lookups and scans pass it by), so
//! the file does not shrink; rebuild the tree to reclaim space.
//!
//! # Protocol (optimistic lock coupling over protocol 5.8)
//!
//! ```text
//!  lookup(key)                              insert(key, value) / remove(key)
//!  L1. view the metadata page; read the     I0. (insert) view the leaf of this
//!      root's page; validate                    thread stripe's latest insert
//!  L2. at an inner node: child = the child      that continued a run, if
//!      for key; view it through a frame         still in its frame; it is
//!      hint (no I/O), or else validate the      the key's leaf if the key is
//!      node first (the number is not torn)      within its keys (first <= key
//!      and view it (may read it in); then       <= last), or >= its first
//!      validate the node (the child was its     key with no next leaf: I2 on
//!      child when its view began)               that view; else I1
//!  L3. at the leaf: find the slot, copy     I1. L1-L3 to the leaf (keep the
//!      the value; validate -> done; any         leaf's view)
//!      failed validation restarts at L1     I2. find the slot (and I0's
//!                                               test); if the entry does not
//!                                               fit: S1-S4, restart at I1
//!                                           I3. upgrade the leaf's view to a
//!                                               latch: fails iff the leaf
//!                                               changed since its view ->
//!                                               restart (latched by another
//!                                               writer: wait for its release
//!                                               first, holding nothing)
//!                                           I4. change the leaf (what I2
//!                                               computed still holds: the
//!                                               page is unchanged); it is
//!                                               the stripe's I0 leaf if
//!                                               the insert continued a run
//!                                               (a new key at the leaf's
//!                                               end or right after its
//!                                               latest insert), else there
//!                                               is none; release
//!
//!  split (S), for the first node on the way down that is full
//!  S1. descend as L1-L2; stop at the first node that cannot take the
//!      entry (a leaf) or any separator (an inner node); its parent can
//!  S2. upgrade the parent's view, then the node's (parents first: never a
//!      latch held while waiting for one above); either fails -> restart
//!      (the parent's refused by another writer's latch: wait for its
//!      release first; the node's, under the parent's latch: no wait)
//!  S3. a new page (page_new) takes the node's upper half; the node keeps
//!      the lower half (a leaf links to the new page, which links to the
//!      old next leaf); the parent gets the separator pointing to the node
//!      and its old pointer to the node now points to the new page. The
//!      root's parent is the metadata page: a root split first puts a new,
//!      empty inner root above the old one
//!  S4. release the latches (versions move: concurrent views of the node
//!      and the parent fail validation and restart)
//! ```
//!
//! Frame hints (L2): a child pointer records the frame its page was in
//! when the pointer was written (S3 knows both halves' frames; see
//! `node::Ptr`), and a side table records where each node was last found.
//! L2 tries the pointer's hint, then the table's, then the cache's index:
//! in memory the child's frame comes from the bytes just read, so its
//! descriptor and its first line load together, with no dependent lookup
//! in between. Hints are only guesses, checked by the cache.
//!
//! Ordering argument: every byte a lookup acts on was read through a view
//! that validated after the read (5.8's guarantee: nothing changed the page
//! meanwhile), and each child number is validated before it is followed
//! anywhere that can read or wait (a hinted view of a torn number finds a
//! frame not holding that page and gives nothing, or a view its parent's
//! validation then rejects), so a lookup acts only on pointers that were
//! current. A child's view begins
//! before its parent's second validation, so the child was the parent's
//! child for the key when the child's view began; if the child splits
//! afterwards, its own validation fails. A writer changes a page only under
//! its latch, taken by upgrading a view that was current when its decision
//! was made (I3, S2): an upgrade succeeds only if the page is unchanged
//! since that view. I0 finds a leaf without a descent: a leaf stays a leaf
//! of the tree for good (nodes are never freed, merged or turned into inner
//! nodes; a root split puts a new root above), and its key range is
//! (lower, upper] where `lower` never changes (a split moves a node's upper
//! half out) and `upper` only shrinks, to the node's last key at each of
//! its splits; every key in it lies in that range, so a key between its
//! first and last keys belongs in it, and so does any key from its first
//! on if it is the last leaf (its upper bound is the tree's, unbounded).
//! I2 makes that test on the view that I3 then upgrades, so it held when
//! the latch was taken. Latches are taken top-down only (S2), and an upgrade
//! never waits for another latch holder while its writer holds a latch (it
//! fails instead; one holding nothing waits for the release, then
//! restarts, `Optimistic::upgrade_or_wait`), so writers cannot deadlock;
//! restarts are bounded by the writers' progress, and a writer preempted
//! while it holds a leaf's latch makes the others sleep, not restart.
//!
//! The "before" design of the lab, [`Coupling::Pin`], descends with pins
//! instead ([`File::page`]: two atomic read-modify-writes of each visited
//! page's state word, the root's above all) and latches with
//! [`File::page_mut`], splitting top-down with latch coupling.
//!
//! # Durability
//!
//! [`BTree::sync`] writes the metadata (entry count, next page) and syncs
//! the file: after it returns, reopening the file gives exactly the tree
//! as it was (with no writer running during the sync). Between syncs the
//! file on disk may hold any mix of older and newer pages (the cache writes
//! pages back as it evicts them and in the background), so a crash between
//! syncs can leave a tree that does not reopen consistently: crash
//! consistency needs a write-ahead log or shadow pages, which this crate
//! does not have.

use crossbeam_utils::CachePadded;
use pagecache::File;
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

mod hints;
mod lookup;
mod node;
mod pinned;
mod scan;
mod split;
mod write;
use hints::Hints;
use node::{Bytes, Corrupt};

const META: u64 = 0;
const MAGIC: u64 = u64::from_le_bytes(*b"PCBTREE1");
const FORMAT: u32 = 1;
const M_MAGIC: usize = 0;
const M_FORMAT: usize = 8;
const M_PAGE_SIZE: usize = 12;
const M_ROOT: usize = 16;
const M_NEXT: usize = 24;
const M_LEN: usize = 32;

/// Stripes of the entry count and of the last-leaf hints (one cache line
/// each: inserts on different threads do not write one shared line).
const STRIPES: usize = 16;

/// One thread stripe's state (threads are spread over the stripes).
#[derive(Debug, Default)]
struct Stripe {
    /// Changes of the entry count since open.
    delta: AtomicI64,
    /// I0: the leaf of this stripe's latest insert if that insert
    /// continued a run in key order, as a stored [`node::Ptr`] (0: none;
    /// page 0 is never a leaf).
    leaf: AtomicU64,
    /// Optimistic operations restarted (a view that failed validation, an
    /// upgrade refused) since open.
    restarts: AtomicU64,
}

/// How a tree's operations hold the pages they visit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Coupling {
    /// Optimistic lock coupling: views with no shared write, validated;
    /// upgrades to latches for changes (the default).
    #[default]
    Optimistic,
    /// Pin coupling: every visited page pinned ([`File::page`]), changes
    /// under [`File::page_mut`] latches (the "before" design).
    Pin,
}

/// A B+tree stored in one file of the cache. `Send + Sync`: share it
/// between threads by reference or in an `Arc`.
#[derive(Debug)]
pub struct BTree {
    file: File,
    ps: usize,
    coupling: Coupling,
    next_page: AtomicU64,
    /// The entry count at open.
    base_len: u64,
    /// The entry count's changes and the last-leaf hints, by stripe.
    stripes: Box<[CachePadded<Stripe>]>,
    /// Where each node was cached when last visited.
    hints: Hints,
}

/// The outcome of one optimistic attempt.
enum Step<T> {
    Done(T),
    Restart,
}

use Step::{Done, Restart};

/// The outcome of one attempt that may not wait for I/O (the
/// asynchronous descents): as [`Step`], or the page that must be read
/// first.
enum Reach<T> {
    Done(T),
    Restart,
    Missing(u64),
}

thread_local! {
    static STRIPE: usize = {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) as usize % STRIPES
    };
}

/// A restart: under loom, a yield (loom requires every retry loop to let
/// the other threads run; the cache's own loops do the same).
#[inline]
fn restart_point() {
    #[cfg(loom)]
    loom::thread::yield_now();
}

fn corrupt(file: &File, page: u64, what: &str) -> io::Error {
    io::Error::new(
        ErrorKind::InvalidData,
        format!("{}: B-tree page {page}: {what}", file.path().display()),
    )
}

impl BTree {
    /// Opens the tree in `file` with optimistic coupling; an empty file
    /// becomes an empty tree (written at the next [`BTree::sync`]).
    /// `InvalidData` if the file holds something else.
    pub fn open(file: File) -> io::Result<BTree> {
        BTree::open_with(file, Coupling::Optimistic)
    }

    /// [`BTree::open`] with the given coupling.
    pub fn open_with(file: File, coupling: Coupling) -> io::Result<BTree> {
        let ps = file.page_size();
        if !(4096..=32768).contains(&ps) {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: B-tree pages must be 4 to 32 KiB (the cache's are {ps} bytes)",
                    file.path().display()
                ),
            ));
        }
        let (next, len) = if file.is_empty() {
            let mut meta = file.page_new(META)?;
            let mut root = file.page_new(1)?;
            node::init(&mut root, true, 0);
            drop(root);
            meta[M_MAGIC..M_MAGIC + 8].copy_from_slice(&MAGIC.to_le_bytes());
            meta[M_FORMAT..M_FORMAT + 4].copy_from_slice(&FORMAT.to_le_bytes());
            meta[M_PAGE_SIZE..M_PAGE_SIZE + 4].copy_from_slice(&(ps as u32).to_le_bytes());
            meta[M_ROOT..M_ROOT + 8].copy_from_slice(&1u64.to_le_bytes());
            meta[M_NEXT..M_NEXT + 8].copy_from_slice(&2u64.to_le_bytes());
            (2, 0)
        } else {
            let meta = file.page(META)?;
            let m: &[u8] = &meta;
            if m.u64(M_MAGIC) != MAGIC || m.u32(M_FORMAT) != FORMAT {
                return Err(corrupt(
                    &file,
                    META,
                    "not a B-tree of this format (bad magic or format)",
                ));
            }
            if m.u32(M_PAGE_SIZE) as usize != ps {
                return Err(corrupt(
                    &file,
                    META,
                    &format!(
                        "written with {}-byte pages, the cache has {ps}",
                        m.u32(M_PAGE_SIZE)
                    ),
                ));
            }
            let pages = file.len().div_ceil(ps as u64);
            let root = m.u64(M_ROOT);
            if root == META || root >= pages {
                return Err(corrupt(
                    &file,
                    META,
                    &format!("root page {root} outside the file"),
                ));
            }
            (m.u64(M_NEXT).max(pages), m.u64(M_LEN))
        };
        Ok(BTree {
            file,
            ps,
            coupling,
            next_page: AtomicU64::new(next),
            base_len: len,
            stripes: (0..STRIPES).map(|_| CachePadded::default()).collect(),
            hints: Hints::new(),
        })
    }

    /// The file the tree lives in.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The coupling its operations use.
    pub fn coupling(&self) -> Coupling {
        self.coupling
    }

    /// The longest key: any key fits as a separator in an inner node.
    pub fn max_key_len(&self) -> usize {
        self.max_entry_len() - 8
    }

    /// The longest key plus value.
    pub fn max_entry_len(&self) -> usize {
        (self.ps - node::HDR) / 4 - node::SLOT
    }

    /// Entries in the tree (exact when no insert or remove is running).
    pub fn len(&self) -> u64 {
        let d: i64 = self
            .stripes
            .iter()
            .map(|c| c.delta.load(Ordering::Relaxed))
            .sum();
        (self.base_len as i64 + d).max(0) as u64
    }

    /// Whether the tree has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The calling thread's stripe.
    #[inline]
    fn stripe(&self) -> &Stripe {
        &self.stripes[STRIPE.with(|s| *s)]
    }

    fn count(&self, n: i64) {
        self.stripe().delta.fetch_add(n, Ordering::Relaxed);
    }

    /// A restart: counted on this thread's stripe (see `restart_point`).
    #[cold]
    fn restarted(&self) {
        self.stripe().restarts.fetch_add(1, Ordering::Relaxed);
        restart_point();
    }

    /// Optimistic operations restarted since the tree was opened: a view
    /// that failed its validation (a writer changed the page, or its frame
    /// was evicted and reused) or an upgrade refused. A descent restarts
    /// from the root. Relaxed sums of per-thread stripes: a snapshot.
    pub fn restarts(&self) -> u64 {
        self.stripes
            .iter()
            .map(|c| c.restarts.load(Ordering::Relaxed))
            .sum()
    }

    fn check_key(&self, key: &[u8], value_len: usize) -> io::Result<()> {
        if key.len() > self.max_key_len() || key.len() + value_len > self.max_entry_len() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "{}: B-tree entry of a {}-byte key and a {value_len}-byte value: at most {} bytes of key and {} of key and value together",
                    self.file.path().display(),
                    key.len(),
                    self.max_key_len(),
                    self.max_entry_len()
                ),
            ));
        }
        Ok(())
    }

    // ----- optimistic descent -------------------------------------------------------

    // ----- lookups ------------------------------------------------------------------

    // ----- changes ------------------------------------------------------------------

    // ----- pin coupling (the "before" design) -----------------------------------------

    // ----- durability ---------------------------------------------------------------

    /// Writes the metadata and syncs the file: after it returns, reopening
    /// the file gives the tree as it is now (see the crate docs: with no
    /// writer running meanwhile).
    pub fn sync(&self) -> io::Result<()> {
        {
            let mut meta = self.file.page_mut(META)?;
            let next = self.next_page.load(Ordering::Relaxed);
            meta[M_NEXT..M_NEXT + 8].copy_from_slice(&next.to_le_bytes());
            meta[M_LEN..M_LEN + 8].copy_from_slice(&self.len().to_le_bytes());
        }
        self.file.sync()
    }

    /// The file, without syncing (to discard what was not synced, say).
    pub fn into_file(self) -> File {
        self.file
    }

    /// [`BTree::sync`], then closes the file, reporting write-back errors.
    pub fn close(self) -> io::Result<()> {
        self.sync()?;
        self.file.close()
    }
}
