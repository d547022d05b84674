"""Special files in a run directory's places (issue 31): a FIFO where a run file belongs,
and a call made on it that must come back at once - a regression (a read or an open that
waits for the FIFO's other end) fails the test by assertion, never hangs the suite.

    fifo = make_fifo(run_dir / "metrics.jsonl")
    outcome = returns_promptly(lambda: read_metrics(fifo), fifo)
    assert outcome.returned, outcome.why            # then outcome.error / outcome.value
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Generous: the calls take milliseconds; a blocked one never returns at all.
PROMPT_S = 10.0


def make_fifo(path: Path) -> Path:
    """A FIFO at ``path`` (whatever was there removed)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.mkfifo(path)
    return path


@dataclass
class Outcome:
    returned: bool  # within PROMPT_S
    value: Any = None
    error: BaseException | None = None

    @property
    def why(self) -> str:
        return f"still blocked after {PROMPT_S} s (it waits on the FIFO's other end)"


def returns_promptly(call: Callable[[], Any], fifo: Path) -> Outcome:
    """Run ``call`` on a thread; whether it came back within PROMPT_S, and with what. A
    call still blocked is released by opening both ends of ``fifo`` (so the thread ends
    and the test fails by assertion, not by hanging)."""
    outcome = Outcome(returned=False)

    def run() -> None:
        try:
            outcome.value = call()
        except BaseException as exc:  # handed to the test, which asserts on it
            outcome.error = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PROMPT_S)
    if not thread.is_alive():
        outcome.returned = True
        return outcome
    _release(fifo)
    thread.join(PROMPT_S)
    return outcome


def _release(fifo: Path) -> None:
    """Open and close both ends of ``fifo``: a reader blocked in open or read gets EOF, a
    writer blocked in open gets its reader."""
    for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, flags))
    with contextlib.suppress(OSError):  # a writer that opened: drain what it wrote
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        with contextlib.suppress(OSError):
            os.read(fd, 1 << 20)
        os.close(fd)
