"""The training objective: next-token cross-entropy, exact under gradient accumulation.

    inputs, targets = next_token_pairs(tokens, pad_id=pad)      # [B, T+1] -> two [B, T]
    loss, count = accumulate_gradients(model, [(inputs_1, targets_1), (inputs_2, targets_2)])
    val_loss, val_count = evaluate_loss(model, val_batches)

Rules (C-TRAINING-LOOP):
- The shift happens here and only here (INV-TRAIN-LOOP-010): the target at position i is
  token i + 1, and padding targets become IGNORE_INDEX so they contribute nothing.
- The loss of one optimizer step is the mean cross-entropy over the non-padding targets of
  the WHOLE global batch (INV-TRAIN-LOOP-009): each micro-batch backpropagates its token
  SUM divided by the GLOBAL count, so the accumulated gradient is the gradient of one big
  batch whatever the split. Why not the usual per-micro-batch mean divided by grad_accum:
  with padding, micro-batches hold unequal token counts, and averaging their means weights
  a token in a sparse micro-batch more than one in a full one - the objective (and the
  result) would change with grad_accum. Dividing once by the global count is what
  torchtitan does for the same reason.
- Cross-entropy is taken in float32 (float64 for a float64 model) whatever the
  forward's autocast dtype.
- No made-up losses: zero target tokens is an error, never 0.0 or 1.0.

Named seams (_shift, _is_target, _token_losses, _micro_batch_loss) let
tests/mutants/loop_parts.py inject the contract's known bugs in one place each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - the universal alias
from torch import Tensor, nn

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index


def _shift(tokens: Tensor) -> tuple[Tensor, Tensor]:
    """inputs = tokens[:, :-1], targets = tokens[:, 1:] (position i predicts token i + 1)."""
    return tokens[:, :-1], tokens[:, 1:].clone()


def next_token_pairs(tokens: Tensor, pad_id: int | None = None) -> tuple[Tensor, Tensor]:
    """tokens [B, T+1] int64 -> (inputs [B, T], targets [B, T]); pad targets -> IGNORE_INDEX."""
    if tokens.dim() != 2 or tokens.dtype != torch.int64:
        raise ValueError(
            f"tokens must be an int64 tensor [batch, seq_len + 1], got {tokens.dtype} "
            f"of shape {tuple(tokens.shape)}"
        )
    if tokens.shape[1] < 2:
        raise ValueError(f"tokens need at least 2 positions to form a pair, got {tokens.shape[1]}")
    inputs, targets = _shift(tokens)
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE_INDEX
    return inputs, targets


def _is_target(targets: Tensor) -> Tensor:
    """Boolean mask of the positions that count: every target that is not IGNORE_INDEX."""
    return targets != IGNORE_INDEX


def count_targets(targets: Tensor) -> int:
    """Number of non-ignored (non-padding) target tokens."""
    return int(_is_target(targets).sum().item())


def _token_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """Per-position cross-entropy [B, T], float32 (float64 for a float64 model); 0 if ignored."""
    # bf16/fp16 logits (autocast) are upcast: a softmax over 50k classes in bf16 loses ~2 digits.
    wide = logits.to(torch.promote_types(logits.dtype, torch.float32))
    flat = F.cross_entropy(
        wide.flatten(0, 1),
        targets.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    )
    return flat.view(targets.shape)


@dataclass(frozen=True)
class GlobalBatch:
    """What one optimizer step reduces over: all of its micro-batches, on every rank."""

    targets: int  # non-padding target tokens
    sequences: int
    micro_batches: int


def _micro_batch_loss(token_losses: Tensor, targets: Tensor, batch: GlobalBatch) -> Tensor:
    """One micro-batch's share of the step loss: its token SUM over the GLOBAL count.

    Summed over the micro-batches this is exactly the token mean of the global batch (the
    contract's wrong reductions - by sum, per micro-batch, per sequence - are each a
    different use of ``batch``).
    """
    return token_losses.sum() / batch.targets


def _autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


#: logits [B, T, V], targets [B, T] -> per-token losses [B, T] (token_losses, or a compile of it).
TokenLosses = Callable[[Tensor, Tensor], Tensor]


def token_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """Per-position cross-entropy [B, T]: what accumulate_gradients backpropagates.

    The loop compiles this beside the model (``torch.compile(token_losses)``): eager, the
    float32 upcast of [tokens, vocab] logits and the softmax each make a pass over memory
    (measured on an H200: ~8 % of a 370M step). It calls the seam by name, so a mutant
    of _token_losses is what gets compiled."""
    return _token_losses(logits, targets)


def _forward(
    model: nn.Module,
    inputs: Tensor,
    targets: Tensor,
    autocast: torch.dtype | None,
    losses: TokenLosses | None = None,
) -> tuple[Tensor, Tensor]:
    """(per-token losses, targets) of one batch, both on the model's device."""
    device = _model_device(model)
    on_device = targets.to(device)
    with _autocast(device, autocast):
        logits = model(inputs.to(device))
    return (losses or token_losses)(logits, on_device), on_device


