/* pagecache from C: open a file through the cache, write, sync, pin and
 * read pages.
 *
 *   cargo build --release -p pagecache-ffi
 *   cc -O2 -Iinclude examples/c/example.c -Ltarget/release -lpagecache -o example
 *   LD_LIBRARY_PATH=target/release ./example /tmp/example.bin
 */
#include <pagecache.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                        \
  do {                                                                     \
    int rc_ = (call);                                                      \
    if (rc_ < 0) {                                                         \
      fprintf(stderr, "%s: %s (errno %d)\n", #call, pc_last_error(), -rc_); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "example.bin";
  pc_config cfg;
  pc_cache *cache;
  pc_file *file;
  CHECK(pc_config_default(&cfg));
  cfg.capacity = 64 << 20; /* a 64 MiB budget */
  CHECK(pc_cache_new(&cfg, &cache));
  CHECK(pc_file_open(cache, path, PC_READ | PC_WRITE | PC_CREATE | PC_TRUNCATE, &file));

  /* Write three pages' worth, the last one partial, and make it durable. */
  char line[64];
  for (int i = 0; i < 200; i++) {
    int n = snprintf(line, sizeof line, "record %03d\n", i);
    CHECK(pc_file_write_at(file, line, (size_t)n, (uint64_t)i * 11));
  }
  CHECK(pc_file_sync(file));
  uint64_t len;
  CHECK(pc_file_len(file, &len));

  /* Pin page 0: no copy, no system call on a hit; read-only until released. */
  pc_pin pin;
  CHECK(pc_page_pin(file, 0, &pin));
  printf("%.*s", 11, (const char *)pin.data + 42 * 11);
  CHECK(pc_pin_release(&pin));

  /* Latch page 0 to change it in place: dirty when released. */
  CHECK(pc_page_latch(file, 0, &pin));
  memcpy(pin.data, "RECORD", 6);
  CHECK(pc_pin_release(&pin));

  char buf[12] = {0};
  size_t got;
  CHECK(pc_file_read_at(file, buf, 11, 0, &got));
  printf("%s", buf);

  pc_stats st;
  CHECK(pc_cache_stats(cache, &st));
  printf("%s: %llu bytes; hits %llu, misses %llu, page writes %llu\n", path,
         (unsigned long long)len, (unsigned long long)st.hits,
         (unsigned long long)st.misses, (unsigned long long)st.writebacks);
  CHECK(pc_file_close(file)); /* writes the latched change back */
  CHECK(pc_cache_free(cache));
  return 0;
}
