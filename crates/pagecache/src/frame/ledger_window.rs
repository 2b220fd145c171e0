//! P6 of protocol 5.15: the window between a pin's RMW and its count, and
//! the recount that finds a pin a dead process took in it.
//!
//! * P6a. Every RMW that takes or drops a counted pin (a pin's CAS, a
//!   clone's, a release, an unlatch that drops the holder's pin) runs in a
//!   *window*: the thread's table's `intent` word names the frame
//!   (`INTENT_PIN`) from before the RMW until after its count (a pin) or
//!   from before its uncount until after the RMW (a release), then is
//!   cleared with a Release store. A thread with no table marks its
//!   process's row `direct` (for the row's life) before the RMW instead:
//!   a window no intent shows.
//! * P6b. A pin's RMW (`FrameDesc::pin_cas`, `pin_more`) is a CAS that
//!   clears `MARK` in the state word and is AcqRel; a release's is a
//!   Release RMW. So a recount that set `MARK` with an Acquire RMW sees
//!   every window whose RMW came before its own (the intent store, and a
//!   release's uncount, precede that RMW), and a compare-and-swap of the
//!   word it read fails if any pin was taken since (`MARK` gone) or any
//!   released (the count lower, and only a pin could raise it again). The
//!   intent is stored with Release and a Release fence after it, and
//!   cleared with Release; a look reads it with Acquire before and after
//!   a table's entries (an Acquire fence between): a count it read that
//!   a window still open made (an uncount whose RMW is yet to come) shows
//!   that window's intent at the second read, and a later value orders
//!   the window's RMW before the recount's CAS.
//! * P6c. Entries do not move: a release clears its entry in place (the
//!   table's end shrinks over cleared entries). Only a fold moves them (into
//!   the row), and a recovery takes a dead process's away (before it drops
//!   the pins they count): both run inside their process's `quiet` word's
//!   count, a seqlock per row that a recount reads, every row's, before
//!   and after its look (a count under way, or a word changed: it tries
//!   again later). So a look sees each pin counted throughout it exactly
//!   once. A process that dies inside a fold leaves its word counting; its
//!   recovery zeroes it, and takes the frame whose entry the fold was
//!   moving (the row's `moving` word: cleared from the table, perhaps not
//!   yet added to the row) as a suspect.
//! * P6d. A process that dies inside a window leaves its intent (or its
//!   eviction's, P5) naming the frame: the recovery (`take_process`) lists
//!   it as *suspect*, and recounts it: with `MARK` set (the word `w0`, its
//!   references `r0`), the pins counted in every table and row in use,
//!   `c`, none of them in a window on the frame (else it tries again
//!   later), and no row `direct` (else it gives up). The page in its index
//!   and not `REMOVED`, the cache's reference is one: `r0 - 1 - c`
//!   references nobody counts are the dead process's, and one CAS from
//!   `w0` drops them. By P6b the CAS succeeds only if no pin was taken or
//!   released since `w0`, so `c` and `r0` describe one moment (a count
//!   landing in the look was in a window the look saw, or had its RMW
//!   before `w0` and shows).
//! * P6e. Removed pages (`cache/shared.rs`, `recover_removed_frames`): the
//!   same recount under the file's tree lock and the deferred-free queue's
//!   lock, the cache's reference counted 1 if the queue holds the frame,
//!   else 0.
//! * P6f. A recovery marks each entry it takes (a frame entry gets the
//!   `HIGH_KEY` bit, which counts and recounts skip; a row's `direct` word
//!   gets `ROW_TAKEN`; an intent gets `INTENT_TAKEN`) and frees the dead
//!   process's tables and row only once it has dropped their pins and
//!   recounted its suspects. A recovery killed before that leaves them so:
//!   the next one (the dead process's slot is recovered again) finds
//!   nothing left to drop and every frame they name a suspect, and its
//!   recounts drop what the first did not.

use super::*;

