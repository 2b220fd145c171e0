#!/usr/bin/env bash
# The cost of a call across each boundary: the same 64 B read of a cached
# page and pin + release from Rust, C and Python, each next to its
# language's pread of the same bytes from the kernel's cache. One thread;
# each figure the median of 5 runs; the three programs run in turn, ROUNDS
# times (default 3). Results as in docs/benchmarks.md ("Across the
# boundary").
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/pagecache-boundary.XXXXXX")
trap 'rm -rf "$work"' EXIT
head -c $((64 << 20)) /dev/urandom > "$work/data.bin"
cargo build -q --release -p pagecache-ffi
cargo build -q --release -p pagecache --example boundary
cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude benches/boundary/bench.c target/release/libpagecache.a \
  -lpthread -ldl -lm -o "$work/bench_c"
venv=target/py-venv
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.16,<2"
rm -rf target/wheels-release
"$venv/bin/maturin" build -q --release --manifest-path crates/pagecache-py/Cargo.toml \
  -i "$venv/bin/python" -o target/wheels-release
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps \
  target/wheels-release/pagecache-*.whl
for r in $(seq "$rounds"); do
  echo "# round $r"
  target/release/examples/boundary "$work/data.bin"
  "$work/bench_c" "$work/data.bin"
  "$venv/bin/python" benches/boundary/bench.py "$work/data.bin"
done
