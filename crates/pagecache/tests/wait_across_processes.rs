//! The blocking waits of a frame (its latch, a latch holder's wait for pins
//! to drain) between two processes, and a future's wait for a latch
//! (protocol 5.13: the region's mailboxes and the doorbell thread): a frame descriptor and a wait table in
//! a shared mapping (a memfd each process maps at its own address), the
//! table registered over it in both (protocol 5.10). One process sleeps in
//! the real descriptor code, the other wakes it through its own transitions;
//! the sleeper is seen asleep in the table before it is woken, so the
//! wake-up really crosses the processes. A watchdog fails a test whose
//! sleeper is never woken.
//!
//! The second process is this test binary again, running the ignored
//! `child` entry with the memfd's number in its environment.
#![cfg(not(loom))]

mod common;
use common::{reap, spawn_child, wait_until};
use pagecache::internals::state::{FrameDesc, PinKind, Released, State};
use pagecache::internals::wait::{
    register_region, unregister_region, Member, SharedMutex, WaitTable,
};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

const LEN: usize = 1 << 20;
const DESC_AT: usize = 64 << 10;
const CTL_AT: usize = DESC_AT + 4096;
const OWNER: u64 = 7;
const INDEX: u64 = 3;

/// The shared mapping: the table at 0, the descriptor, control words.
struct Shared {
    base: *mut u8,
}

impl Shared {
    /// The mapping, registered with `mailbox` as this process's (5.13).
    fn map_as(fd: i32, mailbox: Option<usize>) -> Shared {
        // SAFETY: a fresh shared mapping of the memfd (LEN bytes, sized by
        // the creator), checked against MAP_FAILED; unmapped in Drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let base = p as *mut u8;
        assert!(std::mem::size_of::<WaitTable>() <= DESC_AT);
        // SAFETY: the table lies in the mapping, which stays until Drop,
        // where the region is unregistered first.
        assert!(unsafe {
            register_region(
                base as usize,
                LEN,
                base as *const WaitTable,
                mailbox.map(Member::mailbox),
            )
        });
        Shared { base }
    }

    fn table(&self) -> &WaitTable {
        // SAFETY: zeroed memory is an empty table (its docs); mapped for
        // `self`'s life.
        unsafe { &*(self.base as *const WaitTable) }
    }

    fn desc(&self) -> &FrameDesc {
        // SAFETY: the creator wrote a FrameDesc there before any child
        // started; it lives as long as the mapping.
        unsafe { &*(self.base.add(DESC_AT) as *const FrameDesc) }
    }

    fn ctl(&self, i: usize) -> &AtomicU32 {
        // SAFETY: aligned words inside the mapping, zero at creation.
        unsafe { &*(self.base.add(CTL_AT + 4 * i) as *const AtomicU32) }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: nothing of this process waits on the region any more;
        // then the mapping made in `map`.
        unsafe {
            unregister_region(self.base as usize);
            libc::munmap(self.base as *mut libc::c_void, LEN);
        }
    }
}

/// The cache's mutex at this offset of the mapping (zeroed: unlocked, 0).
const MUTEX_AT: usize = CTL_AT + 1024;
const ROUNDS: u64 = 200_000;

impl Shared {
    fn mutex(&self) -> &SharedMutex<u64> {
        // SAFETY: zeroed memory inside the mapping is an unlocked mutex
        // around 0 (its docs); aligned; lives as long as the mapping.
        unsafe { &*(self.base.add(MUTEX_AT) as *const SharedMutex<u64>) }
    }
}

// Control words.
const READY: usize = 0;
const GO: usize = 1;
const DONE: usize = 2;

/// A memfd (inherited by children: no CLOEXEC) with a free frame holding
/// page (OWNER, INDEX), cached, the cache's reference only.
fn create() -> (i32, Shared) {
    // SAFETY: a plain syscall with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"pagecache-wait-test".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: plain syscall on our fd.
    assert_eq!(unsafe { libc::ftruncate(fd, LEN as libc::off_t) }, 0);
    let sh = Shared::map_as(fd, Some(0));
    // SAFETY: the descriptor's place in the fresh mapping, aligned to 64.
    unsafe { std::ptr::write(sh.base.add(DESC_AT) as *mut FrameDesc, FrameDesc::new()) };
    sh.desc().assign(OWNER, INDEX, State::cached(1));
    (fd, sh)
}

