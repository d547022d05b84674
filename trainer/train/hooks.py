"""What a caller may watch in a run: train()'s hooks, every method a no-op here.

    class Losses(Hooks):
        def after_step(self, step, record): print(step, record["loss"])

    train(config, train_data, val_data, hooks=Losses())

Tests observe the loop through these, never by patching it. An object that is not a
Hooks but has some of these methods (an older caller's) is adapted by ``as_hooks``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

Batch = tuple[Tensor, Tensor]  # (inputs, targets) of one micro-batch


class Hooks:
    def on_start(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Once, before step 1 (``model``: the module, not its DDP or compiled wrapper)."""

    def step_batches(
        self, step: int, epoch: int, indices: list[list[int]], micro_batches: list[Batch]
    ) -> None:
        """Before a step's forward: the sequence indices of this rank's micro-batches."""

    def before_optimizer_step(
        self, step: int, optimizer: torch.optim.Optimizer, model: nn.Module
    ) -> None:
        """After the finite check, with the step's clipped gradients and lr in place."""

    def after_step(self, step: int, record: dict[str, Any]) -> None:
        """After the step's metrics line and checkpoint (``record``: that line)."""

    def evaluation(self, step: int, batches: list[Batch], val_loss: float) -> None:
        """After a validation loss, before the guards see it."""


_METHODS = ("on_start", "step_batches", "before_optimizer_step", "after_step", "evaluation")


class _Adapted(Hooks):
    """The methods ``target`` has; the others no-ops."""

    def __init__(self, target: object) -> None:
        for name in _METHODS:
            method = getattr(target, name, None)
            if method is not None:
                setattr(self, name, method)


def as_hooks(hooks: object | None) -> Hooks:
    """``hooks`` itself when it is a Hooks; no-ops for None; otherwise adapted."""
    if isinstance(hooks, Hooks):
        return hooks
    return Hooks() if hooks is None else _Adapted(hooks)
