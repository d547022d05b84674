"""The interpolated Kneser-Ney trigram baseline of FALSIFY-TRAIN-LOOP-017."""

import math
import random
from collections import Counter

import numpy as np
import pytest

from trainer.oracle.data import build_oracle_data
from trainer.oracle.ngram import KneserNeyTrigram
from trainer.oracle.scorer import score

SMALL = [[0, 1, 2, 0], [0, 1, 3, 0], [0, 2, 1, 3, 0]]


def test_distribution_sums_to_one_for_random_contexts():
    rng = random.Random(3)
    seqs = [[rng.randrange(12) for _ in range(rng.randrange(2, 9))] for _ in range(40)]
    kn = KneserNeyTrigram.fit(seqs, vocab_size=16)
    for _ in range(200):
        context = [rng.randrange(16) for _ in range(rng.randrange(0, 4))]
        row = kn.distribution(context)
        assert row.shape == (16,)
        assert abs(row.sum() - 1.0) < 1e-9
        assert (row > 0).all()


def test_unseen_context_backs_off_to_the_bigram_level():
    kn = KneserNeyTrigram.fit(SMALL, vocab_size=5)
    # (3, 1) never occurs as a trigram context, so P(. | 3 1) = P2(. | 1).
    p2 = kn._interpolate(kn.bigram.get(1), kn._p1())
    np.testing.assert_allclose(kn.distribution([3, 1]), p2, rtol=0, atol=0)
    # a token never seen at all still gets probability from the uniform floor
    assert kn.prob(4, [0, 1]) > 0


def _brute_force(seqs, vocab, d, w, context):
    """The Chen-Goodman formulas written out with explicit loops over the vocabulary."""
    u, v = context
    tri = Counter()
    for s in seqs:
        p = [-1, -1, *s]
        for i in range(3, len(p)):
            tri[(p[i - 2], p[i - 1], p[i])] += 1
    bi_cont = Counter((b, c) for (_, b, c) in tri)
    uni_cont = Counter(c for (_, c) in bi_cont)

    def p1(x):
        n = sum(uni_cont.values())
        return max(uni_cont[x] - d, 0) / n + d * len(uni_cont) / n / vocab

    def p2(x):
        n = sum(bi_cont[(v, y)] for y in range(vocab))
        if n == 0:
            return p1(x)
        types = sum(1 for y in range(vocab) if bi_cont[(v, y)])
        return max(bi_cont[(v, x)] - d, 0) / n + d * types / n * p1(x)

    n = sum(tri[(u, v, y)] for y in range(vocab))
    if n == 0:
        return p2(w)
    types = sum(1 for y in range(vocab) if tri[(u, v, y)])
    return max(tri[(u, v, w)] - d, 0) / n + d * types / n * p2(w)


@pytest.mark.parametrize("context", [[0, 1], [1, 3], [3, 1], [2], [], [4, 4]])
def test_matches_brute_force_on_a_small_example(context):
    kn = KneserNeyTrigram.fit(SMALL, vocab_size=5, discount=0.75)
    u, v = ([-1, -1, *context])[-2:]
    for w in range(5):
        assert kn.prob(w, context) == pytest.approx(
            _brute_force(SMALL, 5, 0.75, w, (u, v)), abs=1e-12
        )


def test_train_perplexity_below_validation_on_the_oracle_corpus():
    data = build_oracle_data()
    kn = KneserNeyTrigram.fit(data.train_sequences, vocab_size=data.tokenizer.vocab_size)
    train_ppl = score(kn.log_probs, data.train_sequences).perplexity
    val_ppl = score(kn.log_probs, data.val_sequences).perplexity
    assert 1 < train_ppl < val_ppl < data.tokenizer.vocab_size * 10
    assert math.isfinite(val_ppl)


def test_refuses_ids_outside_the_vocabulary():
    with pytest.raises(ValueError, match="sequence 0"):
        KneserNeyTrigram.fit([[0, 7]], vocab_size=5)


@pytest.mark.parametrize("context", [[0, 1], [1, 3], [3, 1], [2], [], [4, 4]])
def test_token_prob_matches_brute_force(context):
    kn = KneserNeyTrigram.fit(SMALL, vocab_size=5, discount=0.75)
    u, v = ([-1, -1, *context])[-2:]
    for w in range(5):
        assert kn.token_prob(w, context) == pytest.approx(
            _brute_force(SMALL, 5, 0.75, w, (u, v)), abs=1e-12
        )


def test_token_prob_equals_the_distribution_row_on_random_data():
    """The pipeline's scalar scorer and the oracle's row scorer are one model."""
    rng = random.Random(11)
    seqs = [[rng.randrange(20) for _ in range(rng.randrange(2, 12))] for _ in range(60)]
    kn = KneserNeyTrigram.fit(seqs, vocab_size=24)
    for _ in range(300):
        context = [rng.randrange(24) for _ in range(rng.randrange(0, 4))]
        token = rng.randrange(24)
        assert kn.token_prob(token, context) == pytest.approx(kn.prob(token, context), rel=1e-12)
    with pytest.raises(ValueError, match="outside"):
        kn.token_prob(24, [1])
