"""AdamW state as named tensors: exp_avg, exp_avg_sq and step of every parameter.

    tensors, groups = optimizer_tensors(model, optimizer)   # {"<param>.exp_avg": T, ...}
    restore_optimizer(model, optimizer, tensors, groups)
    tensors, groups = named_state_tensors(full_state)     # the same from a gathered FSDP state

Keys are parameter NAMES, not the positional ids of optimizer.state_dict(): a checkpoint
read into a model whose parameter order changed must fail by name, not load moments into
the wrong tensors. The per-group hyper-parameters (lr, betas, eps, weight_decay, ...) are
JSON in state.json; the tensors go to optimizer.safetensors.

A sharded (FSDP) optimizer is written from its gathered full state dict, which is keyed
by the same parameter names (torch.distributed.checkpoint.state_dict), and restored from
that name-keyed form (restore_optimizer's ``load``): one file format for every strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from trainer.checkpoint.layout import CheckpointError

_SEP = "."  # "<parameter name>.<state key>", e.g. "lm_head.weight.exp_avg"


def _param_names(model: nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in model.named_parameters()}


def _json_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def optimizer_tensors(
    model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """(named state tensors on CPU, param groups with parameter names instead of tensors).

    The tensors are the optimizer's own (a CPU state is not copied: the save writes from
    their memory before the next step changes them); a GPU state is copied to the CPU."""
    names = _param_names(model)
    tensors: dict[str, Tensor] = {}
    groups: list[dict[str, Any]] = []
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            if id(p) not in names:
                raise CheckpointError("the optimizer holds a parameter the model does not name")
            name = names[id(p)]
            params.append(name)
            for key, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, Tensor):
                    raise CheckpointError(f"optimizer state {name}.{key} is not a tensor")
                tensors[f"{name}{_SEP}{key}"] = value.detach().to("cpu").contiguous()
        hyper = {k: _json_value(v) for k, v in group.items() if k != "params"}
        groups.append({**hyper, "params": params})
    return tensors, groups


def named_state_tensors(
    full_state: dict[str, Any],
) -> tuple[dict[str, Tensor], list[dict[str, Any]]]:
    """optimizer_tensors' (tensors, groups) of a full optimizer state dict keyed by
    parameter name (torch.distributed.checkpoint.state_dict.get_optimizer_state_dict)."""
    tensors: dict[str, Tensor] = {}
    groups: list[dict[str, Any]] = []
    states = full_state.get("state", {})
    for group in full_state.get("param_groups", []):
        for name in group["params"]:
            for key, value in states.get(name, {}).items():
                if not isinstance(value, Tensor):
                    raise CheckpointError(f"optimizer state {name}.{key} is not a tensor")
                tensors[f"{name}{_SEP}{key}"] = value.detach().to("cpu").contiguous()
        hyper = {k: _json_value(v) for k, v in group.items() if k != "params"}
        groups.append({**hyper, "params": list(group["params"])})
    if not groups:
        raise CheckpointError("the gathered optimizer state holds no parameter group")
    return tensors, groups


def restore_optimizer(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tensors: dict[str, Tensor],
    groups: list[dict[str, Any]],
    *,
    source: str = "optimizer.safetensors",
    load: Callable[[nn.Module, torch.optim.Optimizer, dict[str, Any]], None] | None = None,
) -> None:
    """Load the named state into ``optimizer`` (built over ``model``) strictly.

    ``load``: called with the checked state keyed by parameter name ({"state": {name:
    {...}}, "param_groups": [{..., "params": [names]}]}) instead of
    optimizer.load_state_dict (an FSDP optimizer re-shards it, trainer/train/fsdp.py)."""
    names = _param_names(model)
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointError(
            f"{source}: {len(groups)} param groups saved, the optimizer has "
            f"{len(optimizer.param_groups)}"
        )
    state: dict[int, dict[str, Tensor]] = {}
    param_groups = []
    named: dict[str, Any] = {"state": {}, "param_groups": []}
    used: set[str] = set()
    # "<name>.<key>" grouped by <name> in one pass (the key holds no "."), in file order:
    # matching every parameter against every tensor cost 20 ms a load on the 370M preset.
    by_param: dict[str, dict[str, Tensor]] = {}
    for full, t in tensors.items():
        name, _, key = full.rpartition(_SEP)
        by_param.setdefault(name, {})[key] = t
    index = 0
    for saved, live in zip(groups, optimizer.param_groups, strict=True):
        live_names = [names[id(p)] for p in live["params"]]
        if saved["params"] != live_names:
            raise CheckpointError(
                f"{source}: group {saved.get('name')!r} holds parameters {saved['params'][:3]}..., "
                f"the optimizer's group holds {live_names[:3]}..."
            )
        ids = []
        for name, p in zip(live_names, live["params"], strict=True):
            entry = by_param.get(name, {})
            for key, t in entry.items():
                if key in ("exp_avg", "exp_avg_sq") and t.shape != p.shape:
                    raise CheckpointError(
                        f"{source}: {name}.{key} has shape {list(t.shape)}, "
                        f"the parameter {list(p.shape)}"
                    )
            used.update(f"{name}{_SEP}{k}" for k in entry)
            if entry:
                state[index] = entry
                named["state"][name] = entry
            ids.append(index)
            index += 1
        hyper = {k: tuple(v) if k == "betas" else v for k, v in saved.items() if k != "params"}
        param_groups.append({**hyper, "params": ids})
        named["param_groups"].append({**hyper, "params": live_names})
    unknown = sorted(set(tensors) - used)
    if unknown:
        raise CheckpointError(f"{source}: tensors of no parameter: {', '.join(unknown[:5])}")
    if load is not None:
        load(model, optimizer, named)
        return
    optimizer.load_state_dict({"state": state, "param_groups": param_groups})
