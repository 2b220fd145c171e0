/* The C ABI's tests: every call's success and error paths, pins, latches,
 * content checks against the file on disk, and threads. Built and run by
 * scripts/test-c.sh, once plainly and once under valgrind.
 *
 *   test_pagecache DIR    (DIR: an existing scratch directory)
 */
#include <errno.h>
#include <fcntl.h>
#include <pagecache.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0;
static const char *dir;
static const char *self_exe;

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: %s: expected %s (last error: %s)\n",        \
              __FILE__, __LINE__, __func__, #cond, pc_last_error());      \
      failures++;                                                         \
    }                                                                     \
  } while (0)
#define OK(call) EXPECT((call) == 0)

#define PS 4096

static void path_of(char *out, const char *name) {
  snprintf(out, 512, "%s/%s", dir, name);
}

static unsigned char pattern(uint64_t pos) { return (unsigned char)(pos * 31 + 7); }

/* This process's resident set in bytes (/proc/self/statm), or -1. */
static long resident_bytes(void) {
  FILE *st = fopen("/proc/self/statm", "r");
  long size = 0, resident = -1;
  if (!st) return -1;
  if (fscanf(st, "%ld %ld", &size, &resident) != 2) resident = -1;
  fclose(st);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

static pc_cache *small_cache(uint64_t pages) {
  pc_config cfg;
  pc_cache *c = NULL;
  OK(pc_config_default(&cfg));
  cfg.capacity = pages * PS;
  OK(pc_cache_new(&cfg, &c));
  return c;
}

static pc_file *open_new(pc_cache *c, const char *name) {
  char p[512];
  pc_file *f = NULL;
  path_of(p, name);
  OK(pc_file_open(c, p, PC_READ | PC_WRITE | PC_CREATE | PC_TRUNCATE, &f));
  return f;
}

/* The whole file as the kernel has it (malloc'd; *len set). */
static unsigned char *read_disk(const char *name, size_t *len) {
  char p[512];
  path_of(p, name);
  int fd = open(p, O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    failures++;
    *len = 0;
    return NULL;
  }
  unsigned char *b = malloc((size_t)st.st_size + 1);
  ssize_t n = pread(fd, b, (size_t)st.st_size, 0);
  close(fd);
  *len = n < 0 ? 0 : (size_t)n;
  return b;
}

static void test_version_and_defaults(void) {
  EXPECT(pc_abi_version() == PC_ABI_VERSION);
  pc_config cfg;
  OK(pc_config_default(&cfg));
  EXPECT(cfg.page_size == 4096);
  EXPECT(cfg.capacity == 256u << 20);
  EXPECT(cfg.direct_io != 0);
  EXPECT(cfg.dirty_background_percent <= cfg.dirty_limit_percent);
  EXPECT(cfg.stable_writes == 0); /* writers do not wait for write-back */
  EXPECT(cfg.populate == 0);      /* frames faulted in on first use */
  EXPECT(cfg.stream_reads == PC_STREAM_MEASURE);
  EXPECT(cfg.drop_behind_writes == 1); /* long write streams dropped behind */
  EXPECT(cfg.dirty_expire_ms == 30000); /* the kernel's dirty_expire_centisecs */
  EXPECT(pc_last_error() != NULL && strlen(pc_last_error()) == 0); /* nothing failed yet */
}

static void test_bad_config(void) {
  pc_config cfg;
  pc_cache *c = (pc_cache *)0x1;
  OK(pc_config_default(&cfg));
  cfg.page_size = 1000;
  EXPECT(pc_cache_new(&cfg, &c) == -EINVAL);
  EXPECT(strstr(pc_last_error(), "page") != NULL);
  EXPECT(c == (pc_cache *)0x1); /* untouched on failure */
  OK(pc_config_default(&cfg));
  cfg.io_engine = 99;
  EXPECT(pc_cache_new(&cfg, &c) == -EINVAL);
  EXPECT(strstr(pc_last_error(), "io_engine") != NULL);
  OK(pc_config_default(&cfg));
  cfg.stream_reads = 7;
  EXPECT(pc_cache_new(&cfg, &c) == -EINVAL);
  EXPECT(strstr(pc_last_error(), "stream_reads") != NULL);
  OK(pc_config_default(&cfg));
  cfg.capacity = PS; /* fewer than four frames */
  EXPECT(pc_cache_new(&cfg, &c) == -EINVAL);
  EXPECT(pc_cache_new(NULL, NULL) == -EINVAL);
  EXPECT(pc_config_default(NULL) == -EINVAL);
  OK(pc_cache_free(NULL));
}

static void test_null_and_bad_arguments(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "nulls");
  char buf[16];
  size_t n;
  uint64_t len;
  pc_pin pin;
  EXPECT(pc_file_open(c, NULL, PC_READ, &f) == -EINVAL);
  EXPECT(pc_file_open(NULL, "x", PC_READ, &f) == -EINVAL);
  EXPECT(pc_file_open(c, "x", PC_READ, NULL) == -EINVAL);
  EXPECT(pc_file_open(c, "x", 1u << 20, &f) == -EINVAL);
  EXPECT(strstr(pc_last_error(), "flags") != NULL);
  EXPECT(pc_file_read_at(NULL, buf, 1, 0, &n) == -EINVAL);
  EXPECT(pc_file_read_at(f, NULL, 1, 0, &n) == -EINVAL);
  EXPECT(pc_file_read_at(f, buf, 1, 0, NULL) == -EINVAL);
  EXPECT(pc_file_read_at(f, buf, (size_t)-1, 0, &n) == -EINVAL);
  OK(pc_file_read_at(f, NULL, 0, 0, &n)); /* empty read: fine */
  EXPECT(n == 0);
  EXPECT(pc_file_write_at(f, NULL, 5, 0) == -EINVAL);
  OK(pc_file_write_at(f, NULL, 0, 0));
  EXPECT(pc_file_len(f, NULL) == -EINVAL);
  EXPECT(pc_file_len(NULL, &len) == -EINVAL);
  EXPECT(pc_page_pin(f, 0, NULL) == -EINVAL);
  EXPECT(pc_page_pin(NULL, 0, &pin) == -EINVAL);
  EXPECT(pc_pin_release(NULL) == -EINVAL);
  EXPECT(pc_cache_stats(c, NULL) == -EINVAL);
  EXPECT(pc_file_close(NULL) == -EINVAL);
  EXPECT(pc_file_sync(NULL) == -EINVAL);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

static void test_open_errors(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = NULL;
  char p[512];
  path_of(p, "does-not-exist");
  EXPECT(pc_file_open(c, p, PC_READ, &f) == -ENOENT);
  EXPECT(strstr(pc_last_error(), "does-not-exist") != NULL);
  EXPECT(f == NULL);
  path_of(p, "exists");
  OK(pc_file_open(c, p, PC_READ | PC_WRITE | PC_CREATE, &f));
  OK(pc_file_close(f));
  EXPECT(pc_file_open(c, p, PC_READ | PC_WRITE | PC_CREATE_NEW, &f) == -EEXIST);
  EXPECT(pc_file_open(c, p, 0, &f) == -EINVAL); /* neither read nor write */
  OK(pc_cache_free(c));
}

static void test_write_read_sync(void) {
  pc_cache *c = small_cache(16); /* smaller than the file: evictions */
  pc_file *f = open_new(c, "rw");
  const size_t len = 40 * PS + 123;
  unsigned char *data = malloc(len), *back = malloc(len);
  for (size_t i = 0; i < len; i++) data[i] = pattern(i);
  OK(pc_file_write_at(f, data, len, 0));
  uint64_t flen = 0;
  OK(pc_file_len(f, &flen));
  EXPECT(flen == len);
  size_t n = 0;
  OK(pc_file_read_at(f, back, len, 0, &n));
  EXPECT(n == len && memcmp(data, back, len) == 0);
  /* short only at end of file; nothing past it */
  OK(pc_file_read_at(f, back, 1000, len - 10, &n));
  EXPECT(n == 10 && memcmp(back, data + len - 10, 10) == 0);
  OK(pc_file_read_at(f, back, 10, len + 5, &n));
  EXPECT(n == 0);
  OK(pc_file_sync(f));
  size_t dlen;
  unsigned char *disk = read_disk("rw", &dlen);
  EXPECT(dlen == len && disk && memcmp(disk, data, len) == 0);
  free(disk);
  pc_stats st;
  OK(pc_cache_stats(c, &st));
  EXPECT(st.frames == 16);
  EXPECT(st.evictions > 0);
  EXPECT(st.writebacks >= 40);
  EXPECT(st.dirty_pages == 0);
  EXPECT(st.direct_files + st.buffered_files >= 1);
  /* shrink, then grow: zeros where the cut was */
  OK(pc_file_set_len(f, 100));
  OK(pc_file_set_len(f, 2 * PS));
  OK(pc_file_read_at(f, back, 2 * PS, 0, &n));
  EXPECT(n == 2 * PS && memcmp(back, data, 100) == 0);
  int zeros = 1;
  for (size_t i = 100; i < 2 * PS; i++) zeros &= back[i] == 0;
  EXPECT(zeros);
  OK(pc_file_prefetch(f, 0, 1 << 20));   /* past EOF: ignored */
  OK(pc_file_prefetch(f, 1ull << 40, 5)); /* far past: nothing */
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
  free(data);
  free(back);
}

/* The age bound: a dirty page of a cache with frames to spare is written
   back with no sync once it has been dirty for dirty_expire_ms (here 50 ms),
   and not while it is younger (UINT32_MAX: never by age). */
static void test_dirty_expire(void) {
  pc_config cfg;
  OK(pc_config_default(&cfg));
  cfg.capacity = 64 * PS;
  cfg.dirty_expire_ms = 50;
  pc_cache *c = NULL;
  OK(pc_cache_new(&cfg, &c));
  pc_file *f = open_new(c, "expire");
  unsigned char b[100];
  memset(b, 7, sizeof b);
  OK(pc_file_write_at(f, b, sizeof b, 0));
  pc_stats st;
  int waited = 0;
  do {
    usleep(10 * 1000);
    OK(pc_cache_stats(c, &st));
  } while ((st.writebacks == 0 || st.dirty_pages != 0) && ++waited < 2000);
  EXPECT(st.writebacks == 1 && st.dirty_pages == 0);
  size_t dlen;
  unsigned char *disk = read_disk("expire", &dlen);
  EXPECT(disk && dlen == sizeof b && memcmp(disk, b, sizeof b) == 0);
  free(disk);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
  /* never by age: still dirty after 200 ms (frames to spare, under the
     limit: nothing else writes it) */
  OK(pc_config_default(&cfg));
  cfg.capacity = 64 * PS;
  cfg.dirty_expire_ms = UINT32_MAX;
  OK(pc_cache_new(&cfg, &c));
  f = open_new(c, "expire-never");
  OK(pc_file_write_at(f, b, sizeof b, 0));
  usleep(200 * 1000);
  OK(pc_cache_stats(c, &st));
  EXPECT(st.writebacks == 0 && st.dirty_pages == 1);
  OK(pc_file_sync(f));
  OK(pc_cache_stats(c, &st));
  EXPECT(st.writebacks == 1 && st.dirty_pages == 0);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

/* The write-back hook in C: called with its context before each page's
   write-back, with the page's bytes and the cause; a deferred page stays
   dirty and fails the sync (-EAGAIN, naming it); written once the hook
   says so; removed with NULL. */
struct hook_log {
  int calls, deferred, bad_cause;
  uint64_t last_index;
  unsigned char first;
};

static int defer_marked(void *ctx, uint64_t index, const uint8_t *bytes, size_t len, uint32_t cause) {
  struct hook_log *l = ctx;
  l->calls++;
  l->last_index = index;
  l->first = len ? bytes[0] : 0;
  if (cause != PC_WB_SYNC) l->bad_cause++;
  if (len == PS && bytes[0] == 'D') {
    l->deferred++;
    return PC_WB_DEFER;
  }
  return PC_WB_WRITE;
}

static int write_all(void *ctx, uint64_t index, const uint8_t *bytes, size_t len, uint32_t cause) {
  (void)index, (void)bytes, (void)len, (void)cause;
  ((struct hook_log *)ctx)->calls++;
  return 7; /* not PC_WB_WRITE: defers */
}

static void test_writeback_hook(void) {
  pc_config cfg;
  OK(pc_config_default(&cfg));
  cfg.capacity = 64 * PS;
  cfg.dirty_expire_ms = UINT32_MAX; /* only sync writes */
  pc_cache *c = NULL;
  OK(pc_cache_new(&cfg, &c));
  pc_file *f = open_new(c, "hooked");
  struct hook_log log;
  memset(&log, 0, sizeof log);
  OK(pc_file_set_writeback_hook(f, defer_marked, &log));
  OK(pc_file_write_at(f, "Dpage", 5, 0));
  OK(pc_file_write_at(f, "write", 5, 2 * PS));
  EXPECT(pc_file_sync(f) == -EAGAIN);
  EXPECT(strstr(pc_last_error(), "page 0") != NULL);
  EXPECT(log.calls >= 2 && log.deferred >= 1 && log.bad_cause == 0);
  pc_stats st;
  OK(pc_cache_stats(c, &st));
  EXPECT(st.dirty_pages == 1); /* page 0 kept, page 2 written */
  /* any answer but PC_WB_WRITE defers */
  memset(&log, 0, sizeof log);
  OK(pc_file_set_writeback_hook(f, write_all, &log));
  EXPECT(pc_file_sync(f) == -EAGAIN);
  EXPECT(log.calls >= 1);
  /* removed: the page is written */
  OK(pc_file_set_writeback_hook(f, NULL, NULL));
  OK(pc_file_sync(f));
  OK(pc_cache_stats(c, &st));
  EXPECT(st.dirty_pages == 0);
  size_t dlen;
  unsigned char *disk = read_disk("hooked", &dlen);
  EXPECT(disk && dlen == 2 * PS + 5 && memcmp(disk, "Dpage", 5) == 0 &&
         memcmp(disk + 2 * PS, "write", 5) == 0);
  free(disk);
  EXPECT(pc_file_set_writeback_hook(NULL, defer_marked, &log) == -EINVAL);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

/* A populated cache: its frames are resident from creation (the process's
   resident set grows by at least the capacity), and it works as any other. */
static void test_populate(void) {
  pc_config cfg;
  pc_cache *c = NULL;
  OK(pc_config_default(&cfg));
  cfg.capacity = 32u << 20;
  cfg.populate = 1;
  long before = resident_bytes();
  OK(pc_cache_new(&cfg, &c));
  long grew = resident_bytes() - before;
  /* Under valgrind the resident set is valgrind's own: only check it
     when the plain run can see it. */
  if (!getenv("PC_UNDER_VALGRIND")) EXPECT(grew >= (long)cfg.capacity);
  pc_file *f = open_new(c, "populated");
  unsigned char b[100];
  memset(b, 9, sizeof b);
  OK(pc_file_write_at(f, b, sizeof b, 3 * PS));
  size_t n = 0;
  unsigned char back[100];
  OK(pc_file_read_at(f, back, sizeof back, 3 * PS, &n));
  EXPECT(n == sizeof back && memcmp(back, b, sizeof b) == 0);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

/* Streams read buffered or measured: a scan through a small cache reads
   every byte right, and the measured cache reports at most one choice
   (none with the thread pool, which reads streams direct; none if the
   scan's windows were too few to measure). */
static void test_stream_reads(void) {
  const size_t len = 24u << 20;
  unsigned char *data = malloc(len), *back = malloc(1u << 20);
  EXPECT(data && back);
  for (size_t i = 0; i < len; i++) data[i] = (unsigned char)(i * 7 + i / 4096);
  uint32_t modes[] = {PC_STREAM_BUFFERED, PC_STREAM_MEASURE};
  for (int m = 0; m < 2; m++) {
    pc_config cfg;
    pc_cache *c = NULL;
    OK(pc_config_default(&cfg));
    cfg.capacity = 4u << 20;
    cfg.stream_reads = modes[m];
    OK(pc_cache_new(&cfg, &c));
    pc_file *f = open_new(c, "streams");
    OK(pc_file_write_at(f, data, len, 0));
    OK(pc_file_sync(f));
    OK(pc_file_close(f));
    char p[512];
    path_of(p, "streams");
    OK(pc_file_open(c, p, PC_READ, &f));
    for (size_t off = 0; off < len; off += 1u << 20) {
      size_t n = 0;
      OK(pc_file_read_at(f, back, 1u << 20, off, &n));
      EXPECT(n == 1u << 20 && memcmp(back, data + off, n) == 0);
    }
    pc_stats st;
    OK(pc_cache_stats(c, &st));
    /* A file six times the cache: buffered streams bypass the frames for
       every page the cache does not hold (at most its 1024 frames); the
       thread-pool engine (valgrind's run) reads streams direct. */
    const char *engine = getenv("PAGECACHE_IO_ENGINE");
    if (modes[m] == PC_STREAM_BUFFERED && !(engine && strcmp(engine, "threads") == 0))
      EXPECT(st.streamed_pages >= (len >> 12) - 1024);
    size_t count = 99;
    pc_stream_choice ch[2];
    OK(pc_cache_stream_choices(c, ch, 2, &count));
    if (modes[m] == PC_STREAM_BUFFERED) EXPECT(count == 0);
    EXPECT(count <= 1);
    if (count == 1) EXPECT(ch[0].direct_rate > 0 && ch[0].buffered_rate > 0);
    EXPECT(pc_cache_stream_choices(c, NULL, 1, &count) == -EINVAL);
    OK(pc_cache_stream_choices(c, NULL, 0, &count));
    OK(pc_file_close(f));
    OK(pc_cache_free(c));
  }
  free(data);
  free(back);
}

static void test_pins_and_latches(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "pins");
  unsigned char page[PS];
  for (int i = 0; i < PS; i++) page[i] = pattern(i);
  OK(pc_file_write_at(f, page, PS, 0));
  OK(pc_file_write_at(f, "tail", 4, PS)); /* page 1 is partial */
  pc_pin pin;
  OK(pc_page_pin(f, 0, &pin));
  EXPECT(pin.len == PS && pin.index == 0 && pin.data != NULL);
  EXPECT(pin.data && memcmp(pin.data, page, PS) == 0);
  pc_pin second; /* a second pin of the same page, at the same address */
  OK(pc_page_pin(f, 0, &second));
  EXPECT(second.data == pin.data);
  OK(pc_pin_release(&second));
  /* close refuses while a pin is held, and changes nothing */
  EXPECT(pc_file_close(f) == -EBUSY);
  EXPECT(strstr(pc_last_error(), "pinned") != NULL);
  EXPECT(pc_file_discard(f, NULL) == -EBUSY);
  OK(pc_pin_release(&pin));
  EXPECT(pin.data == NULL && pin.len == 0);
  EXPECT(pc_pin_release(&pin) == -EINVAL); /* double release detected */
  EXPECT(strstr(pc_last_error(), "released") != NULL);
  pc_pin zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  EXPECT(pc_pin_release(&zeroed) == -EINVAL);

  /* the partial last page reads zeros past the end of file */
  OK(pc_page_pin(f, 1, &pin));
  EXPECT(memcmp(pin.data, "tail", 4) == 0 && pin.data[4] == 0 && pin.data[PS - 1] == 0);
  OK(pc_pin_release(&pin));
  EXPECT(pc_page_pin(f, 2, &pin) == -ENXIO); /* past the last page */
  EXPECT(strstr(pc_last_error(), "page 2") != NULL);

  /* a latch writes in place; released, the page is dirty */
  OK(pc_page_latch(f, 0, &pin));
  memcpy(pin.data + 100, "LATCHED", 7);
  OK(pc_pin_release(&pin));
  char buf[8] = {0};
  size_t n;
  OK(pc_file_read_at(f, buf, 7, 100, &n));
  EXPECT(n == 7 && memcmp(buf, "LATCHED", 7) == 0);
  OK(pc_file_sync(f));
  size_t dlen;
  unsigned char *disk = read_disk("pins", &dlen);
  EXPECT(dlen == PS + 4 && disk && memcmp(disk + 100, "LATCHED", 7) == 0);
  EXPECT(disk && disk[99] == pattern(99) && memcmp(disk + PS, "tail", 4) == 0);
  free(disk);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

/* anonymous regions: zero-filled on first touch, pinned and latched like
 * file pages, freed page by page or whole; a latch holder makes a pinner on
 * another thread wait, and the pinner sees the whole write */
struct anon_reader {
  pc_anon *r;
  volatile int done;
  int rc;
  unsigned char first, last;
};

static void *pin_anon_page_2(void *arg) {
  struct anon_reader *a = arg;
  pc_pin p;
  a->rc = pc_anon_pin(a->r, 2, &p);
  if (a->rc == 0) {
    a->first = p.data[0];
    a->last = p.data[PS - 1];
    a->rc = pc_pin_release(&p);
  }
  a->done = 1;
  return NULL;
}

static void test_anon_regions(void) {
  pc_cache *c = small_cache(64);
  pc_anon *r = NULL;
  OK(pc_anon_new(c, 8 * PS - 100, &r));
  uint64_t len = 0;
  OK(pc_anon_len(r, &len));
  EXPECT(len == 8 * PS - 100); /* as asked; it spans 8 pages */
  pc_pin pin;
  OK(pc_anon_pin(r, 3, &pin));
  EXPECT(pin.len == PS && pin.index == 3 && pin.data != NULL);
  EXPECT(pin.hint == PC_NO_HINT); /* no frame of a file (0 is one) */
  int zero = 1;
  for (int i = 0; pin.data && i < PS; i++) zero &= pin.data[i] == 0;
  EXPECT(zero);
  /* freeing the region refuses while a page of it is pinned */
  EXPECT(pc_anon_free(r) == -EBUSY);
  EXPECT(strstr(pc_last_error(), "pinned") != NULL);
  OK(pc_pin_release(&pin));
  EXPECT(pc_pin_release(&pin) == -EINVAL);

  /* a latch writes in place; a pinner on another thread waits for it */
  OK(pc_anon_latch(r, 2, &pin));
  memset(pin.data, 0x5A, PS);
  struct anon_reader a = {.r = r};
  pthread_t t;
  EXPECT(pthread_create(&t, NULL, pin_anon_page_2, &a) == 0);
  usleep(100 * 1000);
  EXPECT(!a.done); /* waiting for the latch */
  pin.data[PS - 1] = 0xA5;
  OK(pc_pin_release(&pin));
  pthread_join(t, NULL);
  EXPECT(a.rc == 0 && a.first == 0x5A && a.last == 0xA5);

  /* released pages read zeros again; past the end is -ENXIO */
  OK(pc_anon_release_pages(r, 0, 100));
  OK(pc_anon_pin(r, 2, &pin));
  EXPECT(pin.data && pin.data[0] == 0 && pin.data[PS - 1] == 0);
  OK(pc_pin_release(&pin));
  EXPECT(pc_anon_pin(r, 8, &pin) == -ENXIO);
  EXPECT(pc_anon_new(c, PS, NULL) == -EINVAL);
  EXPECT(pc_anon_pin(NULL, 0, &pin) == -EINVAL);
  EXPECT(pc_anon_free(NULL) == -EINVAL);
  OK(pc_anon_free(r));
  OK(pc_cache_free(c));
}

/* runs: consecutive pages under one leaf pin, and what they refuse */
struct run_writer {
  pc_file *f;
  volatile int done;
  int rc;
};

static void *write_page_3(void *arg) {
  struct run_writer *w = arg;
  unsigned char b[64];
  memset(b, 0xAB, sizeof b);
  w->rc = pc_file_write_at(w->f, b, sizeof b, 3 * PS);
  __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void test_runs(void) {
  pc_cache *c = small_cache(128);
  pc_file *f = open_new(c, "runs");
  enum { PAGES = 70 };
  unsigned char *data = malloc((size_t)PAGES * PS);
  for (size_t i = 0; i < (size_t)PAGES * PS; i++) data[i] = pattern(i);
  OK(pc_file_write_at(f, data, (size_t)PAGES * PS, 0));
  pc_run run;
  /* cached pages: one leaf pin, bytes as written */
  OK(pc_file_run(f, 2, 16, &run));
  EXPECT(run.count == 16 && run.start == 2 && run.one_pin == 1 && run.page_size == PS);
  for (size_t k = 0; k < run.count; k++)
    EXPECT(run.pages[k] && memcmp(run.pages[k], data + (2 + k) * PS, PS) == 0);
  EXPECT(run.pages[15] && run.pages[15] != run.pages[0]);
  /* close refuses while it is held */
  EXPECT(pc_file_close(f) == -EBUSY);
  /* a writer of one of its pages waits for it */
  struct run_writer w = {f, 0, -1};
  pthread_t t;
  pthread_create(&t, NULL, write_page_3, &w);
  usleep(200 * 1000);
  EXPECT(__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) == 0);
  EXPECT(memcmp(run.pages[1], data + 3 * PS, PS) == 0); /* unchanged */
  OK(pc_run_release(&run));
  pthread_join(t, NULL);
  OK(w.rc);
  EXPECT(run.count == 0 && run.pages[0] == NULL);
  EXPECT(pc_run_release(&run) == -EINVAL); /* double release detected */
  EXPECT(strstr(pc_last_error(), "released") != NULL);
  pc_run zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  EXPECT(pc_run_release(&zeroed) == -EINVAL);
  /* capped at PC_RUN_MAX, never past a multiple of 64 pages, short at EOF */
  OK(pc_file_run(f, 0, 1000, &run));
  EXPECT(run.count == PC_RUN_MAX);
  OK(pc_run_release(&run));
  OK(pc_file_run(f, 60, 16, &run));
  EXPECT(run.count == 4);
  OK(pc_run_release(&run));
  OK(pc_file_run(f, 66, 16, &run));
  EXPECT(run.count == 4);
  OK(pc_run_release(&run));
  OK(pc_file_run(f, PAGES, 16, &run)); /* at end of file: empty, released all the same */
  EXPECT(run.count == 0);
  OK(pc_run_release(&run));
  EXPECT(pc_file_run(NULL, 0, 16, &run) == -EINVAL);
  EXPECT(pc_file_run(f, 0, 16, NULL) == -EINVAL);
  EXPECT(pc_run_release(NULL) == -EINVAL);
  /* the written page as the writer left it */
  OK(pc_file_run(f, 3, 1, &run));
  EXPECT(run.count == 1 && run.pages[0][0] == 0xAB && run.pages[0][64] == pattern(3 * PS + 64));
  OK(pc_run_release(&run));
  free(data);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

static void test_read_only_handle(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "ro");
  OK(pc_file_write_at(f, "abc", 3, 0));
  OK(pc_file_close(f));
  char p[512];
  path_of(p, "ro");
  OK(pc_file_open(c, p, PC_READ, &f));
  EXPECT(pc_file_write_at(f, "x", 1, 0) == -EACCES);
  EXPECT(strstr(pc_last_error(), "read-only") != NULL);
  pc_pin pin;
  EXPECT(pc_page_latch(f, 0, &pin) == -EACCES);
  EXPECT(pc_file_set_len(f, 0) == -EACCES);
  OK(pc_page_pin(f, 0, &pin));
  EXPECT(memcmp(pin.data, "abc", 3) == 0);
  OK(pc_pin_release(&pin));
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

static void test_cache_freed_before_its_files(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "outlive");
  OK(pc_cache_free(c)); /* the file keeps the cache alive */
  OK(pc_file_write_at(f, "still here", 10, 0));
  char buf[10];
  size_t n;
  OK(pc_file_read_at(f, buf, 10, 0, &n));
  EXPECT(n == 10 && memcmp(buf, "still here", 10) == 0);
  OK(pc_file_close(f));
}

static void test_discard(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "discard");
  OK(pc_file_write_at(f, "never written", 13, 0));
  int dropped = -1;
  OK(pc_file_discard(f, &dropped));
  EXPECT(dropped == 1);
  size_t dlen;
  unsigned char *disk = read_disk("discard", &dlen);
  EXPECT(dlen == 0); /* the dirty bytes were dropped, as asked */
  free(disk);
  size_t forgotten = 99;
  char p[512];
  path_of(p, "discard");
  OK(pc_cache_forget(c, p, &forgotten));
  EXPECT(forgotten == 0); /* nothing kept: discard dropped it already */
  EXPECT(pc_cache_forget(c, NULL, &forgotten) == -EINVAL);
  OK(pc_cache_free(c));
}

/* A full disk (a 64 KiB tmpfs, mounted when root): the OS error reaches the
 * caller as -ENOSPC, the pages stay dirty, close reports it, and forget
 * drops the kept file and its descriptors (the mount is not busy). */
static void test_enospc_reaches_the_caller(void) {
  if (geteuid() != 0) {
    printf("skipped: ENOSPC test needs root to mount a tmpfs\n");
    return;
  }
  char mnt[512], p[600];
  path_of(mnt, "tiny");
  mkdir(mnt, 0700);
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=64k") != 0) {
    printf("skipped: cannot mount a tmpfs here\n");
    return;
  }
  snprintf(p, sizeof p, "%s/big", mnt);
  pc_cache *c = small_cache(128);
  pc_file *f = NULL;
  OK(pc_file_open(c, p, PC_READ | PC_WRITE | PC_CREATE, &f));
  static unsigned char big[256 * 1024];
  memset(big, 'z', sizeof big);
  int rc = pc_file_write_at(f, big, sizeof big, 0);
  if (rc == 0) rc = pc_file_sync(f);
  EXPECT(rc == -ENOSPC);
  pc_stats st;
  OK(pc_cache_stats(c, &st));
  EXPECT(st.dirty_pages > 0); /* nothing dropped */
  EXPECT(pc_file_close(f) == -ENOSPC); /* reported, and the handle freed */
  size_t n = 0;
  OK(pc_cache_forget(c, p, &n));
  EXPECT(n == 1);
  OK(pc_cache_free(c));
  EXPECT(umount(mnt) == 0); /* no descriptor left on it */
}

struct worker {
  pc_file *f;
  int id, nthreads, pages, rounds;
  int bad;
  char msg[256];
};

/* Each thread owns the pages p with p % nthreads == id and writes rounds
 * of (id, round) into them; it reads everyone's pages and checks each is
 * whole (one writer's stamp throughout). */
static void *work(void *arg) {
  struct worker *w = arg;
  unsigned char buf[PS];
  unsigned x = (unsigned)w->id * 7919u + 1;
  for (int r = 1; r <= w->rounds; r++) {
    for (int p = w->id; p < w->pages; p += w->nthreads) {
      memset(buf, (w->id * 16 + r) & 0xff, PS);
      if (pc_file_write_at(w->f, buf, PS, (uint64_t)p * PS) != 0) {
        snprintf(w->msg, sizeof w->msg, "write: %s", pc_last_error());
        w->bad++;
        return NULL;
      }
    }
    for (int k = 0; k < 32; k++) {
      x = x * 1103515245u + 12345u;
      int p = (int)((x >> 8) % (unsigned)w->pages);
      pc_pin pin;
      if (k % 2) {
        if (pc_page_pin(w->f, (uint64_t)p, &pin) != 0) {
          snprintf(w->msg, sizeof w->msg, "pin: %s", pc_last_error());
          w->bad++;
          return NULL;
        }
        for (int i = 1; i < PS; i++)
          if (pin.data[i] != pin.data[0]) { w->bad++; break; }
        pc_pin_release(&pin);
      } else {
        size_t n;
        if (pc_file_read_at(w->f, buf, PS, (uint64_t)p * PS, &n) != 0 || n != PS) {
          snprintf(w->msg, sizeof w->msg, "read: %s", pc_last_error());
          w->bad++;
          return NULL;
        }
        for (int i = 1; i < PS; i++)
          if (buf[i] != buf[0]) { w->bad++; break; }
      }
    }
  }
  return NULL;
}

static void test_threads(void) {
  enum { T = 16, PAGES = 96, ROUNDS = 6 };
  pc_cache *c = small_cache(32); /* 32 frames for 96 pages and 16 threads */
  pc_file *f = open_new(c, "threads");
  OK(pc_file_set_len(f, (uint64_t)PAGES * PS));
  pthread_t th[T];
  struct worker w[T];
  for (int i = 0; i < T; i++) {
    w[i] = (struct worker){f, i, T, PAGES, ROUNDS, 0, {0}};
    pthread_create(&th[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    if (w[i].bad) fprintf(stderr, "thread %d: %d bad (%s)\n", i, w[i].bad, w[i].msg);
    EXPECT(w[i].bad == 0);
  }
  OK(pc_file_sync(f));
  size_t dlen;
  unsigned char *disk = read_disk("threads", &dlen);
  EXPECT(dlen == (size_t)PAGES * PS);
  for (int p = 0; disk && p < PAGES && (size_t)(p + 1) * PS <= dlen; p++) {
    unsigned char want = (unsigned char)(((p % T) * 16 + ROUNDS) & 0xff);
    int whole = 1;
    for (int i = 0; i < PS; i++) whole &= disk[(size_t)p * PS + i] == want;
    EXPECT(whole);
  }
  free(disk);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

static void *fail_in_thread(void *arg) {
  pc_cache *c = arg;
  pc_file *f;
  pc_file_open(c, "/nonexistent/dir/other-thread", PC_READ, &f);
  return NULL;
}

static void test_last_error_is_per_thread(void) {
  pc_cache *c = small_cache(64);
  pc_file *f;
  EXPECT(pc_file_open(c, "/nonexistent/dir/this-thread", PC_READ, &f) == -ENOENT);
  pthread_t t;
  pthread_create(&t, NULL, fail_in_thread, c);
  pthread_join(t, NULL);
  EXPECT(strstr(pc_last_error(), "this-thread") != NULL);
  OK(pc_cache_free(c));
}

struct pin_job {
  pc_file *f;
  pc_pin pin;
  int rc;
};

static void *pin_in_thread(void *arg) {
  struct pin_job *j = arg;
  j->rc = pc_page_pin(j->f, 0, &j->pin);
  return NULL;
}

static void *release_in_thread(void *arg) {
  struct pin_job *j = arg;
  j->rc = pc_pin_release(&j->pin);
  return NULL;
}

/* Pins taken on some threads and released on others: close refuses while
 * any is held and succeeds once all are released, wherever. */
static void test_pins_cross_threads(void) {
  enum { N = 20 }; /* more threads than the pin count's shards */
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "cross");
  OK(pc_file_write_at(f, "x", 1, 0));
  struct pin_job jobs[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    jobs[i].f = f;
    pthread_create(&t[i], NULL, pin_in_thread, &jobs[i]);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    OK(jobs[i].rc);
  }
  EXPECT(pc_file_close(f) == -EBUSY);
  /* release all but one, each on another thread than took it */
  for (int i = 0; i < N - 1; i++) pthread_create(&t[i], NULL, release_in_thread, &jobs[N - 2 - i]);
  for (int i = 0; i < N - 1; i++) {
    pthread_join(t[i], NULL);
    OK(jobs[N - 2 - i].rc);
  }
  EXPECT(pc_file_close(f) == -EBUSY);
  OK(pc_pin_release(&jobs[N - 1].pin)); /* the last, on this thread */
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

/* Optimistic views, as vmcache's readers use them: read the bytes through
 * view.data, then validate; upgrade only an unchanged page. */
static uint64_t view_word(const pc_optimistic *v, size_t off) {
  uint64_t x;
  memcpy(&x, v->data + off, sizeof x); /* may be changing: validated after */
  return x;
}

/* pc_page_optimistic_fast: the inline hinted view agrees with the call,
 * takes the call for a wrong hint, and its views validate and upgrade as
 * any. */
static void test_optimistic_fast(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "fast");
  pc_pin pin;
  for (uint64_t i = 0; i < 4; i++) {
    OK(pc_page_new(f, i, &pin));
    uint64_t x = 100 + i;
    memcpy(pin.data, &x, 8);
    OK(pc_pin_release(&pin));
  }
  pc_fast fast;
  OK(pc_file_fast(f, &fast));
  EXPECT(fast.file == f && fast.page_size == PS && fast.usable == 1);
  EXPECT(pc_file_fast(NULL, &fast) == -EINVAL);
  EXPECT(pc_file_fast(f, NULL) == -EINVAL);
  OK(pc_file_fast(f, &fast));
  pc_optimistic v, h;
  OK(pc_page_optimistic(f, 2, &v)); /* sets the accessed bit */
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &h));
  EXPECT(h.index == 2 && h.hint == v.hint && h.data == v.data && h.len == PS);
  EXPECT(view_word(&h, 0) == 102);
  EXPECT(pc_optimistic_valid(&h) == 1 && pc_optimistic_validate(&h) == 1);
  /* the descriptor's words, as the header says */
  const uint64_t *d = fast.descs + v.hint * PC_DESC_WORDS;
  EXPECT(d[2] == fast.owner && d[3] == 2 && (d[0] & PC_STATE_UPTODATE) != 0);
  /* a wrong hint (another page's frame, no frame) takes the call */
  pc_optimistic p1;
  OK(pc_page_optimistic(f, 1, &p1));
  OK(pc_page_optimistic_fast(&fast, 2, p1.hint, &h));
  EXPECT(h.index == 2 && h.data == v.data && pc_optimistic_valid(&h) == 1);
  OK(pc_page_optimistic_fast(&fast, 2, PC_NO_HINT, &h));
  EXPECT(h.index == 2 && h.data == v.data && pc_optimistic_valid(&h) == 1);
  EXPECT(pc_page_optimistic_fast(&fast, 9, v.hint, &h) == -ENXIO);
  EXPECT(pc_page_optimistic_fast(NULL, 2, v.hint, &h) == -EINVAL);
  EXPECT(pc_page_optimistic_fast(&fast, 2, v.hint, NULL) == -EINVAL);
  /* a writer: the inline view's copy no longer validates */
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &h));
  OK(pc_file_write_at(f, "y", 1, 2 * PS + 50));
  EXPECT(pc_optimistic_valid(&h) == 0 && pc_optimistic_validate(&h) == 0);
  EXPECT(pc_optimistic_upgrade(&h, &pin) == -EAGAIN);
  /* upgrade of an inline view */
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &h));
  OK(pc_optimistic_upgrade(&h, &pin));
  EXPECT(pin.index == 2 && pin.data[50] == 'y');
  pc_optimistic busy;
  /* latched: the version is odd and the latch bit set, the inline view
   * takes the call, which would wait: check the descriptor instead */
  EXPECT((__atomic_load_n(d + 1, __ATOMIC_ACQUIRE) & 1) == 1);
  EXPECT((__atomic_load_n(d, __ATOMIC_ACQUIRE) & PC_STATE_LATCHED) != 0);
  OK(pc_pin_release(&pin));
  EXPECT((__atomic_load_n(d, __ATOMIC_ACQUIRE) & PC_STATE_LATCHED) == 0);
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &busy));
  EXPECT(pc_optimistic_valid(&busy) == 1);
  /* the waiting upgrade: an unchanged page latches, a changed one restarts */
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &h));
  OK(pc_optimistic_upgrade_wait(&h, &pin));
  OK(pc_latch_release_clean(&pin));
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &h));
  OK(pc_file_write_at(f, "z", 1, 2 * PS + 51));
  EXPECT(pc_optimistic_upgrade_wait(&h, &pin) == -EAGAIN);
  EXPECT(pc_optimistic_upgrade_wait(NULL, &pin) == -EINVAL);
  OK(pc_page_optimistic_fast(&fast, 2, v.hint, &busy));
  /* a page cut off: its frame's view fails, and the hint of a page gone
   * makes the call report it */
  OK(pc_file_set_len(f, 2 * PS));
  EXPECT(pc_optimistic_valid(&busy) == 0 && pc_optimistic_validate(&busy) == 0);
  EXPECT(pc_page_optimistic_fast(&fast, 2, v.hint, &h) == -ENXIO);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

