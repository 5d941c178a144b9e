#!/usr/bin/env bash
# Ensures the venv of the trace server the live traces test runs (Arize Phoenix,
# tests/traces/requirements.txt) and prints its python (the server runs as `python -m phoenix.server.main serve`).
#
#   bash tests/traces/setup-venv.sh   # → ~/.cache/raylog/venv-phoenix-<hash>/bin/python
#
# About 860 MB, two minutes to install; cached per machine in
# ${RAYLOG_VENV_ROOT:-~/.cache/raylog}, named after the hash of requirements.txt.
# .ci/run calls this before the tests; tests/it/live_traces.rs calls it too.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/requirements.txt"
hash=$(sha256sum "$req" | cut -c1-12)
venv="${RAYLOG_VENV_ROOT:-$HOME/.cache/raylog}/venv-phoenix-$hash"
python=${PYTHON:-python3}
if ! "$venv/bin/python" -c "import phoenix.server.main" >/dev/null 2>&1; then
  echo "setup-venv: installing $(grep -v '^#' "$req" | tr '\n' ' ')into $venv (one time, a few minutes)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
fi
echo "$venv/bin/python"
