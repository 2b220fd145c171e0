#!/usr/bin/env bash
# Builds vmcache's B-tree and TPC-C over pagecache's C ABI: vmcache.cpp
# (Leis et al., SIGMOD 2023, MIT; its source directory as the argument:
# vmcache.cpp and tpcc/) with its buffer manager and guards (from `struct
# LibaioInterface` up to `struct BTreeNode;`) replaced by pc_bm.hpp, the
# rest compiled unchanged, linked with target/release/libpagecache.a.
# Usage: benches/vmcache-pc/build.sh VMCACHE_SRC_DIR OUT_BINARY
# Run it as vmcache (env BLOCK, PHYSGB, VIRTGB, THREADS, DATASIZE, RUNFOR,
# RNDREAD), or through the lab: `pagecache bench tpcc --vmcache-pc OUT`.
set -euo pipefail
src=${1:?usage: build.sh VMCACHE_SRC_DIR OUT_BINARY}
out=${2:?usage: build.sh VMCACHE_SRC_DIR OUT_BINARY}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
[ -f "$src/vmcache.cpp" ] && [ -d "$src/tpcc" ] || {
  echo "build.sh: $src has no vmcache.cpp and tpcc/ (vmcache's source: github.com/viktorleis/vmcache)" >&2
  exit 2
}
work=$(mktemp -d "${TMPDIR:-/tmp}/vmcache-pc.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$src/tpcc" "$work/"
cp "$src/exmap.h" "$work/" 2>/dev/null || true
start=$(grep -n '^struct LibaioInterface' "$src/vmcache.cpp" | cut -d: -f1)
end=$(grep -n '^struct BTreeNode;' "$src/vmcache.cpp" | cut -d: -f1)
[ -n "$start" ] && [ -n "$end" ] && [ "$start" -lt "$end" ] || {
  echo "build.sh: vmcache.cpp's buffer manager not found between 'struct LibaioInterface' and 'struct BTreeNode;'" >&2
  exit 2
}
{
  sed -n "1,$((start - 1))p" "$src/vmcache.cpp" | grep -v '#include <libaio.h>'
  echo "#include \"$here/pc_bm.hpp\""
  sed -n "$end,\$p" "$src/vmcache.cpp"
} > "$work/vmcache_pc.cpp"
(cd "$root" && cargo build -q --release -p pagecache-ffi)
g++ -O3 -std=c++20 -I"$root/include" "$work/vmcache_pc.cpp" \
  "$root/target/release/libpagecache.a" -lpthread -ldl -lm -o "$out"
echo "built $out"
