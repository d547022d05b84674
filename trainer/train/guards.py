"""The loop's stop rules: non-finite values, divergence, early stopping, validation size.

    check_finite(step, loss, grad_norm)          # before optimizer.step(): NonFiniteError
    guard = DivergenceGuard(vocab_size=50257)
    guard.check(val_loss)                        # after each evaluation: DivergenceError
    early = EarlyStopping(patience=5, min_evals=3)
    if early.update(val_loss): stop
    check_validation_size(val_target_tokens, early_stopping=True)   # at startup

Rules (C-TRAINING-LOOP), each from a failure of the source system:
- INV-TRAIN-LOOP-006: a NaN or infinite loss or gradient norm stops the run before the
  optimizer step, with the step number and the value in the message.
- INV-TRAIN-LOOP-005: the divergence cap is calibrated to the vocabulary. A model at
  initialisation predicts roughly uniformly and scores about ln(V): 10.82 nats for
  V = 50257. The source system's flat cap of 10.0 therefore aborted healthy from-scratch
  runs at their first evaluation. The first evaluation aborts only above 2 ln(V) (21.65);
  a later one only above twice the previous evaluation (exactly double passes). NaN must
  be tested explicitly: every comparison with NaN is False, so `nan > cap` lets a NaN
  through - non-finite values abort before any comparison.
- INV-TRAIN-LOOP-004: early stopping waits for evidence. Never before the third
  evaluation; then stop at the first evaluation after which `patience` (5) consecutive
  evaluations failed to improve strictly on the best loss so far (a tie is no
  improvement). The source system's patience 2 stopped converging runs on noise.
- INV-TRAIN-LOOP-003: with early stopping on, the validation set must hold at least
  131,072 non-padding target tokens, so its noise (~0.01 nats) sits below the
  epoch-over-epoch signal; the source system's 16,384 tokens were as noisy (~0.04) as
  the signal itself.

Named seams (_non_finite_values, _first_eval_cap, _exceeds, _is_finite, _improves,
_should_stop) let tests/mutants/*.py inject the contract's known bugs one at a time.
"""

from __future__ import annotations

import math
from typing import Any

MIN_EARLY_STOP_VAL_TOKENS = 131_072  # 16 batches x 16 sequences x 512 tokens


# ---------------------------------------------------------------- non-finite values
class NonFiniteError(RuntimeError):
    """A step's loss or gradient norm is NaN or infinite; the step must not be applied."""


def _non_finite_values(loss: float, grad_norm: float) -> list[str]:
    """'loss is nan', 'grad norm is inf', ... for every non-finite value (empty if none)."""
    named = (("loss", loss), ("grad norm", grad_norm))
    return [f"{name} is {value}" for name, value in named if not math.isfinite(value)]


def check_finite(step: int, loss: float, grad_norm: float) -> None:
    """Raise NonFiniteError naming the step and the value(s) unless both are finite."""
    bad = _non_finite_values(loss, grad_norm)
    if bad:
        raise NonFiniteError(
            f"step {step}: {', '.join(bad)} (loss {loss}, grad norm {grad_norm}); "
            "stopping before the optimizer step"
        )


# ---------------------------------------------------------------- divergence
class DivergenceError(RuntimeError):
    """A validation loss is non-finite or jumped beyond the divergence cap."""


def _first_eval_cap(vocab_size: int) -> float:
    """2 ln(V): twice what an untrained (uniform) model scores."""
    return 2.0 * math.log(vocab_size)


def _exceeds(value: float, limit: float) -> bool:
    """Strictly above: a loss of exactly the limit (e.g. exactly double) passes."""
    return value > limit


def _is_finite(value: float) -> bool:
    return math.isfinite(value)


