"""Shared by the Python API's tests: where the fixtures are, and the `raylog`
command of the installed wheel, whose output is what the API must give."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
TEXT = FIXTURES / "ray-2.60-text"


def raylog_command() -> str:
    # The wheel's console script sits beside the venv's python.
    exe = Path(sys.executable).parent / "raylog"
    found = str(exe) if exe.exists() else shutil.which("raylog")
    assert found, "no `raylog` command: install the wheel into this venv (python/test-venv.sh)"
    return found


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([raylog_command(), *args], capture_output=True)
    if check:
        assert run.returncode in (0, 1), run.stderr.decode()
    return run


def cli_records(*args: str) -> list:
    out = cli("parse", *args).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="session")
def fixture_dirs() -> list:
    return sorted(str(p) for p in FIXTURES.iterdir() if p.is_dir() and p.name.startswith("ray-"))
