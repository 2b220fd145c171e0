// vmcache's buffer manager and guards (Leis et al., SIGMOD 2023, MIT)
// replaced by pagecache's C ABI, for vmcache's own B-tree and TPC-C
// (benches/vmcache-pc/build.sh cuts vmcache.cpp's buffer manager out and
// includes this file in its place; everything else of vmcache.cpp is
// compiled unchanged).
//
// The mapping, guard by guard:
//   GuardO     pc_page_optimistic_fast, the inline hinted view (the frame
//              hint from `hints[pid]`, one 8-byte word per page id as
//              vmcache's own state array); with PC_VIEW_CALL set in the
//              environment, the call pc_page_optimistic_hinted instead;
//              checkVersionAndRestart is the inline pc_optimistic_valid.
//   GuardX     pc_page_latch, or from a GuardO pc_optimistic_upgrade
//              (-EAGAIN: restart); released with pc_pin_release (dirty:
//              vmcache's exclusive guards all set the page's dirty flag).
//   GuardS     pc_page_pin, or from a GuardO pc_page_try_pin and the view
//              still valid after it (vmcache: tryLockS at the version).
//   AllocGuard pc_page_new at the next page id (vmcache's allocCount).
// bm.toPID(node) of a latched node: a per-thread table of the pages this
// thread holds latched (vmcache computes it from the node's address).
//
// PC_SHADOW set in the environment (a measurement, in memory only): the
// views skip the cache and read vmcache's own state word per page id
// instead (`shadow[pid]`: locked bit, version, frame), which the exclusive
// guards lock and bump while they hold the cache's latch; a view's upgrade
// and a GuardS check it too. It shows what the cache's view path (hint,
// descriptor) costs against vmcache's. Pages never move in memory; a run
// that evicted any page fails at exit (its views may have read another
// page).
//
// PC_POPULATE set in the environment (a measurement): the cache's frame
// arena is faulted in when the cache is created (`pc_config.populate`,
// before vmcache's timer starts), so that neither the load nor the run
// touches new memory.
//
// The file (BLOCK) is truncated and grown page by page; the cache's
// budget is PHYSGB GiB. Statistics as vmcache's: pages read and written
// back (the cache's counters), allocCount.
#pragma once

#include <pagecache.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

struct OLCRestartException {};

// Calls per kind, per thread (PC_COUNTS set: the run's totals, after the
// load, go to stderr at exit, for per-transaction figures against the
// transactions vmcache's main prints). Summed as each thread ends; the
// load's share is taken when main resets the read count (the load's
// threads have ended then; main's own loads are in its thread's counts).
static const int NCALLS = 6;
struct Calls {
   u64 n[NCALLS] = {};  // views, latches, upgrades, pins, new pages, restarts
   ~Calls();
};
static std::atomic<u64> callTotals[NCALLS];
static u64 callsAtRun[NCALLS];
Calls::~Calls() {
   for (int i = 0; i < NCALLS; i++)
      callTotals[i].fetch_add(n[i], std::memory_order_relaxed);
}
static thread_local Calls calls;
enum { C_VIEW, C_LATCH, C_UPGRADE, C_PIN, C_NEW, C_RESTART };

[[noreturn]] static void pcFail(const char* what, int r) {
   const char* e = pc_last_error();
   std::cerr << "vmcache-pc: " << what << ": " << strerror(-r) << ": " << (e ? e : "") << std::endl;
   std::exit(EXIT_FAILURE);
}

u64 envOr(const char* env, u64 value) {
   if (getenv(env))
      return atof(getenv(env));
   return value;
}

struct BufferManager {
   static const u64 mb = 1024ull * 1024;
   static const u64 gb = 1024ull * 1024 * 1024;
   u64 virtSize;
   u64 physSize;
   u64 virtCount;
   bool useExmap = false;
   u64 batch = 0;
   pc_cache* cache = nullptr;
   pc_file* file = nullptr;
   pc_fast fast;
   // Views by the call (PC_VIEW_CALL) rather than inline.
   bool viewCall = getenv("PC_VIEW_CALL") != nullptr;
   // Each page id's frame hint (PC_NO_HINT: none yet).
   std::atomic<u64>* hints;
   // PC_SHADOW (see the top): vmcache's state word per page id, over the
   // cache's latches: bit 63 locked, bits 32-62 version, bits 0-31 frame +
   // 1 (0: not known yet).
   bool shadowOn = getenv("PC_SHADOW") != nullptr;
   std::atomic<u64>* shadow;
   std::atomic<u64> allocCount;
   // Reported per second by vmcache's main: the cache's counters' deltas.
   struct Counter {
      u64 last = 0;
      bool reads;
      explicit Counter(bool reads) : reads(reads) {}
      u64 exchange(u64) {
         u64 now = current();
         u64 d = now - last;
         last = now;
         return d;
      }
      Counter& operator=(u64) {
         last = current();
         if (reads)  // main, after the load: the calls so far are the load's
            for (int i = 0; i < NCALLS; i++)
               callsAtRun[i] = callTotals[i].load() + calls.n[i];
         return *this;
      }
      u64 current();
   };
   Counter readCount{true};
   Counter writeCount{false};

