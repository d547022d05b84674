"""A run whose final checkpoint cannot be written does not end ``finished``, and a resume
that falls back past a corrupt newest checkpoint moves it aside so its step can be saved
again (issue 20, defect 1).

A failed periodic save is loud and training goes on (test_checkpoint_periodic.py); the
final one - the last step, or the save after SIGTERM - is what the run leaves behind, so
when it fails the run ends with status ``save_failed`` (training_state.json, runs.db),
``TrainResult.save_failed`` says why, and every earlier checkpoint is untouched.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import signal
import sqlite3

import pytest

from tests.unit.trainer.loop_support import TensorSequences, loop_config, one_thread, random_rows  # noqa: F401
from trainer.checkpoint import save as save_module
from trainer.checkpoint.layout import CheckpointError, checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.train import checkpointing, loop
from trainer.train.options import RunOptions

VALUES = {"training.max_steps": 12, "training.save_interval": 4, "training.keep_checkpoints": 2}
CONFIG = loop_config({"training.seed": 5, **VALUES})


def _train(run_dir, config=CONFIG, hooks=None, **options):
    options = RunOptions(out_dir=run_dir, checkpoint=True, **options)
    return loop.train(config, TensorSequences(random_rows(32, 8, seed=4)), None, options=options,
                      hooks=hooks)  # fmt: skip


def _saved(run_dir):
    return sorted(step_of(p) for p in checkpoint_dirs(run_dir / "checkpoints"))


def run_end(run_dir) -> tuple[str, str, str]:
    """(training_state.json status, its reason, runs.db status)."""
    state = json.loads((run_dir / "training_state.json").read_text())
    store = sqlite3.connect(f"{(run_dir / 'runs.db').as_uri()}?mode=ro", uri=True)
    try:
        (stored,) = store.execute("SELECT status FROM runs").fetchone()
    finally:
        store.close()
    return state["status"], state["reason"], stored


def _disk_full_at(monkeypatch, step: int) -> None:
    """Every save of ``step`` fails as a full disk would (ENOSPC writing the weights)."""
    real = save_module._write_model

    def disk_full(model, path):
        if f"step-{step:08d}" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(model, path)

    monkeypatch.setattr(save_module, "_write_model", disk_full)


def test_a_run_whose_final_save_fails_ends_save_failed_and_one_that_saves_ends_finished(
    tmp_path, monkeypatch, caplog
):
    good = _train(tmp_path / "good")
    assert good.save_failed is None and _saved(tmp_path / "good") == [8, 12]
    assert run_end(tmp_path / "good")[0::2] == ("finished", "finished")

    caplog.set_level(logging.WARNING, logger="trainer")
    _disk_full_at(monkeypatch, 12)
    full = tmp_path / "full"
    result = _train(full)
    assert result.steps_run == 12 and result.checkpoints == [4, 8]
    assert result.save_failed is not None and "No space left" in result.save_failed
    status, reason, stored = run_end(full)
    assert (status, stored) == ("save_failed", "save_failed"), "a lost final save ended finished"
    assert "final checkpoint was not written" in reason and "No space left" in reason, reason
    assert "last good checkpoint is step 8" in reason, reason
    # Nothing earlier is lost: the checkpoints before it verify, latest still names one.
    assert _saved(full) == [4, 8]
    assert all(inspect_checkpoint(p).valid for p in checkpoint_dirs(full / "checkpoints"))
    assert (full / "checkpoints" / "latest").read_text().strip() == "step-00000008"
    steps = [json.loads(x)["step"] for x in (full / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 13))
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors  # the last step's save is tried once, not twice
    assert "CHECKPOINT FAILED at step 12" in errors[0] and "cannot end cleanly" in errors[0]


class _TermDuring:
    def __init__(self, step: int) -> None:
        self.step = step

    def step_batches(self, step, epoch, indices, micro_batches):
        if step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)  # the loop's handler: stop after this step


def test_a_failed_save_after_sigterm_ends_save_failed_not_signal(tmp_path, monkeypatch):
    _disk_full_at(monkeypatch, 6)
    result = _train(tmp_path, hooks=_TermDuring(6))
    assert (result.stop_reason, result.steps_run) == ("signal", 6)
    assert result.save_failed is not None and "No space left" in result.save_failed
    status, reason, stored = run_end(tmp_path)
    assert (status, stored) == ("save_failed", "save_failed")
    assert "(signal)" in reason and "last good checkpoint is step 4" in reason, reason
    assert _saved(tmp_path) == [4]


def _flip_a_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_fallback_resume_quarantines_the_corrupt_checkpoint_and_saves_its_step_again(
    tmp_path, caplog
):
    checkpoints = tmp_path / "checkpoints"
    _train(tmp_path)
    assert _saved(tmp_path) == [8, 12]
    newest = checkpoints / "step-00000012"
    weights = _sha(newest / "model.safetensors")
    _flip_a_byte(newest / "model.safetensors")
    corrupt = _sha(newest / "model.safetensors")

    # A resume that is refused (another run's config) moves nothing.
    other = loop_config({"training.seed": 6, **VALUES})
    with pytest.raises(CheckpointError):
        _train(tmp_path, config=other, resume_from="latest")
    assert newest.is_dir() and not list(checkpoints.glob("*.corrupt*"))

    caplog.set_level(logging.WARNING, logger="trainer")
    result = _train(tmp_path, resume_from="latest")
    assert (result.resumed_from, result.steps_run, result.save_failed) == (8, 12, None)
    quarantined = checkpoints / "step-00000012.corrupt"
    assert quarantined.is_dir(), "the corrupt checkpoint was not moved aside"
    assert _sha(quarantined / "model.safetensors") == corrupt, "renamed, never rewritten"
    assert result.checkpoints == [12] and _saved(tmp_path) == [8, 12]
    assert inspect_checkpoint(newest).valid
    assert _sha(newest / "model.safetensors") == weights, "the step saved again is not bitwise"
    assert (checkpoints / "latest").read_text().strip() == "step-00000012"
    assert run_end(tmp_path)[0::2] == ("finished", "finished")
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"quarantined checkpoint {newest} as {quarantined}" in said, said

    # Quarantined again (a second corruption of the same step): a name of its own.
    _flip_a_byte(newest / "model.safetensors")
    result = _train(tmp_path, resume_from="latest")
    assert result.save_failed is None and inspect_checkpoint(newest).valid
    assert (checkpoints / "step-00000012.corrupt-2").is_dir() and quarantined.is_dir()


def test_quarantine_names_are_never_checkpoint_names(tmp_path):
    step = tmp_path / "step-00000007"
    step.mkdir()
    first = checkpointing.quarantine_name(step)
    assert first.name == "step-00000007.corrupt" and step_of(first) is None
    first.mkdir()
    assert checkpointing.quarantine_name(step).name == "step-00000007.corrupt-2"
