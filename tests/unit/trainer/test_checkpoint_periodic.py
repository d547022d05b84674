"""FALSIFY-TRAIN-LOOP-014: checkpoints every save_interval steps, at the last step, and on
SIGTERM after the step in progress; none of the poisoned state when a run aborts; a
failed save is reported and the run goes on.

max_steps 35, save_interval 10 (tiny model, 8 steps per epoch): run A leaves 10, 20, 30,
35; run B gets SIGTERM during step 23, stops cleanly after saving 23, and its resume to
35 is bitwise run A; run C's loss is NaN at step 27: it raises and leaves 10 and 20.
"""

from __future__ import annotations

import errno
import logging
import os
import signal

import pytest
import torch

from tests.unit.trainer.loop_support import TensorSequences, loop_config, one_thread, random_rows  # noqa: F401
from trainer.checkpoint import save as save_module
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.train import guards, loop
from trainer.train.options import RunOptions

CONFIG = loop_config(
    {
        "training.seed": 5,
        "training.epochs": 5,
        "training.max_steps": 35,
        "training.save_interval": 10,
        "training.keep_checkpoints": 10,
    }
)


def _train(run_dir, hooks=None, **options):
    """The run into ``run_dir``, checkpoints in its checkpoints/."""
    options = RunOptions(out_dir=run_dir, checkpoint=True, **options)
    return loop.train(CONFIG, _data(), None, options=options, hooks=hooks)


def _data():
    return TensorSequences(random_rows(32, 8, seed=4))  # 8 steps per epoch


def _saved(run_dir):
    return sorted(step_of(p) for p in checkpoint_dirs(run_dir / "checkpoints"))


class _TermDuring:
    def __init__(self, step):
        self.step = step

    def step_batches(self, step, epoch, indices, micro_batches):
        if step == self.step:
            # With no handler installed the signal would end this test process unsaved.
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None), (
                "the run installed no SIGTERM handler: SIGTERM would kill it with no checkpoint"
            )
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the step runs


def test_checkpoints_land_every_interval_at_the_end_and_after_sigterm_and_never_on_abort(
    tmp_path, monkeypatch
):
    a = _train(tmp_path / "a")
    assert a.checkpoints == [10, 20, 30, 35] == _saved(tmp_path / "a")
    assert all(inspect_checkpoint(p).valid for p in checkpoint_dirs(tmp_path / "a" / "checkpoints"))

    before = signal.getsignal(signal.SIGTERM)
    b = _train(tmp_path / "b", hooks=_TermDuring(23))
    assert (b.stop_reason, b.steps_run) == ("signal", 23)
    assert b.checkpoints == [10, 20, 23] == _saved(tmp_path / "b")
    assert signal.getsignal(signal.SIGTERM) is before, "the run left its SIGTERM handler"
    resumed = _train(tmp_path / "b", resume_from="latest")
    assert resumed.resumed_from == 23 and resumed.steps_run == 35
    assert [r["step"] for r in resumed.records] == list(range(24, 36))
    assert resumed.losses == a.losses[23:], "the resumed losses differ from the straight run's"
    for (name, p), (_, q) in zip(
        a.model.named_parameters(), resumed.model.named_parameters(), strict=True
    ):
        assert torch.equal(p, q), f"{name} differs after SIGTERM + resume"

    real = loop.loss.accumulate_gradients
    calls = {"n": 0}

    def nan_at_27(model, micro_batches, **kwargs):
        calls["n"] += 1
        value, count = real(model, micro_batches, **kwargs)
        return (float("nan"), count) if calls["n"] == 27 else (value, count)

    monkeypatch.setattr(loop.loss, "accumulate_gradients", nan_at_27)
    with pytest.raises(guards.NonFiniteError, match="step 27"):
        _train(tmp_path / "c")
    assert _saved(tmp_path / "c") == [10, 20], "the aborted run left other checkpoints"
    assert all(inspect_checkpoint(p).valid for p in checkpoint_dirs(tmp_path / "c" / "checkpoints"))


def test_a_failed_save_is_loud_and_training_goes_on_with_the_previous_checkpoint_intact(
    tmp_path, monkeypatch, caplog
):
    caplog.set_level(logging.WARNING, logger="trainer")
    real = save_module._write_model
    failures = {"left": 1}

    def disk_full_once(model, path):
        if "step-00000020" in str(path) and failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(model, path)

    monkeypatch.setattr(save_module, "_write_model", disk_full_once)
    result = _train(tmp_path)
    assert (result.steps_run, result.stop_reason) == (35, "last_step")
    assert result.checkpoints == [10, 30, 35] == _saved(tmp_path)
    (err,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "CHECKPOINT FAILED at step 20" in err and "No space left" in err, err
    assert "last good checkpoint is step 10" in err
    checkpoints = tmp_path / "checkpoints"
    assert not list(checkpoints.glob("*.tmp")), "the failed save left its staging directory"
    assert all(inspect_checkpoint(p).valid for p in checkpoint_dirs(checkpoints))
