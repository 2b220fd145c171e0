#!/usr/bin/env bash
# The asynchronous misses from C and Python, beside the device in the same
# run: a file 8x the cache, cold; per round, the device's random 4 KiB
# O_DIRECT reads through io_uring at depth 32 (`pagecache device`), the C
# epoll loop (examples/c/async_reads.c) with 32 requests in flight, the
# device at depth 64, Python asyncio (scripts/bench_async.py) with 64 tasks
# on one thread. Prints each round and the medians of the paired ratios.
#
#   scripts/bench-async.sh [--quick] [--busy N] [ROUNDS]
# (root: the kernel's caches are dropped before each measurement.)
# --busy N keeps N processes spinning on the CPUs (nice 0) through every
# round: each configuration and its device reference under the same load.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 busy=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --busy) busy=${2:?--busy needs a number}; shift 2 ;;
    *) break ;;
  esac
done
rounds=${1:-5}
if [ $quick = 1 ]; then mib=32 secs=1; else mib=256 secs=3; fi
file_mib=$((mib * 8))
cargo build -q --release -p pagecache-lab -p pagecache-ffi
out=$(mktemp -d "${TMPDIR:-/tmp}/pagecache-bench-async.XXXXXX")
spinners=()
stop_spinners() { for p in "${spinners[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap 'stop_spinners; rm -rf "$out"' EXIT
cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude examples/c/async_reads.c \
  target/release/libpagecache.a -lpthread -ldl -lm -o "$out/c_async"
# The Python package, built with optimizations into the tests' venv.
venv=target/py-venv
if [ ! -x "$venv/bin/python" ]; then python3 -m venv "$venv"; fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.16,<2"
"$venv/bin/maturin" build -q --release --manifest-path crates/pagecache-py/Cargo.toml \
  -i "$venv/bin/python" -o "$out/wheels"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$out"/wheels/pagecache-*.whl
data="$out/data.bin"
dd if=/dev/urandom of="$data" bs=1M count=$file_mib conv=fsync status=none
cold() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
rate() { awk '{print $1}'; }
for _ in $(seq 1 "$busy"); do sh -c 'while :; do :; done' & spinners+=($!); done
echo "file $file_mib MiB, cache $mib MiB, $secs s per run, $rounds rounds, $busy busy processes"
printf '%-6s %14s %14s %8s %14s %14s %8s\n' round "device d32" "C epoll 32" ratio "device d64" "asyncio 64" ratio
c_r=() p_r=()
for r in $(seq 1 "$rounds"); do
  cold; d32=$(target/release/pagecache device "$data" 32 "$secs")
  cold; c32=$("$out/c_async" "$data" "$mib" 32 "$secs")
  cold; d64=$(target/release/pagecache device "$data" 64 "$secs")
  cold; p64=$("$venv/bin/python" scripts/bench_async.py "$data" "$mib" 64 "$secs")
  cr=$(awk -v a="$(echo "$c32" | rate)" -v b="$(echo "$d32" | rate)" 'BEGIN{printf "%.2f", a/b}')
  pr=$(awk -v a="$(echo "$p64" | rate)" -v b="$(echo "$d64" | rate)" 'BEGIN{printf "%.2f", a/b}')
  c_r+=("$cr") p_r+=("$pr")
  printf '%-6s %14s %14s %8s %14s %14s %8s\n' "$r" "$(echo "$d32" | rate)" "$(echo "$c32" | rate)" "${cr}x" \
    "$(echo "$d64" | rate)" "$(echo "$p64" | rate)" "${pr}x"
  echo "       CPU per read: device d32 $(echo "$d32" | awk '{print $3}') us, C $(echo "$c32" | awk '{print $3}') us, device d64 $(echo "$d64" | awk '{print $3}') us, asyncio $(echo "$p64" | awk '{print $3}') us"
done
med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END{print (NR%2)? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "median ratio: C epoll loop, 32 in flight / device at depth 32: $(med "${c_r[@]}")x (target >= 0.9x)"
echo "median ratio: Python asyncio, 64 tasks / device at depth 64: $(med "${p_r[@]}")x (target >= 0.8x)"
