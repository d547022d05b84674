"""A FIFO in place of metrics.jsonl or training_state.json (issue 31): every read and the
append of a run's files refuse it at once, saying it is a FIFO - the open of a FIFO
waits for its other end, which blocked `trainer apply --resume` past SIGTERM. Regular
files are read and appended as before.

    .venv/bin/pytest -q tests/unit/trainer/test_metrics_special_files.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.trainer.special_files_support import make_fifo, returns_promptly
from trainer.plot.runs import RunDirError as PlotRunDirError
from trainer.plot.runs import load_run
from trainer.runfiles.metrics_file import (
    MetricsFileError,
    MetricsLog,
    read_metrics,
    read_run_file,
    rewind_metrics,
)
from trainer.runfiles.training_state import write_end

LINE = {"step": 1, "loss": 2.5}


def _refused(outcome, path: Path) -> str:
    assert outcome.returned, outcome.why
    assert isinstance(outcome.error, MetricsFileError), repr(outcome.error)
    message = str(outcome.error)
    assert message.startswith(f"{path}: ") and "a FIFO (named pipe)" in message, message
    return message


CALLS = {
    "read_metrics": read_metrics,
    "rewind_metrics": lambda path: rewind_metrics(path, 3),
    "append (MetricsLog)": MetricsLog,
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_fifo_metrics_file_is_refused_at_once_saying_so(call, tmp_path):
    fifo = make_fifo(tmp_path / "metrics.jsonl")
    _refused(returns_promptly(lambda: CALLS[call](fifo), fifo), fifo)


def test_a_fifo_training_state_is_refused_when_the_end_is_recorded(tmp_path):
    fifo = make_fifo(tmp_path / "training_state.json")
    call = lambda: write_end(fifo, "finished", "max_steps", ended="2025-01-01T00:00:00+00:00")  # noqa: E731
    message = _refused(returns_promptly(call, fifo), fifo)
    assert "the end status is not recorded" in message
    assert fifo.is_fifo(), "nothing replaced it"


def test_plot_names_a_fifo_metrics_file_as_one_not_as_missing(tmp_path):
    """`trainer plot` reads metrics.jsonl too (read_metrics): a FIFO is said to be one,
    not taken for no metrics file at all."""
    fifo = make_fifo(tmp_path / "metrics.jsonl")
    outcome = returns_promptly(lambda: load_run(tmp_path), fifo)
    assert outcome.returned, outcome.why
    assert isinstance(outcome.error, PlotRunDirError), repr(outcome.error)
    assert str(outcome.error) == f"{fifo}: a FIFO (named pipe), not a regular file"


def test_a_directory_in_the_metrics_files_place_is_named(tmp_path):
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(MetricsFileError, match=r"metrics\.jsonl: a directory, not a file"):
        read_run_file(tmp_path / "metrics.jsonl")
    with pytest.raises(MetricsFileError, match=r"metrics\.jsonl: a directory, not a file"):
        MetricsLog(tmp_path / "metrics.jsonl")


def test_regular_files_are_still_appended_read_rewound_and_ended(tmp_path):
    """Two-sided: the refusals above leave the files a run writes working."""
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in (1, 2, 3):
        log.append({**LINE, "step": step})
    log.close()
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    assert rewind_metrics(path, 2) == ([3], {**LINE, "step": 2})
    again = MetricsLog(path)  # appends after the rewound lines, as a resume does
    again.append({**LINE, "step": 3})
    again.close()
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    state = tmp_path / "training_state.json"
    state.write_text(json.dumps({"max_steps": 3, "last": LINE}))
    write_end(state, "finished", "max_steps", ended="2025-01-01T00:00:00+00:00")
    assert json.loads(state.read_text())["status"] == "finished"
