"""A run's metrics sinks (trainer/train/sinks.py) behind MetricsWriter (trainer/train/metrics.py),
and the run directory's names (trainer/runfiles/names.py): the files keep their names on
disk, the writer feeds every sink the step in order, the progress line is drawn only where
it is given a terminal, and a closed writer writes nothing more but can still say how the
run ended.

    .venv/bin/pytest -q tests/unit/trainer/test_metrics_sinks.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tests.unit.trainer.loop_support import tiny_config
from trainer.runfiles.names import PipelineDir, RunDir
from trainer.train import metrics
from trainer.train.sinks import ProgressSink

CPU = torch.device("cpu")


class Screen:
    """A ProgressLine that remembers what was drawn."""

    def __init__(self) -> None:
        self.drawn: list[str] = []
        self.ended = 0

    def draw_progress(self, text: str) -> None:
        self.drawn.append(text)

    def end_progress(self) -> None:
        self.ended += 1


def _record(writer: metrics.MetricsWriter, step: int, loss: float = 1.0) -> dict:
    return writer.step_record(
        step, epoch=0, loss=loss, lr=1e-3, grad_norm=0.5, tokens=64, seconds=0.5
    )


def test_the_run_directory_files_keep_their_names_on_disk(tmp_path):
    run = RunDir(tmp_path)
    names = [run.manifest, run.metrics, run.training_state, run.store, run.checkpoints]
    assert [p.relative_to(tmp_path).as_posix() for p in names] == [
        "run_manifest.json",
        "metrics.jsonl",
        "training_state.json",
        "runs.db",
        "checkpoints",
    ]
    job = PipelineDir(tmp_path)
    paths = [job.state, job.run_config, job.train.metrics, job.summary, job.baseline, job.report]
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        "pipeline.json",
        "run.yaml",
        "train/metrics.jsonl",
        "summary.json",
        "baseline.json",
        "report.html",
    ]


def test_the_progress_line_is_drawn_every_log_interval_from_the_record_itself():
    screen = Screen()
    writer = metrics.MetricsWriter(None, tiny_config(), 8, CPU, progress=screen)
    for step in range(1, 7):
        record = _record(writer, step, math.nan if step == 4 else 1.0)
        writer.write(record, last_step=6, log_interval=2)
    writer.close()
    assert [line.split("  ")[0] for line in screen.drawn] == ["step 2/6", "step 4/6", "step 6/6"]
    assert "loss nan" in screen.drawn[1], "formatted from the float, not its JSON string"
    assert screen.ended == 1


def test_without_a_terminal_there_is_no_progress_sink(tmp_path):
    # Under pytest stderr is no terminal, and a library caller installs no handler.
    assert metrics.MetricsWriter(None, tiny_config(), 8, CPU).progress is None
    assert metrics.MetricsWriter(None, tiny_config(), 8, CPU, progress=None).progress is None
    assert isinstance(
        metrics.MetricsWriter(None, tiny_config(), 8, CPU, progress=Screen()).progress,
        ProgressSink,
    )


def test_without_an_output_directory_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = metrics.MetricsWriter(None, tiny_config(), 8, CPU, progress=None)
    writer.write(_record(writer, 1), last_step=3)
    writer.finish("finished", "last_step")
    writer.close()
    assert (writer.files, writer.recorder) == (None, None)
    assert list(tmp_path.iterdir()) == []


def test_a_step_goes_to_the_files_then_the_store_as_the_line_written(tmp_path, monkeypatch):
    writer = metrics.MetricsWriter(tmp_path / "run", tiny_config(), 8, CPU, progress=None)
    stored: list[dict] = []
    monkeypatch.setattr(writer.recorder, "step", lambda line, last_step: stored.append(line))
    writer.write(_record(writer, 1, math.inf), last_step=3)
    line = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert stored == [line] and line["loss"] == "inf"
    state = json.loads((tmp_path / "run" / "training_state.json").read_text())
    assert state == {"last_step": 3, "last": line}
    writer.close()


def test_a_closed_writer_writes_no_step_but_records_the_end(tmp_path):
    out = tmp_path / "run"
    writer = metrics.MetricsWriter(out, tiny_config(), 8, CPU, progress=None)
    writer.write(_record(writer, 1), last_step=3)
    writer.close()
    writer.close()  # idempotent
    writer.write(_record(writer, 2), last_step=3)
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1]
    writer.finish("signal", "SIGTERM")
    state = json.loads((out / "training_state.json").read_text())
    assert (state["last"]["step"], state["status"], state["reason"]) == (1, "signal", "SIGTERM")


def test_a_state_file_that_is_not_json_refuses_the_end_record(tmp_path):
    out = tmp_path / "run"
    writer = metrics.MetricsWriter(out, tiny_config(), 8, CPU, progress=None)
    writer.close()
    Path(out / "training_state.json").write_text("{torn")
    with pytest.raises(metrics.MetricsFileError, match=r"training_state\.json: not JSON"):
        writer.finish("aborted", "NaN")