static void test_optimistic_views(void) {
  pc_cache *c = small_cache(64);
  pc_file *f = open_new(c, "views");
  pc_pin pin;
  /* a new page: zeroed, no read, the file grows */
  OK(pc_page_new(f, 0, &pin));
  EXPECT(pin.data && pin.data[0] == 0 && pin.data[PS - 1] == 0);
  uint64_t seven = 7;
  memcpy(pin.data, &seven, 8);
  OK(pc_pin_release(&pin));
  uint64_t len = 0;
  OK(pc_file_len(f, &len));
  EXPECT(len == PS);
  EXPECT(pc_page_new(f, 0, &pin) == -EEXIST);
  EXPECT(strstr(pc_last_error(), "page 0") != NULL);
  OK(pc_page_new(f, 3, &pin)); /* pages 1-2 are a hole */
  OK(pc_latch_release_clean(&pin)); /* a new page is dirty all the same */
  OK(pc_page_new(f, 2, &pin)); /* a hole nobody wrote: new as well */
  EXPECT(pin.data && pin.data[0] == 0 && pin.data[PS - 1] == 0);
  OK(pc_latch_release_clean(&pin));
  OK(pc_file_len(f, &len));
  EXPECT(len == 4 * PS);

  pc_optimistic v;
  OK(pc_page_optimistic(f, 0, &v));
  EXPECT(v.len == PS && v.index == 0 && view_word(&v, 0) == 7);
  EXPECT(pc_optimistic_validate(&v) == 1);
  EXPECT(pc_optimistic_valid(&v) == 1); /* the inline form agrees */
  /* hints: out of every view and pin, into a hinted view */
  pc_pin hinted;
  OK(pc_page_pin(f, 0, &hinted));
  EXPECT(hinted.hint == v.hint);
  OK(pc_pin_release(&hinted));
  pc_optimistic h;
  OK(pc_page_optimistic_hinted(f, 0, v.hint, &h));
  EXPECT(h.index == 0 && h.data == v.data && view_word(&h, 0) == 7);
  EXPECT(pc_optimistic_valid(&h) == 1);
  /* a wrong hint (another page's frame, or no frame) finds the page all the same */
  pc_optimistic p3;
  OK(pc_page_optimistic(f, 3, &p3));
  OK(pc_page_optimistic_hinted(f, 0, p3.hint, &h));
  EXPECT(h.index == 0 && h.data == v.data && pc_optimistic_valid(&h) == 1);
  OK(pc_page_optimistic_hinted(f, 0, UINT64_MAX, &h));
  EXPECT(h.index == 0 && h.data == v.data && pc_optimistic_valid(&h) == 1);
  EXPECT(pc_page_optimistic_hinted(f, 4, v.hint, &h) == -ENXIO);
  OK(pc_file_write_at(f, "x", 1, 100)); /* a writer changes the page */
  EXPECT(pc_optimistic_validate(&v) == 0);
  EXPECT(pc_optimistic_valid(&v) == 0);
  EXPECT(pc_optimistic_valid(&p3) == 1); /* another page: unchanged */
  EXPECT(pc_optimistic_upgrade(&v, &pin) == -EAGAIN);
  EXPECT(strstr(pc_last_error(), "restart") != NULL);
  OK(pc_page_optimistic(f, 0, &v));
  OK(pc_optimistic_upgrade(&v, &pin));
  EXPECT(pin.data && pin.data[100] == 'x');
  uint64_t eight = 8;
  memcpy(pin.data, &eight, 8);
  /* while latched: try_pin and try_latch refuse instead of waiting */
  pc_pin other;
  EXPECT(pc_page_try_pin(f, 0, &other) == -EAGAIN);
  EXPECT(pc_page_try_latch(f, 0, &other) == -EAGAIN);
  EXPECT(pc_optimistic_validate(&v) == 0);
  OK(pc_pin_release(&pin));
  OK(pc_page_try_pin(f, 0, &other));
  EXPECT(memcmp(other.data, &eight, 8) == 0);
  EXPECT(pc_page_try_latch(f, 0, &pin) == -EAGAIN); /* the pin must drain */
  OK(pc_pin_release(&other));

  /* a latch released clean leaves a clean page clean */
  OK(pc_file_sync(f));
  pc_stats st;
  OK(pc_cache_stats(c, &st));
  EXPECT(st.dirty_pages == 0);
  OK(pc_page_try_latch(f, 0, &pin));
  OK(pc_latch_release_clean(&pin));
  OK(pc_cache_stats(c, &st));
  EXPECT(st.dirty_pages == 0);
  OK(pc_page_latch(f, 0, &pin));
  OK(pc_pin_release(&pin));
  OK(pc_cache_stats(c, &st));
  EXPECT(st.dirty_pages == 1);

  /* bad arguments */
  EXPECT(pc_page_optimistic(NULL, 0, &v) == -EINVAL);
  EXPECT(pc_page_optimistic(f, 0, NULL) == -EINVAL);
  EXPECT(pc_page_optimistic(f, 4, &v) == -ENXIO);
  EXPECT(pc_optimistic_validate(NULL) == -EINVAL);
  pc_optimistic zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  EXPECT(pc_optimistic_validate(&zeroed) == -EINVAL);
  EXPECT(pc_optimistic_valid(&zeroed) == -EINVAL); /* no view: the call's answer */
  EXPECT(pc_optimistic_valid(NULL) == -EINVAL);
  EXPECT(pc_optimistic_upgrade(&zeroed, &pin) == -EINVAL);
  EXPECT(pc_page_new(f, 0, NULL) == -EINVAL);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

/* Threads race upgrades of one page: each reads the counter through a view,
 * validates, upgrades and increments it. An upgrade succeeds only on an
 * unchanged page, so no increment is lost; every validated view is whole
 * (64 copies of the counter). */
struct upgrader {
  pc_file *f;
  int rounds;
  int wait; /* pc_optimistic_upgrade_wait */
  int bad, restarts;
  char msg[256];
};

static void *upgrade_loop(void *arg) {
  struct upgrader *u = arg;
  for (int done = 0; done < u->rounds;) {
    pc_optimistic v;
    if (pc_page_optimistic(u->f, 0, &v) != 0) {
      snprintf(u->msg, sizeof u->msg, "view: %s", pc_last_error());
      u->bad++;
      return NULL;
    }
    uint64_t n = view_word(&v, 0);
    int whole = 1;
    for (size_t k = 1; k < 64; k++) whole &= view_word(&v, k * 64) == n;
    if (pc_optimistic_validate(&v) != 1) {
      u->restarts++;
      continue;
    }
    if (!whole) {
      snprintf(u->msg, sizeof u->msg, "a validated view was torn");
      u->bad++;
    }
    pc_pin pin;
    int rc = u->wait ? pc_optimistic_upgrade_wait(&v, &pin) : pc_optimistic_upgrade(&v, &pin);
    if (rc == -EAGAIN) {
      u->restarts++;
      continue;
    }
    if (rc != 0) {
      snprintf(u->msg, sizeof u->msg, "upgrade: %s", pc_last_error());
      u->bad++;
      return NULL;
    }
    uint64_t now;
    memcpy(&now, pin.data, 8);
    if (now != n) {
      snprintf(u->msg, sizeof u->msg, "upgraded a changed page (%llu, viewed %llu)",
               (unsigned long long)now, (unsigned long long)n);
      u->bad++;
    }
    n++;
    for (size_t k = 0; k < 64; k++) memcpy(pin.data + k * 64, &n, 8);
    pc_pin_release(&pin);
    done++;
  }
  return NULL;
}

/* PC_ARENA_SLACK readable zeros follow the last frame: a reader that goes
   past a page through a torn offset never faults. */
static void test_slack_after_the_last_frame(void) {
  pc_cache *c = small_cache(16);
  pc_file *f = open_new(c, "slack");
  static unsigned char page[PS];
  memset(page, 0x5a, sizeof page);
  for (uint64_t i = 0; i < 16; i++)
    OK(pc_file_write_at(f, page, PS, i * PS));
  const uint8_t *last = NULL;
  pc_optimistic v;
  for (uint64_t i = 0; i < 16; i++) {
    OK(pc_page_optimistic(f, i, &v));
    if (v.data > last)
      last = v.data;
  }
  unsigned sum = 0;
  for (size_t off = 0; off < PC_ARENA_SLACK; off += 64)
    sum += ((const volatile uint8_t *)last)[PS + off];
  EXPECT(sum == 0);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}

static void test_upgrade_race(void) {
  enum { T = 4, ROUNDS = 300 };
  pc_cache *c = small_cache(16);
  pc_file *f = open_new(c, "upgrades");
  pc_pin pin;
  OK(pc_page_new(f, 0, &pin));
  OK(pc_pin_release(&pin));
  pthread_t th[T];
  struct upgrader u[T];
  for (int i = 0; i < T; i++) {
    u[i] = (struct upgrader){f, ROUNDS, i % 2, 0, 0, {0}};
    pthread_create(&th[i], NULL, upgrade_loop, &u[i]);
  }
  for (int i = 0; i < T; i++) {
    pthread_join(th[i], NULL);
    if (u[i].bad) fprintf(stderr, "upgrader %d: %d bad (%s)\n", i, u[i].bad, u[i].msg);
    EXPECT(u[i].bad == 0);
  }
  OK(pc_page_pin(f, 0, &pin));
  uint64_t n;
  memcpy(&n, pin.data, 8);
  EXPECT(n == (uint64_t)T * ROUNDS);
  OK(pc_pin_release(&pin));
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
}


/* The completion queue in an epoll loop: 32 requests in flight over a file
 * 12x the cache, every page's bytes checked, more started as each is
 * collected; a latch through the queue; errors; a file with requests in
 * flight cannot be closed; freeing the queue cancels what is in flight. */
#define QPAGES 200
#define QINFLIGHT 32
#define QTOTAL 600

static int qcheck(const pc_pin *pin, uint64_t index) {
  if (!pin->data || pin->len != PS || pin->index != index) return 0;
  for (size_t k = 0; k < PS; k += 509)
    if (pin->data[k] != pattern(index * PS + k)) return 0;
  return 1;
}

static void test_queue_epoll(void) {
  pc_cache *c = small_cache(16);
  pc_file *f = open_new(c, "queue.bin");
  unsigned char *buf = malloc(QPAGES * PS);
  for (size_t i = 0; i < QPAGES * PS; i++) buf[i] = pattern(i);
  OK(pc_file_write_at(f, buf, QPAGES * PS, 0));
  OK(pc_file_sync(f));
  free(buf);

  pc_queue *q = NULL;
  OK(pc_queue_new(&q));
  int fd = pc_queue_fd(q);
  EXPECT(fd >= 0);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN};
  EXPECT(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);

  uint64_t x = 88172645463325252ull;
  int started = 0, done = 0, inflight = 0, hits = 0, bad = 0;
  pc_pin pin;
  while (done < QTOTAL) {
    while (inflight < QINFLIGHT && started < QTOTAL) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      uint64_t i = x % QPAGES;
      int rc = pc_queue_page_pin(q, f, i, i, &pin);
      started++;
      if (rc == 0) {           /* a hit: the page at once */
        hits++;
        done++;
        if (!qcheck(&pin, i)) bad++;
        OK(pc_pin_release(&pin));
      } else if (rc == PC_PENDING) {
        inflight++;
      } else {
        EXPECT(rc == 0 || rc == PC_PENDING);
        done++;
      }
    }
    if (inflight == 0) continue;
    struct epoll_event got;
    int n = epoll_wait(ep, &got, 1, 10000);
    /* The collecting thread submits the reads; io_uring finishes them with
     * task work on it, which interrupts its waits: retry. */
    if (n < 0 && errno == EINTR) continue;
    EXPECT(n == 1); /* a completion within 10 s */
    if (n != 1) break;
    pc_completion comps[8];
    int k = pc_queue_collect(q, comps, 8);
    EXPECT(k >= 0);
    for (int j = 0; j < k; j++) {
      EXPECT(comps[j].result == 0);
      if (comps[j].result == 0) {
        if (!qcheck(&comps[j].pin, comps[j].user_data)) bad++;
        OK(pc_pin_release(&comps[j].pin));
      }
      inflight--;
      done++;
    }
  }
  EXPECT(bad == 0);
  EXPECT(hits < QTOTAL); /* most were misses */
  EXPECT(pc_queue_pending(q) == 0);

  /* A latch through the queue: written, then read back. */
  int rc = pc_queue_page_latch(q, f, 7, 77, &pin);
  EXPECT(rc == 0 || rc == PC_PENDING);
  if (rc == PC_PENDING) {
    pc_completion comp;
    int k = 0;
    for (int tries = 0; k == 0 && tries < 1000; tries++) {
      struct epoll_event got;
      epoll_wait(ep, &got, 1, 100);
      k = pc_queue_collect(q, &comp, 1);
    }
    EXPECT(k == 1 && comp.user_data == 77 && comp.result == 0);
    pin = comp.pin;
  }
  EXPECT(pin.data != NULL);
  if (pin.data) {
    pin.data[5] = 0xEE;
    OK(pc_pin_release(&pin));
  }
  unsigned char b = 0;
  size_t nread = 0;
  EXPECT(pc_file_read_at(f, &b, 1, 7 * PS + 5, &nread) == 0 && nread == 1);
  EXPECT(b == 0xEE);

  /* Errors: past the end at once; bad arguments. */
  EXPECT(pc_queue_page_pin(q, f, QPAGES, 1, &pin) == -ENXIO);
  EXPECT(pc_queue_page_pin(NULL, f, 0, 1, &pin) == -EINVAL);
  EXPECT(pc_queue_page_pin(q, NULL, 0, 1, &pin) == -EINVAL);
  EXPECT(pc_queue_page_pin(q, f, 0, 1, NULL) == -EINVAL);
  EXPECT(pc_queue_collect(q, NULL, 1) == -EINVAL);
  EXPECT(pc_queue_fd(NULL) == -EINVAL);

  /* Cancelling by user_data: in flight, never collected. */
  {
    int r = pc_queue_page_pin(q, f, 150, 4242, &pin);
    if (r == 0) {
      OK(pc_pin_release(&pin));
    } else {
      EXPECT(r == PC_PENDING);
      EXPECT(pc_queue_cancel(q, 4242) == 1);
      EXPECT(pc_queue_cancel(q, 4242) == 0);
      EXPECT(pc_queue_pending(q) == 0);
    }
    EXPECT(pc_queue_cancel(NULL, 1) == -EINVAL);
  }

  /* Requests in flight keep the file open; freeing the queue cancels. */
  int pending = 0;
  for (uint64_t i = 100; i < 140; i++) {
    int r = pc_queue_page_pin(q, f, i, i, &pin);
    if (r == 0) OK(pc_pin_release(&pin));
    else if (r == PC_PENDING) pending++;
  }
  if (pending > 0) EXPECT(pc_file_close(f) == -EBUSY);
  EXPECT(pc_queue_free(q) == pending);
  OK(pc_file_close(f));
  close(ep);
  OK(pc_cache_free(c));
}

