"""The loop's stop rules (trainer/train/guards.py): early stopping (FALSIFY-TRAIN-LOOP-004),
the divergence guard (FALSIFY-TRAIN-LOOP-005), the finite check and the validation size."""

from __future__ import annotations

import json
import math

import pytest

from trainer.train.guards import (
    MIN_EARLY_STOP_VAL_TOKENS,
    DivergenceError,
    DivergenceGuard,
    EarlyStopping,
    NonFiniteError,
    check_finite,
    check_validation_size,
)


def first_stop(losses: list[float], **kwargs: int) -> int | None:
    """1-based evaluation at which a fresh EarlyStopping first says stop (None: never)."""
    early = EarlyStopping(**kwargs)
    for evaluation, value in enumerate(losses, start=1):
        if early.update(value):
            return evaluation
    return None


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-004
def test_falsify_train_loop_004_early_stopping_waits_for_evidence():
    # (a) the source system's run: best at eval 3, then only 3 evaluations without improvement.
    assert first_stop([9.909, 9.791, 9.733, 9.830, 9.845, 9.818]) is None
    # (b) best at eval 3, five non-improving evaluations after it: stop at 8, not 7 or 9.
    assert first_stop([9.9, 9.8, 9.7] + [9.75] * 5) == 8
    assert first_stop([9.9, 9.8, 9.7] + [9.75] * 4) is None
    # (c) a flat run: eval 1 is the best, evals 2..6 tie it; ties are not improvements.
    assert first_stop([9.9] * 6) == 6
    # (d) a tie counts as no improvement: best stays eval 3, and eval 4 starts the count.
    early = EarlyStopping()
    for value in (9.9, 9.8, 9.7, 9.7):
        assert early.update(value) is False
    assert (early.best, early.best_eval, early.evals) == (9.7, 3, 4)
    assert [early.update(9.7) for _ in range(4)] == [False, False, False, True]  # eval 8
    # (e) The third-evaluation floor: with the contract's patience 5 no stop can come before
    # eval 6 anyway, so (a)-(d) cannot see it; with patience 1 it is the only thing that
    # holds a stop back. Eval 2 does not improve, yet the stop waits for eval 3.
    assert first_stop([9.9, 9.9, 9.9], patience=1, min_evals=3) == 3
    assert first_stop([9.9, 9.8, 9.9], patience=1, min_evals=3) == 3


def test_early_stopping_state_round_trips_through_json():
    early = EarlyStopping()
    for value in (9.9, 9.8, 9.85):
        early.update(value)
    restored = EarlyStopping()
    restored.load_state_dict(json.loads(json.dumps(early.state_dict())))
    assert restored.state_dict() == early.state_dict()
    assert [restored.update(9.85) for _ in range(4)] == [False, False, False, True]


def test_early_stopping_refuses_non_finite_losses_and_bad_state():
    early = EarlyStopping()
    with pytest.raises(ValueError, match="evaluation 1: validation loss is nan"):
        early.update(math.nan)
    with pytest.raises(ValueError, match="missing best_eval"):
        early.load_state_dict({"patience": 5, "min_evals": 3, "best": None, "evals": 0})


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-005
def verdict_first(vocab_size: int, value: float) -> str:
    try:
        DivergenceGuard(vocab_size).check(value)
    except DivergenceError:
        return "abort"
    return "pass"


def verdict_later(previous: float, value: float, vocab_size: int = 50257) -> str:
    guard = DivergenceGuard(vocab_size)
    guard.check(previous)
    try:
        guard.check(value)
    except DivergenceError:
        return "abort"
    return "pass"


def test_falsify_train_loop_005_divergence_cap_is_calibrated_to_the_vocabulary():
    assert 2 * math.log(50257) == pytest.approx(21.65, abs=0.005)
    assert 2 * math.log(512) == pytest.approx(12.48, abs=0.005)
    first = [(v, verdict_first(50257, v)) for v in (10.82, 18.0, 21.6, 21.7, math.nan, math.inf)]
    assert [verdict for _, verdict in first] == [
        "pass",  # 10.82: an untrained model; a flat cap of 10.0 aborted here
        "pass",  # 18.0: the source system aborted here
        "pass",  # 21.6
        "abort",  # 21.7
        "abort",  # NaN: NaN > cap is False, so it must be tested on its own
        "abort",  # +inf
    ], first
    assert verdict_later(9.8, 19.6) == "pass"  # exactly double passes
    assert 2 * 9.8 == 19.6  # (exact in binary, so the test really is at the boundary)
    assert verdict_later(9.8, 19.61) == "abort"
    assert verdict_later(9.8, math.nan) == "abort"
    assert verdict_first(512, 12.4) == "pass"
    assert verdict_first(512, 12.5) == "abort"


def test_divergence_errors_name_the_evaluation_and_value():
    guard = DivergenceGuard(50257)
    with pytest.raises(DivergenceError, match=r"evaluation 1: .*21\.7 exceeds 2 ln\(50257\)"):
        guard.check(21.7)
    guard.check(9.8)
    with pytest.raises(DivergenceError, match=r"evaluation 2: validation loss is nan"):
        guard.check(math.nan)
    assert guard.previous == 9.8  # a refused value is never recorded


def test_divergence_guard_state_round_trips_through_json():
    guard = DivergenceGuard(512)
    guard.check(6.0)
    restored = DivergenceGuard(512)
    restored.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    assert (
        restored.state_dict()
        == guard.state_dict()
        == {
            "vocab_size": 512,
            "previous": 6.0,
            "evals": 1,
        }
    )
    with pytest.raises(DivergenceError):
        restored.check(12.01)
    with pytest.raises(ValueError, match="vocab_size 512"):
        DivergenceGuard(50257).load_state_dict(guard.state_dict())


# ---------------------------------------------------------------- finite check, validation size
@pytest.mark.parametrize(
    ("loss", "grad_norm", "expected"),
    [
        (math.nan, 1.0, "step 7: loss is nan"),
        (2.3, math.inf, "step 7: grad norm is inf"),
        (math.inf, math.nan, "step 7: loss is inf, grad norm is nan"),
    ],
)
def test_check_finite_names_step_and_values(loss, grad_norm, expected):
    with pytest.raises(NonFiniteError, match=expected):
        check_finite(7, loss, grad_norm)


def test_check_finite_passes_finite_values():
    check_finite(1, 10.82, 0.5)


def test_validation_size_minimum_applies_only_with_early_stopping():
    assert MIN_EARLY_STOP_VAL_TOKENS == 131_072 == 16 * 16 * 512
    for refused in (16_384, 131_071):
        with pytest.raises(ValueError, match=f"{refused:,} non-padding .* at least 131,072"):
            check_validation_size(refused, early_stopping=True)
    check_validation_size(131_072, early_stopping=True)
    check_validation_size(2_000, early_stopping=False)
