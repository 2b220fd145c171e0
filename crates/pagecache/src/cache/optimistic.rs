//! Protocol 5.8 (optimistic access and upgrade, for index structures),
//! `try_pin`/`try_latch` (never wait for another holder) and `page_new`.
//!
//! ```text
//!  reader (no reference, no shared write)    writer (latch holder, 5.5)
//!  O1. f = tree.lookup(index) (or a hint:     W1. pin, claim LATCHED
//!      the frame that held the page last
//!      time, checked by O2-O3 alike); empty ->
//!      miss: pin through 5.3 (reads the      W2. wait for pins to drain
//!      page), go to O2 holding the pin       W3. version odd (Release fence)
//!  O2. v = version (Acquire); odd -> the     W4. change the bytes
//!      page is being changed or its frame    W5. version even (Release)
//!      reassigned: wait for the latch        W6. unlatch (Release), wake
//!      (or yield), retry from O1
//!  O3. state UPTODATE, not REMOVED, not      remover (eviction 5.2, truncate
//!      LATCHED (a writer's: its view would    5.6, frame reuse)
//!      fail); identity == (file, index);
//!      else the full path (pin through       R1. refcount frozen or orphaned
//!      5.1/5.3: waits for a latch), go to O2
//!  O4. set ACCESSED only if it was clear     R2. version odd, identity
//!      (drop the O1 pin, if any)                 cleared (`FrameDesc::reset`)
//!  -- the view (f, v) is handed out --       R3. next owner: new identity,
//!  O5. loads: per-word relaxed atomics           version even (`assign`)
//!      (bounds-checked, see `api/optimistic.rs`)
//!  O6. validate: Acquire fence; state not    R1'. truncate of a pinned page
//!      REMOVED (Acquire), then version == v      (5.6 step 4): REMOVED set
//!                                                by one RMW, the frame
//!                                                orphaned; its identity and
//!                                                version stay until its last
//!                                                release (then R2-R3)
//!
//!  upgrade (the view's holder)
//!  U1. pin (5.1 step 2: fails if latched or free -> restart)
//!  U2. identity == (file, index), not REMOVED, else restart
//!  U3. claim LATCHED (fails if held -> restart: of two upgrades racing,
//!      at most one passes U3). U1 and U3 are one CAS (`try_pin_latch`)
//!      outside the baselines, U2 checked after it (a frame recycled
//!      meanwhile is unlatched and released: its holders met a claimed
//!      latch for that moment, as they meet a stray pin)
//!  U4. O6 (nobody else can move the version while we hold LATCHED and
//!      a pin), else unlatch and restart
//!  U5. W2 (drain, then runs: 5.7 W2-W3), then W3: a `PageMut`
//!  U0. (`upgrade_or_wait` only) U1 or U3 refused by another holder's
//!      latch: wait for its release (a short spin, then a park, while the
//!      frame still holds the page), then restart. The caller holds no
//!      pin or latch (lock rule 3)
//! ```
//!
//! Ordering. A writer makes the version odd (W3) before its first byte
//! store (W4), with a Release fence between; a reader loads its bytes (O5)
//! before the Acquire fence and version re-load of O6. If any load of O5
//! read a byte stored by W4 (or by any later writer), the fences
//! synchronise and O6's re-load sees W3's odd value or a later one, so
//! validation fails: a validated view never saw a change. Eviction and
//! reuse change the identity only with the version odd (R2-R3), so a view
//! validated at `v` also read the frame while it held `(file, index)`, up
//! to date: O3's check ran after O2's Acquire load of `v`. Truncate cannot
//! make the version of a page it cuts off odd while others pin it (only an
//! exclusive owner writes the version: a latch holder that drained, or the
//! frame's freer), and their pins keep the frame, with its identity and
//! version, after the file has grown back over the index (R1'): O6's
//! `REMOVED` check is what fails such a view. O6 loads the state before
//! the version: `REMOVED` is cleared only by the frame's reset, after the
//! version went odd, so a state load that no longer sees it is followed by
//! a version load that sees the reset (`FrameDesc::read_validate`).
//! The frame's memory stays mapped and its descriptor valid whatever
//! happens to it (frames and descriptors are type-stable), so a stale view
//! reads only wrong bytes, which O6 rejects, never unmapped memory.
//!
//! Upgrade: U3 and W1 are RMWs of one word. While the upgrader holds
//! `LATCHED` no other writer can begin (W1 fails) and its pin keeps the
//! frame from removal and reuse (R1 needs the refcount), so U4's comparison
//! is final: equal means no writer and no reuse came between the view's O2
//! and U3, which is exactly "unchanged since `optimistic`". Two upgrades of
//! one view (or of two views at the same version) race on U3: the loser
//! fails there, or finds the version moved at U4 if the winner already
//! released.
//!
//! A writer that takes a latch and changes nothing still moves the version
//! (its W3/W5 pair), so validation may fail without a change: restarts are
//! spurious at worst, never missed.
//!
//! `try_pin` / `try_latch` take 5.1 and 5.5 with every wait for another
//! holder replaced by a refusal (`None`): a latched page, pins that would
//! have to drain, a run holding the page. `try_latch` of a cached page
//! takes W1 in one CAS (`try_pin_latch`, as U1-U3) and checks W2 on the
//! state that CAS saw: no pin but the cache's and its own can come after
//! it. They still wait for a frame
//! (eviction) and for the read of a miss, which cannot depend on anything
//! the caller holds. `page_new` inserts a latched page past the end and
//! zero-fills it without a read (5.3 with the read replaced by zeros).

