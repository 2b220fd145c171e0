//! The shared segment: one file in a shared-memory directory (`/dev/shm`
//! by default) that holds a cache shared by processes, mapped by each of
//! them at its own address.
//!
//! ```text
//! offset 0                 header (Header: magic, layout version, the
//!                          creator's configuration, where each table
//!                          starts, the attached processes, their counters)
//! TableId::Waits           the wait table of protocol 5.10, registered
//!                          over the whole segment in every process
//! TableId::Descs           the frame descriptors (64 bytes each)
//! TableId::Nodes           the index node arena (`index/arena.rs`: its
//!                          head in node 0), 2 MiB-aligned
//! TableId::Pool            the free-frame pool (`frame/stacks.rs`: per-CPU
//!                          stacks over a global one, room for MAX_SHARDS)
//! TableId::Files           the files by (device, inode) (`cache/
//!                          file_table.rs`)
//! TableId::Words           the cache-wide counters (`cache/words.rs`)
//! TableId::Deferred        the deferred-free queue (`cache/deferred.rs`)
//! TableId::Pins            who holds the pins: a row per process, a table
//!                          per thread (`frame/ledger.rs`, 5.15)
//! TableId::Frames          the frames, 2 MiB-aligned, then ARENA_SLACK
//! ```
//!
//! Every structure inside refers to others by offset or number (frame
//! numbers, node ids, file ids), never by address, so the processes need
//! not agree on where the segment is mapped (`docs/design.md`, "A cache
//! shared by processes").
//!
//! # Creation and attachment (protocol 5.11)
//!
//! * C1. The creator makes a temporary file beside the name (`O_EXCL`, mode
//!   0600, or 0660 and the configured group), sizes it, maps it and writes
//!   the header and every table's initial state.
//! * C2. It publishes the file under the name with `link`, which fails if
//!   the name exists: of two racing creators one wins; the other removes
//!   its temporary file and attaches to the winner's segment (A1). The
//!   temporary name is unlinked either way.
//! * A1. An attacher opens the name (`O_RDWR`: the file's mode decides who
//!   may), checks the size, the magic, the layout version, the header's
//!   size and every table's bounds against the file, and the creator's
//!   configuration against its own (a mismatch is an error naming both),
//!   then maps the whole file.
//! * A2. Both take a slot of the process table (pid and start time, so a
//!   reused pid is not taken for the dead process; the slot's generation,
//!   5.14) and register the wait table over the mapping (5.10), claim a
//!   row of the pins area and register it for their threads' counts
//!   (5.15), and start the watcher (`death.rs`). Dropping the segment
//!   gives all back.
//!
//! A segment is never seen half-made: the name appears only once C1 is
//! complete (C2), so an attacher needs no wait and no "initialising" state.

use crate::cache::Words;
use crate::frame::alloc::PerCpuPool;
use crate::frame::state::FrameDesc;
use crate::stats::NCOUNTERS;
use crate::sync::futex::{register_region, unregister_region, Member, WaitTable};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

mod death;
mod layout;
mod stats;
mod tools;

use layout::policy_name;
pub use layout::{layout, Extent, Geometry, TableId, MAX_TABLES, TABLES};

pub(crate) use death::kill_self;
pub use death::{slot_of_tag, DeathHook, Recovered, WATCH_EVERY};
pub use stats::StatsHook;

const _: () = assert!(MAX_PROCS == crate::cache::file_table::MAX_OPENERS);

/// The first bytes of every segment.
pub const MAGIC: [u8; 8] = *b"PGCACHE\0";
/// The layout this build writes and reads; any change of the header or of
/// a table's format bumps it.
pub const LAYOUT_VERSION: u32 = 14;
/// Processes attached at most at once.
pub const MAX_PROCS: usize = 64;
const _: () = assert!(MAX_PROCS <= crate::sync::doorbell::MAILBOXES);
/// The segments' directory unless configured.
pub const DEFAULT_DIR: &str = "/dev/shm";
/// Prefix of a segment's file name (`pagecache.NAME`).
pub const PREFIX: &str = "pagecache.";

/// A file open in a shared cache ([`Segment::files`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedFile {
    /// Its device.
    pub device: u64,
    /// Its inode.
    pub inode: u64,
    /// Its id in the cache (the owner its frames name).
    pub id: u64,
    /// Opens by all processes (one per process that has it open).
    pub opens: u32,
    /// Its length in bytes.
    pub len: u64,
}

