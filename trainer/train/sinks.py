"""Where a training run's metrics go, one sink per destination; metrics.MetricsWriter feeds
each step to all of them.

    files = JsonlSink(RunDir(out_dir))       # metrics.jsonl + training_state.json
    files.step(record, last_step=1000)       # returns the line it wrote (json_record)
    files.finish("finished", "last_step", ended=now, last_step=1000)
    progress = ProgressSink(terminal.progress_line())   # None off a terminal: no sink
    progress.step(record, last_step=1000, log_interval=10)

The third sink, the run store (runs.db), is trainer/store/recorder.py's RunRecorder.
``rewind`` makes a run directory's files those of a run that stopped at a checkpoint's
step, before a resume opens them again.

The files' names and formats are trainer/runfiles/'s; these sinks only decide what goes
in them and when.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from trainer.runfiles.metrics_file import MetricsLog, json_record, rewind_metrics
from trainer.runfiles.names import RunDir
from trainer.runfiles.training_state import write_end, write_progress


class JsonlSink:
    """A run directory's metrics.jsonl (a line per step, appended) and training_state.json
    (the latest line and the run's last step, replaced atomically after it)."""

    def __init__(self, run: RunDir) -> None:
        self.run = run
        run.root.mkdir(parents=True, exist_ok=True)
        self._log: MetricsLog | None = MetricsLog(run.metrics)

    def step(self, record: dict, *, last_step: int) -> dict | None:
        """Write one step's record; returns the line written (None once closed)."""
        if self._log is None:
            return None
        line = json_record(record)
        self._log.append(line)
        write_progress(self.run.training_state, last_step=last_step, last=line)
        return line

    def finish(self, status: str, reason: str, *, ended: str, last_step: int | None) -> None:
        """Add the end record to training_state.json (after close too)."""
        write_end(self.run.training_state, status, reason, ended=ended, last_step=last_step)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class ProgressLine(Protocol):
    """What ProgressSink draws on: trainer.terminal.TerminalHandler, or a test's stand-in."""

    def draw_progress(self, text: str) -> None: ...

    def end_progress(self) -> None: ...


class ProgressSink:
    """The progress line on a terminal, redrawn every ``log_interval`` steps."""

    def __init__(self, line: ProgressLine) -> None:
        self.line = line

    def step(self, record: dict, *, last_step: int, log_interval: int) -> None:
        if record["step"] % log_interval == 0:
            self.line.draw_progress(
                f"step {record['step']}/{last_step}  loss {record['loss']:.4f}  "
                f"lr {record['lr']:.2e}  |g| {record['grad_norm']:.3f}  "
                f"{record['tokens_per_s']:,.0f} tok/s"
            )

    def close(self) -> None:
        self.line.end_progress()


def rewind(out_dir: Path, step: int, *, last_step: int) -> list[int]:
    """Make ``out_dir``'s metrics those of a run that stopped after ``step``: drop the lines
    of later steps and a torn last line (metrics.jsonl rewritten atomically, only when
    something changes), and point training_state.json at ``step``'s record. Returns the
    steps dropped. Raises MetricsFileError on a bad line before the last."""
    run = RunDir(out_dir)
    if not os.path.lexists(run.metrics):  # a FIFO or a link in its place is refused below
        return []
    dropped, last_record = rewind_metrics(run.metrics, step)
    if run.training_state.is_file():
        write_progress(run.training_state, last_step=last_step, last=last_record)
    return dropped