static pc_cache *shared_cache(void) {
  pc_config cfg;
  pc_cache *c = NULL;
  OK(pc_config_default(&cfg));
  cfg.capacity = 64 * PS;
  /* No background write-back: the test decides when pages are written. */
  cfg.dirty_background_percent = 100;
  cfg.dirty_limit_percent = 100;
  cfg.dirty_expire_ms = UINT32_MAX;
  OK(pc_cache_open_shared("ctest", dir, &cfg, &c));
  return c;
}

/* The second process of test_shared_cache (this binary, exec'd with
 * "--shared-child DIR"): reads the parent's unsynced page, writes page 1. */
static int shared_child(void) {
  pc_cache *c = shared_cache();
  pc_file *f = NULL;
  char p[512];
  unsigned char b[PS];
  size_t n = 0;
  pc_stats st;
  path_of(p, "shared.bin");
  OK(pc_file_open(c, p, PC_READ | PC_WRITE, &f));
  OK(pc_file_read_at(f, b, PS, 0, &n));
  EXPECT(n == PS && b[0] == 'p' && b[PS - 1] == 'p');
  OK(pc_cache_stats(c, &st));
  EXPECT(st.misses == 0);
  memset(b, 'c', PS);
  OK(pc_file_write_at(f, b, PS, PS));
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
  return failures ? 1 : 0;
}

