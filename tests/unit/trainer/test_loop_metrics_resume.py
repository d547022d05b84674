"""After a crash and a resume, metrics.jsonl holds every step once and training_state.json
is the resumed run's: the lines of the steps after the checkpoint (taken again) and a line
torn by a kill are dropped before the resumed run writes; a damaged line before the last
is an error naming the file and the line.

Tiny model (hidden 16, one layer), 32 sequences of 8 tokens, CPU; about a second each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    TensorSequences,
    loop_config,
    one_thread,
    random_rows,
)
from trainer.train import loop, metrics
from trainer.train.options import RunOptions


def _data() -> TensorSequences:
    return TensorSequences(random_rows(32, 8, seed=3))


def _run(out: Path, stop_after: int, resume_from: Path | None = None) -> loop.TrainResult:
    # One 8-step schedule for every run, stopped early or not: the resumed steps compare.
    run = loop_config(
        {
            "training.seed": 7,
            "training.epochs": 2,
            "training.max_steps": 8,
            "training.save_interval": 2,
        }
    )
    options = RunOptions(
        out_dir=out, checkpoint=True, stop_after=stop_after, resume_from=resume_from
    )
    return loop.train(run, _data(), None, options=options)


def _lines(out: Path) -> list[dict | str]:
    """metrics.jsonl's records; a line that is not JSON is kept as its text, to be seen."""
    records: list[dict | str] = []
    for line in (out / metrics.METRICS_FILE).read_text().splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            records.append(line)
    return records


@pytest.mark.parametrize("killed_mid_line", [False, True])
def test_a_run_resumed_from_an_earlier_checkpoint_has_each_step_once(tmp_path, killed_mid_line):
    straight = _run(tmp_path / "straight", 8)
    out = tmp_path / "crashed"
    _run(out, 6)  # checkpoints at 2, 4, 6; metrics of steps 1..6
    if killed_mid_line:  # a kill while step 7's line was being written: no newline
        with (out / metrics.METRICS_FILE).open("a") as fh:
            fh.write('{"step": 7, "epoch": 0, "lo')

    resumed = _run(out, 8, resume_from=out / "checkpoints" / "step-00000004")

    assert resumed.resumed_from == 4 and [r["step"] for r in resumed.records] == [5, 6, 7, 8]
    lines = _lines(out)
    steps = [x["step"] if isinstance(x, dict) else x for x in lines]
    assert steps == list(range(1, 9)), f"metrics.jsonl after resuming at step 4: {steps}"
    assert [x["loss"] for x in lines] == [r["loss"] for r in straight.records]
    state = json.loads((out / metrics.TRAINING_STATE_FILE).read_text())
    assert state["last"]["step"] == 8 and state["last_step"] == 8
    assert not list(out.glob(".metrics.jsonl.*")), "no temp file left behind"


def _metrics_file(out: Path, steps: range, tail: str = "") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in steps)
    (out / metrics.METRICS_FILE).write_text(lines + tail)
    metrics.atomic_write_json(
        out / metrics.TRAINING_STATE_FILE, {"max_steps": 30, "last": {"step": 30}}
    )
    return out / metrics.METRICS_FILE


@pytest.mark.parametrize("tail", ["", '{"step": 31, "loss": 0.0', "\x00\x00\x00"])
def test_rewind_keeps_the_steps_up_to_the_checkpoint_and_drops_a_torn_last_line(tmp_path, tail):
    path = _metrics_file(tmp_path, range(1, 31), tail)

    dropped = metrics.rewind(tmp_path, 20, last_step=40)

    assert dropped == list(range(21, 31))
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == list(range(1, 21))
    assert path.read_text().endswith("}\n")
    state = json.loads((tmp_path / metrics.TRAINING_STATE_FILE).read_text())
    assert state == {"last_step": 40, "last": {"step": 20, "loss": 1.0 / 20}}


def test_rewind_leaves_a_file_with_nothing_to_drop_untouched(tmp_path):
    path = _metrics_file(tmp_path, range(1, 21))
    inode = path.stat().st_ino
    assert metrics.rewind(tmp_path, 20, last_step=40) == []
    assert path.stat().st_ino == inode, "rewritten though nothing changed"


@pytest.mark.parametrize("bad", ["{not json", "", '{"loss": 1.0}', '{"step": "5"}'])
def test_a_damaged_line_before_the_last_is_an_error_naming_file_and_line(tmp_path, bad):
    path = _metrics_file(tmp_path, range(1, 31))
    lines = path.read_text().splitlines()
    lines[4] = bad
    path.write_text("\n".join(lines) + "\n")
    before = path.read_bytes()

    with pytest.raises(metrics.MetricsFileError) as refused:
        metrics.rewind(tmp_path, 20, last_step=40)

    assert f"{path}: line 5 " in str(refused.value), str(refused.value)
    assert path.read_bytes() == before, "the damaged file was changed"
