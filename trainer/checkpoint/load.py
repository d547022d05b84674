"""Read a verified checkpoint back into a model, an optimizer and the RNGs.

    ckpt, skipped = latest_valid(run_dir)      # skipped: [(path, why), ...]
    state = load_checkpoint(ckpt, model, optimizer)
    state = load_checkpoint(ckpt, model, optimizer, loaders=fsdp.LOADERS)  # sharded model

Nothing is loaded before verify_checkpoint passes: sizes and sha256 of every file, no
stranger files, the expected architecture. The files hold full (unsharded) tensors; a
sharded model checks them like any other and ``loaders`` keep its shard of each.

Each file is read from disk once (issues 21, 35): the verification reads and hashes every
file in parallel and keeps the model and optimizer files it verified in the process's own
memory (``keep=LOADED``, trainer/checkpoint/verify.py); the tensors are built over those
bytes, not read or copied again (the weights are copied into the model). A resume verifies
once: ``latest_verified`` hands the verification of the checkpoint it chose to read_state
and load_checkpoint (``verified``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import load_file
from torch import nn

from gates.io.files import read_regular
from trainer.checkpoint import optimizer_state, rng
from trainer.checkpoint import state as state_file
from trainer.checkpoint.durable import DTYPE_NAMES
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_JSON_FILE,
    RNG_TENSOR_FILE,
    CheckpointError,
    checkpoint_dirs,
)
from trainer.checkpoint.state import TrainingState
from trainer.checkpoint.verify import (
    Inspection,
    inspect_checkpoint,
    require_architecture,
    verify_checkpoint,
)
from trainer.model import hf
from trainer.model.config import LlamaConfig
from trainer.model.llama import Llama


@dataclass(frozen=True)
class StateLoaders:
    """How checked full tensors get into a model and an optimizer whose own
    load_state_dict cannot take them (trainer/train/fsdp.py LOADERS)."""

    model: Callable[[nn.Module, dict[str, torch.Tensor]], None]
    optimizer: Callable[[nn.Module, torch.optim.Optimizer, dict[str, Any]], None]


#: The files a load reads whole: their verified bytes are kept by the verification.
LOADED = (MODEL_FILE, OPTIMIZER_FILE)
#: What _checkpoint_problems' verification keeps (latest_verified sets it).
_KEEP: ContextVar[tuple[str, ...]] = ContextVar("checkpoint_keep", default=())
_TORCH_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


class _Problems(list):
    """The problems of a checkpoint, and the Inspection that found them."""

    def __init__(self, report: Inspection) -> None:
        super().__init__(report.problems)
        self.report = report


def _checkpoint_problems(path: Path, architecture: LlamaConfig | None) -> list[str]:
    return _Problems(inspect_checkpoint(path, architecture=architecture, keep=_KEEP.get()))


def _latest(
    run_dir: Path, architecture: LlamaConfig | None, keep: tuple[str, ...]
) -> tuple[Path | None, Inspection | None, list[tuple[Path, str]]]:
    skipped: list[tuple[Path, str]] = []
    token = _KEEP.set(keep)
    try:
        for path in checkpoint_dirs(Path(run_dir)):
            problems = _checkpoint_problems(path, architecture)
            if not problems:
                report = getattr(problems, "report", None)
                return path, report if isinstance(report, Inspection) else None, skipped
            skipped.append((path, "; ".join(problems)))
    finally:
        _KEEP.reset(token)
    return None, None, skipped


def latest_valid(
    run_dir: Path, *, architecture: LlamaConfig | None = None
) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest checkpoint of ``run_dir`` that verifies, and the newer ones skipped (why)."""
    path, _, skipped = _latest(run_dir, architecture, ())
    return path, skipped


def latest_verified(
    run_dir: Path, *, architecture: LlamaConfig | None = None
) -> tuple[Path | None, Inspection | None, list[tuple[Path, str]]]:
    """latest_valid, with the chosen checkpoint's verification holding the bytes of the
    files a load reads (``verified`` of read_state and load_checkpoint; None when none)."""
    return _latest(run_dir, architecture, LOADED)


def verify_for_load(path: Path, *, architecture: LlamaConfig | None = None) -> Inspection:
    """verify_checkpoint, keeping the bytes a load reads (``verified`` of load_checkpoint)."""
    return verify_checkpoint(path, architecture=architecture, keep=LOADED)


def _usable(verified: Inspection | None, path: Path) -> bool:
    return verified is not None and verified.valid and Path(verified.path) == path


