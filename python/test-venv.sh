#!/usr/bin/env bash
# Ensures the venv of the Python API's tests (python/tests/requirements.txt: Ray 2.60
# with Ray Data, pytest), installs the wheel given (or the newest in target/wheels)
# into it, and prints the venv's python.
#
#   bash python/test-venv.sh [WHEEL]    # → ~/.cache/raylog/venv-python-<hash>/bin/python
#
# The venv is cached per machine, named after the hash of the requirements; the wheel
# is reinstalled every time. .ci/run exports what it prints as RAYLOG_PYTHON for
# tests/it/python.rs.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/tests/requirements.txt"
hash=$(sha256sum "$req" | cut -c1-12)
venv="${RAYLOG_VENV_ROOT:-$HOME/.cache/raylog}/venv-python-$hash"
wheel="${1:-$(ls -t "$here"/../target/wheels/raylog-*.whl 2>/dev/null | head -1)}"
[ -f "$wheel" ] || { echo "test-venv: no wheel; build one with: bash python/build-wheel.sh" >&2; exit 1; }
if ! "$venv/bin/python" -c 'import ray.data, pytest' >/dev/null 2>&1; then
  echo "test-venv: installing $(grep -v '^#' "$req" | tr '\n' ' ')into $venv (one time)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel" >&2
echo "$venv/bin/python"
