"""The config hash a resume checks is of the config's content, not of its file's name
(issue 20, defect 5): the same config under another name resumes, another config does not."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainer.config.load import load_config
from trainer.train.checkpointing import identity_hash, run_identity

REPO = Path(__file__).resolve().parents[3]
CONFIG = REPO / "configs" / "quickstart-cpu.yaml"


def test_the_same_config_under_another_name_has_the_same_identity(tmp_path):
    first, renamed = tmp_path / "run.yaml", tmp_path / "run-copy.yaml"
    shutil.copyfile(CONFIG, first)
    shutil.copyfile(CONFIG, renamed)
    a, b = load_config(first), load_config(renamed)
    assert a.path != b.path  # the loaded configs do differ in where they came from
    assert run_identity(a)[0] == run_identity(b)[0], "the hash still depends on the file name"


def test_another_content_under_another_name_has_another_identity(tmp_path):
    first, other = tmp_path / "run.yaml", tmp_path / "other.yaml"
    shutil.copyfile(CONFIG, first)
    text = CONFIG.read_text(encoding="utf-8")
    assert "  warmup_steps: 110" in text
    other.write_text(text.replace("  warmup_steps: 110", "  warmup_steps: 100", 1), "utf-8")
    a, b = load_config(first), load_config(other)
    assert a.training.warmup_steps != b.training.warmup_steps
    assert run_identity(a)[0] != run_identity(b)[0], "the hash is blind to the content"


def test_a_resolved_config_path_is_left_out_and_nothing_else():
    resolved = {"path": "a.yaml", "name": "x", "training": {"epochs": 1}}
    assert identity_hash(resolved) == identity_hash({**resolved, "path": "b.yaml"})
    assert identity_hash(resolved) != identity_hash({**resolved, "name": "y"})