use super::miss::Got;
use super::run::RunHold;
use super::{FileShared, Inner};
use crate::frame::state::{PinFail, Released};
use crate::frame::FrameNo;
use crate::stats::Counter;
use crate::sync::Ordering;
use std::io;

impl Inner {
    /// Protocol 5.8 O1-O4: an optimistic view `(frame, version)` of page
    /// `index` (below end of file: the caller checked). A hit writes
    /// nothing shared (the accessed bit only when clear) and is not counted
    /// in `Stats::hits` (not even the thread's own counter stripe: 0.7 ns of
    /// an 11 ns view); a miss reads the page in first (counted as a miss). Context: may sleep (a miss's read, a wait for a
    /// latch holder); no latch or tree lock held; pins only lower pages of
    /// this file (lock rule 4), or none.
    #[inline]
    pub(crate) fn optimistic_begin(
        &self,
        fs: &FileShared,
        index: u64,
    ) -> io::Result<(FrameNo, u64)> {
        // O1-O3 on the first try, inlined: the hot path of a tree descent
        // (the frame found in the index checked as a hint is).
        if let Some(f) = fs.tree.lookup(&self.nodes, index) {
            if let Some(view) = self.optimistic_hinted(fs, index, f) {
                return Ok(view);
            }
        }
        self.optimistic_slow(fs, index)
    }

    /// Protocol 5.8 with O1 replaced by a hint: the frame that held page
    /// `index` last time (an index structure remembers it, as vmcache's
    /// page table or LeanStore's swizzled pointers do). O2-O3 check it as
    /// they check a frame found in the index, so a stale hint costs only
    /// the full path (the caller's); a good one saves the index walk.
    /// Context: any, no sleep, writes nothing shared but the accessed bit
    /// when clear.
    #[inline(always)]
    pub(crate) fn optimistic_hinted(
        &self,
        fs: &FileShared,
        index: u64,
        hint: FrameNo,
    ) -> Option<(FrameNo, u64)> {
        if (hint as usize) < self.frames.len() {
            let d = self.desc(hint);
            if let Some(v) = d.read_begin() {
                let s = d.snapshot();
                if s.is_live() && !s.is_latched() && d.identity() == (fs.id, index) {
                    if !s.is_accessed() {
                        d.mark_accessed(s);
                    }
                    self.hit_hook(hint);
                    return Some((hint, v));
                }
            }
        }
        None
    }

    /// O1-O4 through a pin: a miss (read in), a busy page (waited for), a
    /// stale slot. While the pin is held no writer has drained (pins stop
    /// at W2) and the frame cannot be reused, so the version read is even
    /// and belongs to this page. Context: as [`Inner::optimistic_begin`].
    #[cold]
    #[inline(never)]
    fn optimistic_slow(&self, fs: &FileShared, index: u64) -> io::Result<(FrameNo, u64)> {
        loop {
            let f = self.get_page(fs, index)?;
            let d = self.desc(f);
            let v = d.read_begin();
            self.release(f);
            if let Some(v) = v {
                return Ok((f, v));
            }
            // Odd under a user pin: a write-back pin may let a latch holder
            // in only before it drained, so this is not expected; retry.
            crate::sync::retry_point();
        }
    }

