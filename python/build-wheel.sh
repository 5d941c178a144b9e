#!/usr/bin/env bash
# Builds the raylog wheel: `raylog` on PATH and `import raylog`, abi3 (CPython 3.9+),
# manylinux_2_28 (glibc 2.28+), into target/wheels/. Needs the Rust toolchain and
# Python 3 with pip; maturin and zig (which links against glibc 2.28's symbols
# whatever this machine's glibc is) come from PyPI into a cached venv.
#   bash python/build-wheel.sh            # release build, as shipped
# Prints the wheel's path on its last line.
set -euo pipefail
cd "$(dirname "$0")"
MATURIN=maturin==1.16.0
ZIG=ziglang==0.17.1
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/raylog/wheel-venv-${MATURIN##*==}-${ZIG##*==}"
if ! "$VENV/bin/maturin" --version >/dev/null 2>&1 || ! "$VENV/bin/python" -m ziglang version >/dev/null 2>&1; then
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$MATURIN" "$ZIG" >&2
fi
# The package's README is the repository's (one front door).
cp ../README.md README.md
trap 'rm -f README.md' EXIT
# The host's triple, named so that zig links it (x86_64 or aarch64 Linux).
TARGET="$(rustc -vV | sed -n 's/^host: //p')"
PATH="$VENV/bin:$PATH" maturin build --release --zig --compatibility manylinux_2_28 \
  --target "$TARGET" --out ../target/wheels "$@" >&2
ls -t ../target/wheels/raylog-*.whl | head -1 | xargs realpath
