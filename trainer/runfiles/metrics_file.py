"""metrics.jsonl, a run's one line per step: how it is written, read and rewound; torch-free
(read by `trainer monitor`, `trainer plot` and the run store too).

    log = MetricsLog(run.metrics)              # opened for appending
    log.append(json_record(record))            # one line, flushed
    records = read_metrics(run.metrics)        # every whole line, in file order
    dropped, last = rewind_metrics(run.metrics, step=20)   # a resume from step 20

- Appends are flushed, not fsynced: a SIGKILL mid-write can leave a torn last line, which
  readers drop; a bad line before the last is an error naming the file and the line
  (``parse_line``). A resume rewinds the file to its checkpoint's step, so a step lost to
  a crash after the checkpoint is taken again, and each step appears once.
- JSON has no NaN or infinity: ``json_record`` writes them as the strings "nan", "inf",
  "-inf" rather than lie or crash (the store reads them back as numbers).
- Only a regular file is read or appended to (``read_run_file``, the rule of
  gates/io/files.py read_regular): a FIFO, a device or a socket in its place is a
  MetricsFileError saying which, never an open that waits for a reader or a writer that
  never comes (a FIFO blocked `trainer apply --resume` past SIGTERM), nor an endless read.

The file's name is names.METRICS_FILE; training_state.json, written beside it every
step, is training_state.py's.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path
from typing import TextIO

from gates.io.files import FileTooLargeError, NotRegularFileError, atomic_write_bytes, read_regular


class MetricsFileError(ValueError):
    """metrics.jsonl (or training_state.json) cannot be trusted: a bad line before the last,
    a state file that is not a JSON object, a FIFO or a device in the file's place; names
    the file and line."""


#: A run's metrics.jsonl grows by a few hundred bytes a step: a million steps fit many
#: times over. The bound only keeps a read finite; a device is refused before it.
METRICS_LIMIT = 1 << 40


def read_run_file(path: Path, limit: int = METRICS_LIMIT) -> bytes:
    """The bytes of a run's file ``path``, read under the one rule (gates.io.files.read_regular:
    a regular file, symlinks followed, at most ``limit`` bytes): MetricsFileError naming
    ``path`` and what is there instead (a FIFO, a device, a socket, a directory, a
    dangling symlink); any other OSError (none there, a permission) propagates."""
    try:
        return read_regular(path, limit)
    except IsADirectoryError:
        raise MetricsFileError(f"{path}: a directory, not a file") from None
    except (NotRegularFileError, FileTooLargeError) as exc:
        raise MetricsFileError(f"{path}: {exc.strerror}") from None


def _json_number(value: float) -> float | str:
    """JSON has no NaN/inf: write them as strings rather than lie or crash."""
    return value if math.isfinite(value) else str(value)


def json_record(record: dict) -> dict:
    """``record`` as its metrics.jsonl line holds it: non-finite floats as strings."""
    return {k: _json_number(v) if isinstance(v, float) else v for k, v in record.items()}


class MetricsLog:
    """metrics.jsonl opened for appending: one JSON line per ``append``, flushed at once so
    a monitor reading the file sees every step the run has taken."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: TextIO | None = os.fdopen(_open_for_append(self.path), "a", encoding="utf-8")

    def append(self, line: dict) -> None:
        """Append ``line`` (a json_record) as one line of JSON."""
        if self._file is None:
            raise ValueError(f"{self.path}: appended to after close")
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _open_for_append(path: Path) -> int:
    """A descriptor appending to the regular file ``path`` (created when missing); a FIFO
    or a device in its place is a MetricsFileError, before a byte is written. O_NONBLOCK:
    opening a FIFO to write would otherwise wait for a reader; a regular file ignores it,
    and it is cleared before the first write all the same."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO that no process reads
            raise MetricsFileError(f"{path}: a FIFO (named pipe), not a regular file") from None
        if exc.errno == errno.EISDIR:
            raise MetricsFileError(f"{path}: a directory, not a file") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise MetricsFileError(f"{path}: {_kind(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def parse_line(line: bytes, number: int, path: Path, last: bool) -> dict | None:
    """One metrics line as a record with an integer step; None for a torn last line."""
    try:
        record = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, or bytes cut inside a UTF-8 sequence
        if last:
            return None  # the write a SIGKILL interrupted: that step is taken again
        raise MetricsFileError(
            f"{path}: line {number} is not JSON ({exc}); only a torn last line is dropped "
            "on resume, a bad line before it means the file was changed or damaged"
        ) from None
    step = record.get("step") if isinstance(record, dict) else None
    if isinstance(step, bool) or not isinstance(step, int):
        raise MetricsFileError(f"{path}: line {number} has no integer step: {line[:80]!r}")
    return record


def parse_lines(data: bytes, path: Path) -> list[tuple[bytes, dict]]:
    """(line, record) for every line of a whole metrics.jsonl's bytes, in file order: a
    torn last line (a run killed, or still writing, mid-line) is left out; a bad line
    before it raises MetricsFileError naming ``path`` and the line."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the newline that ends the last complete line
    pairs = (
        (line, parse_line(line, n, path, last=n == len(lines))) for n, line in enumerate(lines, 1)
    )
    return [(line, record) for line, record in pairs if record is not None]


def read_metrics(path: Path) -> list[dict]:
    """Every record of a metrics.jsonl, in file order, under the rule rewind applies
    (parse_lines). A FIFO or a device in its place is a MetricsFileError (read_run_file);
    any other OSError propagates."""
    path = Path(path)
    return [record for _, record in parse_lines(read_run_file(path), path)]


def rewind_metrics(path: Path, step: int) -> tuple[list[int], dict | None]:
    """Make ``path`` the metrics of a run that stopped after ``step``: drop the lines of
    later steps and a torn last line, rewriting the file atomically only when something
    changes. Returns (the steps dropped, the last record kept or None). Raises
    MetricsFileError on a bad line before the last or a file that is no regular file
    (read_run_file); any other OSError propagates."""
    path = Path(path)
    raw = read_run_file(path)
    kept, dropped, last_record = [], [], None
    for line, record in parse_lines(raw, path):  # a torn last line is left out
        if record["step"] > step:
            dropped.append(record["step"])
        else:
            kept.append(line)
            last_record = record
    text = b"".join(line + b"\n" for line in kept)
    if text != raw:
        atomic_write_bytes(path, text)
    return dropped, last_record
