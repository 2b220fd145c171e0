/*
 * Probe: what a pin costs when two CPUs pin random pages of one shared
 * set, without the cache's code. The micro-benchmark's row "scaling:
 * page() random hits" (2 threads against 1, DESIGN target 1.6x, "a bare
 * radix walk + one atomic add/sub scales 1.63x here") read 0.78-0.85x on
 * some days and 1.36-1.63x on others, at the same commits. 16 384 descriptors of 64 bytes; each operation picks a random page,
 * optionally walks a 3-level table to its frame (read-only, in L1), takes a
 * reference on the descriptor's state word, optionally checks the
 * identity words in the same line (the speculative pin's re-check), and
 * drops the reference with a fetch_sub.
 *
 *   gcc -O2 -pthread scripts/probe-pin.c -o /tmp/probe-pin
 *   for t in 1 2; do /tmp/probe-pin $t MODE WALK; done
 *
 * MODE 0: fetch_add (the DESIGN's floor, no identity check); 1: load, then
 * compare-and-swap, then the identity check (the cache's pin); 2: a
 * compare-and-swap seeded with a guessed value instead of a load, then the
 * identity check. WALK 1: the 3-level walk first; 0: the page is its frame.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define NP 16384
#define GUESS ((1ull << 35) | (1ull << 38) | 1)
struct d {
  uint64_t state, version, owner, index;
  char pad[32];
} __attribute__((aligned(64)));
static struct d *D;
static uint32_t *leaf;
static uint64_t *l1, *l2;
static volatile int stop;
static int mode, walk;
static void *run(void *a) {
  uint64_t x = 0x9E3779B97F4A7C15ull ^ ((uintptr_t)a) * 0x12345678, n = 0;
  while (!stop) {
    for (int i = 0; i < 64; i++) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      uint64_t pg = x % NP, f = pg;
      if (walk) {
        uint64_t a1 = l1[(pg >> 12) & 3];
        uint64_t a2 = l2[a1 + ((pg >> 6) & 63)];
        f = leaf[a2 * 64 + (pg & 63)];
      }
      struct d *p = &D[f];
      if (mode == 0) {
        __atomic_fetch_add(&p->state, 1, __ATOMIC_ACQUIRE);
      } else {
        uint64_t s = mode == 2 ? GUESS : __atomic_load_n(&p->state, __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&p->state, &s, (s + 1) | (1ull << 38), 1,
                                            __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
          ;
        if (__atomic_load_n(&p->owner, __ATOMIC_RELAXED) != 1 ||
            __atomic_load_n(&p->index, __ATOMIC_RELAXED) != pg)
          abort();
      }
      __atomic_fetch_sub(&p->state, 1, __ATOMIC_RELEASE);
    }
    n += 64;
  }
  *(uint64_t *)a = n;
  return 0;
}
int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: %s THREADS MODE WALK\n", argv[0]); return 2; }
  int T = atoi(argv[1]);
  mode = atoi(argv[2]);
  walk = atoi(argv[3]);
  if (T < 1 || T > 64) { fprintf(stderr, "THREADS: 1 to 64\n"); return 2; }
  D = aligned_alloc(4096, NP * sizeof *D);
  leaf = malloc(NP * 4);
  l1 = malloc(4 * 8);
  l2 = malloc(256 * 8);
  for (int i = 0; i < 4; i++) l1[i] = i * 64;
  for (int i = 0; i < 256; i++) l2[i] = i;
  for (int i = 0; i < NP; i++) {
    leaf[i] = i;
    D[i].state = GUESS;
    D[i].owner = 1;
    D[i].index = i;
  }
  pthread_t t[64];
  uint64_t r[64];
  for (int i = 0; i < T; i++) pthread_create(&t[i], 0, run, &r[i]);
  struct timespec ts = {1, 0};
  nanosleep(&ts, 0);
  stop = 1;
  uint64_t s = 0;
  for (int i = 0; i < T; i++) {
    pthread_join(t[i], 0);
    s += r[i];
  }
  printf("mode %d walk %d, %d threads: %.1f Mops/s\n", mode, walk, T, s / 1e6);
  return 0;
}
