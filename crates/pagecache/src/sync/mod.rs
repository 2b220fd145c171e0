//! The one place atomics, fences, locks, yields and parking come from.
//!
//! Building with `RUSTFLAGS="--cfg loom"` swaps in loom's atomics, mutexes,
//! rwlocks and yields, so that `tests/loom.rs` model-checks the code users
//! run: the whole crate builds under loom. Parking sleeps on futex words in
//! hashed wait buckets keyed by address ([`futex`]: the kernel's
//! `page_waitqueue()` hash, in a form that also works between processes);
//! under loom the same buckets run on loom's atomics and the futex becomes
//! a wait for its word to change.
//!
//! Two kinds of shared memory are deliberately *not* modelled, and come
//! from [`unmodelled`]: statistics (counters, lock profiles, fault-injection
//! counts, id generators), which no protocol reads, and the bytes of frames,
//! which are raw memory accessed with per-word atomics (`cache::copy`).
//! Under loom, every copy of frame bytes is done in two halves, each marked
//! on its frame's [`Witness`], so a model can observe a copy torn by a
//! concurrent writer exactly where the seqlock must catch it.

#[cfg(not(loom))]
pub(crate) mod doorbell;
pub mod futex;
pub mod lockstat;
pub(crate) mod waitq;

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// Shared memory loom does not model (see the module docs): std atomics
/// and `parking_lot`'s mutex and condvar, the same with and without
/// `--cfg loom`.
pub(crate) mod unmodelled {
    pub(crate) use parking_lot::{Condvar, Mutex, RwLock};
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicIsize, AtomicU64, AtomicU8, AtomicUsize, Ordering,
    };
}

/// Gives up the CPU: `std::thread::yield_now`, or a loom scheduling point.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// The top of every retry loop that may go round without waiting (a
/// lookup whose frame was recycled or is being freed): a loom scheduling
/// point, nothing otherwise. Loom may return an old value to a relaxed load
/// any number of times, so a loop that re-reads one must let loom switch
/// threads, or it spins forever in the model (it cannot in hardware, where
/// the new value arrives).
#[inline(always)]
pub(crate) fn retry_point() {
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Stands for one frame's bytes (or one file's contents on disk) in loom's
/// eyes (nothing without loom).
///
/// Frame bytes are raw memory that loom does not see, so by itself loom
/// would (a) never run a reader's copy in the middle of a writer's, since
/// the two look independent to its partial-order reduction, and (b) not
/// know when a reader read a writer's bytes, which is what makes the
/// seqlock sound: the reader's Acquire fence synchronizes with the writer's
/// Release fence through those bytes. So every copy is done in halves, and
/// each half is preceded by a relaxed read-modify-write of the frame's
/// witness ([`Witness::touch`]), with no loom operation between it and the
/// half's bytes. RMWs read the latest value, so a reader's half sees a
/// writer's bytes exactly when its RMW reads from (a successor of) the
/// writer's RMW: loom then derives the fence synchronization, and runs
/// both orders of the two. (RMWs, not a load and a yield: a loom thread
/// that yields is not run again until the others block or yield, which
/// hides exactly the interleavings the witness is for.)
///
/// Each open file has one too (`FileShared::disk`), touched before every
/// read, write and length change of the file, so that loom runs, say, a
/// read of the file both before and after a concurrent truncate.
#[derive(Debug, Default)]
pub(crate) struct Witness {
    #[cfg(loom)]
    w: loom::sync::atomic::AtomicUsize,
}

impl Witness {
    /// The witness of every frame without loom (a zero-sized value).
    #[cfg(not(loom))]
    pub(crate) const NONE: Witness = Witness {};

