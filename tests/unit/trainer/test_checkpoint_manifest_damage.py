"""A checkpoint whose hashes agree with damaged contents (issue 20, defect 4): a manifest
``files`` entry that is not an object, an optimizer file missing a tensor, an RNG tensor
of the wrong size. Each is an invalid checkpoint with a message naming the file: inspect
reports it, export refuses it, and ``latest_valid`` (what a resume uses) falls back past
it to the older checkpoint, instead of a KeyError or RuntimeError mid-load. Valid
checkpoints, a single-process one and a two-rank one, still verify and load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.unit.trainer.checkpoint_support import fresh, save, state_at, trained
from trainer.checkpoint import rng
from trainer.checkpoint.export import EXPORT_ERRORS, export_checkpoint
from trainer.checkpoint.layout import (
    MANIFEST_FILE,
    OPTIMIZER_FILE,
    RNG_JSON_FILE,
    RNG_TENSOR_FILE,
)
from trainer.checkpoint.load import latest_valid, load_checkpoint
from trainer.checkpoint.manifest import file_entry
from trainer.checkpoint.save import save_checkpoint
from trainer.checkpoint.verify import inspect_checkpoint


def _rehash(ckpt: Path, name: str) -> None:
    """Make the manifest agree with ``name``'s new bytes (a hand-edited checkpoint)."""
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"][name] = file_entry(ckpt / name)
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))


def _set_manifest(ckpt: Path, **fields: object) -> None:
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest | fields))


def _entry_not_an_object(ckpt: Path) -> None:
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"][RNG_JSON_FILE] = "deadbeef"
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))


def _files_a_list(ckpt: Path) -> None:
    _set_manifest(ckpt, files=["model.safetensors"])


def _optimizer_tensor_missing(ckpt: Path) -> None:
    tensors = load_file(str(ckpt / OPTIMIZER_FILE))
    del tensors["model.norm.weight.exp_avg"]
    save_file(tensors, str(ckpt / OPTIMIZER_FILE))
    _rehash(ckpt, OPTIMIZER_FILE)


def _optimizer_moment_misshapen(ckpt: Path) -> None:
    tensors = load_file(str(ckpt / OPTIMIZER_FILE))
    tensors["model.norm.weight.exp_avg_sq"] = torch.zeros(3)
    save_file(tensors, str(ckpt / OPTIMIZER_FILE))
    _rehash(ckpt, OPTIMIZER_FILE)


def _rng_tensor_short(ckpt: Path) -> None:
    tensors = load_file(str(ckpt / RNG_TENSOR_FILE))
    tensors[rng.TORCH_CPU] = tensors[rng.TORCH_CPU][:100].clone()
    save_file(tensors, str(ckpt / RNG_TENSOR_FILE))
    _rehash(ckpt, RNG_TENSOR_FILE)


def _rng_json_truncated_state(ckpt: Path) -> None:
    states = json.loads((ckpt / RNG_JSON_FILE).read_text())
    states["python"]["internal"] = states["python"]["internal"][:10]
    (ckpt / RNG_JSON_FILE).write_text(json.dumps(states))
    _rehash(ckpt, RNG_JSON_FILE)


DAMAGE = {
    "files-entry-not-an-object": (_entry_not_an_object, "files entry 'rng.json'"),
    "files-a-list": (_files_a_list, "files is"),
    "optimizer-tensor-missing": (
        _optimizer_tensor_missing,
        "optimizer.safetensors: model.norm.weight: missing exp_avg",
    ),
    "optimizer-moment-misshapen": (
        _optimizer_moment_misshapen,
        "model.norm.weight.exp_avg_sq has shape [3]",
    ),
    "rng-tensor-wrong-size": (_rng_tensor_short, "rng.safetensors: torch.cpu (100 bytes)"),
    "rng-json-python-state": (_rng_json_truncated_state, "rng.json: no Python generator state"),
}


@pytest.fixture(scope="module")
def model_and_optimizer():
    return trained(steps=1)


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damage_is_an_invalid_checkpoint_that_resume_skips_and_export_refuses(
    case, tmp_path, model_and_optimizer
):
    damage, message = DAMAGE[case]
    model, optimizer = model_and_optimizer
    run = tmp_path / "run"
    older = save(run, 2, model, optimizer)
    newest = save(run, 3, model, optimizer)
    assert inspect_checkpoint(newest).valid, "the undamaged checkpoint verifies"
    damage(newest)

    report = inspect_checkpoint(newest)  # never raises on bad data
    assert not report.valid
    assert any(message in p for p in report.problems), report.problems
    assert json.dumps(report.to_json())  # inspect --json can print it

    chosen, skipped = latest_valid(run, architecture=model.config)
    assert chosen == older, f"resume must fall back past the damaged {newest}"
    assert [p for p, _ in skipped] == [newest] and message in skipped[0][1]

    with pytest.raises(EXPORT_ERRORS, match="invalid checkpoint"):
        export_checkpoint(newest, tmp_path / "export")
    assert not (tmp_path / "export").exists()

    fresh_model, fresh_optimizer = fresh(seed=1)
    load_checkpoint(chosen, fresh_model, fresh_optimizer)  # the fallback loads


def test_a_two_rank_checkpoint_and_an_untrained_one_still_verify(tmp_path, model_and_optimizer):
    model, optimizer = model_and_optimizer
    one = rng.capture_rng()
    two = rng.merge_ranks([one, rng.capture_rng()])
    ckpt = save_checkpoint(
        tmp_path / "ddp", step=4, model=model, optimizer=optimizer, state=state_at(4), rng_state=two
    )
    assert inspect_checkpoint(ckpt).valid, inspect_checkpoint(ckpt).problems
    untrained, no_steps = fresh(seed=2)  # AdamW holds no state before its first step
    ckpt = save_checkpoint(
        tmp_path / "zero", step=0, model=untrained, optimizer=no_steps, state=state_at(0)
    )
    assert inspect_checkpoint(ckpt).valid, inspect_checkpoint(ckpt).problems


def test_a_rank_without_its_generator_json_is_invalid(tmp_path, model_and_optimizer):
    model, optimizer = model_and_optimizer
    two = rng.merge_ranks([rng.capture_rng(), rng.capture_rng()])
    ckpt = save_checkpoint(
        tmp_path / "ddp", step=4, model=model, optimizer=optimizer, state=state_at(4), rng_state=two
    )
    states = json.loads((ckpt / RNG_JSON_FILE).read_text())
    del states["ranks"]["1"]
    (ckpt / RNG_JSON_FILE).write_text(json.dumps(states))
    _rehash(ckpt, RNG_JSON_FILE)
    problems = inspect_checkpoint(ckpt).problems
    assert any("no generator states of rank 1" in p for p in problems), problems
