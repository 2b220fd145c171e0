//! What a segment holds where: the creator's geometry, the tables and
//! where each lies for a geometry (`layout`, which attachers check the
//! header against, A1).

use super::Header;
use crate::cache::deferred::DeferredQueue;
use crate::cache::file_table::FileTable;
use crate::cache::Words;
use crate::frame::alloc::PerCpuPool;
use crate::frame::state::FrameDesc;
use crate::frame::ARENA_SLACK;
use crate::index::NodeArena;
use crate::sync::futex::WaitTable;
use std::io;

/// What the creator decides and every attacher must ask for alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Geometry {
    /// Bytes per page (a power of two).
    pub page_size: u64,
    /// Frames.
    pub frames: u64,
    /// The replacement policy, by [`Geometry::policy_code`] (0: none
    /// chosen, as in a segment only tools and tests use).
    pub policy: u64,
}

impl Geometry {
    /// The code of `p` in [`Geometry::policy`] (its place in
    /// `PolicyKind`, plus one).
    pub fn policy_code(p: crate::PolicyKind) -> u64 {
        use crate::PolicyKind::*;
        match p {
            S3Fifo => 1,
            Clock => 2,
            StrictLru => 3,
            SmpLru => 4,
        }
    }
}

/// How an error names a [`Geometry::policy`].
pub(super) fn policy_name(code: u64) -> String {
    match code {
        0 => "no policy".into(),
        1 => "policy S3Fifo".into(),
        2 => "policy Clock".into(),
        3 => "policy StrictLru".into(),
        4 => "policy SmpLru".into(),
        c => format!("unknown policy {c}"),
    }
}

/// The tables of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableId {
    /// The wait table (5.10).
    Waits = 0,
    /// The frame descriptors.
    Descs = 1,
    /// The frames and the slack after them.
    Frames = 2,
    /// The index node arena.
    Nodes = 3,
    /// The free-frame pool.
    Pool = 4,
    /// The files' shared state.
    Files = 5,
    /// The cache-wide counters (`cache/words.rs`).
    Words = 6,
    /// The deferred-free queue (`cache/deferred.rs`).
    Deferred = 7,
    /// Who holds the pins: the processes' rows and their threads' tables
    /// (`frame/ledger.rs`, 5.15).
    Pins = 8,
}

/// Tables in a segment; the header has room for [`MAX_TABLES`] (the rest
/// are zero).
pub const TABLES: usize = 9;
/// Table slots in the header.
pub const MAX_TABLES: usize = 12;

/// Where a table lies in the segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Extent {
    /// Bytes from the segment's start.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// The offsets of every table for `g` (C1; A1 checks the header's against
/// them).
pub fn layout(g: Geometry) -> io::Result<([Extent; MAX_TABLES], u64)> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a shared cache of {} frames of {} bytes does not fit in a segment",
                g.frames, g.page_size
            ),
        )
    };
    if !g.page_size.is_power_of_two()
        || g.frames == 0
        || g.frames > crate::frame::ledger::MAX_FRAMES
    {
        return Err(bad());
    }
    const HUGE: u64 = 2 << 20;
    let mut at = (std::mem::size_of::<Header>() as u64).next_multiple_of(4096);
    let mut put = |len: u64, align: u64| -> io::Result<Extent> {
        let offset = at.checked_next_multiple_of(align).ok_or_else(bad)?;
        at = offset.checked_add(len).ok_or_else(bad)?;
        Ok(Extent { offset, len })
    };
    let waits = put(std::mem::size_of::<WaitTable>() as u64, 4096)?;
    let descs = put(
        g.frames
            .checked_mul(std::mem::size_of::<FrameDesc>() as u64)
            .ok_or_else(bad)?,
        4096,
    )?;
    let max_nodes = NodeArena::max_nodes(g.frames as usize, g.page_size as usize)
        .ok()
        .filter(|&n| n as u64 <= crate::frame::ledger::MAX_NODES)
        .ok_or_else(bad)?;
    let nodes = put(NodeArena::bytes(max_nodes) as u64, HUGE)?;
    let pool = put(
        PerCpuPool::placed_bytes(g.frames as usize) as u64,
        PerCpuPool::placed_align().max(4096) as u64,
    )?;
    let files = put(
        FileTable::bytes() as u64,
        FileTable::align().max(4096) as u64,
    )?;
    let words = put(
        std::mem::size_of::<Words>() as u64,
        std::mem::align_of::<Words>().max(4096) as u64,
    )?;
    let deferred = put(
        DeferredQueue::bytes(g.frames as usize) as u64,
        DeferredQueue::align().max(4096) as u64,
    )?;
    let pins = put(
        crate::frame::ledger::Area::bytes(g.frames as usize) as u64,
        4096,
    )?;
    let frames = put(
        g.frames
            .checked_mul(g.page_size)
            .and_then(|b| b.checked_add(ARENA_SLACK as u64))
            .ok_or_else(bad)?,
        HUGE,
    )?;
    let total = at.next_multiple_of(4096);
    if total > isize::MAX as u64 {
        return Err(bad());
    }
    let mut tables = [Extent::default(); MAX_TABLES];
    tables[..TABLES].copy_from_slice(&[
        waits, descs, frames, nodes, pool, files, words, deferred, pins,
    ]);
    Ok((tables, total))
}