   BufferManager() : virtSize(envOr("VIRTGB", 16) * gb), physSize(envOr("PHYSGB", 4) * gb), virtCount(virtSize / pageSize) {
      const char* path = getenv("BLOCK") ? getenv("BLOCK") : "/tmp/bm";
      pc_config c;
      if (int r = pc_config_default(&c))
         pcFail("pc_config_default", r);
      c.capacity = physSize;
      // PC_POPULATE: see the top of the file.
      c.populate = getenv("PC_POPULATE") != nullptr;
      if (int r = pc_cache_new(&c, &cache))
         pcFail("pc_cache_new", r);
      if (int r = pc_file_open(cache, path, PC_READ | PC_WRITE | PC_CREATE | PC_TRUNCATE, &file))
         pcFail(path, r);
      if (int r = pc_file_fast(file, &fast))
         pcFail("pc_file_fast", r);
      // In huge pages, as vmcache's own state array (`allocHuge`, zeroed
      // by the kernel): in 4 KiB pages every visit also missed the TLB.
      hints = static_cast<std::atomic<u64>*>(allocHuge(virtCount * sizeof(u64)));
      // (Zero, as the kernel maps it: no frame known yet.)
      shadow = shadowOn ? static_cast<std::atomic<u64>*>(allocHuge(virtCount * sizeof(u64))) : nullptr;
      for (u64 i = 0; i < virtCount; i++)
         hints[i].store(PC_NO_HINT, std::memory_order_relaxed);
      // Page 0: vmcache's metadata page (zeroes on its disk at the start).
      pc_pin pin;
      if (int r = pc_page_new(file, 0, &pin))
         pcFail("metadata page", r);
      hints[0].store(pin.hint, std::memory_order_relaxed);
      pc_pin_release(&pin);
      allocCount = 1;
      std::cerr << "vmcache-pc blk:" << path << " virtgb:" << virtSize / gb << " physgb:" << physSize / gb << std::endl;
   }
   ~BufferManager() {
      if (shadowOn) {
         pc_stats st;
         pc_cache_stats(cache, &st);
         if (st.evictions) {
            std::cerr << "vmcache-pc: PC_SHADOW with " << st.evictions << " pages evicted: the views' results are void" << std::endl;
            std::_Exit(EXIT_FAILURE);
         }
      }
      if (getenv("PC_COUNTS")) {
         const char* n[NCALLS] = {"views", "latches", "upgrades", "pins", "new_pages", "restarts"};
         for (int i = 0; i < NCALLS; i++)
            std::cerr << "vmcache-pc calls " << n[i] << " " << callTotals[i].load() - callsAtRun[i] << std::endl;
      }
   }

   u64 hint(PID pid) { return hints[pid].load(std::memory_order_relaxed); }
   void setHint(PID pid, u64 h) {
      if (hints[pid].load(std::memory_order_relaxed) != h)
         hints[pid].store(h, std::memory_order_relaxed);
   }
   bool isValidPtr(void*) { return false; }
   PID toPID(void* page);
};

BufferManager bm;

u64 BufferManager::Counter::current() {
   pc_stats s;
   if (int r = pc_cache_stats(bm.cache, &s))
      pcFail("pc_cache_stats", r);
   return reads ? s.reads : s.writebacks;
}

// The pages this thread holds latched: vmcache's split and merge ask for
// a latched node's page id by its address.
struct Held {
   const void* ptr;
   PID pid;
};
static thread_local Held held[16];
static thread_local unsigned heldCount = 0;

static void heldAdd(const void* ptr, PID pid) {
   if (heldCount == 16) {
      std::cerr << "vmcache-pc: more than 16 latches held by one thread" << std::endl;
      std::exit(EXIT_FAILURE);
   }
   held[heldCount++] = {ptr, pid};
}

static void heldRemove(const void* ptr) {
   for (unsigned i = 0; i < heldCount; i++)
      if (held[i].ptr == ptr) {
         held[i] = held[--heldCount];
         return;
      }
}

PID BufferManager::toPID(void* page) {
   for (unsigned i = 0; i < heldCount; i++)
      if (held[i].ptr == page)
         return held[i].pid;
   std::cerr << "vmcache-pc: toPID of a page this thread does not hold latched" << std::endl;
   std::exit(EXIT_FAILURE);
}

