//! How a sequential stream's readahead windows are read
//! ([`Config::stream_reads`](crate::Config::stream_reads)): direct, through
//! the kernel's cache without keeping a copy there, or, per device, the
//! faster of the two as measured on the first streams that device serves.
//!
//! The measurement (`StreamReads::Measure`). A device's first
//! `WARMUP_WINDOWS` full-size windows and `WARMUP_BYTES` are read direct
//! and not counted (the start of a cache's first scan ran at a third of
//! its later rate in either mode: 0.67 GB/s for the first 64 MiB, then 2
//! GB/s, in fresh processes; a C loop of the same buffered reads shows
//! most of it, `scripts/probe-scan-start.c`); the next
//! `PROBE_WINDOWS` full-size windows, and at least as many bytes as that
//! many windows of `readahead_max` (1 MiB at least), are read direct and
//! measured (a stream's first, smaller windows measure latency, not
//! throughput, and are not counted); the next `WARMUP_WINDOWS` windows
//! and `WARMUP_BYTES` buffered and not counted (the kernel's readahead
//! ramps up, and the first buffered reads of a process ran slow too);
//! then as many windows and bytes as the direct side's, buffered. Each side's
//! rate is its windows' bytes over the time from its first window's
//! submission to its last window's completion: what a stream got,
//! overlap, queueing and the consumer's pace included, not one read's
//! latency. Buffered is chosen only if its rate beats direct's by
//! `MARGIN` (direct keeps the kernel's cache out of it altogether); the
//! choice then holds for the device for the cache's life. Windows
//! submitted while the buffered side is still completing are read
//! buffered. Streams of other files of the device, read meanwhile, count
//! in the same phases: they share the device the choice is about. A
//! stream of a file larger than the cache reads its buffered side past
//! the frames (`Inner::read_bypass`), the path its streams take once
//! buffered is chosen: each of those reads counts as one window, whatever
//! its size (the kernel's readahead runs ahead of it). The bytes matter:
//! such reads are the caller's requests, 1 MiB in a typical scan, and
//! sixteen of them (the window count alone, before) measured 16 MiB in a
//! few milliseconds, where one stall halved the rate: in fresh processes
//! the buffered side read 0.43-0.86 GB/s while whole buffered scans ran
//! at 1.9-2.3 GB/s, and the choice went either way.
//!
//! Why per device, and measured: on a virtual disk or cloud volume direct
//! reads may top out below what the kernel's own readahead gets, while on
//! fast local NVMe direct reads usually win; and on this project's virtual
//! disk the answer changed from day to day (buffered 14% faster, then a
//! tie, then 8-14% faster: `docs/design.md`, "Stream reads"). A fixed rule
//! is wrong somewhere.

use crate::sync::unmodelled::{AtomicU64, AtomicUsize, Mutex, Ordering};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// How a cache reads sequential streams ([`Config::stream_reads`](crate::Config::stream_reads)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamReads {
    /// With direct I/O, as every other read: the kernel's cache is not
    /// involved.
    Direct,
    /// Through the kernel's buffered path, so its readahead keeps
    /// megabytes in flight, without keeping the kernel's copy: it is
    /// dropped behind the stream in aligned 8 MiB blocks
    /// (`POSIX_FADV_DONTNEED`). On devices whose direct reads top out below
    /// what the kernel's own readahead gets (virtual disks, some cloud
    /// volumes) a scan runs faster; on fast local NVMe direct reads
    /// usually win.
    ///
    /// A stream of a file larger than the cache does not go through the
    /// frames at all: its missing pages are read straight into the
    /// reader's buffer through the kernel's readahead (one copy, as
    /// `read()` makes), no frame is taken and nothing is evicted; pages
    /// the cache holds, dirty ones above all, are copied from the cache
    /// ([`Stats::streamed_pages`](crate::Stats::streamed_pages) counts the
    /// others). A file the cache can hold is read into the frames, for the
    /// next pass to hit.
    Buffered,
    /// Each device's first streams are read both ways and measured, and
    /// the faster is kept for that device (buffered only if at least 5%
    /// faster): see [`PageCache::stream_choices`](crate::PageCache::stream_choices). The buffered side is
    /// measured on the path its streams would take (past the cache, for
    /// a file larger than it).
    ///
    /// The default: which way is faster depends on the device (on this
    /// project's virtual disk buffered streams ran 1.1-1.3x direct ones,
    /// on fast local NVMe direct reads usually win), and a fixed choice is
    /// wrong somewhere. What it costs: until a device's choice is made, its
    /// streams are read both ways; the measurement reads about 200 MiB of
    /// streams with 2 MiB windows (warm-ups included), once per device and
    /// cache (a cache that streams less than about 100 MiB from a device
    /// reads all of it direct). Where buffered is chosen, the kernel's cache
    /// holds what [`StreamReads::Buffered`] leaves in it: a stream's last
    /// 8 MiB blocks and the kernel's readahead past them, until the file's
    /// last handle closes. Choose [`StreamReads::Direct`] to keep the
    /// kernel's cache out of a cache's reads entirely.
    #[default]
    Measure,
}

