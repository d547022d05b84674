"""Data parallelism on PyTorch's own engine: torchrun's environment, one process group,
DistributedDataParallel, and the few collectives the loop needs.

    with process_group(device) as world:          # world.rank, world.world_size, world.backend
        model = wrap_data_parallel(model, world, device)   # ddp (fsdp: trainer/train/fsdp.py)
        count = sum_int(local_count, world)       # all-reduce SUM
        stop = any_rank(not finite, world)        # every rank agrees

Rules:
- A process started by ``torchrun`` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT in
  its environment) joins one process group: gloo on CPU, NCCL on CUDA, with a timeout so a
  dead peer is an error, not a hang. The group is destroyed when the run ends, however it
  ends. A process without that environment is world size 1: no process group, no DDP, no
  collective - exactly the single-process loop.
- Gradients are SUMMED over ranks, not averaged (``_sum_gradients``, a DDP comm hook):
  every rank backpropagates its token sum over the GLOBAL token count (loss.py), so the
  sum over ranks is the gradient of the global batch's token mean. DDP's default hook
  divides by the world size, which would need a compensating multiply (inexact for a
  world size that is not a power of two).
- Collectives here move tensors only (never pickled objects).
- The strategy (``training.data_parallel``): ``ddp`` here; ``fsdp`` shards the model
  before AdamW is built (trainer/train/fsdp.py), under the same rules. A sharded model
  is left alone by wrap_data_parallel; defer_sync is FSDP's no_sync for it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainer.train import fsdp

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
STRATEGIES = ("ddp", "fsdp")  # training.data_parallel (trainer/config/schema.json)
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class World:
    """Where this process stands: rank of world_size; backend None when not distributed."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes metrics, manifests and checkpoints."""
        return self.rank == 0


SINGLE = World()


def current_world() -> World:
    """The World of the process group this process is in (SINGLE when it is in none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return SINGLE
    return World(
        dist.get_rank(),
        dist.get_world_size(),
        int(os.environ.get("LOCAL_RANK", "0")),
        dist.get_backend(),
    )


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_VARS)


def env_world_size() -> int:
    """WORLD_SIZE of a torchrun launch, 1 otherwise (for the step algebra's preflight)."""
    return int(os.environ["WORLD_SIZE"]) if launched_by_torchrun() else 1


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _timeout() -> timedelta:
    seconds = float(os.environ.get("SHIPGATE_DIST_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    return timedelta(seconds=seconds)


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[World]:
    """The World of this process; joins (and always leaves) torchrun's process group.

    A group someone else already initialized is used and left alone."""
    if dist.is_available() and dist.is_initialized():
        yield current_world()
        return
    if not launched_by_torchrun():
        yield SINGLE
        return
    local_rank = int(os.environ["LOCAL_RANK"])
    if device.type == "cuda":
        torch.cuda.set_device(local_rank)  # "cuda" below means this rank's GPU
    backend = _backend(device)
    dist.init_process_group(backend, timeout=_timeout())
    try:
        yield World(dist.get_rank(), dist.get_world_size(), local_rank, backend)
    finally:
        # FSDP's garbage (reference cycles of its hooks and gloo work) goes while the group
        # still exists: left to the interpreter's exit, it aborted about 1 gloo run in 10
        # ("terminate called without an active exception", no Python frame).
        gc.collect()
        dist.destroy_process_group()


# ---------------------------------------------------------------- DDP
def _sum_gradients(process_group, bucket):
    """DDP comm hook: all-reduce SUM of a gradient bucket (no division by world size).

    Unannotated on purpose: DDP checks a hook's annotations against the classes
    dist.GradBucket / torch.futures.Future, and this module's postponed annotations
    would be strings."""
    group = process_group if process_group is not None else dist.group.WORLD
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"data_parallel must be one of {', '.join(STRATEGIES)}, got {strategy!r}")


def wrap_data_parallel(model: nn.Module, world: World, device: torch.device) -> nn.Module:
    """``model`` itself at world size 1 or when FSDP already shards it (fsdp.wrap);
    DistributedDataParallel summing gradients otherwise."""
    if not world.distributed or fsdp.is_sharded(model):
        return model
    ddp = DistributedDataParallel(
        model,
        device_ids=[world.local_rank] if device.type == "cuda" else None,
        # The only buffers are RoPE tables computed identically on every rank: no
        # re-broadcast before every forward.
        forward_sync_buffers=False,
    )
    ddp.register_comm_hook(None, _sum_gradients)
    return ddp


def defer_sync(model: nn.Module) -> contextlib.AbstractContextManager | None:
    """DDP's or FSDP's no_sync for the micro-batches before a step's last (None when
    neither wraps the model)."""
    if isinstance(model, DistributedDataParallel):
        return model.no_sync()
    return fsdp.no_sync(model) if fsdp.is_sharded(model) else None


# ---------------------------------------------------------------- collectives
def _collective_device(world: World) -> torch.device:
    return (
        torch.device("cuda", torch.cuda.current_device())
        if world.backend == "nccl"
        else (torch.device("cpu"))
    )


def _all_reduce(value: float, dtype: torch.dtype, op: dist.ReduceOp, world: World) -> float:
    """One scalar all-reduced over the ranks (only called when ``world`` is distributed)."""
    t = torch.tensor([value], dtype=dtype, device=_collective_device(world))
    dist.all_reduce(t, op=op)
    return t.item()


def sum_int(value: int, world: World) -> int:
    if not world.distributed:
        return value
    return int(_all_reduce(value, torch.int64, dist.ReduceOp.SUM, world))


def sum_float(value: float, world: World) -> float:
    """All-reduce SUM in float64 (a no-op at world size 1: the value comes back as is)."""
    if not world.distributed:
        return value
    return float(_all_reduce(value, torch.float64, dist.ReduceOp.SUM, world))


def any_rank(flag: bool, world: World) -> bool:
    """True on every rank when ``flag`` is True on any rank."""
    if not world.distributed:
        return flag
    return bool(_all_reduce(1 if flag else 0, torch.int64, dist.ReduceOp.MAX, world))


def gather_bytes(data: bytes, world: World) -> list[bytes]:
    """Every rank's ``data``, in rank order, on every rank (uint8 tensors, padded)."""
    if not world.distributed:
        return [data]
    device = _collective_device(world)
    length = torch.tensor([len(data)], dtype=torch.int64, device=device)
    lengths = [torch.zeros_like(length) for _ in range(world.world_size)]
    dist.all_gather(lengths, length)
    longest = max(int(n.item()) for n in lengths)
    mine = torch.zeros(longest, dtype=torch.uint8, device=device)
    if data:
        mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    chunks = [torch.zeros_like(mine) for _ in range(world.world_size)]
    dist.all_gather(chunks, mine)
    pairs = zip(chunks, lengths, strict=True)
    return [c[: int(n.item())].cpu().numpy().tobytes() for c, n in pairs]


def gather_json(obj: dict, world: World) -> list[dict]:
    """Every rank's JSON-able ``obj``, in rank order (JSON over uint8 tensors, no pickle)."""
    return [json.loads(b) for b in gather_bytes(json.dumps(obj).encode("utf-8"), world)]


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()