fn spawn(role: &str, fd: i32) -> std::process::Child {
    spawn_child(&[("PC_WAIT_ROLE", role), ("PC_WAIT_FD", &fd.to_string())])
}

/// Reaps the child, which must have passed.
fn reaped_ok(c: std::process::Child) {
    let st = reap(c);
    assert!(st.success(), "the child failed: {st}");
}

/// A future of one process waiting for a latch (registered in its own
/// wait queue, announced in its mailbox) is woken by the unlatch of
/// another process, through the doorbell (5.13).
#[test]
fn a_latch_released_in_one_process_wakes_a_future_in_another() {
    let (fd, sh) = create();
    let d = sh.desc();
    d.try_pin(PinKind::User).unwrap();
    assert!(d.try_latch());
    let child = spawn("future", fd);
    wait_until("the child's future to wait", || {
        sh.ctl(READY).load(Ordering::Acquire) == 1
    });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        sh.ctl(DONE).load(Ordering::Acquire),
        0,
        "woken while latched"
    );
    assert_eq!(d.unlatch_release(), Released::Alive);
    reaped_ok(child);
    assert_eq!(sh.ctl(DONE).load(Ordering::Acquire), 1);
}

/// A process parked for a latch is woken by the unlatch of another.
#[test]
fn a_latch_released_in_one_process_wakes_a_waiter_in_another() {
    let (fd, sh) = create();
    let d = sh.desc();
    d.try_pin(PinKind::User).unwrap();
    assert!(d.try_latch());
    let child = spawn("latch", fd);
    wait_until("the child to start", || {
        sh.ctl(READY).load(Ordering::Acquire) == 1
    });
    // The child is in the table's wait (P1-P5) ...
    wait_until("the child to sleep", || sh.table().sleepers() == 1);
    std::thread::sleep(Duration::from_millis(20));
    // ... and not past it while the latch is held.
    assert_eq!(
        sh.ctl(DONE).load(Ordering::Acquire),
        0,
        "woke while latched"
    );
    assert_eq!(d.unlatch_release(), Released::Alive);
    reaped_ok(child);
    assert_eq!(sh.ctl(DONE).load(Ordering::Acquire), 1);
    assert_eq!(sh.table().sleepers(), 0);
    // SAFETY: our memfd.
    unsafe { libc::close(fd) };
}

/// A latch holder waiting for pins to drain is woken by the release of a
/// pin held by another process.
#[test]
fn a_pin_released_in_one_process_wakes_a_drainer_in_another() {
    let (fd, sh) = create();
    let d = sh.desc();
    let child = spawn("drain", fd);
    // The child holds a pin.
    wait_until("the child's pin", || {
        sh.ctl(READY).load(Ordering::Acquire) == 1
    });
    assert_eq!(d.snapshot().refs(), 2);
    d.try_pin(PinKind::User).unwrap();
    assert!(d.try_latch());
    sh.ctl(GO).store(1, Ordering::Release);
    // The drain: the child releases only once it sees us asleep.
    let (tx, rx) = std::sync::mpsc::channel();
    let base = sh.base as usize;
    std::thread::spawn(move || {
        // SAFETY: the mapping outlives this thread's use: the test waits
        // for the message below (or fails, and the process ends).
        let d = unsafe { &*((base + DESC_AT) as *const FrameDesc) };
        d.wait_drained();
        tx.send(d.snapshot().refs()).unwrap();
    });
    let refs = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the drainer was never woken");
    assert_eq!(
        refs, 2,
        "the holder's pin and the cache's reference are left"
    );
    reaped_ok(child);
    d.unlatch();
    assert_eq!(d.release(), Released::Alive);
    assert_eq!(d.snapshot().refs(), 1);
    // SAFETY: our memfd.
    unsafe { libc::close(fd) };
}