def _tensors_from(contents: torch.Tensor, path: Path) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``contents`` (verified), as views of it: the
    AdamW state lives on in the very memory the verification read the file into."""
    data = contents.numpy()
    try:
        (n,) = struct.unpack("<Q", data[:8].tobytes())
        header = json.loads(data[8 : 8 + n].tobytes().decode("utf-8"))
        header.pop("__metadata__", None)
        start = 8 + n
        if any(info["dtype"] not in _TORCH_DTYPES for info in header.values()):
            return load_bytes(data.tobytes())  # a dtype not laid out here: safetensors copies
        tensors = {}
        for name, info in header.items():
            dtype = _TORCH_DTYPES[info["dtype"]]
            begin, end = (start + o for o in info["data_offsets"])
            shape = [int(d) for d in info["shape"]]
            if not start <= begin <= end <= len(data):
                raise ValueError(f"{name}: data_offsets out of the file")
            size = torch.empty(0, dtype=dtype).element_size()
            tensors[name] = (
                torch.frombuffer(data, dtype=dtype, count=(end - begin) // size, offset=begin)
                if end > begin
                else torch.empty(0, dtype=dtype)
            ).reshape(shape)
    except (ValueError, KeyError, TypeError, RuntimeError, struct.error, SafetensorError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None
    return tensors


def _verified_tensors(verified: Inspection, path: Path) -> dict[str, torch.Tensor]:
    """The tensors of file ``path`` over its verified bytes (read again if not kept)."""
    contents = verified.contents(path.name)
    if contents is None:
        return _read_tensors(path)
    for verdict in verified.files:  # handed over: the tensors hold the bytes from now on
        if verdict.name == path.name:
            verdict.contents = None
    return _tensors_from(contents, path)


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file ({exc})") from None


#: rng.json and state.json: a few generator states per rank and some numbers.
_JSON_LIMIT = 64 * 1024 * 1024


def _read_json(path: Path) -> Any:
    """A checkpoint's JSON file, read under the one rule (gates.io.files.read_regular: a FIFO
    or a device in its place is refused, never waited on or read without end)."""
    try:
        data = read_regular(path, _JSON_LIMIT)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not readable JSON ({exc})") from None


def read_state(path: Path, *, verified: Inspection | None = None) -> TrainingState:
    """state.json of a verified checkpoint (``verified``: its verification, done already)."""
    if not _usable(verified, Path(path)):
        verify_checkpoint(path)
    return state_file.state_from_json(
        _read_json(path / CHECKPOINT_STATE_FILE), source=str(path / CHECKPOINT_STATE_FILE)
    )


def load_checkpoint(
    path: Path,
    model: Llama,
    optimizer: torch.optim.Optimizer | None,
    *,
    restore_random: bool = True,
    rank: int = 0,
    loaders: StateLoaders | None = None,
    verified: Inspection | None = None,
) -> TrainingState:
    """Verify ``path``, then restore weights, AdamW state and RNGs; returns state.json.

    ``rank``: whose generator states to restore (a data-parallel checkpoint holds each
    rank's; trainer/checkpoint/rng.py). ``loaders``: for a sharded model (None:
    load_state_dict). ``verified``: the verification of ``path`` done already
    (latest_verified, verify_for_load): not repeated; its architecture is checked."""
    path = Path(path)
    if _usable(verified, path):
        require_architecture(verified, model.config)
    else:
        verified = verify_for_load(path, architecture=model.config)
    state = state_file.state_from_json(
        _read_json(path / CHECKPOINT_STATE_FILE), source=str(path / CHECKPOINT_STATE_FILE)
    )
    weights = _verified_tensors(verified, path / MODEL_FILE)
    hf.load_weights(
        model,
        path / MODEL_FILE,
        load=None if loaders is None else loaders.model,
        tensors=weights,
    )
    del weights  # copied into the model: its buffer goes
    if optimizer is not None:
        optimizer_state.restore_optimizer(
            model,
            optimizer,
            _verified_tensors(verified, path / OPTIMIZER_FILE),
            state.optimizer_groups,
            source=str(path / OPTIMIZER_FILE),
            load=None if loaders is None else loaders.optimizer,
        )
    if restore_random:
        source = str(path / RNG_JSON_FILE)
        tensors, states = rng.rank_rng(*read_rng(path), rank=rank, source=source)
        rng.restore_rng(tensors, states, source=source)
    return state


def read_rng(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """The RNG files of a verified checkpoint: every rank's generators (rng.rank_rng)."""
    return _read_tensors(path / RNG_TENSOR_FILE), _read_json(path / RNG_JSON_FILE)
