//! Sleeping on a key: hashed wait buckets of futex words, which work between
//! processes when their table lives in memory the processes share.
//!
//! [`park`](super::park) and [`unpark_all`](super::unpark_all) key their
//! waits by an object's address, as the kernel's `page_waitqueue()` hash
//! does. A key selects a [`Bucket`] of a [`WaitTable`]: an *event count*
//! (a sequence word the sleepers sleep on with `FUTEX_WAIT`) and the number
//! of sleepers. The kernel keeps the queue of sleeping threads (its futex
//! hash), so a bucket is two 32-bit words and nothing else: no list, no
//! pointer, no lock. That is what lets a table sit in a shared mapping and
//! serve waits between processes, where a process-private parking lot
//! (`parking_lot_core`'s queues of its own threads) cannot.
//!
//! Which table a key uses: an address inside a registered shared region
//! ([`register_region`]: a mapping that carries its own table, such as a
//! cache shared by processes) uses that region's table, keyed by the
//! address's *offset* in the region, with shared futexes (the kernel keys
//! them by the page's backing object, the same in every process); any
//! other address uses the process's own table with private futexes.
//!
//! # Protocol (numbered as in `docs/design.md`, 5.10)
//!
//! A waiter (park), for a predicate `still_blocked` over some atomic state:
//!
//! * P1. `sleepers += 1` on the key's bucket; `fence(SeqCst)`.
//! * P2. `seq = bucket.seq` (Acquire).
//! * P3. If `still_blocked()` is false, go to P5.
//! * P4. `FUTEX_WAIT(&bucket.seq, seq)`: the kernel sleeps only if the word
//!   still holds `seq`, checked under its own hash-bucket lock.
//! * P5. `sleepers -= 1`. Return (the caller re-checks and may park again).
//!
//! A waker (unpark_all), after it changed the state the predicate reads:
//!
//! * K1. `fence(SeqCst)`; if the bucket's `sleepers` is 0, return.
//! * K2. `seq += 1` (Release).
//! * K3. `FUTEX_WAKE(&bucket.seq, all)`.
//!
//! No lost wake-up: the two SeqCst fences (P1, K1) are ordered one way or
//! the other. If K1's comes first, P3 (after P1's fence) reads the state
//! the waker changed before K1, so the waiter does not sleep. If P1's comes
//! first, K1 reads `sleepers > 0` and the waker goes on to K2-K3: either
//! P2 reads K2's increment, and then (Acquire against K2's Release) P3 sees
//! the state change and does not sleep; or P2 read the old `seq`, and P4
//! either finds the word changed (K2 before P4: no sleep) or sleeps before
//! K3's wake, which wakes it (the kernel orders the two under its bucket
//! lock). Every other return is spurious and allowed: keys that hash to one
//! bucket wake each other, and the callers loop.
//!
//! A waker with no sleeper in its bucket pays a fence and a load of a line
//! no one writes (buckets are padded to a line each); the sleepers' count
//! is written only by threads about to sleep.
//!
//! Under loom the futex becomes a wait for the word to change (a yield
//! loop: loom fails a model whose waiter is never woken), the rest is the
//! code above on loom's atomics, with one table.

use super::{fence, AtomicU32, Ordering};

/// Buckets of a table (a power of two). Collisions cost only spurious
/// wake-ups; 256 as the kernel's `PAGE_WAIT_TABLE_SIZE`.
#[cfg(not(loom))]
pub const BUCKETS: usize = 256;
/// Buckets of a table under loom: one, shared by every key. The bucket a
/// key hashes to depends on addresses, which differ between a model's
/// executions, and loom needs each execution to make the same choices;
/// one bucket for all keys is also the case with the most spurious
/// wake-ups.
#[cfg(loom)]
pub const BUCKETS: usize = 1;

/// One event count: sleepers sleep on `seq`, wakers bump it.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub struct Bucket {
    /// The futex word: changed by every wake-up (K2).
    seq: AtomicU32,
    /// Threads between P1 and P5 (in any process).
    sleepers: AtomicU32,
}

