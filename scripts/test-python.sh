#!/usr/bin/env bash
# The Python package: builds the abi3 wheel with maturin in a virtual
# environment (target/py-venv; maturin, pytest and numpy from PyPI),
# installs it there and runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/py-venv
py=${PYTHON:-python3}
if ! "$py" -c "import venv, ensurepip" >/dev/null 2>&1; then
  if [ "${CI:-}" = true ]; then
    echo "python3 with venv and ensurepip is needed (.ci/run installs python3-venv)" >&2
    exit 1
  fi
  echo "== python3 with venv not found: skipped the Python tests (apt-get install python3-venv)"
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.16,<2" pytest numpy
rm -rf target/wheels/pagecache-*.whl
"$venv/bin/maturin" build -q --manifest-path crates/pagecache-py/Cargo.toml -i "$venv/bin/python" -o target/wheels
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps target/wheels/pagecache-*.whl
"$venv/bin/python" -c "import pagecache, sys; print(\"testing\", pagecache.__file__)"
cd crates/pagecache-py
"../../$venv/bin/python" -m pytest -q tests
