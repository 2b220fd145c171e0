/*
 * Probe: the rate of each 16 MiB at the start of one buffered sequential
 * pass (1 MiB preads, the kernel's copy dropped behind in aligned 8 MiB
 * blocks, as the cache's buffered streams do), in C, without the cache.
 * The first ~64 MiB of a scan in a fresh process ran at a third of the
 * later rate through the cache; this shows whether the kernel and the
 * machine do that on their own.
 *
 *   gcc -O2 scripts/probe-scan-start.c -o /tmp/probe-scan-start
 *   sync; echo 3 > /proc/sys/vm/drop_caches; /tmp/probe-scan-start FILE
 *
 * Prints the first 8 chunks' rates (GB/s) and the whole pass's.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MIB (1 << 20)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0) {
    perror(argv[1]);
    return 1;
  }
  char *b = aligned_alloc(4096, MIB);
  off_t off = 0;
  double t0 = now(), last = t0;
  int chunk = 0;
  for (;;) {
    ssize_t n = pread(fd, b, MIB, off);
    if (n < 0) {
      perror("pread");
      return 1;
    }
    if (n == 0)
      break;
    off += n;
    /* Once past a 16 MiB mark: drop the aligned 8 MiB block ending 8 MiB
     * behind (the cache's drop-behind). */
    if (off % (8 * MIB) == 0 && off >= 24 * MIB)
      posix_fadvise(fd, off - 24 * MIB, 8 * MIB, POSIX_FADV_DONTNEED);
    if (off % (16 * MIB) == 0) {
      double t = now();
      if (chunk < 8)
        printf("%.2f ", 16.0 * MIB / (t - last) / 1e9);
      last = t;
      chunk++;
    }
  }
  printf(" whole pass %.2f GB/s\n", off / (now() - t0) / 1e9);
  return 0;
}
