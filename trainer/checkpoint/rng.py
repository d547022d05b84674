"""Random generator states without pickle: torch as uint8 tensors, Python and NumPy as JSON.

    tensors, states = capture_rng()      # {"torch.cpu": uint8[...], "torch.cuda.0": ...}, JSON
    restore_rng(tensors, states)
    tensors, states = merge_ranks([(tensors_0, states_0), (tensors_1, states_1)])  # DDP
    restore_rng(*rank_rng(tensors, states, rank=1))

Under data parallelism every rank has its own generators. Rank 0's stay under the
single-process names (a one-rank reader sees an ordinary checkpoint); rank r >= 1 adds
``rank.<r>.<name>`` tensors and ``states["ranks"]["<r>"]``.

Restored, not reseeded: a resumed run must draw exactly the numbers the uninterrupted run
would have drawn next (dropout masks, shuffles), or it is a different run.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch import Tensor

from trainer.checkpoint.layout import CheckpointError

TORCH_CPU = "torch.cpu"
_CUDA_PREFIX = "torch.cuda."
_RANKS = "ranks"


def _rank_prefix(rank: int) -> str:
    return f"rank.{rank}."


def _python_state_json() -> dict[str, Any]:
    version, internal, gauss = random.getstate()
    return {"version": version, "internal": list(internal), "gauss_next": gauss}


def _numpy_state_json() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "kind": kind,
        "keys": [int(k) for k in keys],
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached),
    }


def capture_rng() -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Every generator the training process draws from."""
    tensors = {TORCH_CPU: torch.get_rng_state().clone()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"{_CUDA_PREFIX}{i}"] = state.to("cpu").clone()
    return tensors, {"python": _python_state_json(), "numpy": _numpy_state_json()}


def restore_rng(tensors: dict[str, Tensor], states: dict[str, Any], *, source: str = "rng") -> None:
    """Put every generator back where ``capture_rng`` found it."""
    if TORCH_CPU not in tensors:
        raise CheckpointError(f"{source}: no {TORCH_CPU} state")
    for key in ("python", "numpy"):
        if key not in states:
            raise CheckpointError(f"{source}: no {key} RNG state")
    torch.set_rng_state(tensors[TORCH_CPU].to(torch.uint8))
    cuda = sorted(k for k in tensors if k.startswith(_CUDA_PREFIX))
    if cuda:
        if not torch.cuda.is_available() or torch.cuda.device_count() != len(cuda):
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise CheckpointError(
                f"{source}: {len(cuda)} CUDA generator states saved, this process has {have} GPUs"
            )
        torch.cuda.set_rng_state_all([tensors[k].to(torch.uint8) for k in cuda])
    py = states["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    n = states["numpy"]
    np.random.set_state(
        (
            n["kind"],
            np.asarray(n["keys"], dtype=np.uint32),
            n["pos"],
            n["has_gauss"],
            n["cached_gaussian"],
        )
    )


def merge_ranks(
    per_rank: list[tuple[dict[str, Tensor], dict[str, Any]]],
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """One checkpoint's RNG files from every rank's ``capture_rng()``, in rank order."""
    tensors, states = dict(per_rank[0][0]), dict(per_rank[0][1])
    if len(per_rank) > 1:
        states[_RANKS] = {}
        for rank, (rank_tensors, rank_states) in enumerate(per_rank[1:], start=1):
            tensors |= {_rank_prefix(rank) + k: v for k, v in rank_tensors.items()}
            states[_RANKS][str(rank)] = rank_states
    return tensors, states


def rank_rng(
    tensors: dict[str, Tensor], states: dict[str, Any], *, rank: int, source: str = "rng"
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Rank ``rank``'s generator states out of merge_ranks' files."""
    if rank == 0:
        return (
            {k: v for k, v in tensors.items() if not k.startswith("rank.")},
            {k: v for k, v in states.items() if k != _RANKS},
        )
    prefix = _rank_prefix(rank)
    mine = {k.removeprefix(prefix): v for k, v in tensors.items() if k.startswith(prefix)}
    saved = states.get(_RANKS, {})
    if not mine or str(rank) not in saved:
        raise CheckpointError(f"{source}: no RNG state of rank {rank}")
    return mine, saved[str(rank)]