static void test_shared_cache(void) {
  pc_cache *c = shared_cache();
  pc_file *f = open_new(c, "shared.bin");
  unsigned char b[PS];
  size_t n = 0, len = 0;
  uint64_t flen = 0;
  pc_config cfg;
  pc_cache *other = NULL;
  memset(b, 'p', PS);
  OK(pc_file_write_at(f, b, PS, 0));
  /* Another process reads it before any sync, and writes page 1. */
  pid_t pid = fork();
  if (pid == 0) {
    execl(self_exe, self_exe, "--shared-child", dir, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  EXPECT(pid > 0 && waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  OK(pc_file_len(f, &flen));
  EXPECT(flen == 2 * PS);
  OK(pc_file_read_at(f, b, PS, PS, &n));
  EXPECT(n == PS && b[0] == 'c' && b[PS - 1] == 'c');
  OK(pc_file_sync(f));
  unsigned char *disk = read_disk("shared.bin", &len);
  EXPECT(len == 2 * PS && disk && disk[0] == 'p' && disk[PS] == 'c');
  free(disk);
  /* Another geometry: refused, naming both. */
  OK(pc_config_default(&cfg));
  cfg.capacity = 128 * PS;
  EXPECT(pc_cache_open_shared("ctest", dir, &cfg, &other) == -EINVAL);
  EXPECT(strstr(pc_last_error(), "128 frames") != NULL);
  EXPECT(pc_cache_open_shared(NULL, dir, NULL, &other) == -EINVAL);
  /* In use: not removed. */
  EXPECT(pc_cache_remove_shared("ctest", dir) == -EBUSY);
  OK(pc_file_close(f));
  OK(pc_cache_free(c));
  OK(pc_cache_remove_shared("ctest", dir));
  EXPECT(pc_cache_remove_shared("ctest", dir) == -ENOENT);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  if (argc == 3 && strcmp(argv[1], "--shared-child") == 0) {
    dir = argv[2];
    return shared_child();
  }
  dir = argv[1];
  self_exe = argv[0];
  test_version_and_defaults();
  test_bad_config();
  test_null_and_bad_arguments();
  test_open_errors();
  test_write_read_sync();
  test_dirty_expire();
  test_writeback_hook();
  test_populate();
  test_stream_reads();
  test_pins_and_latches();
  test_optimistic_views();
  test_optimistic_fast();
  test_upgrade_race();
  test_slack_after_the_last_frame();
  test_runs();
  test_anon_regions();
  test_pins_cross_threads();
  test_read_only_handle();
  test_cache_freed_before_its_files();
  test_discard();
  test_enospc_reaches_the_caller();
  test_threads();
  test_queue_epoll();
  test_last_error_is_per_thread();
  test_shared_cache();
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("C ABI tests: all passed\n");
  return 0;
}
