"""FALSIFY-NANOGPT-LOOP-003 (C-NANOGPT-LOOP, after INV-TRAIN-LOOP-008): the gradient norm
a step reports is the global L2 norm of the accumulated gradients before clipping, and
clipping scales every gradient by min(1, clip / (norm + 1e-6)). The pre-clip gradients come
from post-accumulate-grad hooks, the clipped ones from an optimizer step pre-hook.

Run: pytest tests/test_grad_norm.py
"""

import nanogpt_train
import pytest

from tests.probe import global_norm64, relative_error

#: 20 steps, 2 micro-batches each; the norm falls from about 3.1 to about 1.4, so clip 1.5
#: scales the early steps and leaves later ones alone
RUN = nanogpt_train.TrainConfig(
    max_iters=19,
    eval_interval=0,
    log_interval=0,
    gradient_accumulation_steps=2,
    batch_size=2,
    block_size=16,
    warmup_iters=2,
    lr_decay_iters=19,
    grad_clip=1.5,
)
#: float32 norms and products against float64: about 1e-7 measured
TOLERANCE = 1e-6


@pytest.mark.ship_blocking
def test_the_reported_grad_norm_is_the_pre_clip_global_norm_and_clipping_uses_it(probe):
    log = nanogpt_train.train(RUN)
    assert len(log) == len(probe.steps) == RUN.max_iters + 1
    norms, clipped = [], 0
    for record, step in zip(log, probe.steps, strict=True):
        norm = global_norm64(step.pre_clip)
        norms.append(norm)
        got = record["grad_norm"]
        assert abs(got - norm) <= TOLERANCE * norm, (
            f"iteration {record['iter']}: reported {got}, pre-clip global norm {norm}"
        )
        scale = min(1.0, RUN.grad_clip / (norm + 1e-6))
        clipped += scale < 1.0
        for name, grad in step.pre_clip.items():
            err = relative_error(step.post_clip[name], grad.double() * scale)
            assert err <= TOLERANCE, f"iteration {record['iter']}: {name} clipped wrongly ({err})"
    assert 0 < clipped < len(log), f"{clipped} of {len(log)} steps clipped: both cases needed"
    assert len(set(norms)) == len(norms), "the norm must change from step to step"
