"""Named exit codes shared by the `pv`, `gates` and `trainer` command-line tools."""

import os
import sys

OK = 0
#: Validation errors found, or a requirement (e.g. ``--require-ship-ready``) not met.
FINDINGS = 1
#: Bad command line, or a path that cannot be read (missing, a directory, no permission).
USAGE = 2
#: A bug in shipgate itself; the traceback is shown only with ``--debug``.
INTERNAL = 3
#: Standard output closed by its reader (``pv status | head``): 128 + SIGPIPE, what a shell
#: reports for a Unix tool the pipe ended. Not 0: the command may not have finished.
BROKEN_PIPE = 141


def stop_on_broken_pipe() -> int:
    """After a BrokenPipeError on stdout: point stdout at /dev/null, so the interpreter's
    final flush cannot raise again ("Exception ignored ... BrokenPipeError"), and return
    BROKEN_PIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return BROKEN_PIPE