    /// Right before a copier touches the frame's bytes (part of a copy).
    #[inline(always)]
    pub(crate) fn touch(&self) {
        #[cfg(loom)]
        {
            // Relaxed RMW: reads the latest value; the copiers' fences
            // order everything else (see the type's docs).
            self.w.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The rule that no poll of the crate's futures blocks its thread, made
/// checkable: every future of the crate marks its poll with
/// [`polling`], and every blocking wait (parking, a condition variable, a
/// completion a thread waits for, a wait step, a sleep) first calls
/// [`may_block`] with its name, which panics inside a poll, as tokio
/// refuses a `block_on` inside its runtime. Debug builds only (tests, the
/// model check, the cancellation stress); nothing in release builds or
/// under loom (whose threads share one OS thread's locals).
#[cfg(all(debug_assertions, not(loom)))]
mod poll_rule {
    use std::cell::Cell;

    thread_local! {
        /// Polls of the crate's futures under way on this thread.
        static POLLING: Cell<u32> = const { Cell::new(0) };
    }

    /// A poll under way (see [`polling`]).
    #[derive(Debug)]
    pub(crate) struct Polling(());

    impl Drop for Polling {
        fn drop(&mut self) {
            let _ = POLLING.try_with(|p| p.set(p.get() - 1));
        }
    }

    pub(crate) fn polling() -> Polling {
        let _ = POLLING.try_with(|p| p.set(p.get() + 1));
        Polling(())
    }

    #[track_caller]
    pub(crate) fn may_block(what: &str) {
        if POLLING.try_with(|p| p.get()).unwrap_or(0) > 0 {
            panic!(
                "pagecache: blocking wait ({what}) inside a poll of one of its futures: \
                 a future must register its waker and return Pending instead"
            );
        }
    }

    /// Runs `f` as blocking work allowed inside a poll: a future that
    /// falls back to the blocking path on purpose (none today but the
    /// cache's own teardown).
    #[allow(dead_code)]
    pub(crate) fn outside_poll<T>(f: impl FnOnce() -> T) -> T {
        let saved = POLLING.try_with(|p| p.replace(0)).unwrap_or(0);
        let r = f();
        let _ = POLLING.try_with(|p| p.set(saved));
        r
    }
}

#[cfg(not(all(debug_assertions, not(loom))))]
mod poll_rule {
    /// A poll under way (nothing in release builds).
    #[derive(Debug)]
    pub(crate) struct Polling(());

    #[inline(always)]
    pub(crate) fn polling() -> Polling {
        Polling(())
    }

    #[inline(always)]
    pub(crate) fn may_block(_what: &str) {}

    #[allow(dead_code)]
    #[inline(always)]
    pub(crate) fn outside_poll<T>(f: impl FnOnce() -> T) -> T {
        f()
    }
}

pub(crate) use poll_rule::{may_block, polling};

/// One step of a bounded busy-wait: a CPU pause for the first rounds, then a
/// yield so that a preempted thread we wait for gets the CPU back (on an
/// oversubscribed machine pure spinning burns whole time slices). Under
/// loom, always a yield (loom requires it of spin loops).
#[inline]
pub(crate) fn spin(round: &mut u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *round += 1;
        if *round < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// One step of a wait for something that ends on its own but may take a
/// while (I/O in flight, another thread's round of work): a yield for the
/// first 64 rounds, then a 50 µs sleep, so a long wait costs no CPU the
/// awaited thread needs. Under loom, a yield.
pub(crate) fn wait_step(round: &mut u32) {
    may_block("a wait step for work in flight");
    *round = round.saturating_add(1);
    #[cfg(not(loom))]
    if *round >= 64 {
        std::thread::sleep(std::time::Duration::from_micros(50));
        return;
    }
    yield_now();
}

/// Sleeps on the wait bucket hashed from `key` (an object's address) while
/// `still_blocked()` holds (protocol 5.10, [`futex`]).
///
/// `still_blocked` is evaluated after the sleeper announced itself, and
/// every waker calls [`unpark_all`] on the same key *after* changing the
/// state the predicate reads, so a wake-up cannot be lost between the check
/// and the sleep. Spurious returns are allowed: callers loop and re-check.
/// Objects in a shared region ([`futex::register_region`]) are waited on
/// and woken across processes.
#[track_caller]
pub(crate) fn park(key: usize, still_blocked: impl Fn() -> bool) {
    may_block("park");
    futex::park(key, still_blocked);
}

/// Wakes every thread parked on `key` (and, where the key's bucket is
/// shared with others, theirs: they re-check).
#[inline]
pub(crate) fn unpark_all(key: usize) {
    futex::unpark_all(key);
}

/// A mutex whose `lock` returns the guard directly: a futex word
/// ([`futex::FutexMutex`], 5.10: it excludes and wakes across processes
/// when it lies in a registered shared region) normally, loom's (modelled)
/// mutex under `--cfg loom`. With the `lockstat` feature it
/// counts acquisitions, contention, wait and hold times per [`LockClass`];
/// without it the class is not even stored.
#[derive(Debug)]
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: lock_api::Mutex<futex::FutexMutex, T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
    #[cfg(all(feature = "lockstat", not(loom)))]
    class: Class,
}

pub(crate) use lockstat::LockClass;

#[cfg(all(feature = "lockstat", not(loom)))]
#[derive(Debug, Clone, Copy)]
struct Class(LockClass);

/// The raw guard of [`Mutex`] (the futex word's, 5.10).
#[cfg(not(loom))]
pub(crate) type RawGuard<'a, T> = lock_api::MutexGuard<'a, futex::FutexMutex, T>;
#[cfg(all(not(feature = "lockstat"), not(loom)))]
pub(crate) type MutexGuard<'a, T> = RawGuard<'a, T>;
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;
/// A mutex guard that records its hold time (`lockstat`).
#[cfg(all(feature = "lockstat", not(loom)))]
pub(crate) type MutexGuard<'a, T> = Held<RawGuard<'a, T>>;

/// A guard of a profiled lock: records the hold time when dropped
/// (`lockstat` only).
#[cfg(all(feature = "lockstat", not(loom)))]
pub(crate) struct Held<G> {
    g: G,
    class: LockClass,
    since: std::time::Instant,
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<G: std::ops::Deref> std::ops::Deref for Held<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.g
    }
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<G: std::ops::DerefMut> std::ops::DerefMut for Held<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.g
    }
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<G> Drop for Held<G> {
    fn drop(&mut self) {
        lockstat::released(self.class, self.since);
    }
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl<G> std::fmt::Debug for Held<G> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Held")
    }
}

/// Profiles one acquisition: `try_get` first (uncontended), else times
/// `get` (contended).
#[cfg(all(feature = "lockstat", not(loom)))]
#[inline]
fn profiled<G>(
    class: LockClass,
    try_get: impl FnOnce() -> Option<G>,
    get: impl FnOnce() -> G,
) -> Held<G> {
    let g = match try_get() {
        Some(g) => {
            lockstat::acquired(class, None);
            g
        }
        None => {
            let t = std::time::Instant::now();
            let g = get();
            lockstat::acquired(class, Some(t));
            g
        }
    };
    Held {
        g,
        class,
        since: std::time::Instant::now(),
    }
}

impl<T> Mutex<T> {
    /// A mutex profiled as `class` (with `lockstat`).
    #[allow(unused_variables)] // `class` is only kept with lockstat
    pub(crate) fn with_class(v: T, class: LockClass) -> Self {
        Mutex {
            #[cfg(not(loom))]
            inner: lock_api::Mutex::new(v),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(v),
            #[cfg(all(feature = "lockstat", not(loom)))]
            class: Class(class),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(all(feature = "lockstat", not(loom)))]
        return profiled(self.class.0, || self.inner.try_lock(), || self.inner.lock());
        #[cfg(all(not(feature = "lockstat"), not(loom)))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().unwrap();
    }

