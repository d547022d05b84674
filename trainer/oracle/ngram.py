"""Interpolated Kneser-Ney trigram over token ids (Chen and Goodman 1998, section 3).

    kn = KneserNeyTrigram.fit(train_sequences, vocab_size=300)   # lists of token ids
    p = kn.prob(target, context)              # context: the tokens before target (any length)
    row = kn.distribution(context)            # [vocab_size] float64, sums to 1

Every level is interpolated with the one below, with one absolute discount D (0.75):

    P3(w | u v) = max(c(u v w) - D, 0) / c(u v .) + D * N1+(u v .) / c(u v .) * P2(w | v)
    P2(w | v)   = max(N1+(. v w) - D, 0) / N1+(. v .) + D * N1+(v .) / N1+(. v .) * P1(w)
    P1(w)       = max(N1+(. w) - D, 0) / N1+(. .) + D * N1+(. +) / N1+(. .) * 1 / V

c are raw counts (highest order only); the lower orders use continuation counts N1+(. x)
(the number of distinct left neighbours), which is what makes it Kneser-Ney. A context
never seen backs off entirely to the level below (its weight is 1); P1 ends in the
uniform distribution over all V ids, so an id never seen in training keeps a small
probability instead of zero. Every level sums to 1 over the vocabulary.

Begin marker: each sequence is left-padded with two BOS markers (id -1, outside the
vocabulary and never predicted), so the first token's context is (BOS, BOS) and the
second's (BOS, first token) - the same prefix the transformer sees, nothing more. Every
token of a sequence except the first is a target: the oracle's sequences start with
<|endoftext|> as a begin-of-text token, exactly the inputs the model gets.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

BOS = -1  # begin marker: context only, never a target, not in the vocabulary
DISCOUNT = 0.75


@dataclass
class KneserNeyTrigram:
    vocab_size: int
    discount: float
    trigram: dict[tuple[int, int], Counter[int]]  # raw counts c(u v w)
    bigram: dict[int, Counter[int]]  # continuation counts N1+(. v w)
    unigram: Counter[int]  # continuation counts N1+(. w)
    _cache: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    # context -> (sum of its counts, distinct ids): token_prob's per-level totals.
    _totals: dict[tuple[int, ...], tuple[int, int]] = field(default_factory=dict, repr=False)

    @classmethod
    def fit(
        cls, sequences: Iterable[Sequence[int]], *, vocab_size: int, discount: float = DISCOUNT
    ) -> KneserNeyTrigram:
        if not 0 < discount < 1:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        trigram: dict[tuple[int, int], Counter[int]] = defaultdict(Counter)
        for index, seq in enumerate(sequences):
            bad = [t for t in seq if not 0 <= t < vocab_size]
            if bad:
                raise ValueError(
                    f"sequence {index} holds ids outside 0..{vocab_size - 1}: {bad[:5]}"
                )
            padded = [BOS, BOS, *seq]
            # The first token has no prefix to be predicted from; it is context only.
            for i in range(3, len(padded)):
                trigram[(padded[i - 2], padded[i - 1])][padded[i]] += 1
        if not trigram:
            raise ValueError("no trigrams: every sequence is shorter than 2 tokens")
        # Continuation counts: each distinct (u, v, w) adds one to N1+(. v w), each
        # distinct (v, w) one to N1+(. w).
        bigram: dict[int, Counter[int]] = defaultdict(Counter)
        for (_, v), nexts in trigram.items():
            for w in nexts:
                bigram[v][w] += 1
        unigram: Counter[int] = Counter()
        for nexts in bigram.values():
            for w in nexts:
                unigram[w] += 1
        return cls(vocab_size, discount, dict(trigram), dict(bigram), unigram)

    # ---------------------------------------------------------------- distributions
    def _interpolate(self, counts: Counter[int] | None, lower: np.ndarray) -> np.ndarray:
        """One level: discounted counts plus the freed mass times the level below."""
        if not counts:
            return lower  # context never seen: all mass to the level below
        total = sum(counts.values())
        ids = np.fromiter(counts.keys(), dtype=np.int64, count=len(counts))
        values = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
        out = (self.discount * len(counts) / total) * lower
        out[ids] += np.maximum(values - self.discount, 0.0) / total
        return out

    def _p1(self) -> np.ndarray:
        key = (BOS - 1, BOS - 1)  # cache slot for the context-free level
        if key not in self._cache:
            uniform = np.full(self.vocab_size, 1.0 / self.vocab_size)
            self._cache[key] = self._interpolate(self.unigram, uniform)
        return self._cache[key]

    def distribution(self, context: Sequence[int]) -> np.ndarray:
        """P(. | last two tokens of context) over the whole vocabulary, float64."""
        padded = [BOS, BOS, *context]
        u, v = padded[-2], padded[-1]
        key = (u, v)
        if key not in self._cache:
            p2 = self._interpolate(self.bigram.get(v), self._p1())
            self._cache[key] = self._interpolate(self.trigram.get(key), p2)
        return self._cache[key]

    def prob(self, token: int, context: Sequence[int]) -> float:
        return float(self.distribution(context)[token])

    def token_prob(self, token: int, context: Sequence[int]) -> float:
        """P(token | context) by the same formulas, one id at a time: no vocabulary-sized
        row per context, so scoring a large set (the pipeline's baseline, V = 8192 over
        100k+ distinct contexts) stays in O(1) memory per target. Equals prob()."""
        if not 0 <= token < self.vocab_size:
            raise ValueError(f"token {token} is outside 0..{self.vocab_size - 1}")
        padded = [BOS, BOS, *context]
        u, v = padded[-2], padded[-1]
        p1 = self._scalar_level((), self.unigram, token, 1.0 / self.vocab_size)
        p2 = self._scalar_level((v,), self.bigram.get(v), token, p1)
        return self._scalar_level((u, v), self.trigram.get((u, v)), token, p2)

    def _scalar_level(
        self, key: tuple[int, ...], counts: Counter[int] | None, token: int, lower: float
    ) -> float:
        """_interpolate's arithmetic, in its order, for one id."""
        if not counts:
            return lower
        totals = self._totals.get(key)
        if totals is None:
            totals = self._totals[key] = (sum(counts.values()), len(counts))
        total, distinct = totals
        return (self.discount * distinct / total) * lower + max(
            counts.get(token, 0) - self.discount, 0.0
        ) / total

    def log_probs(self, prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        """[len(prefixes), vocab] natural-log next-token probabilities: the scorer's interface."""
        return np.log(np.stack([self.distribution(p) for p in prefixes]))
