"""Named exit codes shared by the `pv`, `gates` and `trainer` command-line tools.

Each number has one name and one meaning across the tools. The trainer's own statuses
(4 ALERT_STOPPED, 5 ABORTED, 6 SAVE_FAILED) live in trainer/exit_codes.py and use no number
named here; the README's "Exit codes" table lists them all.
"""

import os
import sys

OK = 0
#: Validation errors found, or a requirement (e.g. ``--require-ship-ready``) not met; for the
#: trainer, an input that fails its checks (config, data, run directory, checkpoint).
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
