"""FALSIFY-TRAIN-LOOP-010: the objective is next-token prediction under a causal mask.

Logits at position i must not depend on any token after i (checked exactly, by perturbing
each token of a 32-token sequence in turn), and the targets the loss receives are the
input tokens shifted left by one (trainer/train/loss.py's next_token_pairs)."""

from __future__ import annotations

import pytest
import torch

from trainer.model import preset
from trainer.model.llama import build_model
from trainer.train import loss
from trainer.train.loss import accumulate_gradients, next_token_pairs

TINY = preset("tiny")
SEQ = 32


def random_tokens(length: int, seed: int) -> torch.Tensor:
    return torch.randint(
        0, TINY.vocab_size, (1, length), generator=torch.Generator().manual_seed(seed)
    )


def check_logits_depend_only_on_earlier_tokens() -> None:
    model = build_model(TINY, seed=0)
    base = random_tokens(SEQ, seed=1)
    # Row 0 is the original; row 1 + j has token j replaced. One forward for all 33 rows, so
    # every row goes through the same kernels and "unchanged" can be tested bitwise.
    variants = base.repeat(SEQ + 1, 1)
    for j in range(SEQ):
        variants[1 + j, j] = (base[0, j] + 1) % TINY.vocab_size
    with torch.no_grad():
        logits = model(variants)
    original = logits[0]
    for j in range(SEQ):
        perturbed = logits[1 + j]
        before, after = perturbed[:j], perturbed[j:]
        assert torch.equal(before, original[:j]), (
            f"changing token {j} changed logits at positions "
            f"{[i for i in range(j) if not torch.equal(perturbed[i], original[i])]}"
        )
        unchanged = [j + i for i in range(SEQ - j) if torch.equal(after[i], original[j + i])]
        assert not unchanged, f"changing token {j} left logits at {unchanged} unchanged"


def check_targets_are_inputs_shifted_left_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = random_tokens(SEQ + 1, seed=2)
    inputs, targets = next_token_pairs(tokens)
    assert torch.equal(inputs, tokens[:, :-1])
    assert torch.equal(targets, tokens[:, 1:])
    assert torch.equal(targets[:, :-1], inputs[:, 1:])
    # ...and those are the targets the cross-entropy actually receives in a training step.
    received: list[torch.Tensor] = []
    real = loss._token_losses

    def spy(logits: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        received.append(seen.clone())
        return real(logits, seen)

    monkeypatch.setattr(loss, "_token_losses", spy)
    accumulate_gradients(build_model(TINY, seed=0), [(inputs, targets)])
    assert len(received) == 1
    assert torch.equal(received[0], tokens[:, 1:])


@pytest.mark.ship_blocking
def test_falsify_train_loop_010_causal_next_token_objective(monkeypatch):
    """One bound node for both halves of the objective: the mask and the shift."""
    check_logits_depend_only_on_earlier_tokens()
    check_targets_are_inputs_shifted_left_by_one(monkeypatch)


def test_padding_targets_are_ignored_and_inputs_keep_the_pad():
    tokens = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 0, 0, 0]])
    inputs, targets = next_token_pairs(tokens, pad_id=0)
    assert inputs.tolist() == [[5, 6, 7, 0], [8, 9, 0, 0]]
    assert targets.tolist() == [[6, 7, -100, -100], [9, -100, -100, -100]]
    assert loss.count_targets(targets) == 3
    assert tokens.tolist()[0] == [5, 6, 7, 0, 0]  # the caller's tensor is not modified


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (torch.zeros(4, dtype=torch.int64), "int64 tensor"),
        (torch.zeros(2, 5, dtype=torch.int32), "int64 tensor"),
        (torch.zeros(2, 1, dtype=torch.int64), "at least 2 positions"),
    ],
)
def test_next_token_pairs_refuses_bad_shapes(tokens, message):
    with pytest.raises(ValueError, match=message):
        next_token_pairs(tokens)
