"""Batches of (inputs, targets) from one split of an encoded data directory.

The split's shards, in manifest order, form one token stream. A global batch is
``world_size * batch_size`` consecutive windows of ``seq_len + 1`` tokens with stride
``seq_len`` (each window's last token is the next one's first), so every token is an
input exactly once per epoch; targets are the inputs shifted by one. Rank ``r`` takes
windows ``r*B .. (r+1)*B - 1`` of each global batch: the ranks' slices are disjoint and
together are the single-process batch.

Tail policy: when fewer than ``world_size * batch_size * seq_len + 1`` tokens remain, the
remainder is dropped. With ``wrap_around`` the stream restarts at its first token and
``epochs_completed`` goes up by one; every epoch therefore sees the same windows (and
drops the same tail, under one global batch of tokens). Without it, the next batch raises
DataExhaustedError, never StopIteration, so a training loop cannot end silently.

Only the split's own shards are opened, so a train iterator cannot read a val document.

    it = ShardBatchIter(data_dir, "train", batch_size=8, seq_len=1024)
    x, y = it.next_batch()          # int64 tensors [B, T]
    saved = it.state_dict()         # JSON-serializable; resume with load_state_dict
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from trainer.data.manifest import SPLITS, load_manifest, open_shard

_STATE_KEYS = (
    "split",
    "position",
    "epochs_completed",
    "batches",
    "manifest_sha256",
    "batch_size",
    "seq_len",
    "world_size",
)


class DataExhaustedError(RuntimeError):
    """A split without wrap-around has no full batch left. Not a StopIteration on
    purpose: a ``for`` loop would end quietly and training would stop short."""


class LoaderStateError(ValueError):
    """A saved iterator state does not belong to this data set or iterator shape."""


class ShardBatchIter:
    def __init__(
        self,
        data_dir: Path,
        split: str = "train",
        *,
        batch_size: int,
        seq_len: int,
        wrap_around: bool = True,
        verify: bool = True,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size}, {seq_len}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..world_size-1, got rank {rank} of {world_size}")
        self.split = split
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.wrap_around = wrap_around
        self.rank = rank
        self.world_size = world_size
        self.manifest = load_manifest(Path(data_dir), verify=verify, splits=(split,))
        self._shards = [open_shard(self.manifest, e) for e in self.manifest.shards(split)]
        self._shard_starts = [0]  # stream offset of each shard's first token
        for shard in self._shards:
            self._shard_starts.append(self._shard_starts[-1] + len(shard))
        self.stream_tokens = self._shard_starts[-1]
        self._stride = world_size * batch_size * seq_len  # stream tokens per global batch
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"{self.manifest.path}: split {split!r} has {self.stream_tokens} tokens; one "
                f"batch of {world_size} x {batch_size} x {seq_len} needs {self._stride + 1}"
            )
        self.position = 0  # stream offset of the next global batch's first token
        self.epochs_completed = 0
        self.batches = 0  # batches returned since construction (or since the saved state)

    @property
    def batches_per_epoch(self) -> int:
        return (self.stream_tokens - 1) // self._stride

    @property
    def tokens_per_epoch(self) -> int:
        """Input tokens of one epoch over all ranks (the dropped tail excluded)."""
        return self.batches_per_epoch * self._stride

    def _read(self, start: int, stop: int) -> np.ndarray:
        """Stream tokens [start, stop) as int64, across shard boundaries."""
        pieces = []
        shard = bisect.bisect_right(self._shard_starts, start) - 1
        while start < stop:
            offset = start - self._shard_starts[shard]
            piece = self._shards[shard][offset : offset + stop - start]
            pieces.append(piece)
            start += len(piece)
            shard += 1
        return np.concatenate(pieces).astype(np.int64)  # a writable copy, off the memmap

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), int64 tensors of shape [batch_size, seq_len] for this rank."""
        if self.position + self._stride + 1 > self.stream_tokens:
            if not self.wrap_around:
                raise DataExhaustedError(
                    f"split {self.split!r} of {self.manifest.directory} exhausted in epoch "
                    f"{self.epochs_completed} after {self.batches} batches: consumed "
                    f"{self.position} of {self.stream_tokens} tokens; the remaining "
                    f"{self.stream_tokens - self.position} cannot fill a batch of "
                    f"{self._stride + 1} (wrap_around=False)"
                )
            self.position = 0
            self.epochs_completed += 1
        span = self.batch_size * self.seq_len
        start = self.position + self.rank * span
        window = torch.from_numpy(self._read(start, start + span + 1))
        inputs = window[:-1].view(self.batch_size, self.seq_len).clone()
        targets = window[1:].view(self.batch_size, self.seq_len)
        self.position += self._stride
        self.batches += 1
        return inputs, targets

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Batches forever; without wrap-around, ends by raising DataExhaustedError."""
        while True:
            yield self.next_batch()

    # ---------------------------------------------------------------- resume
    def state_dict(self) -> dict:
        return {
            "split": self.split,
            "position": self.position,
            "epochs_completed": self.epochs_completed,
            "batches": self.batches,
            "manifest_sha256": self.manifest.sha256,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly where ``state`` was saved; refuse a state saved for another
        data set, split or batch shape, where the position would mean other tokens."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise LoaderStateError(f"loader state lacks {missing}")
        mine = self.state_dict()
        for key in ("manifest_sha256", "split", "batch_size", "seq_len", "world_size"):
            if state[key] != mine[key]:
                raise LoaderStateError(
                    f"loader state was saved with {key}={state[key]!r}, this iterator has "
                    f"{key}={mine[key]!r} ({self.manifest.path})"
                )
        position = state["position"]
        last = self.batches_per_epoch * self._stride
        if not (
            isinstance(position, int) and 0 <= position <= last and position % self._stride == 0
        ):
            raise LoaderStateError(
                f"loader state position {position!r} is not a batch boundary in 0..{last} "
                f"(step {self._stride})"
            )
        self.position = position
        self.epochs_completed = int(state["epochs_completed"])
        self.batches = int(state["batches"])
