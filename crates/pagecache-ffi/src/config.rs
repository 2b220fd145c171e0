//! `pc_config`: the cache's configuration and its translation to `Config`.

use crate::error::{guard, invalid, out};
use pagecache::{Config, IoEngine, StreamReads};
use std::ffi::c_int;
use std::io;

/// `pc_config.io_engine`: io_uring where the kernel allows it, else the
/// thread pool (the environment variable `PAGECACHE_IO_ENGINE` may choose).
pub const PC_IO_AUTO: u32 = 0;

/// `pc_config.io_engine`: io_uring (`pc_cache_new` fails where refused).
pub const PC_IO_URING: u32 = 1;

/// `pc_config.io_engine`: a pool of I/O threads doing `preadv`/`pwritev`.
pub const PC_IO_THREADS: u32 = 2;

/// `pc_config.stream_reads`: sequential streams read with direct I/O, as
/// every other read (the default before ABI 9).
pub const PC_STREAM_DIRECT: u32 = 0;

/// `pc_config.stream_reads`: through the kernel's buffered path and its
/// readahead, without keeping the kernel's copy (dropped behind the
/// stream).
pub const PC_STREAM_BUFFERED: u32 = 1;

/// `pc_config.stream_reads`: each device's first streams read both ways
/// and measured, the faster kept (`pc_cache_stream_choices`); what
/// `pc_config_default` sets since ABI 9.
pub const PC_STREAM_MEASURE: u32 = 2;

/// A cache's settings. Fill it with `pc_config_default`, then change what
/// you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct pc_config {
    /// Memory budget for pages, in bytes (at least 4 pages).
    pub capacity: u64,
    /// Page size: a power of two from 4096 to 2 MiB.
    pub page_size: u32,
    /// Nonzero: read and write with `O_DIRECT` where the filesystem
    /// accepts it (the default), so the kernel keeps no second copy.
    pub direct_io: u32,
    /// One of `PC_IO_AUTO`, `PC_IO_URING`, `PC_IO_THREADS`.
    pub io_engine: u32,
    /// The most threads the thread-pool engine starts.
    pub io_threads: u32,
    /// The largest readahead window in bytes (0: no readahead).
    pub readahead_max: u64,
    /// Percent of the capacity dirty down to which background write-back
    /// writes once the count is past `dirty_limit_percent`.
    pub dirty_background_percent: u32,
    /// Percent of the capacity dirty before writers wait.
    pub dirty_limit_percent: u32,
    /// Nonzero: a writer of a page whose write-back is in flight waits for
    /// that write (stable pages). Zero (the default): it goes ahead and the
    /// page is written again later. Files on btrfs, ZFS or a device asking
    /// for stable writes get stable pages either way. (Added in ABI 2.)
    pub stable_writes: u32,
    /// Nonzero: fault the whole frame arena in at `pc_cache_new` (its
    /// memory is then used from the start), so that no first touch of a
    /// frame during a read or write pays the page fault (with huge pages,
    /// possibly a compaction of memory). Zero (the default): frames are
    /// faulted in on first use. (Added in ABI 4.)
    pub populate: u32,
    /// How sequential streams (readahead windows) are read: one of
    /// `PC_STREAM_DIRECT`, `PC_STREAM_BUFFERED`, `PC_STREAM_MEASURE` (the
    /// default since ABI 9); see `pagecache::StreamReads`. (Added in ABI 7.)
    pub stream_reads: u32,
    /// Milliseconds a page may stay dirty before background write-back
    /// writes it (default 30000; `UINT32_MAX`: never by age). With frames
    /// to spare and the dirty count under the limit, age is the only
    /// reason it writes a page; see `pagecache::Config::dirty_expire`.
    /// (Added in ABI 10.)
    pub dirty_expire_ms: u32,
    /// Nonzero (the default): a file written in order past an eighth of
    /// the cache, while the dirty count is past the background threshold,
    /// is written back as it goes and its pages leave the cache once
    /// written; see `pagecache::Config::drop_behind_writes`. (Added in
    /// ABI 16.)
    pub drop_behind_writes: u32,
}

/// Fills `*config` with the defaults (256 MiB, 4 KiB pages, direct I/O,
/// automatic engine, 2 MiB readahead, dirty thresholds 10% and 30%).
///
/// # Safety
/// Pointer arguments are NULL (`-EINVAL`) or valid as described above;
/// handles come from this library and are not yet freed or closed.
#[no_mangle]
pub unsafe extern "C" fn pc_config_default(config: *mut pc_config) -> c_int {
    guard("pc_config_default", || {
        let d = Config::default();
        let c = out(config, "pc_config_default", "config")?;
        // SAFETY: non-null, and the caller's contract: it points to a
        // writable pc_config.
        unsafe {
            c.write(pc_config {
                capacity: d.capacity as u64,
                page_size: d.page_size as u32,
                direct_io: d.direct_io as u32,
                io_engine: PC_IO_AUTO,
                io_threads: d.io_threads as u32,
                readahead_max: d.readahead_max as u64,
                dirty_background_percent: d.dirty_background_percent,
                dirty_limit_percent: d.dirty_limit_percent,
                stable_writes: d.stable_writes as u32,
                populate: d.populate as u32,
                stream_reads: match d.stream_reads {
                    StreamReads::Direct => PC_STREAM_DIRECT,
                    StreamReads::Buffered => PC_STREAM_BUFFERED,
                    StreamReads::Measure => PC_STREAM_MEASURE,
                },
                dirty_expire_ms: u32::try_from(d.dirty_expire.as_millis()).unwrap_or(u32::MAX),
                drop_behind_writes: d.drop_behind_writes as u32,
            })
        };
        Ok(())
    })
}

pub(crate) fn to_config(c: &pc_config) -> io::Result<Config> {
    let size = |v: u64, name: &str| {
        usize::try_from(v).map_err(|_| invalid(format!("pc_cache_new: {name} {v} is too large")))
    };
    Ok(Config {
        capacity: size(c.capacity, "capacity")?,
        page_size: c.page_size as usize,
        direct_io: c.direct_io != 0,
        io_engine: match c.io_engine {
            PC_IO_AUTO => IoEngine::Auto,
            PC_IO_URING => IoEngine::Uring,
            PC_IO_THREADS => IoEngine::Threads,
            n => {
                return Err(invalid(format!(
                    "pc_cache_new: io_engine {n} is not a PC_IO_* value"
                )))
            }
        },
        io_threads: c.io_threads as usize,
        readahead_max: size(c.readahead_max, "readahead_max")?,
        dirty_background_percent: c.dirty_background_percent,
        dirty_limit_percent: c.dirty_limit_percent,
        dirty_expire: match c.dirty_expire_ms {
            u32::MAX => std::time::Duration::MAX,
            ms => std::time::Duration::from_millis(ms.into()),
        },
        stable_writes: c.stable_writes != 0,
        populate: c.populate != 0,
        drop_behind_writes: c.drop_behind_writes != 0,
        stream_reads: match c.stream_reads {
            PC_STREAM_DIRECT => StreamReads::Direct,
            PC_STREAM_BUFFERED => StreamReads::Buffered,
            PC_STREAM_MEASURE => StreamReads::Measure,
            n => {
                return Err(invalid(format!(
                    "pc_cache_new: stream_reads {n} is not a PC_STREAM_* value"
                )))
            }
        },
        ..Config::default()
    })
}
