"""What a `trainer` command shows on its terminal: the "trainer" logger's stderr handler and
the progress line of a training run.

    from trainer import terminal
    terminal.install()          # once, in each entry point's main
    log = logging.getLogger(__name__)           # in a library module under trainer/
    log.warning("WARNING: run store %s is no longer recorded", path)
    # stderr: "trainer: WARNING: run store runs/demo/train/runs.db is no longer recorded"

Library modules never print (tests/unit/test_library_output.py): a diagnostic is a record
on a logger under "trainer", and the entry point decides what reaches the terminal. Every
trainer entry point calls ``install()`` first: trainer/cli.py's main (which is also what
each torchrun rank runs: ``python -m trainer apply``) and trainer/oracle/__main__.py.
It puts one TerminalHandler on the "trainer" logger, at INFO: each record becomes the line
``trainer: MESSAGE`` on stderr, the line the trainer printed before it logged, so what a
user sees is unchanged. Records still propagate (pytest's caplog sees them); a library
caller that installs nothing sees only warnings, from Python's last-resort handler.

The progress line (``\\rstep 12/100  loss ...``, redrawn in place every log interval) is
drawn through the same handler, and only when stderr is a terminal (``progress_line()``):
a record logged while it is on screen starts on a line of its own instead of running
into it.

Ctrl-C (SIGINT), for an entry point's own process (``handle_interrupts()``, then
``command_returned(status)``): the first one raises KeyboardInterrupt as Python's default
does (a training loop traps SIGINT itself and stops after its step, with a checkpoint);
any further one ends the process at once, streams flushed, with no traceback: with the
command's own status once it has returned (a Ctrl-C during the interpreter's shutdown,
atexit callbacks and torch's finalizers, cannot turn a finished command into a traceback
and exit -2), else with INTERRUPTED (130). Everything a command writes is durable when it
is written; only the interpreter's own cleanup is cut short.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from typing import TextIO

LOGGER_NAME = "trainer"
FORMAT = "trainer: %(message)s"
LEVEL = logging.INFO


class TerminalHandler(logging.Handler):
    """Records as ``trainer: MESSAGE`` lines on whatever ``sys.stderr`` is when each is
    written (so pytest's capsys and contextlib.redirect_stderr see them), and the progress
    line, which a record never runs into."""

    def __init__(self) -> None:
        super().__init__(LEVEL)
        self.setFormatter(logging.Formatter(FORMAT))
        self.progress_shown = False  # a progress line is on screen, its newline not written

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    def _write(self, text: str) -> None:
        stream = self.stream
        stream.write(text)
        stream.flush()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            lead = "\n" if self.progress_shown else ""
            self._write(f"{lead}{self.format(record)}\n")
            self.progress_shown = False
        except Exception:  # logging's contract: a handler never raises into the caller
            self.handleError(record)

    def draw_progress(self, text: str) -> None:
        """Redraw the progress line: ``text`` from the start of the line, no newline."""
        self._write(f"\r{text}")
        self.progress_shown = True

    def end_progress(self) -> None:
        """End the progress line on screen, if one is (the shell's prompt goes below it)."""
        if self.progress_shown:
            self._write("\n")
            self.progress_shown = False


def install() -> TerminalHandler:
    """Give the "trainer" logger its TerminalHandler and level INFO; idempotent (a test
    that calls main() many times gets one handler). Returns the handler."""
    logger = logging.getLogger(LOGGER_NAME)
    for handler in logger.handlers:
        if isinstance(handler, TerminalHandler):
            return handler
    handler = TerminalHandler()
    logger.addHandler(handler)
    logger.setLevel(LEVEL)
    return handler


def progress_line() -> TerminalHandler | None:
    """Where a training run draws its progress line: the installed TerminalHandler when
    stderr is a terminal; None when it is a file or a pipe (logs stay clean) or when no
    entry point installed one (a library caller)."""
    for handler in logging.getLogger(LOGGER_NAME).handlers:
        if isinstance(handler, TerminalHandler):
            stream = handler.stream
            return handler if stream is not None and stream.isatty() else None
    return None


#: The status of a command ended by Ctrl-C, as a shell reports it (128 + SIGINT).
INTERRUPTED = 128 + signal.SIGINT


class _Interrupts:
    """What the SIGINT handler knows: the command's status once it returned, and whether
    it has raised KeyboardInterrupt already (the command is winding down on it)."""

    status: int | None = None
    raised = False


def _flush_and_exit(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(status)


def _on_sigint(signum: int, frame: object) -> None:
    if _Interrupts.status is not None:
        _flush_and_exit(_Interrupts.status)
    if _Interrupts.raised:
        _flush_and_exit(INTERRUPTED)
    _Interrupts.raised = True
    raise KeyboardInterrupt


def handle_interrupts() -> None:
    """Install the SIGINT handler the module docstring describes (main thread only; a
    SIGINT the process was started ignoring stays ignored, as Python leaves it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    _Interrupts.status, _Interrupts.raised = None, False
    signal.signal(signal.SIGINT, _on_sigint)


def command_returned(status: int) -> None:
    """The command is done with ``status``: a Ctrl-C from now on exits with it."""
    _Interrupts.status = status
