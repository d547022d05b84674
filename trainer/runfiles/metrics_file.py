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

The file's name is names.METRICS_FILE; training_state.json, written beside it every
step, is training_state.py's.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TextIO

from gates.files import atomic_write_bytes


class MetricsFileError(ValueError):
    """metrics.jsonl (or training_state.json) cannot be trusted: a bad line before the last,
    a state file that is not a JSON object; names the file and line."""


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
        self._file: TextIO | None = self.path.open("a", encoding="utf-8")

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
    (parse_lines). OSError propagates."""
    path = Path(path)
    return [record for _, record in parse_lines(path.read_bytes(), path)]


def rewind_metrics(path: Path, step: int) -> tuple[list[int], dict | None]:
    """Make ``path`` the metrics of a run that stopped after ``step``: drop the lines of
    later steps and a torn last line, rewriting the file atomically only when something
    changes. Returns (the steps dropped, the last record kept or None). Raises
    MetricsFileError on a bad line before the last; OSError propagates."""
    path = Path(path)
    raw = path.read_bytes()
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