    /// Protocol 5.8 U1-U5: the page latched and drained (ready for a
    /// `FrameLatch`) if it is unchanged since the view `(f, v)` of page
    /// `index`; `None` if a writer, a reuse of the frame or another upgrade
    /// came between (the caller restarts). Context: may sleep (U5's drain
    /// waits for other pins; runs over the page); no latch of this page
    /// held.
    ///
    /// With `wait`, a refusal because another holder has the page latched
    /// (U1 or U3) first waits for that latch's release (U0): the view is
    /// stale by then in all likelihood, and a caller that restarted at once
    /// would meet the same latch again, over and over while its holder is
    /// preempted. The caller must then hold no pin or latch (lock rule 3),
    /// as for any wait for a latch.
    pub(crate) fn optimistic_upgrade(
        &self,
        fs: &FileShared,
        index: u64,
        f: FrameNo,
        v: u64,
        wait: bool,
    ) -> Option<FrameNo> {
        if f as usize >= self.frames.len() {
            return None; // garbage from a recycled index node
        }
        // U0: another holder's latch, waited out (a spin, then a park)
        // while the frame still holds this page.
        let latched = |f: FrameNo| {
            if wait && self.desc(f).wait_unlatched_spin_as(fs.id, index) {
                self.drop_torn(fs.id, index, f);
            }
            None
        };
        // U1-U3: pin and latch, in one CAS unless a baseline's hooks need
        // the pin on its own.
        let f = if self.hooks == 0 {
            let d = self.desc(f);
            let s = match d.try_pin_latch() {
                Ok(s) => s,
                Err(PinFail::Latched) => return latched(f),
                Err(_) => return None,
            };
            if s.is_removed() || d.identity() != (fs.id, index) {
                d.unlatch();
                self.release(f);
                return None;
            }
            f
        } else {
            let f = match self.pin_as(f, fs.id, index) {
                Ok(f) => f,
                Err(super::PinMiss::Fail(PinFail::Latched)) => return latched(f),
                Err(_) => return None,
            };
            if !self.desc(f).try_latch() {
                self.release(f);
                return latched(f);
            }
            f
        };
        let d = self.desc(f);
        // U4 (O6's check: the version, and not removed). Acquire fence
        // inside: our loads come after the CAS of U3.
        if !d.read_validate(v) {
            d.unlatch();
            self.release(f);
            return None;
        }
        // U5: W2 with its waits (other pins; runs, 5.7 W2-W3).
        d.wait_drained();
        if !self.wait_run_pins(fs, index, f) {
            // Truncated meanwhile: the page is gone.
            d.unlatch();
            self.release(f);
            return None;
        }
        Some(f)
    }

    /// 5.1 without waiting: the pinned page, or `None` if another holder
    /// has it latched (or is reading it in). A miss is read (waits for a
    /// frame and the read only). Context: may sleep (a miss's read); the
    /// caller may hold pins and latches of any pages.
    pub(crate) fn try_pin(&self, fs: &FileShared, index: u64) -> io::Result<Option<FrameNo>> {
        let mut tries = 0usize;
        loop {
            match fs.tree.lookup(&self.nodes, index) {
                Some(f) => match self.pin_as(f, fs.id, index) {
                    Ok(f) => {
                        self.count(Counter::Hits);
                        return Ok(Some(f));
                    }
                    Err(super::PinMiss::Fail(PinFail::Latched)) => {
                        // Latched for this page (a stale frame latched for
                        // another page is no reason to refuse: retry).
                        if self.desc(f).identity() == (fs.id, index) {
                            return Ok(None);
                        }
                    }
                    Err(super::PinMiss::Fail(PinFail::Overflow)) => return Ok(None),
                    Err(_) if tries >= 4 => {
                        // A remover between freeze and slot clear: let it
                        // finish (the tree lock is a leaf, held briefly).
                        drop(fs.tree.lock());
                    }
                    Err(_) => {}
                },
                None => {
                    if let Some(f) = self.try_insert(fs, index, true)? {
                        self.fill(fs, index, f)?;
                        self.desc(f).unlatch_uptodate();
                        return Ok(Some(f));
                    }
                    // Another thread's page appeared: look again.
                }
            }
            tries += 1;
            self.count(Counter::LookupRetries);
            crate::sync::retry_point();
        }
    }

    /// 5.5 W1-W2 without waiting: the page latched and drained, or `None`
    /// if another holder latches or pins it, or a run holds it. A miss is
    /// read. Context: as [`Inner::try_pin`].
    pub(crate) fn try_latch(&self, fs: &FileShared, index: u64) -> io::Result<Option<FrameNo>> {
        let found = fs.tree.lookup(&self.nodes, index);
        if let (Some(f), 0) = (found, self.hooks) {
            if let Some(latched) = self.try_latch_cached(fs, index, f) {
                return Ok(latched);
            }
        }
        if found.is_none() {
            if let Some(f) = self.try_insert(fs, index, true)? {
                self.fill(fs, index, f)?;
                return Ok(Some(f)); // latched, drained; up to date at release
            }
        }
        let Some(f) = self.try_pin(fs, index)? else {
            return Ok(None);
        };
        let d = self.desc(f);
        if !d.try_latch() {
            self.release(f);
            return Ok(None);
        }
        let s = d.snapshot();
        let free = !s.is_removed()
            && s.refs() <= s.latch_base()
            && matches!(self.run_over(fs, index, f), RunHold::Free);
        if !free {
            d.unlatch();
            self.release(f);
            return Ok(None);
        }
        Ok(Some(f))
    }