/// One attached process.
#[derive(Debug)]
#[repr(C)]
struct ProcSlot {
    /// Its pid, 0 for a free slot, or [`death::RECOVERING`] and the pid of
    /// the process recovering the slot's dead one (5.14).
    pid: AtomicU32,
    /// Claims of the slot so far (1 to 2^15 - 1, wrapping past 0): with the
    /// slot's index, the tag its process writes into the locks it holds
    /// (`death::tag`), which tells a later claimant's holds from its.
    gen: AtomicU32,
    /// Its start time (`/proc/PID/stat` field 22), to tell it from a later
    /// process with the same pid.
    start: AtomicU64,
}

/// The segment's first bytes.
#[derive(Debug)]
#[repr(C)]
pub struct Header {
    magic: [u8; 8],
    version: u32,
    header_len: u32,
    total_len: u64,
    creator: u32,
    _pad: u32,
    geometry: Geometry,
    tables: [Extent; MAX_TABLES],
    procs: [ProcSlot; MAX_PROCS],
    /// Each attached process's counters as it last published them (its
    /// watcher, every `WATCH_EVERY`), by `stats::Counter` number.
    stats: [[AtomicU64; NCOUNTERS]; MAX_PROCS],
    /// The counters of processes gone (detached, or dead and recovered),
    /// as they last published them.
    retired: [AtomicU64; NCOUNTERS],
}

// The header is read by other processes, maybe of other builds: its
// layout changes only with LAYOUT_VERSION (and the tests' byte offsets).
const _: () = assert!(
    std::mem::offset_of!(Header, version) == 8
        && std::mem::offset_of!(Header, total_len) == 16
        && std::mem::offset_of!(Header, geometry) == 32
        && std::mem::offset_of!(Header, tables) == 56
        && std::mem::offset_of!(Header, procs) == 248
);

/// A mapped segment, attached (a process-table slot held, its wait table
/// registered) until dropped.
#[derive(Debug)]
pub struct Segment {
    base: NonNull<u8>,
    len: usize,
    path: PathBuf,
    /// Our process-table slot (`None`: inspected, not attached).
    slot: Option<usize>,
    created: bool,
    /// The thread that looks for dead processes (attached only, 5.14).
    watcher: Option<death::Watcher>,
    /// What the watcher calls for each dead process it recovers.
    hooks: death::Hooks,
    /// Whether this process's pins are counted in the segment (registered
    /// in `count_pins`, 5.15).
    counting_pins: bool,
}

// SAFETY: the mapping is plain shared memory; what is inside is reached
// through atomics and the protocols of each table.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

/// A segment name's file: `DIR/pagecache.NAME`. Names are 1-200 bytes of
/// letters, digits, `-`, `_` and `.`, not starting with `.`.
pub fn path_of(dir: &Path, name: &str) -> io::Result<PathBuf> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !ok {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "shared cache name {name:?}: use 1-200 letters, digits, '-', '_' or '.', not starting with '.'"
            ),
        ));
    }
    Ok(dir.join(format!("{PREFIX}{name}")))
}

fn cpath(p: &Path) -> io::Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: a NUL byte in the path", p.display()),
        )
    })
}

fn ctx(e: io::Error, what: String) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Process `pid`'s state letter and start time (`/proc/PID/stat` fields 3
/// and 22), if it exists.
fn stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command may hold spaces and parentheses: fields follow the last ')'.
    let mut f = s.rsplit_once(')')?.1.split_whitespace();
    let state = f.next()?.chars().next()?;
    Some((state, f.nth(18)?.parse().ok()?))
}

/// This process's start time (0 if unreadable).
fn start_time(pid: u32) -> u64 {
    stat(pid).map_or(0, |s| s.1)
}

/// Whether the process `pid` that started at `start` still runs. A zombie
/// does not once every thread of it has ended (it holds nothing and runs
/// nothing); its main thread alone may be a zombie while others are still
/// ending, and one of them may still be inside a read into a frame.
fn alive(pid: u32, start: u64) -> bool {
    pid != 0 && stat(pid).is_some_and(|(state, t)| t == start && group_runs(pid, state))
}