/// Two processes, two threads each, add to one counter under the cache's
/// mutex in shared memory: no increment is lost (the lock excludes across
/// processes) and nobody hangs (its sleepers are woken across processes).
#[test]
fn the_mutex_excludes_and_wakes_across_processes() {
    let (fd, sh) = create();
    let mut child = spawn("mutex", fd);
    wait_until("the child to start", || {
        sh.ctl(READY).load(Ordering::Acquire) == 1
    });
    // A watchdog: a sleeper never woken would hang the adds.
    let (tx, rx) = std::sync::mpsc::channel();
    let m = sh.mutex() as *const SharedMutex<u64> as usize;
    std::thread::spawn(move || {
        // SAFETY: the mapping outlives this thread's use: the test waits
        // for the message below (or fails, and the process ends).
        add_under_the_mutex(unsafe { &*(m as *const SharedMutex<u64>) });
        tx.send(()).unwrap();
    });
    if rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = child.kill();
        panic!("a thread waiting for the mutex was never woken");
    }
    reaped_ok(child);
    assert_eq!(*sh.mutex().lock(), 4 * ROUNDS);
    // SAFETY: our memfd.
    unsafe { libc::close(fd) };
}

fn add_under_the_mutex(m: &SharedMutex<u64>) {
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for i in 0..ROUNDS {
                    let mut g = m.lock();
                    let v = *g;
                    if i % 64 == 0 {
                        // Hold it across a yield now and then, so that
                        // others sleep on it.
                        std::thread::yield_now();
                    }
                    *g = v + 1;
                }
            });
        }
    });
}

/// The other process of the tests above (ignored: the tests run it).
#[test]
#[ignore = "run by the tests above in a second process"]
fn child() {
    let (Ok(role), Ok(fd)) = (std::env::var("PC_WAIT_ROLE"), std::env::var("PC_WAIT_FD")) else {
        eprintln!("child: run by the other tests of this file");
        return;
    };
    let sh = Shared::map_as(fd.parse().unwrap(), Some(1));
    let d = sh.desc();
    match role.as_str() {
        "future" => {
            use pagecache::internals::wait::FutureWait;
            use std::task::{Wake, Waker};
            /// Wakes this thread, once.
            struct Flag(std::thread::Thread, std::sync::atomic::AtomicBool);
            impl Wake for Flag {
                fn wake(self: std::sync::Arc<Self>) {
                    self.1.store(true, Ordering::Release);
                    self.0.unpark();
                }
            }
            let flag = std::sync::Arc::new(Flag(
                std::thread::current(),
                std::sync::atomic::AtomicBool::new(false),
            ));
            let waker = Waker::from(flag.clone());
            let mut reg = FutureWait::default();
            assert!(d.snapshot().is_latched());
            assert!(
                d.poll_unlatched_as(OWNER, INDEX, &mut reg, &waker),
                "a latched page: the future waits"
            );
            sh.ctl(READY).store(1, Ordering::Release);
            let t0 = std::time::Instant::now();
            while !flag.1.load(Ordering::Acquire) {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "the future was never woken by the other process's unlatch"
                );
                std::thread::park_timeout(Duration::from_millis(100));
            }
            assert!(!d.snapshot().is_latched());
            // Polled again: nothing to wait for.
            assert!(!d.poll_unlatched_as(OWNER, INDEX, &mut reg, &waker));
            sh.ctl(DONE).store(1, Ordering::Release);
        }
        "latch" => {
            assert!(d.snapshot().is_latched());
            sh.ctl(READY).store(1, Ordering::Release);
            assert!(!d.wait_unlatched_as(OWNER, INDEX));
            assert!(!d.snapshot().is_latched());
            sh.ctl(DONE).store(1, Ordering::Release);
        }
        "drain" => {
            d.try_pin(PinKind::User).unwrap();
            sh.ctl(READY).store(1, Ordering::Release);
            wait_until("the parent's latch", || {
                sh.ctl(GO).load(Ordering::Acquire) == 1
            });
            wait_until("the parent to sleep", || sh.table().sleepers() == 1);
            std::thread::sleep(Duration::from_millis(20));
            assert!(d.snapshot().is_latched());
            assert_eq!(d.release(), Released::Alive);
        }
        "mutex" => {
            sh.ctl(READY).store(1, Ordering::Release);
            add_under_the_mutex(sh.mutex());
        }
        r => panic!("unknown role {r}"),
    }
}
