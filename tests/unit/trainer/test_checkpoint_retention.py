"""Retention keeps the latest K (K >= 2) valid checkpoints and the best by validation loss;
the ``latest`` pointer names the newest save."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.trainer.checkpoint_support import save, trained
from trainer.checkpoint.layout import LATEST_POINTER, MANIFEST_FILE, checkpoint_dirs, step_dir_name
from trainer.checkpoint.retention import prune
from trainer.checkpoint.verify import inspect_checkpoint


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


def test_a_prune_killed_mid_deletion_leaves_no_checkpoint_missing_files(tmp_path, monkeypatch):
    model, optimizer = trained(steps=1)
    for step in (5, 10, 15):
        save(tmp_path, step, model, optimizer)
    real_rmtree = shutil.rmtree

    def killed_after_the_manifest(path, *args, **kwargs):
        (Path(path) / MANIFEST_FILE).unlink()  # the deletion has begun ...
        raise KeyboardInterrupt("killed mid-deletion")  # ... and the process dies

    monkeypatch.setattr(shutil, "rmtree", killed_after_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        prune(tmp_path, keep=2)
    listed = checkpoint_dirs(tmp_path)
    assert [p.name for p in listed] == [step_dir_name(15), step_dir_name(10)]
    assert all(inspect_checkpoint(p).valid for p in listed)

    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    removed = prune(tmp_path, keep=2)  # the next prune finishes the killed one's work
    assert [p.name for p in removed] == [step_dir_name(5) + ".deleting"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        step_dir_name(10),
        step_dir_name(15),
    ]


def test_prune_removes_a_killed_pointer_writes_temp_file_and_nothing_else(tmp_path):
    model, optimizer = trained(steps=1)
    for step in (5, 10):
        save(tmp_path, step, model, optimizer)
    stray = tmp_path / f".{LATEST_POINTER}.k1ll3d.tmp"  # a save killed mid pointer write
    stray.write_text(step_dir_name(15) + "\n")
    lookalike = tmp_path / "notes.tmp"  # someone else's file: not the pointer's temp
    lookalike.write_text("keep me\n")
    removed = prune(tmp_path, keep=2)
    assert [p.name for p in removed] == [stray.name]
    assert not stray.exists() and lookalike.exists()
    assert (tmp_path / LATEST_POINTER).read_text() == step_dir_name(10) + "\n"


def test_prune_reads_no_checkpoint_while_there_are_at_most_k_and_every_one_past_k(
    tmp_path, monkeypatch
):
    """Nothing can be pruned from K checkpoints: verifying them (every byte read) is skipped,
    and the leftovers of killed saves are still cleared. One more, and each is verified
    before any is deleted."""
    from trainer.checkpoint import retention  # noqa: PLC0415

    model, optimizer = trained(steps=1)
    for step in (5, 10):
        save(tmp_path, step, model, optimizer)
    (tmp_path / (step_dir_name(15) + ".tmp")).mkdir()  # a crashed save's staging directory
    verified = []

    def counted(path, *args, **kwargs):
        verified.append(Path(path).name)
        return inspect_checkpoint(path, *args, **kwargs)

    monkeypatch.setattr(retention, "inspect_checkpoint", counted)
    removed = prune(tmp_path, keep=2)
    assert verified == [] and [p.name for p in removed] == [step_dir_name(15) + ".tmp"]
    save(tmp_path, 15, model, optimizer)
    removed = prune(tmp_path, keep=2)
    assert sorted(verified) == [step_dir_name(s) for s in (5, 10, 15)]
    assert [p.name for p in removed] == [step_dir_name(5)]
