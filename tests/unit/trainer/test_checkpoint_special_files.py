"""A FIFO or a device in place of a checkpoint's file (issue 31): `trainer inspect` (and so
a resume, which verifies first) says what is there - "a FIFO (named pipe), not a regular
file" - not that the file is missing, and never opens it to wait on.

    .venv/bin/pytest -q tests/unit/trainer/test_checkpoint_special_files.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.unit.trainer.checkpoint_support import save, trained
from tests.unit.trainer.special_files_support import make_fifo, returns_promptly
from trainer.checkpoint.layout import CHECKPOINT_STATE_FILE, MANIFEST_FILE, MODEL_FILE
from trainer.checkpoint.verify import inspect_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    model, optimizer = trained(steps=1)
    return save(tmp_path_factory.mktemp("ckpt") / "run", 3, model, optimizer)


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    ckpt = tmp_path / checkpoint.name
    shutil.copytree(checkpoint, ckpt)
    return ckpt


@pytest.mark.parametrize("name", [CHECKPOINT_STATE_FILE, MODEL_FILE])
def test_a_fifo_data_file_is_named_as_one(name, checkpoint, tmp_path):
    ckpt = _copy(checkpoint, tmp_path)
    fifo = make_fifo(ckpt / name)
    outcome = returns_promptly(lambda: inspect_checkpoint(ckpt), fifo)
    assert outcome.returned, outcome.why
    assert outcome.error is None, repr(outcome.error)  # inspect never raises on bad data
    report = outcome.value
    verdict = next(v for v in report.files if v.name == name)
    assert (verdict.ok, verdict.reason) == (False, "a FIFO (named pipe), not a regular file")
    assert f"{fifo}: a FIFO (named pipe), not a regular file" in report.problems


def test_a_device_in_a_files_place_is_named_as_one(checkpoint, tmp_path):
    if not os.path.exists(os.devnull):
        pytest.skip(f"no {os.devnull} here")
    ckpt = _copy(checkpoint, tmp_path)
    (ckpt / CHECKPOINT_STATE_FILE).unlink()
    (ckpt / CHECKPOINT_STATE_FILE).symlink_to(os.devnull)  # followed: a character device
    verdict = next(v for v in inspect_checkpoint(ckpt).files if v.name == CHECKPOINT_STATE_FILE)
    assert verdict.reason == "a character device, not a regular file"


def test_a_fifo_manifest_is_named_as_one_not_missing(checkpoint, tmp_path):
    ckpt = _copy(checkpoint, tmp_path)
    fifo = make_fifo(ckpt / MANIFEST_FILE)
    outcome = returns_promptly(lambda: inspect_checkpoint(ckpt), fifo)
    assert outcome.returned, outcome.why
    assert outcome.error is None, repr(outcome.error)
    assert outcome.value.problems == [
        f"{fifo}: cannot be read: a FIFO (named pipe), not a regular file"
    ]


def test_missing_files_are_still_called_missing_and_the_whole_one_valid(checkpoint, tmp_path):
    """Two-sided: the copy verifies; a file removed is "missing", as before."""
    ckpt = _copy(checkpoint, tmp_path)
    assert inspect_checkpoint(ckpt).valid
    (ckpt / CHECKPOINT_STATE_FILE).unlink()
    verdict = next(v for v in inspect_checkpoint(ckpt).files if v.name == CHECKPOINT_STATE_FILE)
    assert verdict.reason == "listed in the manifest but missing"
    (ckpt / MANIFEST_FILE).unlink()
    assert "missing; a directory without a manifest" in inspect_checkpoint(ckpt).problems[0]