class DivergenceGuard:
    """Aborts on a non-finite validation loss, > 2 ln(V) at the first evaluation, or
    > 2x the previous evaluation later."""

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
        self.vocab_size = vocab_size
        self.previous: float | None = None
        self.evals = 0

    def check(self, val_loss: float) -> None:
        """Accept ``val_loss`` as the next evaluation or raise DivergenceError."""
        evaluation = self.evals + 1
        if not _is_finite(val_loss):
            raise DivergenceError(f"evaluation {evaluation}: validation loss is {val_loss}")
        if self.previous is None:
            cap = _first_eval_cap(self.vocab_size)
            if _exceeds(val_loss, cap):
                raise DivergenceError(
                    f"evaluation {evaluation}: validation loss {val_loss} exceeds "
                    f"2 ln({self.vocab_size}) = {cap:.4f}, twice an untrained model's"
                )
        elif _exceeds(val_loss, 2.0 * self.previous):
            raise DivergenceError(
                f"evaluation {evaluation}: validation loss {val_loss} is more than double "
                f"the previous evaluation's {self.previous}"
            )
        self.previous = float(val_loss)
        self.evals = evaluation

    def state_dict(self) -> dict[str, Any]:
        return {"vocab_size": self.vocab_size, "previous": self.previous, "evals": self.evals}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _require_keys("DivergenceGuard", state, ("vocab_size", "previous", "evals"))
        if state["vocab_size"] != self.vocab_size:
            raise ValueError(
                f"DivergenceGuard state is for vocab_size {state['vocab_size']}, "
                f"this guard has {self.vocab_size}"
            )
        self.previous = None if state["previous"] is None else float(state["previous"])
        self.evals = int(state["evals"])


# ---------------------------------------------------------------- early stopping
def _improves(value: float, best: float) -> bool:
    """Strictly lower: a tie is not an improvement."""
    return value < best


def _should_stop(evals: int, evals_since_best: int, patience: int, min_evals: int) -> bool:
    """At least min_evals evaluations, and the last `patience` of them all failed to improve."""
    return evals >= min_evals and evals_since_best >= patience


class EarlyStopping:
    """update(val_loss) -> True when training should stop now (INV-TRAIN-LOOP-004)."""

    def __init__(self, patience: int = 5, min_evals: int = 3) -> None:
        if patience < 1 or min_evals < 1:
            raise ValueError(
                f"patience and min_evals must be >= 1, got patience={patience}, "
                f"min_evals={min_evals}"
            )
        self.patience = patience
        self.min_evals = min_evals
        self.best: float | None = None
        self.best_eval = 0  # 1-based index of the first evaluation attaining `best`
        self.evals = 0

    def update(self, val_loss: float) -> bool:
        if not math.isfinite(val_loss):
            # The divergence guard aborts on these first; reaching here is a caller bug.
            raise ValueError(f"evaluation {self.evals + 1}: validation loss is {val_loss}")
        self.evals += 1
        if self.best is None or _improves(val_loss, self.best):
            self.best, self.best_eval = float(val_loss), self.evals
        return _should_stop(self.evals, self.evals - self.best_eval, self.patience, self.min_evals)

    def state_dict(self) -> dict[str, Any]:
        return {
            "patience": self.patience,
            "min_evals": self.min_evals,
            "best": self.best,
            "best_eval": self.best_eval,
            "evals": self.evals,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _require_keys(
            "EarlyStopping", state, ("patience", "min_evals", "best", "best_eval", "evals")
        )
        self.patience, self.min_evals = int(state["patience"]), int(state["min_evals"])
        self.best = None if state["best"] is None else float(state["best"])
        self.best_eval, self.evals = int(state["best_eval"]), int(state["evals"])


# ---------------------------------------------------------------- validation size
def check_validation_size(target_tokens: int, early_stopping: bool) -> None:
    """Refuse early stopping on a validation set smaller than MIN_EARLY_STOP_VAL_TOKENS."""
    minimum = MIN_EARLY_STOP_VAL_TOKENS
    if early_stopping and target_tokens < minimum:
        raise ValueError(
            f"validation set has {target_tokens:,} non-padding target tokens; early stopping "
            f"needs at least {minimum:,} (noise must sit below the epoch-over-epoch signal). "
            "Enlarge the validation split or turn early stopping off"
        )


def _require_keys(owner: str, state: dict[str, Any], keys: tuple[str, ...]) -> None:
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(f"{owner} state is missing {', '.join(missing)}")
