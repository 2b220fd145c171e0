#!/usr/bin/env bash
# The C ABI: builds libpagecache (debug), compiles the C test suite and the
# example with the system cc, runs them, then runs the suite again under
# valgrind (no leaks, no invalid accesses) when valgrind is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p pagecache-ffi
lib=target/debug
out=$(mktemp -d "${TMPDIR:-/tmp}/pagecache-c.XXXXXX")
trap 'rm -rf "$out"' EXIT
CFLAGS=(-std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -Iinclude)
# Static: the test suite (full symbols for valgrind's reports).
cc "${CFLAGS[@]}" tests/c/test_pagecache.c "$lib/libpagecache.a" -lpthread -ldl -lm -o "$out/test_static"
# Shared: the example, and the suite again.
cc "${CFLAGS[@]}" tests/c/test_pagecache.c -L"$lib" -lpagecache -lpthread -o "$out/test_shared"
cc "${CFLAGS[@]}" examples/c/example.c -L"$lib" -lpagecache -o "$out/example"
cc "${CFLAGS[@]}" examples/c/async_reads.c -L"$lib" -lpagecache -o "$out/async_reads"
mkdir -p "$out/scratch"
echo "== C tests (static library)"
"$out/test_static" "$out/scratch"
echo "== C tests (shared library)"
LD_LIBRARY_PATH="$lib" "$out/test_shared" "$out/scratch"
echo "== C example"
LD_LIBRARY_PATH="$lib" "$out/example" "$out/scratch/example.bin"
echo "== C example: reads in flight through the completion queue"
head -c $((8 << 20)) /dev/urandom > "$out/scratch/async.bin"
LD_LIBRARY_PATH="$lib" "$out/async_reads" "$out/scratch/async.bin" 1 16 0.3
if command -v valgrind >/dev/null 2>&1; then
  echo "== C tests under valgrind"
  # The thread-pool engine: valgrind does not model memory the kernel
  # writes through io_uring's shared rings.
  PC_UNDER_VALGRIND=1 PAGECACHE_IO_ENGINE=threads valgrind -q --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
    "$out/test_static" "$out/scratch"
elif [ "${CI:-}" = true ]; then
  echo "valgrind not installed (CI installs it)" >&2
  exit 1
else
  echo "== valgrind not installed: skipped the run under valgrind"
fi
