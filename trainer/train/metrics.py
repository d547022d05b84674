"""Per-step metrics: a step's record, fanned out to the run's sinks.

    writer = MetricsWriter(out_dir, model_cfg, seq_len, device)   # out_dir None: no files
    record = writer.step_record(step, epoch=0, loss=3.2, lr=3e-4, grad_norm=0.8, tokens=4096,
                                seconds=0.5)
    writer.write(record, last_step=1000, log_interval=10)
    writer.checkpoint(step, path)           # after a save: the run store lists it
    writer.finish("finished", "last_step")  # how the run ended, once, at its end
    writer.close()

A record: step, epoch, loss, lr, grad_norm, tokens, tokens_per_s, step_s, and mfu on CUDA
(model FLOP/s over the datasheet bf16 peak, flops.py), or peak_fraction on
the CPU (model FLOP/s over this machine's measured float32 matmul peak,
trainer/plan/roofline.py: measured once when the writer is made, before the first
timed step, and cached per machine; only where the records are kept, ``out_dir`` given,
unless ``matmul_peak`` is passed). The writer
feeds it to three sinks, in this order, each its own object:

- ``files`` (sinks.JsonlSink): ``metrics.jsonl``, one line per step, and
  ``training_state.json``, the latest line plus the run's progress, replaced atomically;
  ``finish`` adds how the run ended (status, reason, ended_at).
- ``recorder`` (trainer/store/recorder.py's RunRecorder): ``runs.db``, the run store, a
  row per step beside each line, derived from those files; it never stops training (a
  failure is one warning).
- ``progress`` (sinks.ProgressSink): the progress line, only where the entry point put
  a terminal (trainer.terminal.progress_line: stderr, when it is one; logs stay clean).

On resume from the checkpoint of step k, ``rewind(out_dir, k, last_step=...)`` first
drops every metrics line past step k (those steps are taken again) and a torn last line
(a SIGKILL mid-write), rewriting the file atomically, and points training_state.json at
step k; so after any crash and resume every step appears once. A bad line anywhere but
the last is an error naming the file and the line, never skipped. ``read_metrics(path)``
reads the records back under the same rule (``trainer plot``).

The files' names and formats are trainer/runfiles/'s; FLOP accounting is flops.py's.
Both are re-exported here, where the loop and the tests look for them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import torch

from trainer import terminal
from trainer.model.config import LlamaConfig
from trainer.plan.roofline import matmul_peak as measured_matmul_peak
from trainer.plan.roofline import peak_fraction
from trainer.runfiles.json_file import atomic_write_json  # noqa: F401 - re-exported
from trainer.runfiles.metrics_file import (  # noqa: F401 - re-exported
    MetricsFileError,
    parse_line,
    parse_lines,
    read_metrics,
)
from trainer.runfiles.names import METRICS_FILE, TRAINING_STATE_FILE, RunDir  # noqa: F401
from trainer.runfiles.training_state import END_STATUSES, check_end_status  # noqa: F401
from trainer.store.recorder import RunRecorder
from trainer.train.flops import (  # noqa: F401 - re-exported
    PEAK_BF16_FLOPS,
    flops_per_token,
    matmul_params,
    peak_flops,
)
from trainer.train.sinks import JsonlSink, ProgressLine, ProgressSink, rewind  # noqa: F401

#: ``MetricsWriter(..., progress=)``'s default: the terminal the entry point installed, if
#: stderr is one (trainer.terminal.progress_line); None: no progress line.
TERMINAL: Literal["terminal"] = "terminal"


class MetricsWriter:
    """A run's metrics sinks behind one object: files and run store when ``out_dir`` is
    given (rank 0), the progress line when ``progress`` is a terminal's (the default: the
    one the entry point installed, trainer.terminal.progress_line)."""

    def __init__(
        self,
        out_dir: Path | None,
        cfg: LlamaConfig,
        seq_len: int,
        device: torch.device,
        *,
        progress: ProgressLine | Literal["terminal"] | None = TERMINAL,
        matmul_peak: float | Literal["measure"] | None = "measure",
    ) -> None:
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.flops_per_token = flops_per_token(cfg, seq_len)
        self.peak = peak_flops(device)
        #: The CPU's measured float32 matmul FLOP/s (roofline.py), the denominator of
        #: peak_fraction; None on CUDA, or where nothing keeps the records.
        self.matmul_peak: float | None = None
        if device.type == "cpu":
            if matmul_peak == "measure":
                if self.out_dir is not None:  # once, before the first timed step
                    self.matmul_peak = measured_matmul_peak().flops_per_second
            else:
                self.matmul_peak = matmul_peak
        self.files: JsonlSink | None = None
        self.recorder: RunRecorder | None = None
        if self.out_dir is not None:
            self.files = JsonlSink(RunDir(self.out_dir))
            # runs.db, derived from these files: a store failure warns once, never raises.
            self.recorder = RunRecorder(self.out_dir)
            self.recorder.start()
        line = terminal.progress_line() if progress == TERMINAL else progress
        self.progress = None if line is None else ProgressSink(line)

    def step_record(
        self,
        step: int,
        *,
        epoch: int,
        loss: float,
        lr: float,
        grad_norm: float,
        tokens: int,
        seconds: float,
    ) -> dict:
        tokens_per_s = tokens / seconds if seconds > 0 else float("inf")
        record = {
            "step": step,
            "epoch": epoch,
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "tokens": tokens,
            "tokens_per_s": tokens_per_s,
            "step_s": seconds,
        }
        if self.peak is not None:
            record["mfu"] = tokens_per_s * self.flops_per_token / self.peak
        fraction = peak_fraction(tokens_per_s * self.flops_per_token, self.matmul_peak)
        if fraction is not None:
            record["peak_fraction"] = fraction
        return record

    def write(self, record: dict, *, last_step: int, log_interval: int = 1) -> None:
        """One step: its line to the files, then the same line to the run store, then the
        progress line (from the record itself: it formats floats, NaN included)."""
        line = None if self.files is None else self.files.step(record, last_step=last_step)
        if line is not None and self.recorder is not None:
            self.recorder.step(line, last_step=last_step)
        if self.progress is not None:
            self.progress.step(record, last_step=last_step, log_interval=log_interval)

    def finish(self, status: str, reason: str, *, last_step: int | None = None) -> None:
        """Record how the run ended: training_state.json's latest state plus ``status``
        (END_STATUSES), ``reason`` and ``ended_at`` (UTC, ISO 8601), then the run store's
        row. Without it a monitor cannot tell a run that stopped on purpose (early
        stopping, a signal, an alert) or aborted from one that died without a word
        (SIGKILL: "stale"). ``last_step`` fills a state file the run never wrote (it ended
        before a step). ValueError for another status, whatever the sinks."""
        check_end_status(status)
        if self.files is None:
            return
        ended = datetime.now(UTC).isoformat(timespec="seconds")
        self.files.finish(status, reason, ended=ended, last_step=last_step)
        if self.recorder is not None:
            self.recorder.finish(status, reason, ended=ended)

    def checkpoint(self, step: int, path: Path) -> None:
        """The checkpoint of ``step`` was saved at ``path``: the run store records it."""
        if self.recorder is not None:
            self.recorder.checkpoint(step, path)

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        if self.files is not None:
            self.files.close()
        if self.progress is not None:
            self.progress.close()