/// A table of wait buckets. All zeros is a valid, empty table, so one can
/// be placed in freshly mapped (zeroed) memory shared by processes.
#[derive(Debug)]
#[repr(C)]
pub struct WaitTable {
    buckets: [Bucket; BUCKETS],
    /// The attached processes' mailboxes, for futures woken across
    /// processes (`doorbell.rs`, protocol 5.13).
    #[cfg(not(loom))]
    pub(crate) mail: super::doorbell::Mailboxes,
}

impl Default for WaitTable {
    fn default() -> Self {
        WaitTable {
            buckets: std::array::from_fn(|_| Bucket::default()),
            #[cfg(not(loom))]
            mail: Default::default(),
        }
    }
}

impl WaitTable {
    fn bucket(&self, key: usize) -> &Bucket {
        // Fibonacci hashing (descriptors are 64 bytes apart: the low bits
        // carry little).
        let h = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
        &self.buckets[h as usize & (BUCKETS - 1)]
    }

    /// P1-P5 on `key`'s bucket (see the module docs).
    fn park(
        &self,
        key: usize,
        shared: bool,
        limit: Option<std::time::Duration>,
        still_blocked: impl Fn() -> bool,
    ) {
        let b = self.bucket(key);
        // P1. Relaxed RMW: the fence after it orders it before P2-P3.
        b.sleepers.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        // P2. Acquire: pairs with K2's Release, so a new value means P3
        // sees the waker's state change.
        let seq = b.seq.load(Ordering::Acquire);
        // P3, P4.
        if still_blocked() {
            futex_wait(&b.seq, seq, shared, limit);
        }
        // P5. Relaxed: a waker that reads the old count only wakes a bucket
        // with no sleeper left (spurious, harmless).
        b.sleepers.fetch_sub(1, Ordering::Relaxed);
    }

    /// K1-K3 on `key`'s bucket (see the module docs).
    fn unpark_all(&self, key: usize, shared: bool) {
        let b = self.bucket(key);
        // K1. SeqCst fence: Dekker's pattern with P1 (no lost wake-up).
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence.
        if b.sleepers.load(Ordering::Relaxed) == 0 {
            return;
        }
        // K2. Release: pairs with P2's Acquire.
        b.seq.fetch_add(1, Ordering::Release);
        // K3.
        futex_wake(&b.seq, shared, i32::MAX);
    }

    /// Threads (of any process) now sleeping or about to sleep in this
    /// table, over all buckets (tests; a racy sum).
    pub fn sleepers(&self) -> u32 {
        self.buckets
            .iter()
            // Relaxed: a statistic.
            .map(|b| b.sleepers.load(Ordering::Relaxed))
            .sum()
    }
}

/// Sleeps while `*word == expected`, for at most `limit` when given
/// (returns at once if not; may return spuriously). `shared`: the word may
/// be waited on from other processes.
#[cfg(not(loom))]
pub(crate) fn futex_wait(
    word: &AtomicU32,
    expected: u32,
    shared: bool,
    limit: Option<std::time::Duration>,
) {
    let ts = limit.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    let op = if shared {
        libc::FUTEX_WAIT
    } else {
        libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG
    };
    // SAFETY: `word` is a live, aligned 32-bit atomic for the whole call;
    // FUTEX_WAIT only reads it (atomically, under the kernel's lock) and
    // the timeout (null, or a timespec that outlives the call). EINTR,
    // EAGAIN and ETIMEDOUT are the spurious returns the callers allow.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op, expected, tsp);
    }
}

/// Wakes at most `n` threads sleeping on `word`.
#[cfg(not(loom))]
pub(crate) fn futex_wake(word: &AtomicU32, shared: bool, n: i32) {
    let op = if shared {
        libc::FUTEX_WAKE
    } else {
        libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG
    };
    // SAFETY: as `futex_wait`: the kernel only uses the address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), op, n);
    }
}

/// Loom: waits for the word to change. A waiter nobody wakes spins until
/// loom gives up on the model, which is how a lost wake-up fails it.
#[cfg(loom)]
fn futex_wait(word: &AtomicU32, expected: u32, _shared: bool, _limit: Option<std::time::Duration>) {
    // Acquire: as the real futex's return, the caller re-reads the state.
    while word.load(Ordering::Acquire) == expected {
        loom::thread::yield_now();
    }
}

#[cfg(loom)]
fn futex_wake(_word: &AtomicU32, _shared: bool, _n: i32) {}

