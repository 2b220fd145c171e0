//! Tests of the file table (`file_table.rs`).
use super::*;
use crate::sync::futex::{register_region, unregister_region, WaitTable};

/// Two mappings of one memfd, each registered with the wait table
/// that follows the file table in it (as a segment does): what two
/// processes see.
struct Shared {
    a: NonNull<u8>,
    b: NonNull<u8>,
    len: usize,
}

impl Shared {
    fn new() -> Shared {
        let waits = FileTable::bytes().next_multiple_of(4096);
        let len = waits + std::mem::size_of::<WaitTable>().next_multiple_of(4096);
        // SAFETY: plain syscalls, results checked; the mappings are
        // unmapped by Drop.
        unsafe {
            let fd = libc::memfd_create(c"file-table-test".as_ptr(), libc::MFD_CLOEXEC);
            assert!(fd >= 0);
            assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
            let map = || {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                NonNull::new(p.cast::<u8>()).unwrap()
            };
            let (a, b) = (map(), map());
            libc::close(fd);
            for m in [a, b] {
                let t = m.as_ptr().add(waits).cast::<WaitTable>();
                assert!(register_region(m.as_ptr() as usize, len, t, None));
            }
            Shared { a, b, len }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: our two mappings, unregistered first.
        unsafe {
            unregister_region(self.a.as_ptr() as usize);
            unregister_region(self.b.as_ptr() as usize);
            libc::munmap(self.a.as_ptr().cast(), self.len);
            libc::munmap(self.b.as_ptr().cast(), self.len);
        }
    }
}

#[test]
fn one_file_one_slot_whoever_opens_it() {
    let m = Shared::new();
    // SAFETY: zeroed memfd memory of the table's size, page aligned,
    // mapped while `m` lives (longer than the tables).
    let (a, b) = unsafe { (FileTable::over(m.a, Some(0)), FileTable::over(m.b, Some(1))) };
    let x = a.open((8, 100), 4096, 1 << 40, (0, 0)).unwrap();
    assert!(x.created);
    // The other mapping finds the same slot, length and all.
    let y = b.open((8, 100), 0, 0, (0, 0)).unwrap();
    assert!(!y.created);
    assert_eq!(y.slot.id, x.slot.id);
    assert_eq!(y.slot.len.load(Ordering::Relaxed), 4096);
    x.slot.len.store(8192, Ordering::Relaxed);
    assert_eq!(y.slot.len.load(Ordering::Relaxed), 8192);
    assert_eq!(b.opens(x.slot.id), 2);
    // Another inode is another file.
    let z = b.open((8, 101), 0, 1 << 40, (0, 0)).unwrap();
    assert!(z.created);
    assert_ne!(z.slot.id, x.slot.id);
    let listed = a.list().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&Listed {
        ident: (8, 100),
        id: x.slot.id,
        opens: 2,
        len: 8192
    }));
    // Closes: the last one leaves the entry CLOSING (found by nobody)
    // until released.
    let id = x.slot.id;
    assert!(!a.close(x.slot.id).unwrap());
    assert!(b.close(y.slot.id).unwrap());
    assert_eq!(a.opens(id), 0);
    let again = a.open((8, 100), 0, 1 << 40, (0, 0)).unwrap();
    assert!(again.created, "a closing file is not reopened");
    assert_ne!(again.slot.id, id);
    a.release(id).unwrap();
    assert_eq!(a.release(id).unwrap_err().kind(), io::ErrorKind::NotFound);
    assert_eq!(a.close(id).unwrap_err().kind(), io::ErrorKind::NotFound);
    // Its entry is free again, with a new generation.
    assert_eq!(a.list().unwrap().len(), 2);
    assert!(b.close(z.slot.id).unwrap());
    b.release(z.slot.id).unwrap();
    let w = b.open((9, 1), 0, 1 << 40, (0, 0)).unwrap();
    assert_eq!(
        w.slot.id & ((1 << INDEX_BITS) - 1),
        1,
        "the first entry reused"
    );
    assert_ne!(w.slot.id, id);
}