template <class T>
struct GuardO {
   PID pid;
   T* ptr;
   pc_optimistic view;
   u64 sv = 0;  // PC_SHADOW: the state word seen (0: the cache's view)
   static const u64 moved = ~0ull;
   static const u64 LOCKED = 1ull << 63;

   explicit GuardO(u64 pid) : pid(pid) { init(); }

   template <class T2>
   GuardO(u64 pid, GuardO<T2>& parent) {
      parent.checkVersionAndRestart();
      this->pid = pid;
      init();
   }

   GuardO(GuardO&& other) {
      pid = other.pid;
      ptr = other.ptr;
      view = other.view;
      sv = other.sv;
   }

   void init() {
      calls.n[C_VIEW]++;
      if (bm.shadowOn) {
         for (int spins = 0;; spins++) {
            u64 s = bm.shadow[pid].load(std::memory_order_acquire);
            if (s & LOCKED) {
               if (spins > 64)
                  sched_yield();
               else
                  __builtin_ia32_pause();
               continue;
            }
            u64 f = s & 0xffffffffu;
            if (f != 0) {
               sv = s;
               ptr = reinterpret_cast<T*>(const_cast<uint8_t*>(bm.fast.frames + ((f - 1) << bm.fast.page_shift)));
               return;
            }
            break;
         }
      }
      sv = 0;
      int r = bm.viewCall ? pc_page_optimistic_hinted(bm.file, pid, bm.hint(pid), &view)
                          : pc_page_optimistic_fast(&bm.fast, pid, bm.hint(pid), &view);
      if (r)
         pcFail("pc_page_optimistic_fast", r);
      bm.setHint(pid, view.hint);
      ptr = reinterpret_cast<T*>(const_cast<uint8_t*>(view.data));
      if (bm.shadowOn) {
         u64 s = bm.shadow[pid].load(std::memory_order_relaxed);
         if (!(s & LOCKED) && (s & 0xffffffffu) == 0)
            bm.shadow[pid].compare_exchange_strong(s, s | (view.hint + 1));
      }
   }

   GuardO& operator=(GuardO&& other) {
      if (pid != moved)
         checkVersionAndRestart();
      pid = other.pid;
      ptr = other.ptr;
      view = other.view;
      sv = other.sv;
      other.pid = moved;
      other.ptr = nullptr;
      return *this;
   }
   bool valid() {
      if (sv) {
         std::atomic_thread_fence(std::memory_order_acquire);
         return bm.shadow[pid].load(std::memory_order_relaxed) == sv;
      }
      return pc_optimistic_valid(&view) == 1;
   }

   GuardO& operator=(const GuardO&) = delete;
   GuardO(const GuardO&) = delete;

   void checkVersionAndRestart() {
      if (pid != moved) {
         if (valid())
            return;
         if (std::uncaught_exceptions() == 0) {
            calls.n[C_RESTART]++;
            throw OLCRestartException();
         }
      }
   }

   ~GuardO() noexcept(false) { checkVersionAndRestart(); }

   T* operator->() { return ptr; }

   void release() {
      checkVersionAndRestart();
      pid = moved;
      ptr = nullptr;
   }
};

template <class T>
struct GuardX {
   PID pid;
   T* ptr;
   pc_pin pin;
   static const u64 moved = ~0ull;

   GuardX() : pid(moved), ptr(nullptr) {}

   explicit GuardX(u64 pid) : pid(pid) {
      calls.n[C_LATCH]++;
      int r = pc_page_latch(bm.file, pid, &pin);
      if (r)
         pcFail("pc_page_latch", r);
      took();
   }

   explicit GuardX(GuardO<T>&& other) {
      calls.n[C_UPGRADE]++;
      if (other.sv) {
         // PC_SHADOW: the cache's view of the frame the state word names.
         u64 f = (other.sv & 0xffffffffu) - 1;
         if (int r = pc_page_optimistic_fast(&bm.fast, other.pid, f, &other.view))
            pcFail("pc_page_optimistic_fast", r);
      }
      int r = pc_optimistic_upgrade(&other.view, &pin);
      if (r == 0 && other.sv) {
         // The latch is ours; the state word locked only if nothing
         // changed it since the view (else the view was stale).
         u64 s = other.sv;
         if (!bm.shadow[other.pid].compare_exchange_strong(s, s | GuardO<T>::LOCKED)) {
            pc_latch_release_clean(&pin);
            calls.n[C_RESTART]++;
            throw OLCRestartException();
         }
      }
      if (r == -EAGAIN) {
         calls.n[C_RESTART]++;
         throw OLCRestartException();
      }
      if (r)
         pcFail("pc_optimistic_upgrade", r);
      pid = other.pid;
      other.pid = moved;
      other.ptr = nullptr;
      took(other.sv != 0);
   }

