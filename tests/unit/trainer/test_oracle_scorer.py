"""The oracle's independent scorer: shifts targets itself, feeds each prediction only its
prefix, averages NLL over every target including the final end-of-text."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from trainer.oracle.examples import PaddedExamples
from trainer.oracle.scorer import model_log_probs, prediction_pairs, score
from trainer.train.loss import IGNORE_INDEX


def test_pairs_are_prefix_and_next_token():
    assert prediction_pairs([[5, 6, 7]]) == [((5,), 6), ((5, 6), 7)]
    with pytest.raises(ValueError, match="sequence 0"):
        prediction_pairs([[5]])


def test_uniform_model_scores_vocab_size():
    uniform = lambda prefixes: np.full((len(prefixes), 8), -math.log(8))  # noqa: E731
    result = score(uniform, [[0, 1, 2, 0], [0, 3, 0]])
    assert result.targets == 5
    assert result.perplexity == pytest.approx(8.0)


def test_known_probabilities_give_exact_mean_nll():
    def fn(prefixes):  # P(next = last + 1) = 1/2, the rest shared over 3 others
        rows = np.full((len(prefixes), 4), math.log(1 / 6))
        for i, p in enumerate(prefixes):
            rows[i, (p[-1] + 1) % 4] = math.log(1 / 2)
        return rows

    result = score(fn, [[0, 1, 3]])  # 0->1 hit (1/2), 1->3 miss (1/6)
    assert result.nll == pytest.approx((math.log(2) + math.log(6)) / 2)


class _PeekingModel(nn.Module):
    """Predicts token i+1 by reading it from the input: a model without a causal mask."""

    vocab = 6

    def __init__(self):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        nxt = torch.roll(ids, -1, dims=1)
        logits = torch.full((*ids.shape, self.vocab), -20.0)
        return logits.scatter(2, nxt[..., None], 20.0)


def test_a_model_that_reads_the_future_gains_nothing():
    # With the whole sequence as input it would be perfect; prefix-only, the "next" token it
    # reads at the last position is the prefix's first token (the roll wraps), never the target.
    result = score(model_log_probs(_PeekingModel()), [[0, 1, 2, 3, 4, 5]])
    assert result.perplexity > 1e6


def test_padded_examples_mask_padding_targets_only():
    data = PaddedExamples([[0, 2, 3, 0], [0, 4, 0]], seq_len=5, pad_id=1)
    inputs, targets = data.batch([0, 1])
    assert inputs.tolist() == [[0, 2, 3, 0, 1], [0, 4, 0, 1, 1]]
    assert targets.tolist() == [
        [2, 3, 0, IGNORE_INDEX, IGNORE_INDEX],
        [4, 0, IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX],
    ]
    with pytest.raises(ValueError, match="sequence 0 has 4 tokens"):
        PaddedExamples([[0, 2, 3, 0]], seq_len=2, pad_id=1)