// ----- which table a key uses -------------------------------------------------

/// Shared regions registered at most at once in a process.
#[cfg(not(loom))]
const MAX_REGIONS: usize = 8;

/// A registered shared region: `[base, base + len)`, its table at `table`.
/// Immutable once published and never freed (an unregistered one is kept
/// in `REGISTER`'s list: a few words per registration, and registrations
/// are rare), so a lookup racing with an unregistration reads a whole old
/// record or none, never a torn one.
#[cfg(not(loom))]
struct Region {
    base: usize,
    len: usize,
    table: *const WaitTable,
    /// This process's membership, if it is one of the region's processes
    /// (a mailbox, a lock tag, a way to tell a dead holder).
    me: Option<Member>,
}

/// A process's membership of a shared region ([`register_region`]).
#[cfg(not(loom))]
#[derive(Debug, Clone, Copy)]
pub struct Member {
    /// Its mailbox in the region's table (futures, `doorbell.rs`, 5.13).
    pub mailbox: usize,
    /// What its threads write into the [`FutexMutex`] words of the region
    /// they hold (5.14): at least 2 (1 is the tag of a process with no
    /// membership) and below 2^31.
    pub tag: u32,
    /// Whether the process that held a lock with tag `tag` is gone (dead,
    /// or detached): given the region's base and the tag. Called by a
    /// waiter that waited `HOLDER_CHECK` (200 ms) on a region's lock.
    pub gone: fn(usize, u32) -> bool,
}

#[cfg(not(loom))]
impl Member {
    /// A member with a mailbox only: its locks carry no tag a waiter could
    /// check, so they are never taken over.
    pub fn mailbox(mailbox: usize) -> Member {
        Member {
            mailbox,
            tag: NO_TAG,
            gone: |_, _| false,
        }
    }
}

#[cfg(not(loom))]
#[allow(clippy::declare_interior_mutable_const)]
const NO_REGION: std::sync::atomic::AtomicPtr<Region> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

/// The registered regions (null: a free slot).
#[cfg(not(loom))]
static REGIONS: [std::sync::atomic::AtomicPtr<Region>; MAX_REGIONS] = [NO_REGION; MAX_REGIONS];

/// Slots ever used (`0..N` may hold regions): 0 in a process with no shared
/// region, so the lookup costs one load of a line nobody writes.
#[cfg(not(loom))]
static REGIONS_N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Serializes registration (rare: a shared mapping's creation and end),
/// and keeps the records of unregistered regions (see [`Region`]), as
/// addresses.
#[cfg(not(loom))]
static REGISTER: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// The doorbell threads of registered regions: base, stop flag, thread.
#[cfg(not(loom))]
type Doorbell = (
    usize,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    std::thread::JoinHandle<()>,
);

#[cfg(not(loom))]
static DOORBELLS: std::sync::Mutex<Vec<Doorbell>> = std::sync::Mutex::new(Vec::new());

/// The process's own table (private futexes).
#[cfg(not(loom))]
fn local() -> &'static WaitTable {
    static T: std::sync::OnceLock<WaitTable> = std::sync::OnceLock::new();
    T.get_or_init(WaitTable::default)
}

#[cfg(loom)]
fn local() -> &'static WaitTable {
    loom::lazy_static! {
        static ref T: WaitTable = WaitTable::default();
    }
    &T
}

/// The registered region that holds address `addr`, if any.
#[cfg(not(loom))]
#[inline]
fn find_region(addr: usize) -> Option<&'static Region> {
    // Relaxed: an object of a region is reached only through something
    // its registration happens-before (the segment is handed out after it
    // registers), so this load sees N cover its slot; the slot's own
    // Acquire load below publishes the record.
    let n = REGIONS_N.load(Ordering::Relaxed);
    REGIONS[..n].iter().find_map(|slot| {
        // Acquire: pairs with `register_region`'s Release store.
        let r = slot.load(Ordering::Acquire);
        // SAFETY: a published record is immutable and never freed.
        let r = unsafe { r.as_ref() }?;
        (addr.wrapping_sub(r.base) < r.len).then_some(r)
    })
}