    /// The lock if it is free right now.
    #[cfg_attr(loom, allow(dead_code))]
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(all(feature = "lockstat", not(loom)))]
        return self.inner.try_lock().map(|g| {
            lockstat::acquired(self.class.0, None);
            Held {
                g,
                class: self.class.0,
                since: std::time::Instant::now(),
            }
        });
        #[cfg(all(not(feature = "lockstat"), not(loom)))]
        return self.inner.try_lock();
        #[cfg(loom)]
        return self.inner.try_lock().ok();
    }
}

impl<T> Mutex<T> {
    /// The tag of the holder's process in the lock's word (5.14 R1), if
    /// the lock is held: for a recovery that looks for what a dead
    /// process held. Context: any.
    #[cfg(not(loom))]
    pub(crate) fn holder(&self) -> Option<u32> {
        // SAFETY: only a look at the word (no lock or unlock through it).
        unsafe { self.inner.raw() }.holder()
    }

    /// [`Mutex::try_lock`], or the lock taken over at once from a holder
    /// whose process died (5.14 R3; [`futex::took_over`] tells which): for
    /// a caller that skips a lock it finds held, and would otherwise skip
    /// one a dead process left held for ever. Under loom, `try_lock`.
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn try_lock_or_take_over(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(not(loom))]
        {
            // (L1 first, as `try_lock`'s.) SAFETY: `raw` is unsafe because
            // unlocking through it would break a guard's contract; this
            // only locks through it, and makes the guard only once the
            // lock is held.
            if !unsafe { self.inner.raw() }.try_lock_or_take_over() {
                return None;
            }
            // SAFETY: the lock is held by this thread (taken just above),
            // and the guard made here is its only one.
            let g = unsafe { self.inner.make_guard_unchecked() };
            #[cfg(feature = "lockstat")]
            {
                lockstat::acquired(self.class.0, None);
                Some(Held {
                    g,
                    class: self.class.0,
                    since: std::time::Instant::now(),
                })
            }
            #[cfg(not(feature = "lockstat"))]
            Some(g)
        }
        #[cfg(loom)]
        self.try_lock()
    }
}

