"""The learning-rate schedule (trainer/config/schedule.py): linear warmup to the peak,
cosine decay to 0.1 x peak (INV-CFG-006, FALSIFY-CFG-007 of training-config-kernel-v1)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.config.algebra import AlgebraInputs, default_min_lr, evaluate
from trainer.config.schedule import lr_at

PEAK = 3e-4
MIN_LR = default_min_lr(PEAK)


def curve(warmup: int, max_steps: int, peak: float = PEAK) -> list[float]:
    min_lr = default_min_lr(peak)
    return [
        lr_at(s, peak=peak, warmup=warmup, max_steps=max_steps, min_lr=min_lr)
        for s in range(1, max_steps + 1)
    ]


# ---------------------------------------------------------------- FALSIFY-CFG-007
@pytest.mark.ship_blocking
def test_the_schedule_peaks_at_warmup_and_ends_at_a_tenth_of_the_peak():
    lr = curve(500, 5000)  # lr[s - 1] is step s
    assert lr[500 - 1] == 3e-4, "exactly the peak at s = w"
    assert abs(lr[5000 - 1] - 3e-5) <= 1e-15, "min_lr = 0.1 x peak at s = M"
    assert abs(lr[2750 - 1] - 1.65e-4) <= 1e-15, "half-way through the decay"
    warmup, decay = lr[:500], lr[500 - 1 :]
    assert all(a <= b for a, b in itertools.pairwise(warmup))
    assert all(a >= b for a, b in itertools.pairwise(decay))
    assert max(lr) == 3e-4
    assert lr[1 - 1] == pytest.approx(3e-4 / 500, rel=1e-12)
    # No jump where warmup hands over to the cosine.
    assert lr[500] == pytest.approx(3e-4, rel=1e-5) and lr[500] < 3e-4

    # w = 0: the cosine starts at step 1, just below the peak.
    no_warmup = curve(0, 5000)
    expected = MIN_LR + 0.5 * (PEAK - MIN_LR) * (1 + math.cos(math.pi / 5000))
    assert no_warmup[0] == expected
    assert PEAK * (1 - 1e-6) < no_warmup[0] < PEAK
    assert abs(no_warmup[-1] - 3e-5) <= 1e-15

    # The seed: 43 reachable steps of a 2000-step warmup peak at 6.45e-6, and the
    # preflight says so.
    seed = AlgebraInputs(
        sequences=22_079,
        micro_batch=4,
        grad_accum=128,
        seq_len=1024,
        epochs=1,
        max_steps=5000,
        warmup_steps=2000,
        params=373_509_120,
        peak_lr=PEAK,
        min_lr=MIN_LR,
    )
    assert max(curve(2000, 5000)[:43]) == pytest.approx(6.45e-6, rel=1e-12)
    report = evaluate(seed)
    assert report.lr_max_reached == pytest.approx(6.45e-6, rel=1e-12)
    flagged = [v for v in report.violations if v.rule == "INV-CFG-006"]
    assert flagged and "peaks at 6.45e-06" in flagged[0].message
    fixed = evaluate(dataclasses.replace(seed, epochs=117, warmup_steps=500))
    assert fixed.lr_max_reached == PEAK
    assert not [v for v in fixed.violations if v.rule == "INV-CFG-006"]


@given(
    max_steps=st.integers(1, 3000),
    data=st.data(),
    peak=st.floats(1e-6, 1.0),
)
def test_any_schedule_reaches_its_peak_once_and_ends_at_min_lr(max_steps, data, peak):
    warmup = data.draw(st.integers(0, max_steps - 1))
    lr = curve(warmup, max_steps, peak)
    assert max(lr) <= peak
    if warmup >= 1:
        assert lr[warmup - 1] == peak
    assert lr[-1] == pytest.approx(default_min_lr(peak), rel=1e-12)
    assert all(v >= default_min_lr(peak) * (1 - 1e-12) for v in lr[warmup:]), "decay floor"


def test_steps_outside_the_run_are_refused():
    with pytest.raises(ValueError, match=r"outside 1\.\.max_steps"):
        lr_at(0, peak=PEAK, warmup=10, max_steps=100, min_lr=MIN_LR)
    with pytest.raises(ValueError, match=r"outside 1\.\.max_steps"):
        lr_at(101, peak=PEAK, warmup=10, max_steps=100, min_lr=MIN_LR)
    # A warmup longer than the run never ends: every step is a warmup step.
    assert lr_at(100, peak=PEAK, warmup=200, max_steps=100, min_lr=MIN_LR) == PEAK / 2
