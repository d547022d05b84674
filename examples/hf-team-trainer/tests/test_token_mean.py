"""FALSIFY-TEAM-TRAINER-001, -002 and -003 (contracts/team-trainer-v1.yaml): the team's
Trainer, built by the factory pyproject.toml names, gives the token-mean gradient of each
accumulation window: full windows of unequal micro-batches, a last window or micro-batch
shorter than the others, label smoothing, and padding-free batches. The scenarios are the
Trainer pack's (hf_example)."""

from pathlib import Path

import hf_example
import hf_trainer_pack
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def factory():
    return hf_trainer_pack.load_factory(ROOT)


def _agree(results, what: str) -> None:
    for r in results:
        at = f"{what}, step {r.step} ({r.micro_batch_targets} targets per micro-batch)"
        assert r.grad_tensors == 21, f"{at}: {r.grad_tensors} parameter tensors had gradients"
        assert r.max_grad_relative_error <= 1e-6, f"{at}: gradient {r.max_grad_relative_error:.3g}"
        assert r.loss_relative_error <= 1e-6, f"{at}: logged loss {r.loss_relative_error:.3g}"


@pytest.mark.ship_blocking
def test_the_team_trainer_gives_the_token_mean_gradient_of_each_full_window(factory):
    for micro_batch, grad_accum in [(3, 2), (2, 3), (1, 6)]:
        r = hf_example.accumulation(micro_batch, grad_accum, sequences=6, factory=factory)
        assert len(set(r.micro_batch_targets)) == grad_accum, r.micro_batch_targets  # unequal
        _agree([r], f"{grad_accum} micro-batches of {micro_batch}")


@pytest.mark.ship_blocking
def test_short_last_windows_and_label_smoothing_give_each_windows_token_mean(factory):
    cases = [  # (micro-batch, accumulation, sequences, label smoothing)
        (2, 3, 10, 0.0),  # windows of 3 and 2 micro-batches
        (2, 2, 5, 0.0),  # micro-batches of 2, 2, 1: a last micro-batch of one sequence
        (2, 3, 10, 0.1),  # smoothing over a full and a short window
    ]
    for micro_batch, grad_accum, sequences, eps in cases:
        results = hf_example.accumulation_steps(
            micro_batch, grad_accum, sequences, label_smoothing=eps, factory=factory
        )
        windows = -(-sequences // (micro_batch * grad_accum))
        assert len(results) == windows, f"{len(results)} steps, {windows} windows"
        assert len(results[-1].micro_batch_targets) < grad_accum, "the last window is short"
        _agree(results, f"{sequences} sequences at {micro_batch} x {grad_accum}, smoothing {eps}")


@pytest.mark.ship_blocking
def test_padding_free_batches_train_as_their_sequences_padded(factory):
    cases = [  # (micro-batch, accumulation, sequences, label smoothing)
        (2, 3, 6, 0.0),  # one full window of rows of 2 sequences
        (2, 2, 5, 0.0),  # a last row of one sequence
        (3, 2, 9, 0.1),  # smoothing, and a last window of one row
    ]
    for micro_batch, grad_accum, sequences, eps in cases:
        results = hf_example.accumulation_steps(
            micro_batch, grad_accum, sequences, label_smoothing=eps, padding_free=True,
            factory=factory,
        )  # fmt: skip
        windows = -(-sequences // (micro_batch * grad_accum))
        assert len(results) == windows, f"{len(results)} steps, {windows} windows"
        _agree(results, f"padding-free, {sequences} sequences at {micro_batch} x {grad_accum}")