/// A condition variable for [`Mutex`]: a futex word of its own (5.10),
/// which works between processes like the mutex when both lie in a
/// registered shared region; loom's (modelled) under `--cfg loom`. Loom's
/// timed wait never times out, so in a model a wake-up that is never sent
/// ends in a deadlock loom reports, where a timeout would hide it.
///
/// A waiter counts itself and reads the sequence word under the mutex,
/// then unlocks and sleeps while the word holds what it read; a notifier
/// bumps the word and wakes only if someone counted itself. Notifiers
/// change the state waiters test under the same mutex (the usual contract;
/// they may notify after unlocking it), so a waiter's count and read happen
/// before a notifier's look at them, or the waiter saw the state change and
/// does not wait.
pub(crate) struct Condvar {
    #[cfg(not(loom))]
    seq: AtomicU32,
    #[cfg(not(loom))]
    waiters: AtomicU32,
    #[cfg(loom)]
    inner: loom::sync::Condvar,
}

impl std::fmt::Debug for Condvar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Condvar")
    }
}

impl Condvar {
    pub(crate) fn new() -> Self {
        Condvar {
            #[cfg(not(loom))]
            seq: AtomicU32::new(0),
            #[cfg(not(loom))]
            waiters: AtomicU32::new(0),
            #[cfg(loom)]
            inner: loom::sync::Condvar::new(),
        }
    }

    /// Releases `g`'s lock, waits for a notification (spurious wake-ups
    /// happen), and takes the lock again. Context: sleeps.
    pub(crate) fn wait<'a, T>(&self, g: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_for(g, None)
    }

    /// As [`Condvar::wait`], for at most `limit` when given (never timing
    /// out under loom). Context: sleeps.
    #[allow(unused_mut, unused_variables)]
    pub(crate) fn wait_for<'a, T>(
        &self,
        mut g: MutexGuard<'a, T>,
        limit: Option<std::time::Duration>,
    ) -> MutexGuard<'a, T> {
        may_block("a condition variable");
        #[cfg(loom)]
        return self.inner.wait(g).unwrap();
        #[cfg(not(loom))]
        {
            #[cfg(feature = "lockstat")]
            let raw = &mut g.g;
            #[cfg(not(feature = "lockstat"))]
            let raw = &mut g;
            // Relaxed: under the mutex, whose unlock (Release) orders them
            // before a notifier's lock.
            self.waiters.fetch_add(1, Ordering::Relaxed);
            let seq = self.seq.load(Ordering::Relaxed);
            RawGuard::unlocked(raw, || futex::wait_word(&self.seq, seq, limit));
            self.waiters.fetch_sub(1, Ordering::Relaxed);
            g
        }
    }

    /// Wakes one waiter. Context: any (the state change under the mutex).
    pub(crate) fn notify_one(&self) {
        #[cfg(loom)]
        self.inner.notify_one();
        #[cfg(not(loom))]
        self.notify(1);
    }

    /// Wakes every waiter. Context: any (the state change under the mutex).
    pub(crate) fn notify_all(&self) {
        #[cfg(loom)]
        self.inner.notify_all();
        #[cfg(not(loom))]
        self.notify(i32::MAX);
    }

    #[cfg(not(loom))]
    fn notify(&self, n: i32) {
        // Relaxed: a waiter's count and read of `seq` happened before it
        // unlocked the mutex, and the notifier changed the state under that
        // mutex before coming here, so both are visible (or the waiter saw
        // the change and is not waiting).
        self.seq.fetch_add(1, Ordering::Relaxed);
        if self.waiters.load(Ordering::Relaxed) != 0 {
            futex::wake_word(&self.seq, n);
        }
    }
}

