"""RunOptions (trainer/train/options.py): how one process runs a config, never what the run
is. The defaults write nothing; checkpoints and a resume need a run directory; stop_after
ends the run early on the configured LR schedule and is refused past its end before
anything is written; run_manifest.json records the options as the config's apply block,
which the resume identity leaves out."""

from __future__ import annotations

import json

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    TensorSequences,
    loop_config,
    one_thread,
    random_rows,
)
from trainer.train import loop
from trainer.train.checkpointing import identity_hash, run_identity
from trainer.train.options import RunOptions


def _data() -> TensorSequences:
    return TensorSequences(random_rows(16, 8, seed=1))


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"checkpoint": True}, "checkpoint needs out_dir"),
        ({"resume_from": "latest"}, "resume_from needs out_dir"),
        ({"stop_after": 0}, "stop_after must be >= 1"),
    ],
)
def test_options_that_cannot_work_are_refused_when_made(options, words):
    with pytest.raises(ValueError, match=words):
        RunOptions(**options)


def test_the_default_options_write_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = loop.train(loop_config({"training.max_steps": 2}), _data(), None)
    assert result.steps_run == 2 and result.checkpoints == []
    assert list(tmp_path.iterdir()) == []


def test_stop_after_ends_the_run_early_on_the_configured_schedule(tmp_path):
    config = loop_config({"training.max_steps": 8})
    full = loop.train(config, _data(), None)
    out = tmp_path / "run"
    options = RunOptions(out_dir=out, stop_after=5)
    stopped = loop.train(config, _data(), None, options=options)
    assert stopped.steps_run == 5 and stopped.stop_reason == "last_step"
    assert stopped.lrs == full.lrs[:5], "the LR schedule is the config's 8 steps, not 5"
    assert stopped.losses == full.losses[:5]
    state = json.loads((out / "training_state.json").read_text())
    assert (state["last_step"], state["reason"]) == (5, "step 5: last step 5 reached")


def test_a_stop_after_past_the_schedule_is_refused_with_nothing_written(tmp_path):
    options = RunOptions(out_dir=tmp_path / "run", checkpoint=True, stop_after=13)
    with pytest.raises(ValueError, match=r"stop_after 13 is past training\.max_steps 12"):
        loop.train(loop_config(), _data(), None, options=options)
    assert not (tmp_path / "run").exists()


def test_the_manifest_records_the_options_and_the_identity_ignores_them(tmp_path):
    config = loop_config({"training.max_steps": 3})
    out = tmp_path / "run"
    options = RunOptions(out_dir=out, checkpoint=True, stop_after=2)
    loop.train(config, _data(), None, options=options)
    manifest = json.loads((out / "run_manifest.json").read_text())
    assert manifest["config"]["apply"] == {
        "stop_after": 2,
        "out": str(out),
        "device": "cpu",
        "compile": False,
        "resume": None,
    }
    assert manifest["config"]["training"]["max_steps"] == 3
    assert identity_hash(manifest["config"]) == run_identity(config)[0]
    assert manifest["data_manifest"] is None, "in-memory sources: no data set to hash"