#[cfg(not(loom))]
impl Region {
    /// Its table.
    fn table(&self) -> &'static WaitTable {
        // SAFETY: `register_region`'s contract: the table stays mapped
        // until `unregister_region`, which the owner calls only when no
        // object of the region can be waited on or woken.
        unsafe { &*self.table }
    }
}

/// The table, the key within it and whether its futexes are shared, for
/// an object at address `addr`.
#[inline]
fn resolve(addr: usize) -> (&'static WaitTable, usize, bool) {
    #[cfg(not(loom))]
    if let Some(r) = find_region(addr) {
        return (r.table(), addr - r.base, true);
    }
    (local(), addr, false)
}

/// Makes the waits on objects in `[base, base + len)` use `table` (which
/// lies in that memory or in other memory shared the same way), keyed by
/// offset from `base`, with shared futexes: processes that map the same
/// memory, each at its own address, and register it wait on and wake each
/// other.
///
/// # Safety
///
/// `table` must stay valid (mapped, not moved) until
/// [`unregister_region`] of `base`, and nothing in the region may be waited
/// on or woken after that call; objects in it may be waited on or woken
/// only by threads that reached them through something this call
/// happens-before (else their wait may take the process's own table).
/// Regions must not overlap.
#[cfg(not(loom))]
pub unsafe fn register_region(
    base: usize,
    len: usize,
    table: *const WaitTable,
    member: Option<Member>,
) -> bool {
    let _g = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    // Relaxed: under REGISTER.
    let n = REGIONS_N.load(Ordering::Relaxed);
    let Some(i) = (0..MAX_REGIONS).find(|&i| REGIONS[i].load(Ordering::Relaxed).is_null()) else {
        return false;
    };
    let member = member.filter(|m| m.mailbox < super::doorbell::MAILBOXES && m.tag < 1 << 31);
    if let Some(me) = member.map(|m| m.mailbox) {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (t, s2) = (table as usize, stop.clone());
        let spawned = std::thread::Builder::new()
            .name("pagecache-doorbell".into())
            .spawn(move || {
                // SAFETY: the caller keeps the table mapped until
                // `unregister_region`, which stops and joins this thread
                // first.
                let table = unsafe { &*(t as *const WaitTable) };
                super::doorbell::serve(table, base, len, me, &s2)
            });
        match spawned {
            Ok(h) => DOORBELLS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((base, stop, h)),
            Err(_) => return false,
        }
    }
    let r = Box::into_raw(Box::new(Region {
        base,
        len,
        table,
        me: member,
    }));
    // Release: publishes the record to `resolve`'s Acquire load.
    REGIONS[i].store(r, Ordering::Release);
    if i >= n {
        // Relaxed: see `resolve`.
        REGIONS_N.store(i + 1, Ordering::Relaxed);
    }
    true
}

/// Ends [`register_region`] of the region at `base` (nothing if none).
/// Its record is kept: a lookup racing with this reads it whole.
///
/// # Safety
///
/// No thread of this process may be waiting on, or about to wake, an object
/// of that region (its users are gone).
#[cfg(not(loom))]
pub unsafe fn unregister_region(base: usize) {
    let mut retired = REGISTER.lock().unwrap_or_else(|e| e.into_inner());
    for slot in &REGIONS {
        // Relaxed: under REGISTER.
        let r = slot.load(Ordering::Relaxed);
        // SAFETY: a published record is immutable and never freed.
        if !r.is_null() && unsafe { (*r).base } == base {
            slot.store(std::ptr::null_mut(), Ordering::Release);
            retired.push(r as usize);
            // SAFETY: as above.
            let (table, me) = unsafe { ((*r).table, (*r).me.map(|m| m.mailbox)) };
            drop(retired);
            if let Some(me) = me {
                let mut bells = DOORBELLS.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(k) = bells.iter().position(|d| d.0 == base) {
                    let (_, stop, h) = bells.swap_remove(k);
                    drop(bells);
                    // SAFETY: the table is still mapped (the caller's
                    // contract) until this returns.
                    super::doorbell::stop_serving(unsafe { &*table }, me, &stop);
                    // Not from the doorbell thread itself (a waker it ran
                    // may drop the last user of the region): it returns
                    // once this call does, seeing `stop`.
                    if h.thread().id() != std::thread::current().id() {
                        let _ = h.join();
                    }
                }
            }
            return;
        }
    }
}