/// An intent (P6a): the thread is inside a pin count's window on the frame.
pub(super) const INTENT_PIN: u64 = 2;
/// Or-ed into an intent a recovery took (P6f): no live window.
pub(super) const INTENT_TAKEN: u64 = 1 << 16;
/// In a row's `direct` word: a recovery took the row's counts (P6f); a
/// recount skips the row.
pub(super) const ROW_TAKEN: u32 = 2;

/// A pin count's window on one frame (P6a), opened before the RMW and
/// closed after the count (a pin) or after the RMW (a release). Nothing
/// in a private cache.
#[must_use = "a window is closed after its RMW"]
pub(crate) struct Window {
    /// The descriptor, for counts that do not fit the table.
    desc: usize,
    /// This thread's table and the frame's number in it, if it has one.
    table: Option<(&'static Table, usize)>,
    /// The frame is in a shared cache.
    shared: bool,
}

impl Window {
    /// Opens the window on the frame whose descriptor is at `desc`.
    #[inline(always)]
    pub(crate) fn open(desc: usize) -> Window {
        if in_shared(desc) {
            Self::open_shared(desc)
        } else {
            Window {
                desc,
                table: None,
                shared: false,
            }
        }
    }

    /// Counts `delta` pins of the frame as the calling thread's: after the
    /// RMW that took them, before the one that drops them (P3).
    #[inline(always)]
    pub(crate) fn count(&self, delta: i32) {
        if let Some((t, frame)) = self.table {
            compiler_fence(Ordering::SeqCst);
            if add(t, frame, delta) {
                compiler_fence(Ordering::SeqCst);
                return;
            }
        }
        if self.shared {
            count_shared(self.desc, delta);
        }
    }

    /// Closes the window.
    #[inline(always)]
    pub(crate) fn close(self) {
        if let Some((t, _)) = self.table {
            close_intent(t);
        }
    }
}

impl Window {
    /// [`Window::open`] of a frame the caller knows is in a shared cache
    /// (`in_shared`, checked once on the caller's path).
    #[inline(never)]
    pub(crate) fn open_shared(desc: usize) -> Window {
        open_shared(desc)
    }
}

fn open_shared(desc: usize) -> Window {
    let mut w = Window {
        desc,
        table: None,
        shared: true,
    };
    compiler_fence(Ordering::SeqCst);
    let fast = FAST.try_with(Cell::get).ok();
    let cached = fast.filter(|f| {
        // Acquire: as in `count_shared`.
        f.epoch == EPOCH.load(Acquire) && desc.wrapping_sub(f.lo) < f.len
    });
    match cached {
        Some(f) => {
            // SAFETY: as in `count_shared`.
            let t = unsafe { &*(f.table as *const Table) };
            w.table = Some((t, (desc - f.lo) / 64));
        }
        None => {
            let Some(reg) = find(desc) else { return w };
            let frame = (desc - reg.descs) / 64;
            w.table = table_or_direct(reg).map(|t| (t, frame));
        }
    }
    if let Some((t, frame)) = w.table {
        open_intent(t, (frame as u64 + 1) << 32 | INTENT_PIN);
    }
    compiler_fence(Ordering::SeqCst);
    w
}

/// This thread's table of `reg`'s area, claimed if it has none; `None` if
/// none can be had, its process's row then marked `direct` (a window no
/// intent shows: P6a, P7b).
pub(super) fn table_or_direct(reg: &'static Reg) -> Option<&'static Table> {
    cached_table(reg).or_else(|| {
        let found = Cell::new(None);
        count_in(reg, |reg, t| {
            match t {
                Some(t) => found.set(Some(t as *const Table as usize)),
                None => reg.area.row_direct(reg.row).store(1, Relaxed),
            }
            true
        });
        // SAFETY: a table of `reg`'s area, mapped while its pins are
        // counted (the caller's).
        found.get().map(|t| unsafe { &*(t as *const Table) })
    })
}

/// Opens a window (P6a, P7b): `intent` stored in the thread's table.
#[inline(always)]
pub(super) fn open_intent(t: &Table, intent: u64) {
    // Release, and the fence after: a look that reads a count made in the
    // window (a release's uncount) then sees the intent, or a later value
    // of the word, which a Release store wrote (P6b).
    t.intent.store(intent, Release);
    std::sync::atomic::fence(Release);
}

/// Closes a window (P6a, P7b).
#[inline(always)]
pub(super) fn close_intent(t: &Table) {
    compiler_fence(Ordering::SeqCst);
    // Release: the count (or the RMW) before a recount's Acquire load that
    // sees the intent gone.
    t.intent.store(0, Release);
}

/// What a dead process's fold was moving (P6c, P7).
pub(super) enum Moving {
    Frame(u32),
    /// A run entry of this leaf node.
    Run(u32),
}

/// Holds a recount off (P6c) while alive: a fold, or a recovery's taking
/// and dropping of a dead process's pins. Counted in the process's row.
pub struct Unquiet<'a>(&'a AtomicU64);

impl Drop for Unquiet<'_> {
    fn drop(&mut self) {
        // Release: the moves and drops before a recount's reading of the
        // word (after its Acquire fence).
        self.0.fetch_sub(1, Release);
    }
}

