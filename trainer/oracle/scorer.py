"""The independent scorer: validation perplexity of any next-token model, prefix by prefix.

    result = score(model_log_probs(llama), val_sequences)      # a torch model
    result = score(kn.log_probs, val_sequences)                # the Kneser-Ney trigram
    result.perplexity                                          # exp(mean NLL)

Independent of the loop on purpose (FALSIFY-TRAIN-LOOP-017): it shifts targets itself
(target i of a sequence is token i + 1, predicted from tokens[:i + 1]) and never calls
trainer.train.loss, so a loop whose labels are not shifted is scored against the real
next token; and each prediction is computed from its prefix ALONE - a batch of prefixes
of one length, no padding, nothing after the prefix in the input - so a model trained
without a causal mask cannot read its answer from the future here.

Sequences are unpadded token lists (begin-of-text first); every token after the first is
a target, the final end-of-text included. The NLL is averaged over all targets of all
sequences (a token mean, like the loss).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

#: prefixes (all of one length) -> [len(prefixes), vocab] natural-log next-token probabilities.
LogProbFn = Callable[[Sequence[Sequence[int]]], np.ndarray]


@dataclass(frozen=True)
class Score:
    nll: float  # mean negative log-likelihood per target token, nats
    targets: int  # number of target tokens scored

    @property
    def perplexity(self) -> float:
        return math.exp(self.nll)


def prediction_pairs(sequences: Sequence[Sequence[int]]) -> list[tuple[tuple[int, ...], int]]:
    """(prefix, target) for every target: the shift, done here and nowhere else in the oracle."""
    pairs = []
    for index, seq in enumerate(sequences):
        if len(seq) < 2:
            raise ValueError(f"sequence {index} has {len(seq)} token(s); at least 2 are needed")
        pairs.extend((tuple(seq[: i + 1]), seq[i + 1]) for i in range(len(seq) - 1))
    return pairs


def score(log_probs: LogProbFn, sequences: Sequence[Sequence[int]]) -> Score:
    """Mean NLL of every target given only its prefix, prefixes batched by length."""
    by_length: dict[int, list[tuple[tuple[int, ...], int]]] = defaultdict(list)
    for prefix, target in prediction_pairs(sequences):
        by_length[len(prefix)].append((prefix, target))
    total, count = 0.0, 0
    for length in sorted(by_length):
        pairs = by_length[length]
        rows = np.asarray(log_probs([p for p, _ in pairs]), dtype=np.float64)
        if rows.ndim != 2 or rows.shape[0] != len(pairs):
            raise ValueError(
                f"log_probs returned shape {rows.shape} for {len(pairs)} prefixes of length "
                f"{length}; expected [{len(pairs)}, vocab]"
            )
        picked = rows[np.arange(len(pairs)), [t for _, t in pairs]]
        if not np.all(np.isfinite(picked)):
            raise ValueError(f"non-finite log-probability among prefixes of length {length}")
        total -= float(picked.sum())
        count += len(pairs)
    if count == 0:
        raise ValueError("no sequences to score")
    return Score(nll=total / count, targets=count)


def model_log_probs(model: nn.Module) -> LogProbFn:
    """A LogProbFn for a causal LM (ids [B, T] -> logits [B, T, V]): last position only."""

    @torch.no_grad()
    def log_probs(prefixes: Sequence[Sequence[int]]) -> np.ndarray:
        device = next(model.parameters()).device
        ids = torch.tensor([list(p) for p in prefixes], dtype=torch.int64, device=device)
        was_training = model.training
        model.eval()
        try:
            logits = model(ids)[:, -1, :]
        finally:
            model.train(was_training)
        return torch.log_softmax(logits.to(torch.float64), dim=-1).cpu().numpy()

    return log_probs
