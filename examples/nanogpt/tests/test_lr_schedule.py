"""FALSIFY-NANOGPT-LOOP-002 (C-NANOGPT-LOOP, after INV-TRAIN-LOOP-007): before every
optimizer.step(), every parameter group's lr is the scheduled lr of that iteration, read back
from optimizer.param_groups by a global optimizer step pre-hook.

Run: pytest tests/test_lr_schedule.py
"""

import math

import nanogpt_train
import pytest

#: warmup 5, cosine to iteration 30, then the min_lr floor; iterations 0..40 all step
RUN = nanogpt_train.TrainConfig(
    max_iters=40,
    eval_interval=0,
    log_interval=0,
    batch_size=2,
    block_size=8,
    learning_rate=1e-3,
    min_lr=1e-4,
    warmup_iters=5,
    lr_decay_iters=30,
)


def scheduled_lr(it: int) -> float:
    """The contract's schedule, written from its formula: linear warmup to the peak over
    iterations 0..warmup-1 as (it + 1) / (warmup + 1), cosine from the peak at `warmup` to
    min_lr at lr_decay_iters, min_lr after."""
    peak, floor, warmup, end = RUN.learning_rate, RUN.min_lr, RUN.warmup_iters, RUN.lr_decay_iters
    if it < warmup:
        return peak * (it + 1) / (warmup + 1)
    if it > end:
        return floor
    return floor + 0.5 * (1 + math.cos(math.pi * (it - warmup) / (end - warmup))) * (peak - floor)


@pytest.mark.ship_blocking
def test_the_scheduled_lr_is_on_every_param_group_before_every_optimizer_step(probe):
    log = nanogpt_train.train(RUN)
    assert len(probe.steps) == RUN.max_iters + 1  # nanoGPT steps at iterations 0..max_iters
    assert [r["iter"] for r in log] == list(range(RUN.max_iters + 1))
    wrong = [
        (it, group, lr, scheduled_lr(it))
        for it, step in enumerate(probe.steps)
        for group, lr in enumerate(step.lrs)
        if abs(lr - scheduled_lr(it)) > 1e-12 * scheduled_lr(it)
    ]
    assert len(probe.steps[0].lrs) == 2, "nanoGPT's two groups: decay and no decay"
    assert not wrong, f"(iteration, group, lr, scheduled): {wrong[:5]} ({len(wrong)} in all)"
    assert scheduled_lr(RUN.warmup_iters) == RUN.learning_rate
    assert scheduled_lr(RUN.max_iters) == RUN.min_lr