/// Whether process `pid`, in state `state` (`/proc/PID/stat`), still runs:
/// not dead, and not a zombie whose other threads have all ended (its
/// `Threads:` count in `/proc/PID/status` is then 1, the zombie itself).
fn group_runs(pid: u32, state: char) -> bool {
    match state {
        'X' => false,
        'Z' => std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Threads:"))
                    .and_then(|n| n.trim().parse::<u32>().ok())
            })
            .is_some_and(|n| n > 1),
        _ => true,
    }
}

impl Segment {
    /// Creates the segment `name` in `dir` with geometry `g` if it does not
    /// exist, and attaches to it otherwise (5.11). `group`: a group whose
    /// members may attach too (mode 0660), else only this user (0600).
    pub fn open(dir: &Path, name: &str, g: Geometry, group: Option<u32>) -> io::Result<Segment> {
        let path = path_of(dir, name)?;
        for _ in 0..8 {
            match Self::attach(&path, Some(g)) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                r => return r,
            }
            match Self::create(&path, g, group) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                r => return r,
            }
        }
        Err(io::Error::other(format!(
            "{}: created and removed by others while we tried to attach",
            path.display()
        )))
    }

    /// Attaches to the existing segment at `path` (A1-A2); `want`: the
    /// geometry this process asks for (`None`: whatever it is).
    pub fn attach(path: &Path, want: Option<Geometry>) -> io::Result<Segment> {
        Self::inspect(path, want)?.enter()
    }

    /// A1 alone: maps and checks the segment at `path` without attaching
    /// (no process-table slot, no wait table registered): for tools that
    /// only look.
    pub fn inspect(path: &Path, want: Option<Geometry>) -> io::Result<Segment> {
        let c = cpath(path)?;
        // SAFETY: a NUL-terminated path; the result is checked.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            let what = if e.kind() == io::ErrorKind::PermissionDenied {
                format!(
                    "opening shared cache {} (its mode or owner does not let this user attach)",
                    path.display()
                )
            } else {
                format!("opening shared cache {}", path.display())
            };
            return Err(ctx(e, what));
        }
        // SAFETY: a descriptor we just opened and now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = std::fs::File::from(fd.try_clone()?).metadata()?.len();
        let corrupt = |why: String| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a usable shared cache: {why}", path.display()),
            )
        };
        let hlen = std::mem::size_of::<Header>() as u64;
        if size < hlen {
            return Err(corrupt(format!(
                "{size} bytes, shorter than a header ({hlen})"
            )));
        }
        let (base, len) = map(&fd, size, path)?;
        let seg = Segment {
            base,
            len,
            path: path.to_path_buf(),
            slot: None,
            created: false,
            watcher: None,
            hooks: Default::default(),
            counting_pins: false,
        };
        let h = seg.header();
        if h.magic != MAGIC {
            return Err(corrupt("no pagecache header (wrong magic)".into()));
        }
        if h.version != LAYOUT_VERSION {
            return Err(corrupt(format!(
                "layout version {}, this library reads version {LAYOUT_VERSION}",
                h.version
            )));
        }
        if h.header_len as u64 != hlen || h.total_len != size {
            return Err(corrupt(format!(
                "header says {} header bytes and {} in all, the file has {size} (this library: {hlen} header bytes)",
                h.header_len, h.total_len
            )));
        }
        let g = h.geometry;
        let (tables, total) = layout(g).map_err(|e| corrupt(e.to_string()))?;
        if total != size || tables != h.tables {
            return Err(corrupt(format!(
                "its tables ({:?}) are not where its geometry puts them ({tables:?})",
                h.tables
            )));
        }
        if let Some(w) = want {
            if w != g {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "shared cache {} was created with {} frames of {} bytes ({}); this process asked for {} frames of {} bytes ({})",
                        path.display(),
                        g.frames,
                        g.page_size,
                        policy_name(g.policy),
                        w.frames,
                        w.page_size,
                        policy_name(w.policy),
                    ),
                ));
            }
        }
        Ok(seg)
    }

    /// C1-C2.
    fn create(path: &Path, g: Geometry, group: Option<u32>) -> io::Result<Segment> {
        let (tables, total) = layout(g)?;
        // Unique among this process's threads too.
        static NTH: AtomicU64 = AtomicU64::new(0);
        let tmp = path.with_file_name(format!(
            ".{}.{}.{}.tmp",
            path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id(),
            NTH.fetch_add(1, Ordering::Relaxed)
        ));
        let ct = cpath(&tmp)?;
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        // SAFETY: a NUL-terminated path; the result is checked.
        let fd = unsafe {
            libc::open(
                ct.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(ctx(e, format!("creating shared cache {}", tmp.display())));
        }
        // SAFETY: a descriptor we just opened and now own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let unlink_tmp = || {
            // SAFETY: a NUL-terminated path.
            unsafe { libc::unlink(ct.as_ptr()) };
        };
        let r = (|| {
            // The umask may have taken bits away; a group needs its bits.
            // SAFETY: plain syscalls on our descriptor.
            unsafe {
                if let Some(gid) = group {
                    if libc::fchown(fd.as_raw_fd(), u32::MAX, gid) != 0 {
                        let e = io::Error::last_os_error();
                        return Err(ctx(e, format!("giving {} to group {gid}", tmp.display())));
                    }
                }
                if libc::fchmod(fd.as_raw_fd(), mode) != 0 {
                    let e = io::Error::last_os_error();
                    return Err(ctx(
                        e,
                        format!("setting mode {mode:o} on {}", tmp.display()),
                    ));
                }
                if libc::ftruncate(fd.as_raw_fd(), total as libc::off_t) != 0 {
                    let e = io::Error::last_os_error();
                    return Err(ctx(e, format!("sizing {} to {total} bytes", tmp.display())));
                }
            }
            let (base, len) = map(&fd, total, &tmp)?;
            let seg = Segment {
                base,
                len,
                path: path.to_path_buf(),
                slot: None,
                created: true,
                watcher: None,
                hooks: Default::default(),
                counting_pins: false,
            };
            // C1: the header and the tables' first state. The file is
            // zeroed (fresh), which is an empty wait table and an empty
            // process table already.
            // SAFETY: the header's place, inside the fresh mapping that
            // no one else sees yet.
            unsafe {
                let h = seg.base.as_ptr().cast::<Header>();
                std::ptr::addr_of_mut!((*h).magic).write(MAGIC);
                std::ptr::addr_of_mut!((*h).version).write(LAYOUT_VERSION);
                std::ptr::addr_of_mut!((*h).header_len).write(std::mem::size_of::<Header>() as u32);
                std::ptr::addr_of_mut!((*h).total_len).write(total);
                std::ptr::addr_of_mut!((*h).creator).write(std::process::id());
                std::ptr::addr_of_mut!((*h).geometry).write(g);
                std::ptr::addr_of_mut!((*h).tables).write(tables);
            }
            let d = seg.table(TableId::Descs).cast::<FrameDesc>();
            for i in 0..g.frames as usize {
                // SAFETY: in bounds of the descriptors' extent (4 KiB
                // aligned, so each is 64-byte aligned); no one reads it yet.
                unsafe { d.as_ptr().add(i).write(FrameDesc::new()) };
            }
            // SAFETY: the pool's extent, sized by `placed_bytes` and aligned
            // by `layout` to `placed_align`; no one reads it yet.
            unsafe { PerCpuPool::place(seg.table(TableId::Pool), g.frames as usize) };
            // SAFETY: the words' extent, sized and aligned for them by
            // `layout`; no one reads it yet.
            unsafe {
                seg.table(TableId::Words)
                    .cast::<Words>()
                    .as_ptr()
                    .write(Words::new())
            };
            Ok(seg)
        })();
        let seg = match r {
            Ok(seg) => seg,
            Err(e) => {
                unlink_tmp();
                return Err(e);
            }
        };
        // C2.
        let cp = cpath(path)?;
        // SAFETY: NUL-terminated paths.
        let linked = unsafe { libc::link(ct.as_ptr(), cp.as_ptr()) };
        let e = io::Error::last_os_error();
        unlink_tmp();
        if linked != 0 {
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                e
            } else {
                ctx(e, format!("publishing shared cache {}", path.display()))
            });
        }
        seg.enter()
    }

    /// A2: a process-table slot (a free one; if none, one whose process
    /// died, recovered first: 5.14), the wait table's registration with
    /// the slot's tag for the locks this process holds, and the thread
    /// that looks for dead processes.
    fn enter(mut self) -> io::Result<Segment> {
        let me = std::process::id();
        let start = start_time(me);
        let slot = loop {
            let procs = &self.header().procs;
            let free = procs.iter().position(|p| {
                // Relaxed: a hint; the CAS claims.
                p.pid.load(Ordering::Relaxed) == 0
                    // Acquire: the previous owner's last uses (its Drop's
                    // Release store, or its recovery's).
                    && p.pid
                        .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
            });
            if let Some(s) = free {
                break s;
            }
            if self.recover_dead() == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!(
                        "shared cache {}: {MAX_PROCS} live processes attached already",
                        self.path.display()
                    ),
                ));
            }
        };
        let p = &self.header().procs[slot];
        // Release (both): pairs with `processes`' and `death::gone`'s
        // Acquire loads; the start time is visible to whoever sees the new
        // generation.
        p.start.store(start, Ordering::Release);
        let gen = death::next_gen(p.gen.load(Ordering::Relaxed));
        p.gen.store(gen, Ordering::Release);
        // A fresh slot's counters start at 0 (its last owner's were moved
        // to `retired` when it left).
        for c in &self.header().stats[slot] {
            // Relaxed: statistics.
            c.store(0, Ordering::Relaxed);
        }
        self.slot = Some(slot);
        let w = self.table(TableId::Waits);
        // SAFETY: the wait table lies inside the mapping, which stays until
        // Drop, where it is unregistered first; the region is this mapping;
        // our process slot is our mailbox (5.13), its tag our locks' (5.14).
        let ok = unsafe {
            register_region(
                self.base.as_ptr() as usize,
                self.len,
                w.as_ptr() as *const WaitTable,
                Some(Member {
                    mailbox: slot,
                    tag: death::tag(slot, gen),
                    gone: death::gone,
                }),
            )
        };
        if !ok {
            return Err(io::Error::other(format!(
                "shared cache {}: too many shared caches attached in this process (or no thread for its doorbell)",
                self.path.display()
            )));
        }
        self.count_pins(death::tag(slot, gen))?;
        self.watcher = Some(death::Watcher::start(&self)?);
        Ok(self)
    }

    /// 5.15 P1-P2: a row of the pins area for this process (one held by a
    /// dead process not yet recovered is waited for, at most two seconds),
    /// and the area registered for this process's threads' counts.
    fn count_pins(&mut self, tag: u32) -> io::Result<()> {
        let area = self.pins();
        let mut waited = std::time::Duration::ZERO;
        let row = loop {
            if let Some(r) = area.claim_row(tag) {
                break r;
            }
            if waited >= std::time::Duration::from_secs(2) {
                return Err(io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    format!(
                        "shared cache {}: every row of its pins is held (dead processes not yet recovered)",
                        self.path.display()
                    ),
                ));
            }
            self.recover_dead();
            std::thread::sleep(std::time::Duration::from_millis(20));
            waited += std::time::Duration::from_millis(20);
        };
        let descs = self.table(TableId::Descs).as_ptr() as usize;
        // SAFETY: the area and the descriptors lie in the mapping, which
        // stays until Drop, where the area is unregistered first (the
        // cache over it is gone by then: no pin held or taken).
        if !unsafe { crate::frame::ledger::register(area, descs, tag, row) } {
            // The row back (no table was claimed yet).
            let _ = area.take_process(tag);
            area.free_process(tag);
            return Err(io::Error::other(format!(
                "shared cache {}: too many shared caches attached in this process",
                self.path.display()
            )));
        }
        self.counting_pins = true;
        Ok(())
    }

    /// Where the segment is mapped in this process.
    pub(crate) fn base(&self) -> usize {
        self.base.as_ptr() as usize
    }

    /// The pins area (5.15).
    pub(crate) fn pins(&self) -> crate::frame::ledger::Area {
        crate::frame::ledger::Area {
            base: self.table(TableId::Pins).as_ptr() as usize,
            frames: self.geometry().frames as usize,
        }
    }

    /// This process's slot in the process table (`None`: inspected, not
    /// attached).
    pub fn slot(&self) -> Option<usize> {
        self.slot
    }

    /// The header.
    pub fn header(&self) -> &Header {
        // SAFETY: the mapping is at least a header long (checked or made
        // so), page-aligned; the header lives as long as the mapping.
        unsafe { &*self.base.as_ptr().cast::<Header>() }
    }

    /// The start of table `t` in this process.
    pub fn table(&self, t: TableId) -> NonNull<u8> {
        let e = self.header().tables[t as usize];
        debug_assert!(e.offset + e.len <= self.len as u64);
        // SAFETY: the extent was checked against the mapping's length.
        unsafe { NonNull::new_unchecked(self.base.as_ptr().add(e.offset as usize)) }
    }

    /// The geometry the creator chose.
    pub fn geometry(&self) -> Geometry {
        self.header().geometry
    }

    /// The pid of the process that created the segment.
    pub fn creator(&self) -> u32 {
        self.header().creator
    }

    /// Whether this process created the segment (rather than attached).
    pub fn created(&self) -> bool {
        self.created
    }

    /// The segment's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes mapped (the whole file).
    pub fn mapped_bytes(&self) -> usize {
        self.len
    }

    /// Removes the segment `name` from `dir` if no live process is attached
    /// (those attached keep their mapping; new ones create a new segment).
    pub fn remove(dir: &Path, name: &str) -> io::Result<()> {
        let path = path_of(dir, name)?;
        let seg = Self::inspect(&path, None)?;
        let others: Vec<u32> = seg
            .processes()
            .into_iter()
            .filter(|&(_, live)| live)
            .map(|(pid, _)| pid)
            .collect();
        if !others.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "shared cache {} is in use by processes {others:?}",
                    path.display()
                ),
            ));
        }
        std::fs::remove_file(&path).map_err(|e| ctx(e, format!("removing {}", path.display())))
    }
}

