#!/bin/sh
# Two raylog binaries side by side; see bench/compare.py.
exec python3 "$(dirname "$0")/compare.py" "$@"
