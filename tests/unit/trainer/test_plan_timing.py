"""The plan's time estimate (trainer/plan/timing.py): the fit recovers known costs, the
measured shapes stay within the FLOP budget, and a real measurement gives positive
numbers with its basis. Speed itself is not asserted."""

from __future__ import annotations

import dataclasses

import pytest

from trainer.model.config import preset
from trainer.plan import timing
from trainer.plan.timing import Shape


def synthetic_seconds(cfg, small, large, *, c0, c1, rate):
    def t(layers, shape):
        return c0 + layers * c1 + timing.model_flops(cfg, layers, shape) / rate

    return {"A": t(1, small), "B": t(2, small), "C": t(1, large)}


@pytest.mark.parametrize("name", ["tiny", "50m", "370m"])
def test_fit_recovers_fixed_costs_and_rate_from_the_three_cells(name):
    cfg = preset(name)
    small, large = timing.measured_shapes(cfg, 4, 256)
    seconds = synthetic_seconds(cfg, small, large, c0=0.25, c1=0.004, rate=3e10)
    c0, c1, rate, notes = timing.fit(cfg, small, large, seconds)
    assert c0 == pytest.approx(0.25, rel=1e-6)
    assert c1 == pytest.approx(0.004, rel=1e-6)
    assert rate == pytest.approx(3e10, rel=1e-6)
    assert notes == []


def test_fit_clamps_what_timing_noise_makes_negative_and_says_so():
    cfg = preset("tiny")
    small, large = Shape(1, 64), Shape(4, 64)
    seconds = {"A": 0.010, "B": 0.009, "C": 0.030}  # B < A: a noisy second layer
    c0, c1, rate, notes = timing.fit(cfg, small, large, seconds)
    assert c1 == 0.0 and c0 >= 0.0 and rate > 0
    assert any("c1 fitted" in note for note in notes)


def test_measured_shapes_fit_the_flop_budget_and_keep_the_configured_shape_when_cheap():
    quick = dataclasses.replace(preset("tiny"), vocab_size=8192)
    small, large = timing.measured_shapes(quick, 16, 256)
    assert large.seq_len == 256 and large.batch < 16  # fewer sequences, whole ones
    assert timing.model_flops(quick, 1, large) <= timing.PASS_FLOP_BUDGET
    assert timing.model_flops(quick, 1, Shape(large.batch + 1, 256)) > timing.PASS_FLOP_BUDGET
    assert large.tokens == timing.SHAPE_RATIO * small.tokens
    # A 50257-row lm_head needs more tokens than the budget allows to leave the
    # memory-bound regime: the floor wins.
    _, large = timing.measured_shapes(preset("370m"), 4, 1024)
    assert large.tokens == timing.MIN_LARGE_TOKENS
    cheap = dataclasses.replace(preset("tiny"), vocab_size=512)
    small, large = timing.measured_shapes(cheap, 2, 64)
    assert large == Shape(2, 64)  # the whole configured micro-batch
    assert small.tokens == 128 // timing.SHAPE_RATIO


def test_attention_flops_grow_with_the_square_of_seq_len():
    cfg = preset("tiny")
    one = timing.layer_flops(cfg, Shape(1, 64))
    assert timing.layer_flops(cfg, Shape(2, 64)) == 2 * one  # more sequences: linear
    q = cfg.num_attention_heads * cfg.resolved_head_dim
    longer = timing.layer_flops(cfg, Shape(1, 128)) - 2 * one  # longer ones: the T^2 term
    assert longer == 3 * 2 * (128**2 - 2 * 64**2) * q


# bf16 is planned for CUDA; CPU autocast runs the same code path here.
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_measurement_on_the_tiny_model_gives_positive_times_and_its_basis(precision):
    cfg = dataclasses.replace(preset("tiny"), vocab_size=1000)
    est = timing.measure(
        cfg,
        micro_batch=4,
        seq_len=64,
        grad_accum=3,
        steps=100,
        optimizer={"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1},
        precision=precision,
    )
    assert est.precision == precision and 1 <= est.passes <= timing.TIMED_PASSES
    assert set(est.seconds) == {"A", "B", "C"} and all(s > 0 for s in est.seconds.values())
    assert est.micro_batch_seconds > 0 and est.optimizer_seconds > 0
    assert est.step_seconds == pytest.approx(3 * est.micro_batch_seconds + est.optimizer_seconds)
    assert est.run_seconds == pytest.approx(100 * est.step_seconds)
    basis = "\n".join(est.basis())
    assert "1 and 2 layers" in basis and "GFLOP/s" in basis and str(est.small) in basis
