"""One corpus form per sequence, padded to a fixed length: the loop's SequenceSource.

    data = PaddedExamples(sequences, seq_len=24, pad_id=pad)
    inputs, targets = data.batch([0, 5, 7])        # [3, 24] each; padding targets ignored

Each row is a whole sequence (begin-of-text, the form's tokens, end-of-text) followed by
pad ids up to seq_len + 1 tokens; the shift and the masking of padding targets happen in
trainer.train.loss.next_token_pairs, the loop's one place for them (looked up at call
time, so the contract's mutants of it reach the oracle's training too).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from trainer.train import loss


class PaddedExamples:
    def __init__(self, sequences: Sequence[Sequence[int]], *, seq_len: int, pad_id: int) -> None:
        if not sequences:
            raise ValueError("no sequences")
        rows = torch.full((len(sequences), seq_len + 1), pad_id, dtype=torch.int64)
        for i, seq in enumerate(sequences):
            if len(seq) > seq_len + 1:
                raise ValueError(
                    f"sequence {i} has {len(seq)} tokens; seq_len {seq_len} holds at most "
                    f"{seq_len + 1} (inputs plus the last target)"
                )
            if pad_id in seq:
                raise ValueError(f"sequence {i} contains the pad id {pad_id}")
            rows[i, : len(seq)] = torch.tensor(list(seq), dtype=torch.int64)
        self._rows = rows
        self.pad_id = pad_id
        self.num_sequences = len(sequences)
        self.seq_len = seq_len

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """(inputs [B, seq_len], targets [B, seq_len]) of the given sequences."""
        return loss.next_token_pairs(self._rows[list(indices)], self.pad_id)