def _check_pair(index: int, inputs: Tensor, targets: Tensor) -> None:
    if inputs.dim() != 2 or inputs.shape != targets.shape:
        raise ValueError(
            f"micro-batch {index}: inputs {tuple(inputs.shape)} and targets "
            f"{tuple(targets.shape)} must both be [batch, seq_len]"
        )


def accumulate_gradients(
    model: nn.Module,
    micro_batches: Sequence[tuple[Tensor, Tensor]],
    *,
    autocast: torch.dtype | None = None,
    global_count: int | None = None,
    defer_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
    losses: TokenLosses | None = None,
) -> tuple[float, int]:
    """Forward and backward over every micro-batch of ONE optimizer step.

    Gradients ADD to what is in ``.grad`` (the caller zeroes them and steps the
    optimizer). ``autocast``: a dtype (e.g. torch.bfloat16) to run the forward under
    torch.autocast on the model's device; None runs in the model's own dtype. Returns
    (step loss, global target count); the loss is the detached sum of the micro-batch
    contributions, i.e. the token-mean cross-entropy of the global batch.

    Data parallel (trainer/train/distributed.py): ``global_count`` is the target count of
    the global batch across ALL ranks (this rank's micro-batches when None), so each rank
    backpropagates its token sum over it and the summed gradients are those of the global
    batch; the returned loss is then this rank's share (all-reduce SUM for the step loss).
    ``defer_sync``: DDP's no_sync, entered for every micro-batch but the last so the
    gradients cross ranks once per step. ``losses``: how per-token losses are computed from
    the logits (None: token_losses, eager; the loop passes its compile of it).
    """
    if not micro_batches:
        raise ValueError("an optimizer step needs at least one micro-batch, got none")
    for index, (inputs, targets) in enumerate(micro_batches):
        _check_pair(index, inputs, targets)
    if global_count is None:
        global_count = sum(count_targets(targets) for _, targets in micro_batches)
    if global_count == 0:
        raise ValueError(
            f"the step's {len(micro_batches)} micro-batch(es) hold no non-padding target "
            "tokens; there is no loss to compute"
        )
    batch = GlobalBatch(
        targets=global_count,
        sequences=sum(targets.shape[0] for _, targets in micro_batches),
        micro_batches=len(micro_batches),
    )
    step_loss = torch.zeros((), dtype=torch.float64, device=_model_device(model))  # one sync
    last = len(micro_batches) - 1
    for index, (inputs, targets) in enumerate(micro_batches):
        deferred = defer_sync is not None and index < last
        with defer_sync() if deferred else contextlib.nullcontext():
            per_token, on_device = _forward(model, inputs, targets, autocast, losses)
            share = _micro_batch_loss(per_token, on_device, batch)
            share.backward()
        step_loss += share.detach().to(torch.float64)
    return float(step_loss.item()), global_count


@torch.no_grad()
def evaluate_loss(
    model: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    autocast: torch.dtype | None = None,
) -> tuple[float, int]:
    """Token-mean cross-entropy over the non-padding targets of all ``batches``, and their count.

    Sums are accumulated in float64 so a large validation set loses no precision.
    """
    total = torch.zeros((), dtype=torch.float64, device=_model_device(model))
    count = 0
    for index, (inputs, targets) in enumerate(batches):
        _check_pair(index, inputs, targets)
        per_token, _ = _forward(model, inputs, targets, autocast)
        total += per_token.sum(dtype=torch.float64)
        count += count_targets(targets)
    if count == 0:
        raise ValueError("the evaluation batches hold no non-padding target tokens")
    return float(total.item()) / count, count
