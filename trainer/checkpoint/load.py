"""Read a verified checkpoint back into a model, an optimizer and the RNGs.

    ckpt, skipped = latest_valid(run_dir)      # skipped: [(path, why), ...]
    state = load_checkpoint(ckpt, model, optimizer)
    state = load_checkpoint(ckpt, model, optimizer, loaders=fsdp.LOADERS)  # sharded model

Nothing is read before verify_checkpoint passes: sizes and sha256 of every file, no
stranger files, the expected architecture. The files hold full (unsharded) tensors; a
sharded model checks them like any other and ``loaders`` keep its shard of each.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from trainer.checkpoint import optimizer_state, rng
from trainer.checkpoint import state as state_file
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_JSON_FILE,
    RNG_TENSOR_FILE,
    CheckpointError,
    checkpoint_dirs,
)
from trainer.checkpoint.state import TrainingState
from trainer.checkpoint.verify import inspect_checkpoint, verify_checkpoint
from trainer.model import hf
from trainer.model.config import LlamaConfig
from trainer.model.llama import Llama


@dataclass(frozen=True)
class StateLoaders:
    """How checked full tensors get into a model and an optimizer whose own
    load_state_dict cannot take them (trainer/train/fsdp.py LOADERS)."""

    model: Callable[[nn.Module, dict[str, torch.Tensor]], None]
    optimizer: Callable[[nn.Module, torch.optim.Optimizer, dict[str, Any]], None]


def _checkpoint_problems(path: Path, architecture: LlamaConfig | None) -> list[str]:
    return inspect_checkpoint(path, architecture=architecture).problems


def latest_valid(
    run_dir: Path, *, architecture: LlamaConfig | None = None
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint of ``run_dir`` that verifies, and the newer ones skipped (why)."""
    skipped: list[tuple[Path, str]] = []
    for path in checkpoint_dirs(Path(run_dir)):
        problems = _checkpoint_problems(path, architecture)
        if not problems:
            return path, skipped
        skipped.append((path, "; ".join(problems)))
    return None, skipped


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not readable JSON ({exc})") from None


def read_state(path: Path) -> TrainingState:
    """state.json of a verified checkpoint."""
    verify_checkpoint(path)
    return state_file.state_from_json(
        _read_json(path / CHECKPOINT_STATE_FILE), source=str(path / CHECKPOINT_STATE_FILE)
    )


def load_checkpoint(
    path: Path,
    model: Llama,
    optimizer: torch.optim.Optimizer | None,
    *,
    restore_random: bool = True,
    rank: int = 0,
    loaders: StateLoaders | None = None,
) -> TrainingState:
    """Verify ``path``, then restore weights, AdamW state and RNGs; returns state.json.

    ``rank``: whose generator states to restore (a data-parallel checkpoint holds each
    rank's; trainer/checkpoint/rng.py). ``loaders``: for a sharded model (None:
    load_state_dict)."""
    path = Path(path)
    verify_checkpoint(path, architecture=model.config)
    state = state_file.state_from_json(
        _read_json(path / CHECKPOINT_STATE_FILE), source=str(path / CHECKPOINT_STATE_FILE)
    )
    hf.load_weights(model, path / MODEL_FILE, load=None if loaders is None else loaders.model)
    if optimizer is not None:
        optimizer_state.restore_optimizer(
            model,
            optimizer,
            _read_tensors(path / OPTIMIZER_FILE),
            state.optimizer_groups,
            source=str(path / OPTIMIZER_FILE),
            load=None if loaders is None else loaders.optimizer,
        )
    if restore_random:
        source = str(path / RNG_JSON_FILE)
        tensors, states = rng.rank_rng(*read_rng(path), rank=rank, source=source)
        rng.restore_rng(tensors, states, source=source)
    return state


def read_rng(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The RNG files of a verified checkpoint: every rank's generators (rng.rank_rng)."""
    return _read_tensors(path / RNG_TENSOR_FILE), _read_json(path / RNG_JSON_FILE)
