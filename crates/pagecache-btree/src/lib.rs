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
//!                                               restart
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
//! never waits for another latch holder (it fails instead), so writers
//! cannot deadlock; restarts are bounded by the writers' progress.
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
use pagecache::{File, Optimistic, PageMut};
use std::io::{self, ErrorKind};
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU32, AtomicU64, Ordering};

mod node;
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

/// Frame hints by page (`File::optimistic_hinted`): the frame each node
/// was cached in when last visited, so that a descent finds a cached child
/// without the cache's index walk. Two levels, chunks allocated on first
/// use; a hint is only a guess, checked by the cache, so races between
/// threads updating one are harmless.
struct Hints {
    top: Box<[AtomicPtr<AtomicU32>]>,
}

const HINT_BITS: u32 = 16;
const HINT_CHUNK: usize = 1 << HINT_BITS;
const NO_HINT: u32 = u32::MAX;

impl Hints {
    fn new() -> Hints {
        Hints {
            top: (0..HINT_CHUNK)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    #[inline]
    fn get(&self, pid: u64) -> u32 {
        let Some(c) = self.top.get((pid >> HINT_BITS) as usize) else {
            return NO_HINT;
        };
        // Acquire: pairs with the publishing CAS, so the chunk's
        // initialisation is visible.
        let c = c.load(Ordering::Acquire);
        if c.is_null() {
            return NO_HINT;
        }
        // SAFETY: a published chunk has HINT_CHUNK entries and lives until
        // the table drops; the index is masked below HINT_CHUNK.
        unsafe { &*c.add(pid as usize & (HINT_CHUNK - 1)) }.load(Ordering::Relaxed)
    }

    fn set(&self, pid: u64, frame: u32) {
        let Some(slot) = self.top.get((pid >> HINT_BITS) as usize) else {
            return; // past 2^32 pages: no hints
        };
        let mut c = slot.load(Ordering::Acquire);
        if c.is_null() {
            let fresh: Box<[AtomicU32]> =
                (0..HINT_CHUNK).map(|_| AtomicU32::new(NO_HINT)).collect();
            let fresh = Box::into_raw(fresh) as *mut AtomicU32;
            // AcqRel: publishes the chunk (Release), or reads the winner's
            // (Acquire).
            match slot.compare_exchange(
                std::ptr::null_mut(),
                fresh,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => c = fresh,
                Err(winner) => {
                    // SAFETY: ours, never published: rebuilt from the raw
                    // parts `into_raw` gave.
                    drop(unsafe {
                        Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, HINT_CHUNK))
                    });
                    c = winner;
                }
            }
        }
        // SAFETY: as in `get`.
        unsafe { &*c.add(pid as usize & (HINT_CHUNK - 1)) }.store(frame, Ordering::Relaxed);
    }
}

impl Drop for Hints {
    fn drop(&mut self) {
        for c in self.top.iter() {
            let c = c.load(Ordering::Acquire);
            if !c.is_null() {
                // SAFETY: published chunks came from `Box::into_raw` of a
                // HINT_CHUNK-long slice; nobody else holds the table now.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(c, HINT_CHUNK)) });
            }
        }
    }
}

impl std::fmt::Debug for Hints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hints")
    }
}

/// The outcome of one optimistic attempt.
enum Step<T> {
    Done(T),
    Restart,
}