/// For an object at `addr` in a registered region: the region's table,
/// the object's offset in the region and this process's mailbox there
/// (futures across processes, `doorbell.rs`).
#[cfg(not(loom))]
#[inline]
pub(crate) fn region_of(addr: usize) -> Option<(&'static WaitTable, usize, Option<usize>)> {
    find_region(addr).map(|r| (r.table(), addr - r.base, r.me.map(|m| m.mailbox)))
}

/// Sleeps on the wait bucket of the object at `addr` while
/// `still_blocked()` holds (P1-P5). The waker changes the state the
/// predicate reads, then calls [`unpark_all`] with the same `addr`.
/// Spurious returns are allowed: callers loop and re-check.
#[inline]
pub(crate) fn park(addr: usize, still_blocked: impl Fn() -> bool) {
    let (t, key, shared) = resolve(addr);
    t.park(key, shared, None, still_blocked);
}

/// [`park`] for at most `limit` (a spurious return, to the caller).
#[cfg(not(loom))]
#[inline]
pub(crate) fn park_for(addr: usize, limit: std::time::Duration, still_blocked: impl Fn() -> bool) {
    let (t, key, shared) = resolve(addr);
    t.park(key, shared, Some(limit), still_blocked);
}

/// For an object at `addr` in a registered region this process is a
/// member of (with a way to tell dead holders): the region's base and the
/// membership (5.14: latch holders' tags).
#[cfg(not(loom))]
#[inline]
pub(crate) fn member_at(addr: usize) -> Option<(usize, Member)> {
    find_region(addr).and_then(|r| r.me.filter(|m| m.tag != NO_TAG).map(|m| (r.base, m)))
}

/// Wakes every thread parked on `addr`'s bucket (K1-K3), in any process
/// when the object lies in a registered shared region.
#[inline]
pub(crate) fn unpark_all(addr: usize) {
    let (t, key, shared) = resolve(addr);
    t.unpark_all(key, shared);
}

// ----- a word of its own: locks and condition variables ------------------------

/// Whether the word at `addr` lies in a registered shared region.
#[cfg(not(loom))]
fn in_region(addr: usize) -> bool {
    find_region(addr).is_some()
}

/// Sleeps while `*word == expected`, on the word itself (not a bucket), for
/// at most `limit`; across processes when the word lies in a registered
/// shared region. Spurious returns are allowed.
#[cfg(not(loom))]
pub(crate) fn wait_word(word: &AtomicU32, expected: u32, limit: Option<std::time::Duration>) {
    futex_wait(word, expected, in_region(word.as_ptr() as usize), limit);
}

/// Wakes at most `n` sleepers of [`wait_word`] on `word`.
#[cfg(not(loom))]
pub(crate) fn wake_word(word: &AtomicU32, n: i32) {
    futex_wake(word, in_region(word.as_ptr() as usize), n);
}

/// The lock tag of a process that is no member of the word's region (or
/// of a word in no region): its holds are never taken over.
#[cfg(not(loom))]
const NO_TAG: u32 = 1;

/// How long a waiter on a region's lock sleeps before it asks whether the
/// holder's process is gone (5.14 R2): a dead holder's lock is taken over
/// within about this long after the death is seen.
#[cfg(not(loom))]
pub const HOLDER_CHECK: std::time::Duration = std::time::Duration::from_millis(200);

/// A waiter's watch on who holds what it waits for (5.14 R2, L2): a
/// lock's or a latch's holder tag, seen the same for `HOLDER_CHECK`, is
/// asked about then (and again every `HOLDER_CHECK` while it stays).
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct HolderWatch(Option<(u32, std::time::Instant)>);

#[cfg(not(loom))]
impl HolderWatch {
    /// Whether `holder` (a tag other than the "no tag" ones), seen now,
    /// has been the holder for `HOLDER_CHECK` and its process is gone, by
    /// the region's `gone` (`base`: the region's base).
    pub(crate) fn gone(&mut self, m: &Member, base: usize, holder: u32) -> bool {
        let now = std::time::Instant::now();
        match self.0 {
            Some((h, t0)) if h == holder => {
                if now.duration_since(t0) < HOLDER_CHECK {
                    return false;
                }
                if (m.gone)(base, holder) {
                    return true;
                }
                self.0 = Some((holder, now));
            }
            _ => self.0 = Some((holder, now)),
        }
        false
    }
}

