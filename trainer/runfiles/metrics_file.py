"""The two files a run's metrics live in, torch-free (read by `trainer monitor` and the run
store too), and the name of the run's manifest beside them (``RUN_MANIFEST``, written by
trainer/train/manifest.py, which imports torch).

- ``metrics.jsonl``: one JSON object per step, appended; a SIGKILL mid-write can leave a
  torn last line, which readers drop; a bad line before the last is an error naming the
  file and the line (``parse_line``).
- ``training_state.json``: the latest record plus max_steps, replaced atomically
  (``atomic_write_json``: gates/files.py's temp file, fsync, os.replace, directory fsync) so
  a reader never sees half a file.
  At the end of every run the loop adds ``status`` (END_STATUSES), ``reason`` and
  ``ended_at`` (MetricsWriter.finish); a run killed without a word (SIGKILL, power loss)
  has none, and a resume drops them (metrics.rewind) while it runs again.
"""

from __future__ import annotations

import json
from pathlib import Path

from gates.files import atomic_write_text

METRICS_FILE = "metrics.jsonl"
STATE_FILE = "training_state.json"
RUN_MANIFEST = "run_manifest.json"
#: How a run ended (training_state.json "status"): max_steps reached, early stopping,
#: SIGTERM/SIGINT, a stop alert (monitoring.alerts), or an exception (NaN, divergence, ...).
END_STATUSES = ("finished", "early_stopping", "signal", "alert", "aborted")


class MetricsFileError(ValueError):
    """metrics.jsonl cannot be trusted (a bad line before the last); names file and line."""


def atomic_write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (readers never see half a file)."""
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


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
