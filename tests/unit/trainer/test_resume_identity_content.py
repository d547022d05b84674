"""The config hash a resume checks is of the config's content, not of its file's name
(issue 20, defect 5) nor of where the run is (issue 31): the same config under another
name or in a moved run directory resumes, another config does not."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainer.checkpoint.layout import CheckpointError
from trainer.config.in_code import with_values
from trainer.config.load import load_config
from trainer.train.checkpointing import identity_hash, legacy_identity_hash, run_identity
from trainer.train.components import RunIdentity

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


def test_where_a_run_reads_and_writes_is_left_out_so_a_moved_run_resumes(tmp_path):
    """Issue 31: a run directory copied or moved elsewhere (its config's data, tokenizer and
    output paths rewritten) keeps its identity; what a step computes still counts."""
    a = load_config(CONFIG)
    moved = with_values(
        a,
        {
            "data.shards": Path("/elsewhere/data"),
            "data.tokenizer": Path("/elsewhere/tokenizer"),
            "training.output_dir": Path("/elsewhere/train"),
        },
    )
    assert run_identity(a)[0] == run_identity(moved)[0], "the hash depends on where the run is"
    assert legacy_identity_hash(a.to_json()) != legacy_identity_hash(moved.to_json())
    stepped = with_values(moved, {"data.seq_len": a.data.seq_len // 2})
    assert run_identity(a)[0] != run_identity(stepped)[0], "the hash is blind to the content"


def test_a_checkpoint_written_before_paths_left_the_hash_still_resumes():
    """The identity a checkpoint recorded with its paths in (legacy_identity_hash) is
    accepted; any other hash is still another run's."""
    config = load_config(CONFIG)
    resolved = config.to_json()
    mine = RunIdentity(
        identity_hash(resolved),
        "d" * 64,
        seed=1,
        tokenizer_dir=None,
        world_size=1,
        legacy_config_hash=legacy_identity_hash(resolved),
    )
    saved = {"world_size": 1, "data_manifest_sha256": "d" * 64}
    assert _refusal(mine, {**saved, "config_hash": legacy_identity_hash(resolved)}) is None
    assert _refusal(mine, {**saved, "config_hash": identity_hash(resolved)}) is None
    refused = _refusal(mine, {**saved, "config_hash": "e" * 64})
    assert refused is not None and "written by another run: config hash" in refused


def _refusal(identity: RunIdentity, saved: dict) -> str | None:
    """Why ``identity`` refuses a checkpoint's ``saved`` identity; None when it accepts."""
    try:
        identity.load_state_dict(saved)
    except CheckpointError as exc:
        return str(exc)
    return None