#[cfg(not(loom))]
std::thread_local! {
    /// Set by a lock that took over from a dead holder (5.14 R3), until
    /// [`took_over`] reads it.
    static TOOK_OVER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread's last [`FutexMutex`] lock since the previous call
/// took the lock over from a holder whose process died (5.14 R3): what the
/// lock guards may be half-changed, and the caller repairs it. Clears it.
#[cfg(not(loom))]
pub(crate) fn took_over() -> bool {
    TOOK_OVER.with(|t| t.replace(false))
}

/// A mutex that is one 32-bit word and works between processes when it
/// lies in a registered shared region (Drepper's "Futexes Are Tricky",
/// mutex 2, with the holder's tag in the word): 0 free, else `tag << 1 |
/// c`, where `tag` names the holder's process (its [`Member::tag`] in the
/// word's region; 1 outside regions and for non-members) and `c`
/// says there may be sleepers.
///
/// * L1. CAS 0 -> `tag << 1` (Acquire): taken.
/// * L2. While `c` is clear (no sleeper), a bounded spin: pauses, then
///   yields, retrying L1.
/// * L3. Load the word `w`. 0: CAS 0 -> `tag << 1 | 1` (Acquire; taken,
///   with `c` set: the unlock may wake someone for nothing, which is
///   allowed). `c` clear: CAS `w -> w | 1`. Either CAS failing: L3 again.
///   (With tag 1, as Drepper's: swap in `1 << 1 | 1`; taken if it was 0.)
/// * L4. `FUTEX_WAIT(word, w | 1)`, then L3 (in a region whose member can
///   tell a dead holder, for at most `HOLDER_CHECK`, then 5.14 R2; with
///   tag 1, for at most `HOLDER_CHECK` too, see below).
/// * U1. Swap in 0 (Release); if the old value had `c`, `FUTEX_WAKE` one.
///
/// No lost wake-up: a sleeper sleeps only while the word has `c` (the
/// kernel checks under its lock), and a word with `c` means the unlock
/// that clears it wakes one sleeper; the woken one sets `c` again at L3,
/// so the sleepers left are woken by its own unlock. That holds when the
/// waker and the sleeper agree on whether the word is shared: a process
/// that uses the word after its region was unregistered (a bug: its
/// detach must not take a region lock then) would sleep on a private
/// futex no other process wakes, so tag 1's sleeps are bounded as well.
///
/// A holder whose process died (protocol 5.14, `docs/design.md`):
///
/// * R1. A member's holds carry its tag, which its segment can map to a
///   process-table slot and generation ([`Member::gone`]).
/// * R2. A waiter that slept `HOLDER_CHECK` with the word unchanged asks
///   `gone(tag)`; only a process that died (or detached, which it does
///   holding no lock) answers yes, never a slow one.
/// * R3. Gone: CAS `w | 1 -> mytag << 1 | 1` (Acquire): the lock is the
///   waiter's, `took_over` says so, and the caller repairs what the dead
///   holder may have left half-done. Of several waiters one wins the CAS;
///   the others see a live tag and wait on.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct FutexMutex {
    word: AtomicU32,
}

#[cfg(not(loom))]
impl FutexMutex {
    /// This process's tag for this lock (R1).
    #[inline]
    fn tag(&self) -> u32 {
        member_at(self.word.as_ptr() as usize).map_or(NO_TAG, |(_, m)| m.tag)
    }