/// Maps `len` bytes of `fd` shared, read-write, with huge pages advised.
fn map(fd: &OwnedFd, len: u64, path: &Path) -> io::Result<(NonNull<u8>, usize)> {
    let len = usize::try_from(len).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: too large", path.display()),
        )
    })?;
    // SAFETY: a shared mapping of our descriptor with no address hint; the
    // result is checked against MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        return Err(ctx(
            e,
            format!("mapping shared cache {} ({len} bytes)", path.display()),
        ));
    }
    // SAFETY: advice on the mapping just made (harmless if refused).
    unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
    // SAFETY: mmap succeeded: non-null.
    Ok((unsafe { NonNull::new_unchecked(p.cast()) }, len))
}

impl Drop for Segment {
    fn drop(&mut self) {
        // The watcher first: it uses the mapping.
        drop(self.watcher.take());
        if self.counting_pins {
            // SAFETY: registered in `count_pins`; the cache over the
            // segment is gone (no pin held or taken).
            unsafe {
                crate::frame::ledger::unregister(self.table(TableId::Descs).as_ptr() as usize)
            };
        }
        // Dead processes' slots this segment's watcher claimed and whose
        // recovery did not finish (the cache went first): handed back, to
        // be recovered by another (a pid of 0 under RECOVERING runs no
        // more, D2).
        // Relaxed: the watcher is joined and the cache gone (no recovery
        // of ours runs any more).
        let claims = self.hooks.1.swap(0, Ordering::Relaxed);
        for slot in (0..MAX_PROCS).filter(|s| claims >> s & 1 != 0) {
            death::hand_back(self.header(), slot);
        }
        if let Some(slot) = self.slot {
            // Opens a tool left (a cache closes its files before its
            // segment drops): given back, as for a dead process (5.14 D5).
            // Before the region is unregistered: the file table's lock is
            // then still taken with this process's tag and waited for on
            // the shared futex (unregistered, a wait would sleep on a
            // private futex that another process's unlock never wakes).
            self.file_table().forget_process(slot);
            // Its counters, published one last time, stay in the totals.
            // SAFETY: our mapping, still mapped.
            unsafe { stats::publish(self.base.as_ptr() as usize, slot, &self.hooks) };
            stats::retire(self.header(), slot);
        }
        // SAFETY: registered in `enter`, or never (inspected, or `enter`
        // failed: then a no-op); the segment's users (tables borrowed from
        // it) are gone before it drops, and no lock of the region is held.
        unsafe { unregister_region(self.base.as_ptr() as usize) };
        if let Some(slot) = self.slot {
            // The slot last: its mailbox is no longer served (unregistered
            // above) when another process may claim it.
            let p = &self.header().procs[slot];
            // Relaxed: ordered before the pid's Release store (a claimant's
            // start time is 0 until it stores its own: 5.14 D2).
            p.start.store(0, Ordering::Relaxed);
            // Release: our last uses of the segment happen-before a
            // reader that sees the slot free.
            p.pid.store(0, Ordering::Release);
        }
        // SAFETY: the mapping made in `attach` or `create`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