/// Full-size windows measured on each side.
const PROBE_WINDOWS: u32 = 16;
/// Windows read, not measured, before each side (with `WARMUP_BYTES`).
const WARMUP_WINDOWS: u32 = 32;
/// Bytes each warm-up reads at least, besides its windows.
const WARMUP_BYTES: u64 = 64 << 20;
/// Buffered is chosen only if its rate is at least this many times
/// direct's.
const MARGIN: f64 = 1.05;
/// Windows of at least this many bytes (or of the largest window, if
/// smaller) are measured.
const PROBE_MIN_BYTES: u64 = 1 << 20;

/// The streams' read mode and, for `Measure`, each device's state.
#[derive(Debug)]
pub(crate) struct Streams {
    mode: StreamReads,
    /// Smallest window measured.
    min_bytes: u64,
    /// Bytes each side measures at least: `PROBE_WINDOWS` windows of
    /// `readahead_max`, of 1 MiB at least.
    probe_bytes: u64,
    /// Per device (`st_dev`). A leaf lock, held for a few loads and
    /// stores.
    devices: Mutex<HashMap<u64, Device>>,
    /// A shared cache's board (`cache/words.rs`): each device is measured
    /// by one process, whose choice the others then take; `None` for a
    /// private cache.
    board: Option<crate::placed::Placed<StreamBoard>>,
}

/// Devices a shared cache's board has room for (more are measured by
/// every process on its own).
pub(crate) const BOARD_DEVICES: usize = 8;

/// A shared cache's stream choices, one slot per device: its `st_dev` plus
/// one (0: a free slot), then its state: the measuring process's pid times
/// 4 plus 1 while measured, 2 once direct is chosen, 3 once buffered is.
/// A slot is claimed by a CAS of its device word, then its state is
/// stored; a slot seen claimed with no state yet is being measured
/// elsewhere. Slots are never freed: a device's choice holds for the
/// cache's life, as in a private cache.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct StreamBoard {
    slots: [(
        crate::sync::unmodelled::AtomicU64,
        crate::sync::unmodelled::AtomicU64,
    ); BOARD_DEVICES],
}

/// What a board says about a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Board {
    /// Chosen (buffered or not), by whichever process measured it.
    Chosen(bool),
    /// Another process measures it: read direct, measure nothing.
    Elsewhere,
    /// This process measures it (or the board is full).
    Ours,
}

impl StreamBoard {
    /// The board's word on `dev`, claiming its slot if no process has.
    fn claim(&self, dev: u64) -> Board {
        self.claim_as(dev, u64::from(std::process::id()))
    }

    /// `claim` by process `me`.
    fn claim_as(&self, dev: u64, me: u64) -> Board {
        use crate::sync::unmodelled::Ordering::{AcqRel, Acquire, Release};
        for (d, st) in &self.slots {
            // Acquire: pairs with the claim's CAS and the state's store.
            let mut k = d.load(Acquire);
            if k == 0 {
                match d.compare_exchange(0, dev + 1, AcqRel, Acquire) {
                    Ok(_) => {
                        st.store(me << 2 | 1, Release);
                        return Board::Ours;
                    }
                    Err(now) => k = now,
                }
            }
            if k != dev + 1 {
                continue;
            }
            // Acquire: pairs with the Release stores of the state.
            let v = st.load(Acquire);
            return match v & 3 {
                2 => Board::Chosen(false),
                3 => Board::Chosen(true),
                1 if v >> 2 == me => Board::Ours,
                _ => Board::Elsewhere,
            };
        }
        Board::Ours
    }

    /// Publishes the choice this process made for `dev`.
    fn publish(&self, dev: u64, buffered: bool) {
        use crate::sync::unmodelled::Ordering::{Acquire, Release};
        for (d, st) in &self.slots {
            if d.load(Acquire) == dev + 1 {
                st.store(2 | u64::from(buffered), Release);
                return;
            }
        }
    }
}

