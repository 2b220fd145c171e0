/* Random page reads of a file from one thread with DEPTH requests in
 * flight, through the completion queue and an epoll loop: the C face of
 * the cache's asynchronous misses. Prints the rate and the process's CPU
 * time per read. scripts/bench-async.sh runs it beside the device.
 *
 *   async_reads FILE CACHE_MIB DEPTH SECONDS
 */
#include <errno.h>
#include <pagecache.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_utime.tv_usec * 1e-6 + r.ru_stime.tv_sec +
         r.ru_stime.tv_usec * 1e-6;
}

static int die(const char *what, int rc) {
  fprintf(stderr, "%s: %d: %s\n", what, rc, pc_last_error());
  return 1;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s FILE CACHE_MIB DEPTH SECONDS\n", argv[0]);
    return 2;
  }
  int depth = atoi(argv[3]);
  double secs = atof(argv[4]);
  pc_config cfg;
  pc_config_default(&cfg);
  cfg.capacity = (uint64_t)atoi(argv[2]) << 20;
  cfg.populate = 1; /* the arena faulted in before the clock starts */
  pc_cache *c;
  pc_file *f;
  pc_queue *q;
  int rc;
  if ((rc = pc_cache_new(&cfg, &c))) return die("pc_cache_new", rc);
  if ((rc = pc_file_open(c, argv[1], PC_READ, &f))) return die("pc_file_open", rc);
  if ((rc = pc_queue_new(&q))) return die("pc_queue_new", rc);
  uint64_t len;
  pc_file_len(f, &len);
  uint64_t pages = len / 4096;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN};
  epoll_ctl(ep, EPOLL_CTL_ADD, pc_queue_fd(q), &ev);

  uint64_t x = 0x9E3779B97F4A7C15ull, reads = 0;
  int inflight = 0;
  pc_pin pin;
  double t0 = now(), c0 = cpu(), end = t0 + secs;
  for (;;) {
    int more = now() < end;
    while (more && inflight < depth) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      rc = pc_queue_page_pin(q, f, x % pages, x % pages, &pin);
      if (rc == 0) { /* a hit */
        reads++;
        pc_pin_release(&pin);
      } else if (rc == PC_PENDING) {
        inflight++;
      } else {
        return die("pc_queue_page_pin", rc);
      }
    }
    if (inflight == 0) break;
    struct epoll_event got;
    int n = epoll_wait(ep, &got, 1, 10000);
    if (n < 0 && errno == EINTR) continue; /* io_uring's task work */
    if (n != 1) return die("epoll_wait: no completion within 10 s", n);
    pc_completion comp[64];
    int k = pc_queue_collect(q, comp, 64);
    if (k < 0) return die("pc_queue_collect", k);
    for (int j = 0; j < k; j++) {
      if (comp[j].result) return die("a read", comp[j].result);
      if (comp[j].pin.index != comp[j].user_data) return die("a page of the wrong index", -1);
      pc_pin_release(&comp[j].pin);
      inflight--;
      reads++;
    }
  }
  double wall = now() - t0, used = cpu() - c0;
  printf("%.0f reads/s %.2f us/read\n", reads / wall, used / reads * 1e6);
  pc_queue_free(q);
  pc_file_close(f);
  pc_cache_free(c);
  return 0;
}
