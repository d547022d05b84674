"""The step driver: which sequences make each optimizer step of a run.

The training loop must take its steps from :func:`iterate_steps`, not count them itself:
this is the loop the C-TRAINCFG-001 preflight (trainer/config/algebra.py) is checked
against (FALSIFY-CFG-005, INV-CFG-007), so a loop that follows it runs exactly the
``min(max_steps, epochs * floor(N / (b * g * world)))`` steps the preflight predicted.

Rules, written out once:

1. An epoch is the positions ``0 .. N-1`` of the training sequences, cut into global
   batches of ``micro_batch * grad_accum * world_size`` consecutive positions. One global
   batch is one optimizer step. (The loop reads position ``i`` of epoch ``e`` as sequence
   ``epoch_order(N, seed=seed, epoch=e)[i]`` of trainer/train/sequences.py.)
2. The last partial global batch of every epoch is dropped (never carried into the next
   epoch), so every epoch has the same steps.
3. The run stops the moment its ``last_step`` has been taken, mid-epoch if need be (the
   config's ``training.max_steps``, or an earlier ``--stop-after``).

Within a step, micro-step ``a`` (0 .. grad_accum - 1) is ``world_size * micro_batch``
consecutive positions, and rank ``r`` takes positions ``r*micro_batch ..
(r+1)*micro_batch - 1`` of them: the ranks' slices are disjoint and together are the
single-process micro-batch.

    for step in iterate_steps(N, micro_batch=4, grad_accum=8, epochs=3, last_step=1000):
        set_lr(optimizer, lr_at(step.step, peak=..., warmup=..., max_steps=1000, min_lr=...))
        for seqs in step.micro_batches(rank):       # ranges of sequence indices
            loss = model(batch_of(seqs)) / step.grad_accum; loss.backward()
        optimizer.step(); optimizer.zero_grad()

Feed it from a source that reads sequences by index (trainer/train/sequences.py
SequenceSource.batch), as the loop does: an iterator with its own notion of an epoch
would wrap per micro-batch and, with ``grad_accum > 1``, hand out the micro-batches this
driver drops at an epoch's end.

Records are cheap (a tuple of six ints; micro-batch ranges are built only on request),
so counting the steps of a 20,000-step run takes milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple


class StepPlan(NamedTuple):
    """One optimizer step: its 1-based number, 0-based epoch, and its global batch."""

    step: int
    epoch: int
    first_sequence: int  # index of the global batch's first sequence within the epoch
    micro_batch: int
    grad_accum: int
    world_size: int

    @property
    def sequences(self) -> range:
        """Every sequence of this step's global batch (all ranks, all micro-steps)."""
        size = self.micro_batch * self.grad_accum * self.world_size
        return range(self.first_sequence, self.first_sequence + size)

    def micro_batches(self, rank: int = 0) -> list[range]:
        """The ``grad_accum`` micro-batches rank ``rank`` runs for this step, in order."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside 0..{self.world_size - 1}")
        per_micro_step = self.world_size * self.micro_batch
        out = []
        for a in range(self.grad_accum):
            start = self.first_sequence + a * per_micro_step + rank * self.micro_batch
            out.append(range(start, start + self.micro_batch))
        return out


def epoch_steps(
    num_sequences: int, global_batch: int, steps_done: int, last_step: int
) -> Iterator[int]:
    """First-sequence indices of one epoch's whole global batches, stopping once the run
    has taken ``last_step`` steps (``steps_done`` were taken before this epoch)."""
    first = 0
    while first + global_batch <= num_sequences and steps_done < last_step:
        yield first
        first += global_batch
        steps_done += 1


def iterate_steps(
    num_sequences: int,
    *,
    micro_batch: int,
    grad_accum: int,
    epochs: int,
    last_step: int,
    world_size: int = 1,
) -> Iterator[StepPlan]:
    """Yield one :class:`StepPlan` per optimizer step of the run, in order."""
    for name, value, low in (
        ("num_sequences", num_sequences, 0),
        ("micro_batch", micro_batch, 1),
        ("grad_accum", grad_accum, 1),
        ("epochs", epochs, 0),
        ("last_step", last_step, 0),
        ("world_size", world_size, 1),
    ):
        if value < low:
            raise ValueError(f"{name} must be >= {low}, got {value}")
    global_batch = micro_batch * grad_accum * world_size
    step = 0
    for epoch in range(epochs):
        if step >= last_step:
            return
        for first in epoch_steps(num_sequences, global_batch, step, last_step):
            step += 1
            yield StepPlan(step, epoch, first, micro_batch, grad_accum, world_size)
