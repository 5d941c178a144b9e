#!/usr/bin/env bash
# Ensures the small venv of the OTLP capture receiver (tests/otlp/receiver.py) and
# prints its python's path.
#
#   bash tests/otlp/setup-venv.sh     # → ~/.cache/raylog/venv-otlp-<hash>/bin/python
#
# The venv lives in ${RAYLOG_VENV_ROOT:-~/.cache/raylog}, named after the hash of
# tests/otlp/requirements.txt: a change of a pin builds a new one. .ci/run calls this
# before the tests; tests/it/otlp.rs calls it too (needs PyPI access the first time).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
req="$here/requirements.txt"
hash=$(sha256sum "$req" | cut -c1-12)
venv="${RAYLOG_VENV_ROOT:-$HOME/.cache/raylog}/venv-otlp-$hash"
python=${PYTHON:-python3}
if ! "$venv/bin/python" -c "from opentelemetry.proto.collector.logs.v1 import logs_service_pb2; from google.protobuf import json_format" >/dev/null 2>&1; then
  echo "setup-venv: installing $(grep -v '^#' "$req" | tr '\n' ' ')into $venv (one time)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
fi
echo "$venv/bin/python"