#[derive(Debug, Default)]
struct Device {
    /// Direct (0) and buffered (1) sides.
    side: [Side; 2],
    /// Direct windows read before the direct side's measurement, and
    /// their bytes.
    settled: (u32, u64),
    /// Buffered windows read before the buffered side's measurement, and
    /// their bytes.
    warmed: (u32, u64),
    /// Whether streams read buffered, once measured.
    choice: Option<bool>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Side {
    /// Measured windows in flight, and the bytes they asked for.
    pending: u32,
    pending_bytes: u64,
    /// Measured windows completed that read something, and their bytes.
    done: u32,
    bytes: u64,
    /// The first measured window's submission, the last one's completion.
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Side {
    /// Whether the side has measured enough: `PROBE_WINDOWS` windows and
    /// `probe_bytes`.
    fn enough(&self, probe_bytes: u64) -> bool {
        self.done >= PROBE_WINDOWS && self.bytes >= probe_bytes
    }

    /// Whether the windows measured and in flight will be enough.
    fn enough_asked(&self, probe_bytes: u64) -> bool {
        self.done + self.pending >= PROBE_WINDOWS && self.bytes + self.pending_bytes >= probe_bytes
    }

    fn rate(&self) -> f64 {
        match (self.first, self.last) {
            (Some(a), Some(b)) if b > a => self.bytes as f64 / (b - a).as_secs_f64(),
            _ => 0.0,
        }
    }
}

/// Whether streams read buffered, from the two sides' measurements.
fn decide(direct: &Side, buffered: &Side) -> bool {
    let (d, b) = (direct.rate(), buffered.rate());
    b > 0.0 && b >= MARGIN * d
}

/// How to read one window.
#[derive(Debug)]
pub(crate) struct Window {
    /// Through the kernel's cache (dropped behind), else direct.
    pub(crate) buffered: bool,
    /// Set for a measured window: each of its reads holds a count.
    pub(crate) probe: Option<Arc<Probe>>,
}

/// A measured window in flight.
#[derive(Debug)]
pub(crate) struct Probe {
    dev: u64,
    buffered: bool,
    /// The window's bytes, as counted in its side's `pending_bytes`.
    asked: u64,
    /// The bytes its reads asked for (pages already cached are not read).
    bytes: AtomicU64,
    /// Its reads in flight, plus one for its submitter until it has
    /// submitted them all (`Streams::done`).
    pending: AtomicUsize,
}

impl Probe {
    /// One more read of the window, of `bytes` (before it is submitted).
    pub(crate) fn add_read(&self, bytes: u64) {
        // Relaxed: counts; the last `done` reads them after its AcqRel
        // decrement, which follows every increment (each read's `done`
        // comes after its `add_read`, the submitter's after all of them).
        self.pending.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl Streams {
    pub(crate) fn new(mode: StreamReads, readahead_max: u64) -> Streams {
        Streams {
            mode,
            min_bytes: PROBE_MIN_BYTES.min(readahead_max.max(1)),
            probe_bytes: PROBE_WINDOWS as u64 * readahead_max.max(PROBE_MIN_BYTES),
            devices: Mutex::new(HashMap::new()),
            board: None,
        }
    }

    /// As `new`, each device measured once for every process of a shared
    /// cache through `board`.
    pub(crate) fn with_board(
        mode: StreamReads,
        readahead_max: u64,
        board: crate::placed::Placed<StreamBoard>,
    ) -> Streams {
        Streams {
            board: Some(board),
            ..Self::new(mode, readahead_max)
        }
    }

    /// How to read a window of `bytes` of a stream on device `dev`;
    /// `any_size`: a read past the cache (`read_bypass`), measured whatever
    /// its size (the kernel's readahead runs ahead of it, so even a small
    /// one is a stream's steady state, not its ramp).
    /// Context: any, no sleep but the leaf lock.
    pub(crate) fn window(&self, dev: u64, bytes: u64, any_size: bool) -> Window {
        let buffered = match self.mode {
            StreamReads::Direct => false,
            StreamReads::Buffered => true,
            StreamReads::Measure => return self.measure(dev, bytes, any_size),
        };
        Window {
            buffered,
            probe: None,
        }
    }

    /// Whether streams on device `dev` read through the kernel's cache
    /// (`Buffered`, or `Measure` once it chose buffered): `Some` once that
    /// is settled (a choice never changes once made); `None` while
    /// `Measure` measures, with whether its current phase reads buffered
    /// (the buffered side's warm-up or measurement).
    /// Context: any, no sleep but the leaf lock.
    pub(crate) fn buffered(&self, dev: u64) -> Result<bool, bool> {
        match self.mode {
            StreamReads::Direct => Ok(false),
            StreamReads::Buffered => Ok(true),
            StreamReads::Measure => {
                let devices = self.devices.lock();
                let local = devices.get(&dev).and_then(|d| d.choice);
                if let (None, Some(b)) = (local, &self.board) {
                    match b.claim(dev) {
                        Board::Chosen(c) => return Ok(c),
                        Board::Elsewhere => return Err(false),
                        Board::Ours => {}
                    }
                }
                match devices.get(&dev) {
                    Some(d) => d.choice.ok_or(d.side[0].enough(self.probe_bytes)),
                    None => Err(false),
                }
            }
        }
    }

    fn measure(&self, dev: u64, bytes: u64, any_size: bool) -> Window {
        let mut devices = self.devices.lock();
        let d = devices.entry(dev).or_default();
        if let (None, Some(b)) = (d.choice, &self.board) {
            match b.claim(dev) {
                Board::Chosen(c) => d.choice = Some(c),
                // Another process measures it: direct meanwhile.
                Board::Elsewhere => {
                    return Window {
                        buffered: false,
                        probe: None,
                    }
                }
                Board::Ours => {}
            }
        }
        if let Some(buffered) = d.choice {
            return Window {
                buffered,
                probe: None,
            };
        }
        // The phase: the direct warm-up, direct until its side is measured
        // (windows that read nothing, every page cached, are not counted
        // and are replaced), then the buffered warm-up, then the buffered
        // side.
        let direct_done = d.side[0].enough(self.probe_bytes);
        let buffered = direct_done;
        let unmeasured = Window {
            buffered,
            probe: None,
        };
        if bytes < self.min_bytes && !any_size {
            return unmeasured;
        }
        let warm = if direct_done {
            &mut d.warmed
        } else {
            &mut d.settled
        };
        if warm.0 < WARMUP_WINDOWS || warm.1 < WARMUP_BYTES {
            warm.0 += 1;
            warm.1 += bytes;
            return unmeasured;
        }
        let side = &mut d.side[buffered as usize];
        if side.enough_asked(self.probe_bytes) {
            return unmeasured; // enough in flight: wait for them
        }
        side.pending += 1;
        side.pending_bytes += bytes;
        side.first.get_or_insert_with(Instant::now);
        Window {
            buffered,
            probe: Some(Arc::new(Probe {
                dev,
                buffered,
                asked: bytes,
                bytes: AtomicU64::new(0),
                pending: AtomicUsize::new(1),
            })),
        }
    }

    /// A read of a measured window ended, or (once) its submitter has
    /// submitted them all: the last of these counts the window and, once
    /// both sides are measured, makes the device's choice. A window whose
    /// read failed counts too (its time was spent). Context: any (the
    /// engine's completion), no sleep but the leaf lock.
    pub(crate) fn done(&self, p: &Probe) {
        // AcqRel: the last one sees the others' (nothing else to order:
        // the window's fields are immutable).
        if p.pending.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        // Relaxed: see `add_read`.
        let bytes = p.bytes.load(Ordering::Relaxed);
        let now = Instant::now();
        let mut devices = self.devices.lock();
        let Some(d) = devices.get_mut(&p.dev) else {
            return;
        };
        if d.choice.is_some() {
            return;
        }
        let side = &mut d.side[p.buffered as usize];
        side.pending -= 1;
        side.pending_bytes -= p.asked;
        if bytes == 0 {
            return; // every page was cached already: nothing measured
        }
        side.done += 1;
        side.bytes += bytes;
        side.last = Some(side.last.map_or(now, |l| l.max(now)));
        if d.side.iter().all(|s| s.enough(self.probe_bytes)) {
            let c = decide(&d.side[0], &d.side[1]);
            d.choice = Some(c);
            if let Some(b) = &self.board {
                b.publish(p.dev, c);
            }
        }
    }

    /// Each measured device's choice (buffered or not) and the two rates
    /// it was made from, in bytes per second.
    pub(crate) fn choices(&self) -> Vec<StreamChoice> {
        let devices = self.devices.lock();
        let mut v: Vec<_> = devices
            .iter()
            .filter_map(|(&device, d)| {
                d.choice.map(|buffered| StreamChoice {
                    device,
                    buffered,
                    direct_rate: d.side[0].rate(),
                    buffered_rate: d.side[1].rate(),
                })
            })
            .collect();
        v.sort_by_key(|c| c.device);
        v
    }
}

/// What [`StreamReads::Measure`] chose for one device
/// ([`PageCache::stream_choices`](crate::PageCache::stream_choices)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamChoice {
    /// The device (`st_dev` of its files).
    pub device: u64,
    /// Whether its streams are read through the kernel's cache.
    pub buffered: bool,
    /// The rates measured, in bytes per second: direct windows, and
    /// buffered ones.
    pub direct_rate: f64,
    /// See `direct_rate`.
    pub buffered_rate: f64,
}

impl std::fmt::Display for StreamChoice {
    /// `device 0xfe00: buffered (direct 1.55 GB/s, buffered 1.67 GB/s
    /// measured)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "device {:#x}: {} (direct {:.2} GB/s, buffered {:.2} GB/s measured)",
            self.device,
            if self.buffered { "buffered" } else { "direct" },
            self.direct_rate / 1e9,
            self.buffered_rate / 1e9
        )
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Reads device `dev`'s direct warm-up: full-size windows, direct and
    /// not measured.
    fn settle(s: &Streams, dev: u64) {
        for _ in 0..WARMUP_WINDOWS {
            let w = s.window(dev, 2 << 20, false);
            assert!(!w.buffered && w.probe.is_none(), "direct warm-up");
        }
    }

    /// Runs the measurement with windows whose reads take `direct` and
    /// `buffered` seconds each, one at a time; returns the choice.
    fn choose(direct: f64, buffered: f64) -> Option<bool> {
        let s = Streams::new(StreamReads::Measure, 2 << 20);
        for _ in 0..2 * PROBE_WINDOWS + 2 * WARMUP_WINDOWS {
            assert!(
                s.choices().is_empty(),
                "chosen before both sides were measured"
            );
            // A ramping window is read in the phase's mode, not counted.
            let small = s.window(7, 4096, false);
            assert!(small.probe.is_none());
            let w = s.window(7, 2 << 20, false);
            if let Some(p) = &w.probe {
                p.add_read(2 << 20);
                std::thread::sleep(std::time::Duration::from_secs_f64(if w.buffered {
                    buffered
                } else {
                    direct
                }));
                s.done(p); // the read
                s.done(p); // the submitter
            }
        }
        let c = s.choices();
        c.first().map(|c| c.buffered)
    }

    #[test]
    fn a_board_has_each_device_measured_by_one_process() {
        let b = StreamBoard::default();
        assert_eq!(b.claim_as(7, 100), Board::Ours);
        assert_eq!(b.claim_as(7, 100), Board::Ours, "still ours");
        assert_eq!(b.claim_as(7, 200), Board::Elsewhere);
        assert_eq!(b.claim_as(8, 200), Board::Ours, "another device");
        b.publish(7, true);
        assert_eq!(b.claim_as(7, 200), Board::Chosen(true));
        assert_eq!(b.claim_as(7, 100), Board::Chosen(true));
        b.publish(8, false);
        assert_eq!(b.claim_as(8, 100), Board::Chosen(false));
        // Full: every process measures the rest on its own.
        for dev in 9..9 + BOARD_DEVICES as u64 {
            b.claim_as(dev, 100);
        }
        assert_eq!(b.claim_as(1000, 200), Board::Ours);
    }

    #[test]
    fn measure_picks_the_faster_side() {
        // 4x apart: no scheduling noise turns that around.
        assert_eq!(choose(0.004, 0.001), Some(true));
        assert_eq!(choose(0.001, 0.004), Some(false));
    }

    #[test]
    fn buffered_must_win_by_the_margin() {
        let side = |bytes: u64, ms: u64| {
            let t = Instant::now();
            Side {
                pending: 0,
                pending_bytes: 0,
                done: PROBE_WINDOWS,
                bytes,
                first: Some(t),
                last: Some(t + std::time::Duration::from_millis(ms)),
            }
        };
        let direct = side(100 << 20, 100);
        assert!(!decide(&direct, &side(100 << 20, 100)), "equal: direct");
        assert!(!decide(&direct, &side(103 << 20, 100)), "3% faster: direct");
        assert!(
            decide(&direct, &side(108 << 20, 100)),
            "8% faster: buffered"
        );
        assert!(
            !decide(&direct, &Side::default()),
            "nothing measured: direct"
        );
    }

    #[test]
    fn fixed_modes_never_measure() {
        for (mode, buffered) in [(StreamReads::Direct, false), (StreamReads::Buffered, true)] {
            let s = Streams::new(mode, 2 << 20);
            let w = s.window(1, 2 << 20, false);
            assert_eq!(w.buffered, buffered);
            assert!(w.probe.is_none());
            assert!(s.choices().is_empty());
        }
    }

    #[test]
    fn a_window_counts_once_all_its_reads_and_its_submitter_are_done() {
        let s = Streams::new(StreamReads::Measure, 2 << 20);
        settle(&s, 3);
        let w = s.window(3, 2 << 20, false);
        let p = w.probe.unwrap();
        p.add_read(1 << 20);
        p.add_read(1 << 20);
        s.done(&p);
        s.done(&p);
        assert_eq!(
            s.devices.lock()[&3].side[0].done,
            0,
            "the submitter's count is left"
        );
        s.done(&p);
        assert_eq!(s.devices.lock()[&3].side[0].done, 1);
        assert_eq!(s.devices.lock()[&3].side[0].bytes, 2 << 20);
        // A window whose pages were all cached reads nothing: not counted,
        // and another window is measured in its place.
        for _ in 0..PROBE_WINDOWS {
            let w = s.window(3, 2 << 20, false);
            s.done(&w.probe.unwrap());
        }
        let d = &s.devices.lock()[&3];
        assert_eq!((d.side[0].done, d.side[0].pending), (1, 0));
    }

    #[test]
    fn no_more_windows_are_measured_than_asked_for() {
        let s = Streams::new(StreamReads::Measure, 2 << 20);
        settle(&s, 5);
        let held: Vec<_> = (0..PROBE_WINDOWS)
            .map(|_| s.window(5, 2 << 20, false).probe.unwrap())
            .collect();
        // The direct side has its windows in flight: the next is read
        // direct, unmeasured, until they end.
        let w = s.window(5, 2 << 20, false);
        assert!(!w.buffered && w.probe.is_none());
        for p in &held {
            p.add_read(2 << 20);
            s.done(p);
            s.done(p);
        }
        // Then the warm-up, buffered and unmeasured, then the buffered side.
        for _ in 0..WARMUP_WINDOWS {
            let w = s.window(5, 2 << 20, false);
            assert!(w.buffered && w.probe.is_none());
        }
        let w = s.window(5, 2 << 20, false);
        assert!(w.buffered && w.probe.is_some());
    }

    /// Completes one measured window of `bytes` read.
    fn finish(s: &Streams, w: Window, bytes: u64) {
        let p = w.probe.expect("a measured window");
        p.add_read(bytes);
        s.done(&p);
        s.done(&p);
    }

    #[test]
    fn each_side_measures_its_bytes_and_reads_past_the_cache_count_at_any_size() {
        let s = Streams::new(StreamReads::Measure, 2 << 20);
        let probe_bytes = PROBE_WINDOWS as u64 * (2 << 20);
        settle(&s, 9);
        // The direct side: full-size windows up to its bytes.
        for _ in 0..PROBE_WINDOWS {
            finish(&s, s.window(9, 2 << 20, false), 2 << 20);
        }
        assert_eq!(s.buffered(9), Err(true), "direct measured: buffered phase");
        // The warm-up: windows and bytes (64 MiB).
        for _ in 0..WARMUP_WINDOWS {
            assert!(s.window(9, 1 << 20, true).probe.is_none(), "warm-up");
        }
        for _ in 0..(WARMUP_BYTES >> 20) - WARMUP_WINDOWS as u64 {
            assert!(s.window(9, 1 << 20, true).probe.is_none(), "warm-up bytes");
        }
        // Reads past the cache of 256 KiB (below the window minimum) are
        // measured, and the side needs its bytes, not only its count:
        // sixteen of them are not enough.
        let small = 256 << 10;
        for _ in 0..PROBE_WINDOWS {
            finish(&s, s.window(9, small, true), small);
        }
        assert!(s.choices().is_empty(), "16 reads of 256 KiB are not enough");
        let needed = (probe_bytes - PROBE_WINDOWS as u64 * small) / small;
        for i in 0..needed {
            assert!(s.choices().is_empty(), "chosen after {i} more reads");
            finish(&s, s.window(9, small, true), small);
        }
        assert_eq!(s.choices().len(), 1, "chosen once the bytes were read");
        // A ramping window of a stream into the frames is still not
        // counted (no probe), before or after the choice.
        let t = Streams::new(StreamReads::Measure, 2 << 20);
        assert!(t.window(9, small, false).probe.is_none());
    }
}
