"""Watch one nanogpt_train.train() call from outside, without seams in the script.

The probe swaps two module-level names the script looks up at call time (GPT, get_batch) for
recording wrappers, hangs a post-accumulate-grad hook on every parameter (the gradient after
the last backward of a step, before clipping) and a global optimizer step pre-hook (the
param groups and the gradients the optimizer is about to apply). The script runs unchanged.
Used by the tests of C-NANOGPT-LOOP (contracts/nanogpt-training-loop-v1.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import nanogpt_model
import nanogpt_train
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook


@dataclass
class Step:
    """What the optimizer saw just before one optimizer.step()."""

    lrs: list[float]  # every param group's lr, in group order
    params: dict[str, torch.Tensor]  # weights before the step
    pre_clip: dict[str, torch.Tensor]  # accumulated gradients before clipping
    post_clip: dict[str, torch.Tensor]  # gradients handed to the optimizer


@dataclass
class Probe:
    #: train batches returned by get_batch, in draw order: (x, y)
    batches: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    models: list[torch.nn.Module] = field(default_factory=list)
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    #: when set, get_batch("train", ...) returns these in order instead of sampling
    scripted: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    _pre_clip: dict[str, torch.Tensor] = field(default_factory=dict)

    def install(self, monkeypatch):
        """Patch the script's names (undone by monkeypatch); returns the optimizer hook's
        handle, which the caller removes."""
        real_get_batch = nanogpt_train.get_batch

        def get_batch(data, split, batch_size, block_size):
            if split == "train" and self.scripted is not None:
                x, y = self.scripted[len(self.batches)]
            else:
                x, y = real_get_batch(data, split, batch_size, block_size)
            if split == "train":
                self.batches.append((x, y))
            return x, y

        def build(config):
            model = nanogpt_model.GPT(config)
            for name, p in model.named_parameters():
                p.register_post_accumulate_grad_hook(self._grad_hook(name))
            self.models.append(model)
            return model

        monkeypatch.setattr(nanogpt_train, "get_batch", get_batch)
        monkeypatch.setattr(nanogpt_train, "GPT", build)
        return register_optimizer_step_pre_hook(self._before_step)

    def _grad_hook(self, name):
        def hook(p):
            self._pre_clip[name] = p.grad.detach().clone()

        return hook

    def _before_step(self, optimizer, args, kwargs):
        model = self.models[-1]
        if not self.optimizers or self.optimizers[-1] is not optimizer:
            self.optimizers.append(optimizer)
        self.steps.append(
            Step(
                lrs=[g["lr"] for g in optimizer.param_groups],
                params={n: p.detach().clone() for n, p in model.named_parameters()},
                pre_clip=dict(self._pre_clip),
                post_clip={n: p.grad.detach().clone() for n, p in model.named_parameters()},
            )
        )


def global_norm64(grads: dict[str, torch.Tensor]) -> float:
    """L2 norm over all gradients, accumulated in float64."""
    return float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())))


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in float64 (0 when both are zero)."""
    got, want = got.double(), want.double()
    scale = want.norm().item()
    diff = (got - want).norm().item()
    return diff / scale if scale else diff


def token_mean_reference(model: torch.nn.Module, params, batches):
    """Loss and gradients of the token-mean cross-entropy over every non-ignored target
    (y != -1) of all micro-batches together, in float64, at the given weights."""
    with torch.random.fork_rng():  # a fresh model (no probe hooks), RNG left as it was
        ref = nanogpt_model.GPT(model.config).double()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(params[name].double())
    ref.zero_grad(set_to_none=True)
    total = torch.zeros((), dtype=torch.float64)
    count = 0
    for x, y in batches:
        logits, _ = ref(x)  # no targets: the script's loss is not used
        keep = y.view(-1) != -1
        logp = torch.log_softmax(logits.view(-1, logits.size(-1)), dim=-1)
        total = total - logp[keep].gather(1, y.view(-1)[keep][:, None]).sum()
        count += int(keep.sum())
    loss = total / count
    loss.backward()
    return loss.item(), {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
