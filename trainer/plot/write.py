"""Draw runs' metrics into OUT/loss.png and OUT/loss.svg: the work of `trainer plot
RUN_DIR...` (trainer/plot/commands.py) and of `trainer pipeline`'s plots stage.

    result = write_plots([Path("runs/demo/train")], Path("runs/demo/plots"))
    result.files     # [runs/demo/plots/loss.png, runs/demo/plots/loss.svg]

Every check comes before any write: each run directory reads back (trainer/plot/runs.py),
none is named twice, ``out`` is a directory or absent, and each target is absent or one
we wrote (figure.is_ours). Then every format is drawn, and only then written, each
atomically (temp file + os.replace), so a failed write leaves that file's old bytes.
Raises PlotError for a failed check (nothing written) and PlotWriteError for a failed
write (naming the file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gates.io.files import atomic_write_bytes
from trainer.plot import figure
from trainer.plot.runs import RunDirError, load_run, run_labels

PLOT_NAME = "loss"  # the file stem: loss.png, loss.svg
DEFAULT_FORMATS = ("png", "svg")


class PlotError(Exception):
    """The runs cannot be drawn to ``out``; the message says why. Nothing written."""


class PlotWriteError(PlotError):
    """A write failed (disk full, permissions); the message names the file, which keeps
    its old bytes. Formats written before it stay written."""


@dataclass(frozen=True)
class PlotResult:
    drawn: list[str]  # each run as "label (N steps)", in the order given
    files: list[Path]  # the files written, one per format


def write_plots(
    run_dirs: Sequence[Path], out: Path, formats: Sequence[str] = DEFAULT_FORMATS
) -> PlotResult:
    """Draw the runs in ``run_dirs``, overlaid, into ``out``/loss.FORMAT for each format."""
    try:
        labels = run_labels(list(run_dirs))
    except ValueError:
        raise PlotError("a run directory is named twice") from None
    try:
        runs = [load_run(path) for path in run_dirs]
    except RunDirError as exc:
        raise PlotError(str(exc)) from exc
    if out.exists() and not out.is_dir():
        raise PlotError(f"--out {out} is not a directory")
    targets = {fmt: out / f"{PLOT_NAME}.{fmt}" for fmt in formats}
    for path in targets.values():
        if (path.exists() or path.is_symlink()) and not figure.is_ours(path):
            raise PlotError(f"{path} exists and was not written by trainer plot; not replacing it")

    fig = figure.draw(runs, labels)
    data = {fmt: figure.to_bytes(fig, fmt) for fmt in targets}  # drawn before anything is written
    path = out
    try:
        out.mkdir(parents=True, exist_ok=True)
        for fmt, path in targets.items():
            atomic_write_bytes(path, data[fmt])  # the old file or the new one, never a part
    except OSError as exc:  # disk full, permissions: say which file, no traceback
        raise PlotWriteError(f"cannot write {path}: {exc}") from exc
    drawn = [f"{label} ({len(run.steps)} steps)" for label, run in zip(labels, runs, strict=True)]
    return PlotResult(drawn, list(targets.values()))
