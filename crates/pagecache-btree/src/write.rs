//! Inserts, updates and removals: a leaf found by descent (or I0's
//! stripe leaf), upgraded to a latch, changed (I0-I4).

use crate::{corrupt, node, BTree, Coupling, Done, Restart};
use pagecache::PageMut;
use std::io;
use std::sync::atomic::Ordering;

impl BTree {
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
            let Some(mut m) = self.latch_view(leaf, true)? else {
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
        let Some((mut m, pos)) = self.latch_entry(key)? else {
            return Ok(false);
        };
        let (off, klen, vlen) = node::slot(&m[..], pos)
            .map_err(|_| corrupt(&self.file, m.index(), "inconsistent node"))?;
        f(&mut m[off + klen..off + klen + vlen]);
        Ok(true)
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, key: &[u8]) -> io::Result<bool> {
        if self.coupling == Coupling::Pin {
            return self.remove_pinned(key);
        }
        let Some((mut m, pos)) = self.latch_entry(key)? else {
            return Ok(false);
        };
        node::remove_at(&mut m, pos)
            .map_err(|_| corrupt(&self.file, m.index(), "inconsistent node"))?;
        self.count(-1);
        Ok(true)
    }

    /// The leaf holding `key`, latched, and the key's slot in it, or
    /// `None` if `key` is absent: L1-L3 to the leaf, then I3's upgrade of
    /// the view the slot was found in (an upgrade that fails restarts:
    /// the leaf changed since). Latched with the view validated, `pos` is
    /// still the key's slot.
    fn latch_entry(&self, key: &[u8]) -> io::Result<Option<(PageMut<'_>, usize)>> {
        loop {
            let (_, leaf) = self.descend(key)?;
            let (pos, found) = match self.checked(&leaf, node::lower_bound(&leaf, key))? {
                Done(x) => x,
                Restart => continue,
            };
            if !found {
                return Ok(None);
            }
            if let Some(m) = self.latch_view(leaf, true)? {
                return Ok(Some((m, pos)));
            }
        }
    }
}
