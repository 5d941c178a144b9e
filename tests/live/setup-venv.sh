#!/usr/bin/env bash
# Ensures the Python venv the live tests run Ray from, and prints its python's path.
#
#   bash tests/live/setup-venv.sh     # → /root/.cache/raylog/venv-ray-2.60.0/bin/python
#
# The venv lives in ${RAYLOG_VENV_ROOT:-~/.cache/raylog} so it is built once per
# machine; it is rebuilt when tests/live/requirements.txt no longer matches it.
# .ci/run calls this before the tests; tests/it/live.rs calls it too, so a plain
# `cargo test --release` on a new machine installs Ray by itself (needs PyPI access).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/requirements.txt"
pin=$(grep -o 'ray\[default\]==[0-9.]*' "$req")
version=${pin##*==}
venv="${RAYLOG_VENV_ROOT:-$HOME/.cache/raylog}/venv-ray-$version"
python=${PYTHON:-python3}
if ! "$venv/bin/python" -c "import ray, ray.dashboard, aiohttp, sys; sys.exit(ray.__version__ != '$version')" >/dev/null 2>&1; then
  echo "setup-venv: installing $pin into $venv (one time, a few minutes)" >&2
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
fi
echo "$venv/bin/python"
