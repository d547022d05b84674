"""Retention keeps the latest K (K >= 2) valid checkpoints and the best by validation loss;
the ``latest`` pointer names the newest save."""

from __future__ import annotations

import pytest

from tests.unit.trainer.checkpoint_support import save, trained
from trainer.checkpoint.layout import LATEST_POINTER, MANIFEST_FILE, step_dir_name
from trainer.checkpoint.retention import prune


def test_prune_keeps_the_latest_k_and_the_best_by_validation_loss(tmp_path):
    model, optimizer = trained(steps=1)
    losses = {5: 3.0, 10: 2.0, 15: 2.5, 20: 2.6, 25: 2.7}
    for step, val in losses.items():
        save(tmp_path, step, model, optimizer, val_loss=val)
        assert (tmp_path / LATEST_POINTER).read_text() == step_dir_name(step) + "\n"
    (tmp_path / (step_dir_name(30) + ".tmp")).mkdir()  # a crashed save's staging directory
    removed = prune(tmp_path, keep=2)
    left = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert left == [step_dir_name(10), step_dir_name(20), step_dir_name(25)], left
    assert {p.name for p in removed} == {
        step_dir_name(5),
        step_dir_name(15),
        step_dir_name(30) + ".tmp",
    }


def test_prune_never_counts_an_invalid_checkpoint_as_kept_and_refuses_k_below_2(tmp_path):
    model, optimizer = trained(steps=1)
    for step in (5, 10, 15):
        save(tmp_path, step, model, optimizer)
    (tmp_path / step_dir_name(15) / MANIFEST_FILE).unlink()
    prune(tmp_path, keep=2)
    left = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert left == [step_dir_name(5), step_dir_name(10), step_dir_name(15)]
    with pytest.raises(ValueError, match="keep must be >= 2"):
        prune(tmp_path, keep=1)