impl Area {
    /// Row `r`'s `quiet` word (P6c): high half, how many folds and
    /// recoveries its process began; low half, how many are under way. In
    /// the area's first 4 KiB, after the rows' `direct` marks.
    pub(super) fn quiet(&self, r: usize) -> &AtomicU64 {
        // SAFETY: ROWS words from 3 KiB of the area's first 4 KiB.
        unsafe { &*((self.base + 3072) as *const AtomicU64).add(r) }
    }

    /// Row `r`'s `moving` word (P6c): the frame (+ 1) whose entry its
    /// process's fold is moving into the row, or `RUN_KEY |` the leaf
    /// node of a run entry it is moving to its table's front (P7); 0
    /// otherwise. After the `quiet` words.
    pub(super) fn moving(&self, r: usize) -> &AtomicU32 {
        // SAFETY: ROWS words from 3.5 KiB of the area's first 4 KiB.
        unsafe { &*((self.base + 3584) as *const AtomicU32).add(r) }
    }

    /// A dead process's row `r`: its `quiet` count under way zeroed (its
    /// generation moved on) and what its fold was moving returned, if
    /// anything: a frame, or a run's leaf (P7).
    pub(super) fn take_quiet(&self, r: usize) -> Option<Moving> {
        let q = self.quiet(r);
        // Relaxed: its process is gone; a recount reads the change.
        q.store(((q.load(Relaxed) >> 32) + 1) << 32, Release);
        match self.moving(r).swap(0, Relaxed) {
            0 => None,
            v if v as u64 & RUN_KEY != 0 => Some(Moving::Run(v & !(RUN_KEY as u32))),
            f => Some(Moving::Frame(f - 1)),
        }
    }