    #[cold]
    fn lock_slow(&self, tag: u32) {
        // L2: while no one sleeps, a few rounds of exponential pauses, then
        // yields (parking_lot's `SpinWait`): a holder on another CPU lets
        // go within the pauses; one that was preempted gets the CPU back
        // in a yield; past that, sleep.
        for round in 0..SPIN_ROUNDS {
            // Relaxed: a hint; the CAS decides.
            let w = self.word.load(Ordering::Relaxed);
            if w == 0 {
                if self
                    .word
                    .compare_exchange(0, tag << 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            if w & 1 != 0 {
                break;
            }
            if round < 3 {
                for _ in 0..(2 << round) {
                    std::hint::spin_loop();
                }
            } else {
                std::thread::yield_now();
            }
        }
        if tag == NO_TAG {
            // L3-L4 with one tag for every holder (no region, or no member
            // of it): a swap both sets `c` and, from 0, takes the lock, as
            // in Drepper's mutex (it may overwrite a member's tag with 1 in
            // a region: that hold can then no longer be taken over, which
            // only non-members, tests, cause). Each sleep is bounded: a
            // waker and a sleeper that disagree on whether the word is
            // shared (a process whose region is no longer registered sleeps
            // on a private futex; another process's unlock wakes the shared
            // one) cost a check interval, never a hang, and are counted.
            // Acquire: pairs with U1's Release (the holder's writes).
            while self.word.swap(NO_TAG << 1 | 1, Ordering::Acquire) != 0 {
                let t = std::time::Instant::now();
                wait_word(&self.word, NO_TAG << 1 | 1, Some(HOLDER_CHECK));
                if t.elapsed() >= HOLDER_CHECK {
                    UNTAGGED_LONG_SLEEPS.fetch_add(1, Ordering::Relaxed);
                }
            }
            return;
        }
        // A tag other than NO_TAG: a member of the word's region.
        let member = member_at(self.word.as_ptr() as usize);
        let mut watch = HolderWatch::default();
        loop {
            // L3. Acquire: pairs with U1's Release (the holder's writes).
            let w = self.word.load(Ordering::Acquire);
            if w == 0 {
                if self
                    .word
                    .compare_exchange(0, tag << 1 | 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return;
                }
                continue;
            }
            if w & 1 == 0
                && self
                    .word
                    .compare_exchange(w, w | 1, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            let w = w | 1;
            // R2: the same holder for HOLDER_CHECK; is its process gone?
            if let Some((base, m)) = &member {
                if w >> 1 != NO_TAG && watch.gone(m, *base, w >> 1) {
                    // R3. Acquire: whatever the dead holder wrote before
                    // it died.
                    if self
                        .word
                        .compare_exchange(w, tag << 1 | 1, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        TOOK_OVER.with(|t| t.set(true));
                        return;
                    }
                    continue;
                }
            }
            // L4.
            wait_word(&self.word, w, member.map(|_| HOLDER_CHECK));
        }
    }
}

#[cfg(not(loom))]
#[path = "futex_takeover.rs"]
mod takeover;

/// Sleeps of [`FutexMutex`]'s tag-1 path that lasted a whole
/// [`HOLDER_CHECK`]: a holder that long, or a wake-up lost between a
/// private and a shared futex that the bound turned into a delay (tests).
#[cfg(not(loom))]
static UNTAGGED_LONG_SLEEPS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// How many of this process's tag-1 lock sleeps lasted a whole holder
/// check interval, 200 ms (tests: a detach must not sleep on a private
/// futex).
#[cfg(not(loom))]
pub fn untagged_long_sleeps() -> usize {
    UNTAGGED_LONG_SLEEPS.load(Ordering::Relaxed)
}

/// Rounds of [`FutexMutex`]'s spin (L2): 3 of pauses, 7 of yields.
#[cfg(not(loom))]
const SPIN_ROUNDS: u32 = 10;

#[cfg(not(loom))]
// SAFETY: L1-L4 give the lock to one holder at a time (a CAS from 0), R3
// only from a holder that can no longer run (its process is gone), and U1
// is called only by the holder (lock_api's contract); Acquire/Release
// order the holders' critical sections.
unsafe impl lock_api::RawMutex for FutexMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: FutexMutex = FutexMutex {
        word: AtomicU32::new(0),
    };
    type GuardMarker = lock_api::GuardSend;

    #[inline]
    fn lock(&self) {
        let tag = self.tag();
        // L1. Acquire: pairs with U1's Release.
        if self
            .word
            .compare_exchange(0, tag << 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow(tag);
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        // Acquire: as L1.
        self.word
            .compare_exchange(0, self.tag() << 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // U1. Release: our critical section before the next holder's.
        if self.word.swap(0, Ordering::Release) & 1 != 0 {
            wake_word(&self.word, 1);
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        // Relaxed: a hint (lock_api's contract).
        self.word.load(Ordering::Relaxed) != 0
    }
}
