"""The ``raylog`` command of the wheel: the command line, run in this process by the
native module, with the binary's exit codes."""

import os
import signal
import sys

from . import _raylog


def main() -> None:
    # As in the binary: Ctrl-C ends the command at once. Python's own handler would
    # only run between bytecodes, never while the native code runs without the GIL
    # (`raylog ship` puts its own handler in its place to shut down cleanly). SIGPIPE
    # stays ignored, as Rust binaries leave it: a write to a closed pipe fails, and
    # raylog stops quietly (`raylog parse | head`).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise SystemExit(_raylog.run_cli([b"raylog", *map(os.fsencode, sys.argv[1:])]))


if __name__ == "__main__":
    main()