   // `shadowLocked`: the upgrade locked the state word already.
   void took(bool shadowLocked = false) {
      if (bm.shadowOn && !shadowLocked) {
         u64 s = bm.shadow[pid].load(std::memory_order_relaxed);
         for (;;) {
            if (s & GuardO<T>::LOCKED) {
               __builtin_ia32_pause();
               s = bm.shadow[pid].load(std::memory_order_relaxed);
               continue;
            }
            u64 n = (s & ~0xffffffffull) | GuardO<T>::LOCKED | (pin.hint + 1);
            if (bm.shadow[pid].compare_exchange_weak(s, n))
               break;
         }
      }
      ptr = reinterpret_cast<T*>(pin.data);
      bm.setHint(pid, pin.hint);
      heldAdd(ptr, pid);
      ptr->dirty = true;
   }

   void unfix() {
      heldRemove(ptr);
      if (bm.shadowOn) {
         u64 s = bm.shadow[pid].load(std::memory_order_relaxed);
         bm.shadow[pid].store(((s & ~GuardO<T>::LOCKED) + (1ull << 32)) & ~GuardO<T>::LOCKED, std::memory_order_release);
      }
      int r = pc_pin_release(&pin);
      if (r)
         pcFail("pc_pin_release", r);
   }

   GuardX& operator=(const GuardX&) = delete;

   GuardX& operator=(GuardX&& other) {
      if (pid != moved)
         unfix();
      pid = other.pid;
      ptr = other.ptr;
      pin = other.pin;
      other.pid = moved;
      other.ptr = nullptr;
      return *this;
   }

   GuardX(const GuardX&) = delete;

   ~GuardX() {
      if (pid != moved)
         unfix();
   }

   T* operator->() { return ptr; }

   void release() {
      if (pid != moved) {
         unfix();
         pid = moved;
      }
   }
};

template <class T>
struct AllocGuard : public GuardX<T> {
   template <typename... Params>
   AllocGuard(Params&&... params) {
      u64 pid = bm.allocCount++;
      if (pid >= bm.virtCount) {
         std::cerr << "VIRTGB is too low" << std::endl;
         std::exit(EXIT_FAILURE);
      }
      calls.n[C_NEW]++;
      int r = pc_page_new(bm.file, pid, &this->pin);
      if (r == -EEXIST) {
         // A hole below bytes written back (another thread's later pages,
         // evicted meanwhile): the library cannot tell it from written
         // bytes, but the page id is ours alone. Latched as any page (its
         // read gives zeros) and zeroed.
         r = pc_page_latch(bm.file, pid, &this->pin);
         if (r == 0)
            memset(this->pin.data, 0, this->pin.len);
      }
      if (r)
         pcFail("pc_page_new", r);
      GuardX<T>::pid = pid;
      GuardX<T>::took();
      new (GuardX<T>::ptr) T(std::forward<Params>(params)...);
   }
};

template <class T>
struct GuardS {
   PID pid;
   T* ptr;
   pc_pin pin;
   static const u64 moved = ~0ull;

   explicit GuardS(u64 pid) : pid(pid) {
      calls.n[C_PIN]++;
      int r = pc_page_pin(bm.file, pid, &pin);
      if (r)
         pcFail("pc_page_pin", r);
      ptr = reinterpret_cast<T*>(pin.data);
   }

   GuardS(GuardO<T>&& other) {
      calls.n[C_PIN]++;
      int r = pc_page_try_pin(bm.file, other.pid, &pin);
      if (r == -EAGAIN)
         throw OLCRestartException();
      if (r)
         pcFail("pc_page_try_pin", r);
      if (!other.valid()) {
         pc_pin_release(&pin);
         throw OLCRestartException();
      }
      pid = other.pid;
      ptr = reinterpret_cast<T*>(pin.data);
      other.pid = moved;
      other.ptr = nullptr;
   }

   GuardS(GuardS&& other) {
      pid = other.pid;
      ptr = other.ptr;
      pin = other.pin;
      other.pid = moved;
      other.ptr = nullptr;
   }

   GuardS& operator=(const GuardS&) = delete;

   GuardS& operator=(GuardS&& other) {
      if (pid != moved)
         pc_pin_release(&pin);
      pid = other.pid;
      ptr = other.ptr;
      pin = other.pin;
      other.pid = moved;
      other.ptr = nullptr;
      return *this;
   }

   GuardS(const GuardS&) = delete;

   ~GuardS() {
      if (pid != moved)
         pc_pin_release(&pin);
   }

   T* operator->() { return ptr; }

   void release() {
      if (pid != moved) {
         pc_pin_release(&pin);
         pid = moved;
      }
   }
};
