"""A run directory (what `trainer apply --out DIR` writes) read back as plottable series.

    run = load_run(Path("runs/demo/train"))   # RunDirError, naming the path, if it is not one
    run.steps, run.loss, run.lr, run.grad_norm, run.val_steps, run.val_loss
    run_labels([Path("a/train"), Path("b/train")])   # ["a/train", "b/train"]

metrics.jsonl is read by trainer/runfiles/metrics_file.py's read_metrics, the rule resume
uses: a torn last line (a run still writing, or killed mid-line) is left out, a bad line
before it is an error naming the file and the line. Validation loss is the ``val_loss``
key the loop adds to the record of each step it evaluated at. Non-finite values (written
as "nan"/"inf" strings, since JSON has none) become NaN: a gap in the line, not a value.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from trainer.runfiles.metrics_file import MetricsFileError, read_metrics
from trainer.runfiles.names import METRICS_FILE

_NON_FINITE = ("nan", "inf", "-inf")


class RunDirError(ValueError):
    """A RUN_DIR that cannot be plotted; the message names the path (and line)."""


@dataclass(frozen=True)
class RunSeries:
    path: Path
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)  # NaN where a step has none
    val_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)

    @property
    def has_grad_norm(self) -> bool:
        return any(not math.isnan(v) for v in self.grad_norm)


def _number(record: dict, key: str, where: str, *, required: bool) -> float | None:
    """``record[key]`` as a float (NaN for non-finite); None when absent and optional."""
    value = record.get(key)
    if value is None and not required:
        return None
    if isinstance(value, str) and value in _NON_FINITE:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RunDirError(f"{where}: {key} is not a number: {value!r}")
    return float(value) if math.isfinite(value) else math.nan


def load_run(run_dir: Path) -> RunSeries:
    """The series of ``run_dir``'s metrics.jsonl; RunDirError if it is no run or no metrics."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory (a run directory is a trainer apply --out)")
    path = run_dir / METRICS_FILE
    if not os.path.lexists(path):  # a FIFO in its place is named by read_metrics, not missed
        raise RunDirError(f"{run_dir}: not a run directory: no {METRICS_FILE}")
    try:
        records = read_metrics(path)
    except MetricsFileError as exc:
        raise RunDirError(str(exc)) from None
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not records:
        raise RunDirError(f"{path}: no metrics (no complete line); nothing to plot")
    run = RunSeries(path=run_dir)
    for number, record in enumerate(records, 1):  # only a torn last line is left out
        where = f"{path}: line {number}"
        step = record["step"]  # read_metrics guarantees an integer step
        if run.steps and step <= run.steps[-1]:
            # apply never appends a second run and resume drops the steps it re-takes,
            # so a step out of order means the file was edited or concatenated.
            raise RunDirError(f"{where}: step {step} after step {run.steps[-1]}")
        run.steps.append(step)
        run.loss.append(_number(record, "loss", where, required=True))
        run.lr.append(_number(record, "lr", where, required=True))
        grad = _number(record, "grad_norm", where, required=False)
        run.grad_norm.append(math.nan if grad is None else grad)
        val = _number(record, "val_loss", where, required=False)
        if val is not None:
            run.val_steps.append(step)
            run.val_loss.append(val)
    return run


def run_labels(paths: list[Path]) -> list[str]:
    """Each run's directory name, with as many parent names as it takes to tell it from the
    other runs (``x/train``, ``y/train``, ``z``). The paths must be distinct directories.
    Labels of different depths differ in their number of parts, so all labels differ."""
    parts = [Path(p).resolve().parts for p in paths]
    if len(set(parts)) != len(parts):
        raise ValueError("the same run directory is named twice")

    def label(i: int) -> str:
        for depth in range(1, len(parts[i]) + 1):
            mine = parts[i][-depth:]
            if all(other[-depth:] != mine for j, other in enumerate(parts) if j != i):
                return str(Path(*mine))
        return str(Path(*parts[i]))  # a prefix of another run's path: the whole path

    return [label(i) for i in range(len(parts))]
