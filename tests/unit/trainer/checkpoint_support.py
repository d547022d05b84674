"""Shared pieces of the checkpoint tests: a tiny model trained a few real AdamW steps.

Models are built through ``llama.build_model`` (the module attribute) so the mutants that
wrap the builder (tests/mutants/checkpoint.py) see them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from trainer.checkpoint.layout import CheckpointError
from trainer.checkpoint.save import save_checkpoint
from trainer.checkpoint.state import TrainingState
from trainer.model import llama
from trainer.model.config import preset
from trainer.train import loss, optim

TINY = preset("tiny")
HASH = "c" * 64


def fresh(seed: int = 0) -> tuple[llama.Llama, torch.optim.AdamW]:
    model = llama.build_model(TINY, seed=seed)
    optimizer = optim.build_adamw(model, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    return model, optimizer


def train_steps(
    model: llama.Llama, optimizer: torch.optim.AdamW, steps: int, seed: int = 0
) -> None:
    """``steps`` real optimizer steps on random tokens (moments and step counts non-zero)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        tokens = torch.randint(0, TINY.vocab_size, (2, 17), generator=g)
        optimizer.zero_grad(set_to_none=True)
        loss.accumulate_gradients(model, [loss.next_token_pairs(tokens)])
        optimizer.step()


def trained(steps: int = 3, seed: int = 0) -> tuple[llama.Llama, torch.optim.AdamW]:
    model, optimizer = fresh(seed)
    train_steps(model, optimizer, steps, seed)
    return model, optimizer


def state_at(step: int, **fields: object) -> TrainingState:
    values: dict = {
        "step": step,
        "epoch": 1,
        "epoch_step": 2,
        "scheduler_step": step,
        "config_hash": HASH,
        "data_manifest_sha256": "d" * 64,
    }
    return TrainingState(**(values | fields))


def save(
    run_dir: Path, step: int, model: llama.Llama, optimizer: torch.optim.AdamW, **fields: object
) -> Path:
    """save_checkpoint, where a refusal to save a correct run is a test failure."""
    try:
        return save_checkpoint(
            run_dir, step=step, model=model, optimizer=optimizer, state=state_at(step, **fields)
        )
    except CheckpointError as exc:
        pytest.fail(f"saving a correct checkpoint failed: {exc}")


def manifest_entry(data: bytes, range_bytes: int) -> dict:
    """The format 3 manifest entry of ``data``, computed here from slices of it (an oracle
    independent of trainer.checkpoint.manifest's incremental hashing)."""
    starts = range(0, max(len(data), 1), range_bytes)
    return {
        "size": len(data),
        "range_bytes": range_bytes,
        "range_sha256": [hashlib.sha256(data[i : i + range_bytes]).hexdigest() for i in starts],
    }


def listed_digest(entry: dict) -> str:
    """The one digest a run store records for a format 3 entry, computed here: the sha256 of
    "<range_bytes>\n" followed by each range digest and a newline."""
    lines = [str(entry["range_bytes"]), *entry["range_sha256"]]
    return hashlib.sha256("".join(line + "\n" for line in lines).encode()).hexdigest()


def as_format_1(checkpoint: Path) -> None:
    """Rewrite ``checkpoint``'s manifest as the trainer wrote it before issue 35 (format 1:
    each file's sha256 and size, no ranges); the data files are the same bytes."""
    _rewrite(checkpoint, 1, lambda entry, sha256: {"sha256": sha256, "size": entry["size"]})


def as_format_2(checkpoint: Path) -> None:
    """Rewrite ``checkpoint``'s manifest as format 2 wrote it (issue 35's first round: each
    file's ranges and its whole sha256); the data files are the same bytes."""
    _rewrite(checkpoint, 2, lambda entry, sha256: {"sha256": sha256, **entry})


def _rewrite(checkpoint: Path, version: int, entry_of) -> None:
    path = checkpoint / "manifest.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format_version"] == 3, "rewrites a manifest of the current format"
    data["format_version"] = version
    data["files"] = {
        name: entry_of(entry, hashlib.sha256((checkpoint / name).read_bytes()).hexdigest())
        for name, entry in data["files"].items()
    }
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