    /// `try_latch` of a cached page in one CAS (W1's pin and latch, as the
    /// upgrade's U1-U3), with one walk of the index: `Some(Some(f))`
    /// latched and drained, `Some(None)` busy (latched or pinned by another
    /// holder, or held by a run), `None` when the frame was not this page's
    /// (recycled or removed meanwhile: the caller takes the full path).
    /// Outside the baselines only (their hooks want the pin on its own).
    /// Context: any, no sleep.
    #[inline(always)]
    fn try_latch_cached(&self, fs: &FileShared, index: u64, f: FrameNo) -> Option<Option<FrameNo>> {
        if f as usize >= self.frames.len() {
            return None; // garbage from a recycled index node
        }
        let d = self.desc(f);
        let s = match d.try_pin_latch() {
            Ok(s) => s,
            // Latched for this page: busy. A stale frame latched for
            // another page is no reason to refuse: the full path looks again.
            Err(PinFail::Latched) if d.identity() == (fs.id, index) => return Some(None),
            Err(_) => return None,
        };
        // Identity after the CAS (Acquire), as 5.1 step 3.
        let ours = !s.is_removed() && d.identity() == (fs.id, index);
        // W2 without waiting: no pin but the cache's and ours at the CAS
        // (none can come after it: the latch refuses them, and a
        // write-back pin passes a latch only while its holder drains),
        // and no run holding the page.
        if ours
            && s.refs() <= s.latch_base()
            && matches!(self.run_over(fs, index, f), RunHold::Free)
        {
            self.count(Counter::Hits);
            return Some(Some(f));
        }
        if d.unlatch_release() == Released::Last {
            self.free_frame(f);
        }
        ours.then_some(None)
    }

    /// A latched, zeroed page at `index`, which must be at or past the end
    /// of file: the file grows to cover it, and nothing is read.
    /// `AlreadyExists` if the page is below the end, or appears meanwhile
    /// (another `page_new` of the same index won). Context: may sleep
    /// (eviction; a latch held by a concurrent `page_new` of this page);
    /// takes the size lock shared; the caller holds no latch of this page.
    pub(crate) fn page_new(&self, fs: &FileShared, index: u64) -> io::Result<FrameNo> {
        let exists = || {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{}: new page {index}: the page exists (cached, or its bytes may be on \
                     disk: the file's length is {} bytes, {} of them written)",
                    fs.path.display(),
                    fs.len.load(Ordering::Acquire),
                    fs.disk_end.load(Ordering::Acquire)
                ),
            )
        };
        // Page `index` exists unless it starts past the file's end, or past
        // every byte that may be on disk and is not cached (a hole nobody
        // wrote: another thread's `page_new` of a later page grew the
        // length over it). Acquire: pairs with write-back's AcqRel raise of
        // `disk_end` (before the write) and the writers' `fetch_max` of
        // `len`; the eviction that took a written page out of the index
        // did so after its write-back raised `disk_end`, and before our
        // insert (both under the tree lock).
        let written = |start: u64| {
            fs.len.load(Ordering::Acquire) > start && fs.disk_end.load(Ordering::Acquire) > start
        };
        let start = index
            .checked_shl(self.shift)
            .filter(|s| s >> self.shift == index);
        let end = start.and_then(|s| s.checked_add(self.page_size as u64));
        let Some(end) = end else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: new page {index}: past any file size",
                    fs.path.display()
                ),
            ));
        };
        self.check_len(fs, end, "new page")?;
        let start = end - self.page_size as u64;
        // Shared, for this page: `set_len` (exclusive) cannot cut the file
        // between our check and the growth.
        let size = fs.size.read(index);
        if written(start) {
            return Err(exists());
        }
        let f = match self.insert_latched(fs, index)? {
            Got::Inserted(f) => f,
            Got::Hit(f) => {
                // Created meanwhile by another `page_new` (or the page a
                // writer is growing the file with).
                self.release(f);
                return Err(exists());
            }
        };
        // Re-check with the page latched in its slot: a page created,
        // written back and evicted between our check and our insert is
        // below `disk_end` now.
        if written(start) {
            self.abandon(fs, index, f);
            return Err(exists());
        }
        let d = self.desc(f);
        // SAFETY: the page is latched by us and not up to date, so no
        // reader uses its bytes (stale optimistic readers of the frame's
        // previous page use atomic loads and discard what they read).
        unsafe { super::atomic_zero(d.witness(), self.frames.ptr(f), self.page_size) };
        // Grow the length while the page is latched (as `write_at` does), so
        // that a write-back of it sees its bytes inside the file. AcqRel:
        // as in `write_at`.
        fs.len.fetch_max(end, Ordering::AcqRel);
        drop(size);
        Ok(f)
    }
}
