"""Known bugs of data-parallel training (issue 8), each a one-place patch of
trainer/train/distributed.py or the loop's seams. They reach the torchrun workers
because tests/unit/trainer/distributed_child.py applies $SHIPGATE_MUTANT first."""

from __future__ import annotations

import torch

from gates.mutants import mutant
from trainer.train import distributed, fsdp, loop


@mutant("gradient-not-all-reduced")
def _gradient_not_all_reduced(patch):
    # The comm hook hands each rank's own gradient back: every rank steps alone.
    def keep_local(process_group, bucket):
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    patch.setattr(distributed, "_sum_gradients", keep_local)


@mutant("every-rank-reads-the-same-data")
def _same_data(patch):
    patch.setattr(loop, "_data_rank", lambda world: 0)  # every rank reads rank 0's slice


@mutant("loss-averaged-per-rank")
def _per_rank_mean(patch):
    # Each rank divides by its own count (times the world size, as DDP's averaging of
    # per-rank means amounts to) instead of the all-reduced global count.
    patch.setattr(loop, "_global_token_count", lambda local, world: local * world.world_size)


@mutant("fsdp-gradients-averaged")
def _fsdp_averaged(patch):
    # FSDP2's default: the reduce-scatter averages over the ranks, so with each rank's loss
    # already divided by the GLOBAL count the gradient is 1/world_size of the true one.
    patch.setattr(fsdp, "_sum_gradients", lambda module: None)