#[test]
fn an_idle_file_is_found_again_unless_its_stamp_changed() {
    let m = Shared::new();
    // SAFETY: as above.
    let (a, b) = unsafe { (FileTable::over(m.a, Some(0)), FileTable::over(m.b, Some(1))) };
    let x = a.open((8, 7), 4096, 1 << 40, (11, 4096)).unwrap();
    let id = x.slot.id;
    let y = b.open((8, 7), 0, 1 << 40, (99, 1)).unwrap();
    assert_eq!(y.slot.id, id, "open elsewhere: found whatever its stamp");
    assert!(!a.close_idle(id, Some((12, 4096))).unwrap());
    assert!(b.close_idle(id, Some((12, 8192))).unwrap());
    assert_eq!(
        a.close_idle(id, None).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    // Idle: listed with no open, found by an opener of the same stamp.
    assert_eq!(a.list().unwrap()[0].opens, 0);
    let z = a.open((8, 7), 0, 1 << 40, (12, 8192)).unwrap();
    assert!(!z.created);
    assert_eq!(z.slot.id, id);
    // Closed again with no stamp known: never matched. With no page
    // cached, the stale entry is free at once, and reused.
    assert!(a.close_idle(id, None).unwrap());
    let w = b.open((8, 7), 0, 1 << 40, (12, 8192)).unwrap();
    assert!(w.created, "a stale idle entry is not served");
    assert_ne!(w.slot.id, id);
    assert_eq!(
        w.slot.id & ((1 << INDEX_BITS) - 1),
        id & ((1 << INDEX_BITS) - 1)
    );
    assert!(a.borrow(id).is_none());
    assert_eq!(a.list().unwrap().len(), 1);
    // An idle entry with no page is freed when asked (reclaim asks when
    // it evicts a file's last page); an open one is not.
    assert!(!a.free_if_unused(w.slot.id), "open");
    let wid = w.slot.id;
    assert!(b.close_idle(wid, Some((1, 1))).unwrap());
    let s = a.borrow(wid).unwrap();
    assert_eq!(s.id, wid);
    assert!(!a.free_if_unused(wid), "borrowed");
    a.unborrow(wid);
    assert!(a.free_if_unused(wid));
    assert!(a.list().unwrap().is_empty());
    assert_eq!(a.release(wid).unwrap_err().kind(), io::ErrorKind::NotFound);
}

#[test]
fn a_dead_processs_opens_are_given_back_and_its_last_files_orphaned() {
    let m = Shared::new();
    // SAFETY: as above (process 1 "dies": only its opens are used).
    let (a, b) = unsafe { (FileTable::over(m.a, Some(0)), FileTable::over(m.b, Some(1))) };
    let x = a.open((8, 1), 0, 1 << 40, (1, 1)).unwrap().slot.id;
    assert_eq!(b.open((8, 1), 0, 1 << 40, (1, 1)).unwrap().slot.id, x);
    b.open((8, 1), 0, 1 << 40, (1, 1)).unwrap();
    let y = b.open((8, 2), 0, 1 << 40, (1, 1)).unwrap().slot.id;
    assert_eq!(a.opens(x), 3);
    // Only its own opens can be closed.
    assert_eq!(
        a.close_idle(y, None).unwrap_err().kind(),
        io::ErrorKind::NotFound
    );
    assert_eq!(a.forget_process(1), 2, "two entries");
    assert_eq!(a.opens(x), 1);
    assert_eq!(a.opens(y), 0);
    assert_eq!(a.forget_process(1), 0, "nothing left to give back");
    // Its last file is an orphan: adopted whatever the stamp.
    let o = a.open((8, 2), 0, 1 << 40, (77, 77)).unwrap();
    assert!(!o.created);
    assert_eq!(o.slot.id, y);
    // A half-done open (the ledger written, `opens` not: its process
    // died under the lock) is recounted by the next holder that took
    // the lock over.
    a.ledger(1, 0).fetch_add(1, Ordering::Relaxed);
    let _g = a.head().lock.lock();
    a.audit();
    drop(_g);
    assert_eq!(a.opens(x), 2);
    assert_eq!(a.forget_process(1), 1);
    assert_eq!(a.opens(x), 1);
}

#[test]
fn racing_opens_of_one_file_share_one_slot() {
    let m = Shared::new();
    // SAFETY: as above.
    let (a, b) = unsafe { (FileTable::over(m.a, Some(0)), FileTable::over(m.b, Some(1))) };
    for round in 0..200u64 {
        let ident = (1, round);
        let ids: Vec<(u64, bool)> = std::thread::scope(|s| {
            let ts: Vec<_> = [&a, &b, &a, &b]
                .into_iter()
                .map(|t| {
                    s.spawn(move || {
                        let o = t.open(ident, 0, 1 << 40, (0, 0)).unwrap();
                        (o.slot.id, o.created)
                    })
                })
                .collect();
            ts.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|x| x.0 == ids[0].0), "{ids:?}");
        assert_eq!(ids.iter().filter(|x| x.1).count(), 1, "{ids:?}");
        assert_eq!(a.opens(ids[0].0), 4);
    }
}

#[test]
fn a_full_table_is_an_error() {
    let m = Shared::new();
    // SAFETY: as above.
    let a = unsafe { FileTable::over(m.a, Some(0)) };
    for i in 0..MAX_FILES as u64 {
        a.open((2, i), 0, 1 << 40, (0, 0)).unwrap();
    }
    let e = a.open((3, 0), 0, 1 << 40, (0, 0)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
    assert!(e.to_string().contains("file table is full"), "{e}");
}