/// A reader-writer lock profiled per [`LockClass`] like [`Mutex`] (shared
/// and exclusive acquisitions may be given different classes): the file
/// registry and seed 004's two-mode LRU lock. Loom's rwlock under loom.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct RwLock<T> {
    inner: parking_lot::RwLock<T>,
    #[cfg(feature = "lockstat")]
    classes: (Class, Class),
}

#[cfg(all(not(feature = "lockstat"), not(loom)))]
pub(crate) type ReadGuard<'a, T> = parking_lot::RwLockReadGuard<'a, T>;
#[cfg(all(not(feature = "lockstat"), not(loom)))]
pub(crate) type WriteGuard<'a, T> = parking_lot::RwLockWriteGuard<'a, T>;
#[cfg(all(feature = "lockstat", not(loom)))]
pub(crate) type ReadGuard<'a, T> = Held<parking_lot::RwLockReadGuard<'a, T>>;
#[cfg(all(feature = "lockstat", not(loom)))]
pub(crate) type WriteGuard<'a, T> = Held<parking_lot::RwLockWriteGuard<'a, T>>;

#[cfg(not(loom))]
impl<T> RwLock<T> {
    /// A lock profiled as `shared` when read-locked and `exclusive` when
    /// write-locked (with `lockstat`).
    #[allow(unused_variables)] // the classes are only kept with lockstat
    pub(crate) fn with_classes(v: T, shared: LockClass, exclusive: LockClass) -> Self {
        RwLock {
            inner: parking_lot::RwLock::new(v),
            #[cfg(feature = "lockstat")]
            classes: (Class(shared), Class(exclusive)),
        }
    }

    #[inline]
    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        #[cfg(feature = "lockstat")]
        return profiled(
            self.classes.0 .0,
            || self.inner.try_read(),
            || self.inner.read(),
        );
        #[cfg(not(feature = "lockstat"))]
        return self.inner.read();
    }

    /// [`RwLock::write`] without waiting.
    #[inline]
    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        #[cfg(feature = "lockstat")]
        return self
            .inner
            .try_write()
            .map(|g| profiled(self.classes.1 .0, || Some(g), || unreachable!()));
        #[cfg(not(feature = "lockstat"))]
        return self.inner.try_write();
    }

    #[inline]
    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        #[cfg(feature = "lockstat")]
        return profiled(
            self.classes.1 .0,
            || self.inner.try_write(),
            || self.inner.write(),
        );
        #[cfg(not(feature = "lockstat"))]
        return self.inner.write();
    }
}

/// See the non-loom [`RwLock`].
#[cfg(loom)]
#[derive(Debug)]
pub(crate) struct RwLock<T> {
    inner: loom::sync::RwLock<T>,
}

#[cfg(loom)]
pub(crate) type ReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
#[cfg(loom)]
pub(crate) type WriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

#[cfg(loom)]
impl<T> RwLock<T> {
    pub(crate) fn with_classes(v: T, _shared: LockClass, _exclusive: LockClass) -> Self {
        RwLock {
            inner: loom::sync::RwLock::new(v),
        }
    }

    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        self.inner.read().unwrap()
    }

    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        self.inner.write().unwrap()
    }

    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        self.inner.try_write().ok()
    }
}

/// Times a wait of `class` (page latches) when `lockstat` is on; the
/// returned token records it when dropped. Free otherwise.
#[inline]
#[allow(unused_variables)]
pub(crate) fn wait_timer(class: LockClass) -> WaitTimer {
    WaitTimer {
        #[cfg(all(feature = "lockstat", not(loom)))]
        t: (class, std::time::Instant::now()),
    }
}

/// See [`wait_timer`].
pub(crate) struct WaitTimer {
    #[cfg(all(feature = "lockstat", not(loom)))]
    t: (LockClass, std::time::Instant),
}

#[cfg(all(feature = "lockstat", not(loom)))]
impl Drop for WaitTimer {
    fn drop(&mut self) {
        lockstat::waited(self.t.0, self.t.1);
    }
}
