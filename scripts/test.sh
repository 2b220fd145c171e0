#!/usr/bin/env bash
# Every test of the project: the Rust workspace (unit, integration, doc
# tests; the C header's freshness), the C ABI with the system cc (plainly
# and under valgrind), and the Python package with pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== Rust: cargo test --workspace"
cargo test --workspace
echo "== C: scripts/test-c.sh"
scripts/test-c.sh
echo "== Python: scripts/test-python.sh"
scripts/test-python.sh
