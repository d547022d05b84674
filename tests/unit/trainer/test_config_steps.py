"""The step driver (trainer/train/steps.py) is the loop the preflight algebra predicts:
FALSIFY-CFG-005 of training-config-kernel-v1 runs it with a stub step function over a
stub loader and compares the steps it takes with the algebra, on random configs."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from trainer.config.algebra import AlgebraInputs, default_min_lr, evaluate
from trainer.train.steps import StepPlan, iterate_steps

#: The rules about steps: an epoch has a step, the epochs reach max_steps, warmup ends.
STEP_RULES = {"INV-CFG-001", "INV-CFG-002", "INV-CFG-003"}


class StubLoader:
    """N sequences, indexed 0..N-1 within every epoch; refuses a partial global batch."""

    def __init__(self, num_sequences: int) -> None:
        self.num_sequences = num_sequences

    def take(self, plan: StepPlan) -> range:
        seqs = plan.sequences
        assert seqs.start >= 0 and seqs.stop <= self.num_sequences, "a partial global batch"
        return seqs


def run_stub_loop(n: int, b: int, g: int, epochs: int, max_steps: int) -> tuple[int, int]:
    """(optimizer steps taken, epochs entered) by a loop that follows the driver."""
    loader, steps, epoch_seen = StubLoader(n), 0, -1
    for plan in iterate_steps(n, micro_batch=b, grad_accum=g, epochs=epochs, last_step=max_steps):
        loader.take(plan)  # the stub step function: count and check the batch
        steps += 1
        assert plan.step == steps
        if plan.epoch != epoch_seen:
            assert plan.first_sequence == 0, "each epoch starts at its first sequence"
            epoch_seen = plan.epoch
    return steps, epoch_seen + 1


# ---------------------------------------------------------------- FALSIFY-CFG-005
@st.composite
def run_configs(draw) -> dict:
    """The contract's ranges: N, b, g, E, M, and w in [0, M]."""
    max_steps = draw(st.integers(1, 20_000))
    return {
        "n": draw(st.integers(0, 200_000)),
        "b": draw(st.integers(1, 64)),
        "g": draw(st.integers(1, 256)),
        "epochs": draw(st.integers(1, 500)),
        "max_steps": max_steps,
        "warmup": draw(st.integers(0, max_steps)),
    }


@pytest.mark.ship_blocking
@settings(max_examples=500)
@given(cfg=run_configs())
def test_the_algebra_predicts_the_steps_the_loop_driver_runs(cfg):
    n, b, g, epochs, max_steps, warmup = cfg.values()
    counted, _ = run_stub_loop(n, b, g, epochs, max_steps)
    report = evaluate(
        AlgebraInputs(
            sequences=n,
            micro_batch=b,
            grad_accum=g,
            seq_len=1,
            epochs=epochs,
            max_steps=max_steps,
            warmup_steps=warmup,
            params=1,
            peak_lr=3e-4,
            min_lr=default_min_lr(3e-4),
        )
    )
    event(
        "no step per epoch"
        if counted == 0
        else "epochs cap"
        if counted < max_steps
        else "max_steps"
    )
    assert counted <= max_steps, "the loop never runs past max_steps"
    assert counted == report.reachable_steps == min(max_steps, epochs * (n // (b * g)))
    refused_for_steps = {v.rule for v in report.violations} & STEP_RULES
    assert (not refused_for_steps) == (counted == max_steps and warmup < counted), (
        "the preflight accepts exactly the runs that reach max_steps with warmup complete"
    )


def test_the_driver_drops_each_epochs_partial_batch_and_stops_mid_epoch():
    # 10 sequences, 3 per step: 3 steps per epoch, sequence 9 never used.
    plans = list(iterate_steps(10, micro_batch=3, grad_accum=1, epochs=5, last_step=7))
    assert [(p.step, p.epoch, p.first_sequence) for p in plans] == [
        (1, 0, 0),
        (2, 0, 3),
        (3, 0, 6),
        (4, 1, 0),
        (5, 1, 3),
        (6, 1, 6),
        (7, 2, 0),
    ]
    assert run_stub_loop(10, 3, 1, 5, 7) == (7, 3)
    assert list(iterate_steps(10, micro_batch=3, grad_accum=4, epochs=5, last_step=7)) == []


def test_micro_batches_tile_the_global_batch_rank_by_rank():
    plan = next(
        iterate_steps(100, micro_batch=2, grad_accum=3, epochs=1, last_step=1, world_size=2)
    )
    assert plan.sequences == range(0, 12)
    rank0, rank1 = plan.micro_batches(0), plan.micro_batches(1)
    # Micro-step a is sequences 4a..4a+3: rank 0 takes the first two, rank 1 the next two
    # (disjoint rank slices that together are the single-process micro-batch).
    assert rank0 == [range(0, 2), range(4, 6), range(8, 10)]
    assert rank1 == [range(2, 4), range(6, 8), range(10, 12)]
    assert sorted(i for r in rank0 + rank1 for i in r) == list(plan.sequences)
    with pytest.raises(ValueError, match="rank 2"):
        plan.micro_batches(2)


def test_driver_arguments_out_of_range_are_refused():
    with pytest.raises(ValueError, match="grad_accum must be >= 1"):
        list(iterate_steps(10, micro_batch=1, grad_accum=0, epochs=1, last_step=1))