use Step::{Done, Restart};

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

    /// A view of node `pid`, read in if needed; a page past the end of the
    /// file (a corrupt pointer, followed only after validation) is
    /// `InvalidData`.
    fn view(&self, pid: u64) -> io::Result<Optimistic<'_>> {
        match self.file.optimistic_hinted(pid, self.hints.get(pid)) {
            Some(o) => Ok(o),
            None => self.view_unhinted(pid),
        }
    }

    /// A view of the page `p` points to, through the frame the pointer
    /// recorded if the page is still there (no side-table lookup), else as
    /// [`BTree::view`]. Only for a pointer read from a validated view.
    fn view_ptr(&self, p: node::Ptr) -> io::Result<Optimistic<'_>> {
        match self.file.optimistic_hinted(p.pid, p.hint) {
            Some(o) => Ok(o),
            None => self.view(p.pid),
        }
    }

    /// [`BTree::view`] past a missing or stale hint: the cache's index
    /// walk (or a read), and the hint refreshed.
    fn view_unhinted(&self, pid: u64) -> io::Result<Optimistic<'_>> {
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
    fn past_end(&self, pid: u64, e: io::Error) -> io::Error {
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
    fn step<'a>(&'a self, node: &Optimistic<'a>, key: &[u8]) -> io::Result<Step<Optimistic<'a>>> {
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
    fn latch_view<'a>(&self, o: Optimistic<'a>) -> io::Result<Option<PageMut<'a>>> {
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
    fn checked<T>(&self, o: &Optimistic<'_>, r: Result<T, Corrupt>) -> io::Result<Step<T>> {
        if !o.validate() {
            self.restarted();
            return Ok(Restart);
        }
        r.map(Done)
            .map_err(|_| corrupt(&self.file, o.index(), "inconsistent node"))
    }

    // ----- optimistic descent -------------------------------------------------------

    /// L1: views of the metadata page and of the root it names, both
    /// current when taken.
    #[inline]
    fn root_views(&self) -> io::Result<Step<(Optimistic<'_>, Optimistic<'_>)>> {
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
    fn descend(&self, key: &[u8]) -> io::Result<(Optimistic<'_>, Optimistic<'_>)> {
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

    // ----- lookups ------------------------------------------------------------------

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

    /// Calls `f` with each entry whose key is `>= from`, in key order,
    /// until it returns false or the entries run out. Entries inserted or
    /// removed during the scan may or may not be seen; every entry seen was
    /// in the tree when its leaf was read, and no key is seen twice.
    pub fn scan(&self, from: &[u8], mut f: impl FnMut(&[u8], &[u8]) -> bool) -> io::Result<()> {
        if self.coupling == Coupling::Pin {
            return self.scan_pinned(from, f);
        }
        let mut from = from.to_vec();
        let mut inclusive = true;
        // Entries are copied out of a leaf a batch at a time (a scan that
        // wants one entry copies a few, not the leaf), into one buffer
        // reused for the whole scan (no allocation per entry), and handed
        // to `f` once the leaf's view validates.
        let mut batch = Batch::default();
        let mut want = 4;
        'restart: loop {
            let (_, mut leaf) = self.descend(&from)?;
            loop {
                let r = batch.collect(&leaf, &from, inclusive, want);
                let (next, rest) = match self.checked(&leaf, r)? {
                    Done(n) => n,
                    Restart => continue 'restart,
                };
                for (k, v) in batch.entries() {
                    if !f(k, v) {
                        return Ok(());
                    }
                }
                if let Some((k, _)) = batch.entries().last() {
                    from.clear();
                    from.extend_from_slice(k);
                    inclusive = false;
                }
                want = (want * 4).min(1024);
                if rest {
                    // More of this leaf: the same view again (a change
                    // since fails its validation: restart after `from`).
                    continue;
                }
                if next.pid == 0 {
                    return Ok(());
                }
                leaf = self.view_ptr(next)?;
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

    // ----- changes ------------------------------------------------------------------

    /// Inserts `key` with `value`, replacing the value if `key` is present
    /// (returns true then). `InvalidInput` past the size limits.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> io::Result<bool> {
        self.check_key(key, value.len())?;
        if self.coupling == Coupling::Pin {
            return self.insert_pinned(key, value);
        }
        let stripe = self.stripe();
        let mut hinted = true;
        loop {
            // I0: the leaf of this stripe's latest insert in a run, if it
            // is cached where it was (no index walk, no I/O).
            let hint = node::Ptr::decode(if hinted {
                stripe.leaf.load(Ordering::Relaxed)
            } else {
                0
            });
            let at_hint = match hint.pid {
                0 => None,
                pid => self.file.optimistic_hinted(pid, hint.hint),
            };
            let from_hint = at_hint.is_some();
            // I1.
            let leaf = match at_hint {
                Some(o) => o,
                None => self.descend(key)?.1,
            };
            // I2 (None: the key may not belong in I0's leaf).
            let r = (|| {
                if from_hint && !node::is_leaf(&leaf) {
                    return Ok(None);
                }
                let (pos, found) = node::lower_bound(&leaf, key)?;
                let n = node::count(&leaf)?;
                if from_hint
                    && !((pos > 0 || found) && (pos < n || node::next_leaf(&leaf).pid == 0))
                {
                    return Ok(None);
                }
                // A run in key order: a new key at the leaf's end or right
                // after its latest insert.
                let run = !found && (pos == n || node::after_last_insert(&leaf) == Some(pos));
                let old = if found {
                    let (_, klen, vlen) = node::slot(&leaf, pos)?;
                    Some(klen + vlen)
                } else {
                    None
                };
                let fits = node::fits(&leaf, key.len(), value.len(), old)?;
                Ok(Some((pos, found, run, fits)))
            })();
            let (pos, found, run, fits) = match self.checked(&leaf, r)? {
                Done(Some(x)) => x,
                Done(None) => {
                    hinted = false;
                    continue;
                }
                Restart => continue,
            };
            if !fits {
                self.split_for(key, key.len() + value.len())?;
                hinted = false;
                continue;
            }
            // I3.
            let pid = leaf.index();
            let Some(mut m) = self.latch_view(leaf)? else {
                continue;
            };
            // I4.
            let r = if found {
                node::replace_at(&mut m, pos, value)
            } else {
                node::insert_at(&mut m, pos, key, value)
            };
            r.map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?;
            if !found {
                self.count(1);
            }
            // I0's leaf from now on: this one if the insert continued a
            // run, else none (random inserts would only pay for a view and
            // a search that fail). Written only when it changes.
            let now = if run {
                node::Ptr::encode(pid, m.frame_hint())
            } else {
                0
            };
            if node::Ptr::decode(stripe.leaf.load(Ordering::Relaxed)).pid
                != node::Ptr::decode(now).pid
            {
                stripe.leaf.store(now, Ordering::Relaxed);
            }
            return Ok(found);
        }
    }

    /// Calls `f` on the value of `key` in place, under the leaf's latch
    /// (one descent, no copy; the value keeps its length), and returns
    /// true, or returns false if `key` is absent. The storage engine's
    /// update of a fixed-size record (vmcache's `updateInPlace`). `f` runs
    /// with the leaf latched: it must not call into this tree.
    pub fn update(&self, key: &[u8], f: impl FnOnce(&mut [u8])) -> io::Result<bool> {
        if self.coupling == Coupling::Pin {
            return self.update_pinned(key, f);
        }
        loop {
            let (_, leaf) = self.descend(key)?;
            let (pos, found) = match self.checked(&leaf, node::lower_bound(&leaf, key))? {
                Done(x) => x,
                Restart => continue,
            };
            if !found {
                return Ok(false);
            }
            let pid = leaf.index();
            // Latched, the view validated: `pos` is still the key's slot.
            let Some(mut m) = self.latch_view(leaf)? else {
                continue;
            };
            let (off, klen, vlen) = node::slot(&m[..], pos)
                .map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?;
            f(&mut m[off + klen..off + klen + vlen]);
            return Ok(true);
        }
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, key: &[u8]) -> io::Result<bool> {
        if self.coupling == Coupling::Pin {
            return self.remove_pinned(key);
        }
        loop {
            let (_, leaf) = self.descend(key)?;
            let (pos, found) = match self.checked(&leaf, node::lower_bound(&leaf, key))? {
                Done(x) => x,
                Restart => continue,
            };
            if !found {
                return Ok(false);
            }
            let pid = leaf.index();
            let Some(mut m) = self.latch_view(leaf)? else {
                continue;
            };
            node::remove_at(&mut m, pos)
                .map_err(|_| corrupt(&self.file, pid, "inconsistent node"))?;
            self.count(-1);
            return Ok(true);
        }
    }

    /// S1-S4: splits the first node on the way to `key` that is full (a
    /// leaf that cannot take an entry of `need` bytes, an inner node that
    /// cannot take any separator). Returns when one split was made, or when
    /// none was needed any more (another thread split first).
    fn split_for(&self, key: &[u8], need: usize) -> io::Result<()> {
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
                    let Some(mut p) = self.latch_view(parent)? else {
                        continue 'restart;
                    };
                    let Some(mut n) = self.latch_view(node)? else {
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
    fn new_page(&self) -> io::Result<(u64, PageMut<'_>)> {
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
    fn split_root(
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
    fn split_child(
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

    // ----- pin coupling (the "before" design) -----------------------------------------

    fn get_pinned(&self, key: &[u8], out: &mut Vec<u8>) -> io::Result<bool> {
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
    fn pin_leaf(&self, key: &[u8]) -> io::Result<pagecache::PageRef<'_>> {
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

    fn pin(&self, pid: u64) -> io::Result<pagecache::PageRef<'_>> {
        self.file.page(pid).map_err(|e| self.past_end(pid, e))
    }

    fn insert_pinned(&self, key: &[u8], value: &[u8]) -> io::Result<bool> {
        loop {
            match self.change_pinned(key, Some(value))? {
                Some(replaced) => return Ok(replaced),
                None => self.split_pinned(key, key.len() + value.len())?,
            }
        }
    }

    /// [`BTree::update`] by pin coupling: pins down to the leaf's parent
    /// (which keeps the leaf from splitting), latches the leaf.
    fn update_pinned(&self, key: &[u8], f: impl FnOnce(&mut [u8])) -> io::Result<bool> {
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
    fn latch_leaf_pinned(
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

    fn remove_pinned(&self, key: &[u8]) -> io::Result<bool> {
        Ok(self.change_pinned(key, None)?.unwrap_or(false))
    }

    /// Pin-couples down to the leaf's parent, latches the leaf, and inserts
    /// (`Some(value)`) or removes (`None`). `None` if the entry does not
    /// fit. The parent's pin keeps the leaf from splitting meanwhile
    /// (a split latches the parent).
    fn change_pinned(&self, key: &[u8], value: Option<&[u8]>) -> io::Result<Option<bool>> {
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
    fn split_pinned(&self, key: &[u8], need: usize) -> io::Result<()> {
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

    fn scan_pinned(&self, from: &[u8], mut f: impl FnMut(&[u8], &[u8]) -> bool) -> io::Result<()> {
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

/// Entries copied out of a leaf by a scan: keys and values in one buffer.
#[derive(Default)]
struct Batch {
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
