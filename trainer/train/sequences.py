"""Training and validation data as numbered sequences, and the order an epoch visits them.

The loop asks for sequences by index (trainer/train/steps.py hands out index ranges), so
a data source is anything with a length and a ``batch(indices)`` method:

    source = ShardSequences("runs/demo/data", "train", seq_len=128)
    order = epoch_order(source.num_sequences, seed=1234, epoch=0)
    inputs, targets = source.batch([int(order[i]) for i in range(8)])   # int64 [8, 128]

Rules:
- Sequence ``i`` of a split is stream tokens ``[i*T, i*T + T + 1)``: consecutive windows
  that share one token, so every token is an input once per epoch.
  The tail that cannot fill a window is dropped. Only the split's own shards are opened:
  a train source cannot read a validation document.
- The order of epoch ``e`` is a permutation drawn from a torch.Generator seeded with
  ``(seed, e)`` - the same on every machine, process and PYTHONHASHSEED. Never an
  unseeded generator, never the iteration order of a set.
- A position in the data is (epoch, step): the order is a pure function of (seed, epoch),
  so a later checkpoint can restore the stream from those two numbers alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from trainer.data.manifest import Manifest, load_manifest, open_shard
from trainer.train import loss


class DataExhaustedError(RuntimeError):
    """The run needs a step past the end of the training data (no wrap-around, or all its
    epochs taken). Not a StopIteration on purpose: a ``for`` loop would end quietly and
    training would stop short."""


class SequenceSource(Protocol):
    """Numbered (inputs, targets) sequences of one split."""

    num_sequences: int
    seq_len: int

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        """(inputs [B, T], targets [B, T]) int64 for sequences ``indices``, built with
        loss.next_token_pairs (padding targets are IGNORE_INDEX)."""
        ...


def _order_seed(seed: int, epoch: int) -> int:
    """One 63-bit generator seed per (run seed, epoch); distinct epochs, distinct orders."""
    return (seed * 1_000_003 + epoch) % (2**63 - 1)


def _shuffled(num_sequences: int, seed: int, epoch: int) -> Tensor:
    """A permutation of 0..N-1 from a generator seeded by (seed, epoch) and nothing else."""
    generator = torch.Generator().manual_seed(_order_seed(seed, epoch))
    return torch.randperm(num_sequences, generator=generator)


def epoch_order(num_sequences: int, *, seed: int, epoch: int) -> Tensor:
    """The sequence indices of epoch ``epoch`` in the order training visits them (int64):
    a permutation drawn from (seed, epoch), in every epoch."""
    return _shuffled(num_sequences, seed, epoch)


def _split_stream(manifest: Manifest, split: str) -> np.ndarray:
    """The split's token stream: its own shards, in manifest order, and nothing else."""
    shards = [open_shard(manifest, e) for e in manifest.shards(split)]
    # One in-memory stream: the split is small next to the model for the runs this
    # trainer targets, and concatenating once keeps batch() a single slice.
    return np.concatenate(shards) if shards else np.zeros(0, dtype=np.int64)


class ShardSequences:
    """Sequences of ``seq_len + 1`` tokens over one split of an encoded data directory."""

    def __init__(
        self, manifest_dir: Path | str, split: str, seq_len: int, *, verify: bool = True
    ) -> None:
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        self.split = split
        self.seq_len = seq_len
        self.manifest = load_manifest(Path(manifest_dir), verify=verify, splits=(split,))
        self._stream = _split_stream(self.manifest, split)
        self.stream_tokens = int(self._stream.shape[0])
        self.num_sequences = max(0, (self.stream_tokens - 1) // seq_len)
        self.pad_id: int | None = None  # token shards hold no padding

    def window(self, index: int) -> np.ndarray:
        """Stream tokens of sequence ``index`` (``seq_len + 1`` of them)."""
        if not 0 <= index < self.num_sequences:
            raise IndexError(
                f"sequence {index} is outside 0..{self.num_sequences - 1} of split {self.split!r}"
            )
        start = index * self.seq_len
        return self._stream[start : start + self.seq_len + 1]

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        rows = np.stack([self.window(int(i)) for i in indices]).astype(np.int64)
        return loss.next_token_pairs(torch.from_numpy(rows), pad_id=self.pad_id)
