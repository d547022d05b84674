"""The ``fsdp`` data-parallel strategy: FSDP2 (torch.distributed.fsdp.fully_shard).

    model = fsdp.wrap(model, world, device, mixed_precision="bf16")   # before AdamW is built
    with fsdp.no_sync(model): ...                     # a micro-batch before the step's last
    weights, optim_state = fsdp.full_state(model, optimizer)   # collective; rank 0 gets them
    load_checkpoint(path, model, optimizer, loaders=fsdp.LOADERS)  # full state, re-sharded

Rules (the ``ddp`` strategy's, trainer/train/distributed.py, with sharded state):
- fully_shard each DecoderLayer, then the root (embedding, final norm, lm_head): one
  layer's parameters are gathered at a time. It replaces the model's parameters with
  sharded DTensors, so AdamW is built AFTER it, over the shards (its state is sharded too).
- Gradients are SUMMED over ranks, not averaged, as loss.py requires (each rank
  backpropagates its token sum over the GLOBAL count): gradient divide factor 1 and
  sum-only collectives on every FSDP module (_sum_gradients). The factor alone would ask
  for ReduceOp.PREMUL_SUM(1.0), which gloo lacks ("Cannot use ReduceOp.PREMUL_SUM with
  Gloo"); with sum-only collectives FSDP reduce-scatters with SUM and divides by the
  factor afterwards, a division it skips for 1.
- bf16 parameters for compute (gradients reduced in float32) on CUDA when the config
  asks for bf16; CPU stays float32. The sharded master weights are float32 either way.
- Gradient accumulation reduce-scatters once per step: set_requires_gradient_sync(False)
  for every micro-batch but the last (FSDP's no_sync).
- Checkpoints are the single-process files (trainer/checkpoint): every rank joins the
  gather of the FULL model and AdamW state (torch.distributed.checkpoint.state_dict,
  full_state_dict, cpu_offload: rank 0 alone receives it and writes); on resume every
  rank reads the files, checks them like a single process would, and keeps its shard.
  Names are the model's parameter names, so a ddp or single-process checkpoint loads
  here and an fsdp one there (the world size must still match, checkpointing.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from trainer.checkpoint.load import StateLoaders
from trainer.model.llama import DecoderLayer

if TYPE_CHECKING:
    from trainer.train.distributed import World

_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)
_SCATTER = StateDictOptions(full_state_dict=True)  # every rank holds the full state


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def _policy(device: torch.device, mixed_precision: str) -> MixedPrecisionPolicy:
    if device.type == "cuda" and mixed_precision == "bf16":
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()  # the parameters' own dtype (float32) throughout


def _sum_gradients(module: FSDPModule) -> None:
    """Reduce-scatter ``module``'s gradients with SUM and no division by the world size."""
    module.set_gradient_divide_factor(1.0)
    module.set_force_sum_reduction_for_comms(True)


def wrap(
    model: nn.Module, world: World, device: torch.device, *, mixed_precision: str
) -> nn.Module:
    """``model`` sharded in place over the ranks of ``world`` (as is at world size 1)."""
    if not world.distributed:
        return model
    policy = _policy(device, mixed_precision)
    for module in list(model.modules()):
        if isinstance(module, DecoderLayer):
            fully_shard(module, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            _sum_gradients(module)
    return model


@contextlib.contextmanager
def no_sync(model: FSDPModule) -> Iterator[None]:
    """Accumulate unsharded gradients locally; the next synced backward reduce-scatters."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer | None
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """(full model state dict, full AdamW state dict keyed by parameter name) on CPU, on
    rank 0; empty dicts on the other ranks. A collective: every rank calls it."""
    weights = get_model_state_dict(model, options=_GATHER)
    if optimizer is None:
        return weights, {}
    return weights, get_optimizer_state_dict(model, optimizer, options=_GATHER)


def _load_model(model: nn.Module, tensors: dict[str, Tensor]) -> None:
    set_model_state_dict(model, tensors, options=_SCATTER)


def _load_optimizer(
    model: nn.Module, optimizer: torch.optim.Optimizer, named: dict[str, Any]
) -> None:
    set_optimizer_state_dict(model, optimizer, named, options=_SCATTER)


LOADERS = StateLoaders(model=_load_model, optimizer=_load_optimizer)
