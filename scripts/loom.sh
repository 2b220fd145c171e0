#!/usr/bin/env bash
# Model-checks the protocols with loom (tests/loom.rs): the whole crate
# builds under --cfg loom and the models drive the real code.
# Runtime on the project's 2-core machine: see docs/benchmarks.md ("loom").
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom ${RUSTFLAGS:-}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/loom}"
# Each model sets its own preemption bound; MODEL_PREEMPTIONS=N overrides
# it for the models that drive the public API (slower, deeper).
start=$(date +%s)
# The crate builds under loom: lint that build too (loom-only code paths).
cargo clippy --release -p pagecache --tests -- -D warnings
cargo test --release -p pagecache --test loom -- --test-threads=1 "$@"
# The B+tree's upgrade-and-split path, over the cache's real protocols.
if [ $# -eq 0 ]; then
  cargo clippy --release -p pagecache-btree --tests -- -D warnings
  cargo test --release -p pagecache-btree --test loom -- --test-threads=1
fi
echo "loom models passed in $(( $(date +%s) - start )) s"
