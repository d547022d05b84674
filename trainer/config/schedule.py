"""Learning-rate schedule: linear warmup, then cosine decay to min_lr (INV-CFG-006 of
contracts/training-config-kernel-v1.yaml, C-TRAINCFG-001).

    lr(s) = peak * s / w                                            1 <= s <= w
    lr(s) = min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * (s - w) / (M - w)))   w < s <= M

Steps are optimizer steps counted from 1, so the first update uses lr(1) and the last
lr(M). With w >= 1, lr(w) == peak exactly; with w = 0 the decay starts at s = 1, just
below the peak; lr(M) == min_lr exactly (cos(pi) is -1.0 in IEEE arithmetic). A warmup
of M or more never ends: every step is a warmup step (the preflight refuses such runs).

    lr = lr_at(step, peak=3e-4, warmup=500, max_steps=5000, min_lr=3e-5)
"""

from __future__ import annotations

import math


def warmup_lr(step: int, peak: float, warmup: int) -> float:
    """Linear warmup; ``s / w`` first so that s == w gives exactly ``peak * 1.0``."""
    return peak * (step / warmup)


def cosine_lr(step: int, peak: float, warmup: int, max_steps: int, min_lr: float) -> float:
    """Cosine decay over the steps after warmup, from just below peak down to min_lr at M."""
    progress = (step - warmup) / (max_steps - warmup)
    return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * progress))


def lr_at(step: int, *, peak: float, warmup: int, max_steps: int, min_lr: float) -> float:
    """The learning rate of optimizer step ``step`` (1-based) of a ``max_steps`` run."""
    if not 1 <= step <= max_steps:
        raise ValueError(f"step {step} is outside 1..max_steps ({max_steps})")
    if warmup < 0:
        raise ValueError(f"warmup {warmup} is negative")
    if step <= warmup:
        return warmup_lr(step, peak, warmup)
    return cosine_lr(step, peak, warmup, max_steps, min_lr)
