/* The C side of the boundary benchmark (scripts/bench-boundary.sh): a 64 B
 * pc_file_read_at of a cached page and a pc_page_pin + pc_pin_release,
 * next to pread(2) of the same bytes, one thread; and a sequential scan,
 * per page: a pin + release each, or runs of 16 (pc_file_run); an
 * optimistic view + validation (by the index walk with the call, and
 * through the frame hint with the inline pc_optimistic_valid, the view by
 * the call or inline: pc_page_optimistic_fast), and a latch
 * + clean release. Prints `c <op> <ns per op>` lines, the median of RUNS
 * runs. */
#include <fcntl.h>
#include <pagecache.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define OPS 1000000
#define RUNS 5

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { READ, PIN, PREAD, OPT, OPT_HINTED, OPT_FAST, LATCH };

static pc_fast fast; /* pc_file_fast of the file */

static uint64_t *hints; /* each page's frame, from a view */

/* pages 1: one page over and over ("hot"). */
static double run(int what, pc_file *f, int fd, uint64_t pages) {
  double r[RUNS];
  unsigned char buf[64];
  volatile unsigned char sink = 0;
  for (int k = 0; k < RUNS; k++) {
    uint64_t x = 1;
    double t = now_ns();
    for (int i = 0; i < OPS; i++) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      uint64_t v = x >> 33, at = (v % pages) * 4096 + (v % 4032);
      size_t n;
      pc_pin pin;
      pc_optimistic o;
      if (what == OPT) {
        if (pc_page_optimistic(f, v % pages, &o) != 0) abort();
        sink = (unsigned char)pc_optimistic_validate(&o);
      } else if (what == OPT_HINTED) {
        if (pc_page_optimistic_hinted(f, v % pages, hints[v % pages], &o) != 0) abort();
        sink = (unsigned char)pc_optimistic_valid(&o);
      } else if (what == OPT_FAST) {
        if (pc_page_optimistic_fast(&fast, v % pages, hints[v % pages], &o) != 0) abort();
        sink = (unsigned char)pc_optimistic_valid(&o);
      } else if (what == LATCH) {
        if (pc_page_try_latch(f, v % pages, &pin) != 0) abort();
        sink = pin.data[7];
        pc_latch_release_clean(&pin);
      } else if (what == READ) {
        if (pc_file_read_at(f, buf, 64, at, &n) != 0) abort();
      } else if (what == PIN) {
        if (pc_page_pin(f, v % pages, &pin) != 0) abort();
        sink = pin.data[7];
        pc_pin_release(&pin);
      } else if (pread(fd, buf, 64, (off_t)at) != 64) {
        abort();
      }
    }
    r[k] = (now_ns() - t) / OPS;
  }
  (void)sink;
  qsort(r, RUNS, sizeof r[0], cmp);
  return r[RUNS / 2];
}

enum { SCAN_PIN, SCAN_RUN };

/* ns per page of a sequential pass over every page, 16 at a time. */
static double scan(int what, pc_file *f, uint64_t pages) {
  double r[RUNS];
  volatile unsigned char sink = 0;
  uint64_t groups = pages / 16, total = 0;
  for (int k = 0; k < RUNS; k++) {
    double t = now_ns();
    total = 0;
    for (int pass = 0; total < OPS; pass++) {
      for (uint64_t g = 0; g < groups; g++) {
        if (what == SCAN_PIN) {
          for (uint64_t i = 0; i < 16; i++) {
            pc_pin pin;
            if (pc_page_pin(f, g * 16 + i, &pin) != 0) abort();
            sink = pin.data[7];
            pc_pin_release(&pin);
          }
        } else {
          pc_run run;
          if (pc_file_run(f, g * 16, 16, &run) != 0 || run.count != 16) abort();
          for (size_t i = 0; i < run.count; i++) sink = run.pages[i][7];
          pc_run_release(&run);
        }
        total += 16;
      }
    }
    r[k] = (now_ns() - t) / (double)total;
  }
  (void)sink;
  qsort(r, RUNS, sizeof r[0], cmp);
  return r[RUNS / 2];
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  pc_config cfg;
  pc_cache *c;
  pc_file *f;
  pc_config_default(&cfg);
  cfg.capacity = 128 << 20;
  if (pc_cache_new(&cfg, &c) || pc_file_open(c, argv[1], PC_READ | PC_WRITE, &f)) {
    fprintf(stderr, "%s\n", pc_last_error());
    return 1;
  }
  uint64_t len, pages;
  pc_file_len(f, &len);
  pages = len / 4096;
  unsigned char buf[64];
  size_t n;
  for (uint64_t p = 0; p < pages; p++) pc_file_read_at(f, buf, 64, p * 4096, &n);
  int fd = open(argv[1], O_RDONLY);
  hints = malloc(pages * sizeof *hints);
  for (uint64_t p = 0; p < pages; p++) {
    pc_optimistic o;
    if (pc_page_optimistic(f, p, &o) != 0) abort();
    hints[p] = o.hint;
  }
  printf("c optimistic_validate %.1f\n", run(OPT, f, fd, pages));
  printf("c optimistic_hinted_valid %.1f\n", run(OPT_HINTED, f, fd, pages));
  if (pc_file_fast(f, &fast) != 0) abort();
  printf("c optimistic_fast_valid %.1f\n", run(OPT_FAST, f, fd, pages));
  printf("c latch_release_clean %.1f\n", run(LATCH, f, fd, pages));
  printf("c hot_latch_release_clean %.1f\n", run(LATCH, f, fd, 1));
  printf("c read_at_64 %.1f\n", run(READ, f, fd, pages));
  printf("c pin_release %.1f\n", run(PIN, f, fd, pages));
  printf("c pread_64 %.1f\n", run(PREAD, f, fd, pages));
  printf("c hot_read_at_64 %.1f\n", run(READ, f, fd, 1));
  printf("c hot_pin_release %.1f\n", run(PIN, f, fd, 1));
  printf("c hot_pread_64 %.1f\n", run(PREAD, f, fd, 1));
  printf("c scan_pin_per_page %.1f\n", scan(SCAN_PIN, f, pages));
  printf("c scan_run16_per_page %.1f\n", scan(SCAN_RUN, f, pages));
  close(fd);
  free(hints);
  pc_file_close(f);
  pc_cache_free(c);
  return 0;
}