    /// Begins, for the process whose row is `r`, what a recount must not
    /// overlap (P6c), until the guard drops.
    pub(super) fn unquiet(&self, r: usize) -> Unquiet<'_> {
        let q = self.quiet(r);
        // Acquire and a Release fence: a seqlock's writer (the moves after
        // it are seen only with the count raised).
        q.fetch_add(1 << 32 | 1, Acquire);
        std::sync::atomic::fence(Release);
        Unquiet(q)
    }

    /// Holds recounts off for this process's recovery of a dead one (its
    /// taking and dropping of the dead one's pins), counted in this
    /// process's row; `None` if this process has no row in the area.
    pub fn unquiet_mine(&self) -> Option<Unquiet<'_>> {
        let reg = find_by(|r| r.area.base == self.base)?;
        Some(self.unquiet(reg.row))
    }

    /// Whether a recovery took row `r`'s counts (P6f): they count no
    /// live pin.
    pub(super) fn row_taken(&self, r: usize) -> bool {
        self.row_direct(r).load(Relaxed) & ROW_TAKEN != 0
    }

    /// A row's `direct` mark (P6a): its process counted a pin with no
    /// table. In the area's first 4 KiB, after the rows' owners.
    pub(super) fn row_direct(&self, r: usize) -> &AtomicU32 {
        // SAFETY: ROWS owner words, then at 2 KiB ROWS marks, all in the
        // area's first 4 KiB.
        unsafe { &*((self.base + 2048) as *const AtomicU32).add(r) }
    }

    /// P6d: the pins of `frame` counted in every table and row in use,
    /// or `None` if a count of it may be under way (a window on it, or a
    /// row marked `direct`). The caller set `MARK` on the frame before
    /// (its Acquire RMW orders what this reads).
    pub fn counted_pins(&self, frame: u32) -> Option<i64> {
        let sum = Cell::new(0i64);
        self.look(
            frame as u64 + 1,
            |e| {
                if let Entry::Frame(f, n) = e {
                    if f == frame {
                        sum.set(sum.get() + n);
                    }
                }
            },
            |row| {
                if let Some(c) = row.get(frame as usize) {
                    sum.set(sum.get() + c.load(Relaxed) as i64);
                }
            },
        )?;
        Some(sum.get())
    }

    /// A recount's look (P6b-c, P7): every entry of every table in use to
    /// `entry`, then every row in use to `row`, unless a window whose
    /// intent's high half is `key` is open in a table (`None`), a row in
    /// use is marked `direct` (`None`), or a fold or a recovery moves
    /// entries meanwhile (`None`). Tables first, then the rows (P6c).
    pub(super) fn look(
        &self,
        key: u64,
        mut entry: impl FnMut(Entry),
        mut row: impl FnMut(&[AtomicI32]),
    ) -> Option<()> {
        // Acquire: a seqlock's reader (pairs with `Unquiet`'s Release).
        let mut q0 = [0u64; ROWS];
        for (r, q) in q0.iter_mut().enumerate() {
            *q = self.quiet(r).load(Acquire);
            if *q & 0xffff_ffff != 0 {
                return None;
            }
        }
        let live = |i: u64| i >> 32 == key && i & INTENT_TAKEN == 0;
        for t in 0..TABLES {
            let table = self.table(t);
            // Relaxed: a table claimed during the look counts pins taken
            // after the caller's mark, which its CAS catches (P6b).
            if table.owner.load(Relaxed) == 0 {
                continue;
            }
            // Acquire: pairs with a window's closing store, so the count
            // made in it is read below.
            if live(table.intent.load(Acquire)) {
                return None;
            }
            let used = (table.used.load(Relaxed) as usize).min(ENTRIES);
            for e in &table.entries[..used] {
                entry(Entry::of(e.load(Relaxed)));
            }
            // A count read above that was made in a window still open (a
            // release's uncount before its RMW) shows its intent now: the
            // window's fence after its intent pairs with this one.
            // Acquire: a later value, written by a Release store, orders
            // the window's RMW before this recount's CAS (which then fails).
            std::sync::atomic::fence(Acquire);
            if live(table.intent.load(Acquire)) {
                return None;
            }
        }
        for r in 0..ROWS {
            // Acquire: the row's counts as its claimant's.
            if self.row_owner(r).load(Acquire) == 0 {
                continue;
            }
            match self.row_direct(r).load(Relaxed) {
                0 => {}
                // Taken by a recovery: its pins are being dropped (under
                // the recoverer's `quiet` count) or are suspects.
                d if d & ROW_TAKEN != 0 => continue,
                _ => return None,
            }
            row(self.row(r));
        }
        // A seqlock's reader: the reads above before the second look.
        std::sync::atomic::fence(Acquire);
        (0..ROWS)
            .all(|r| self.quiet(r).load(Relaxed) == q0[r])
            .then_some(())
    }
}
