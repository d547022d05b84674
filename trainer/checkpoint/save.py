"""Write a checkpoint atomically: staging directory, data files, manifest LAST, rename.

    path = save_checkpoint(run_dir, step=15, model=model, optimizer=opt, state=state)
    save_checkpoint(..., gathered=Gathered(weights, optimizer_state))   # a sharded (FSDP) model

Order (INV-TRAIN-LOOP-013): into ``step-NNNNNNNN.tmp/`` write model, optimizer, RNG and
state, fsync each; their digests into manifest.json, fsync it; fsync the directory; rename it
to ``step-NNNNNNNN``; fsync the parent; then point ``latest`` at it by atomic rename. A
crash at any point leaves either no ``step-NNNNNNNN`` or a complete one; the loader never
considers staging directories. A failed save removes its staging directory and raises
CheckpointError; existing checkpoints are untouched.

A sharded (FSDP) run hands the full state its ranks gathered for rank 0 (``gathered``):
the files are those of a single-process run (the same names, shapes and dtypes).

Speed (issue 21): every file is hashed while it is written, from the chunks handed to
``os.write`` (trainer/checkpoint/durable.py), so the manifest needs no second pass over
the bytes; a file's hash may finish while the next file is written (the manifest waits for
all of them); the tensor files are written straight from the weights' and AdamW state's
memory (the optimizer state is not copied first).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from gates.io.files import atomic_write_text, fsync_dir, fsync_file
from trainer.checkpoint import optimizer_state, rng
from trainer.checkpoint.durable import PendingEntry, writable_here, write_json, write_tensors
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    LATEST_POINTER,
    MANIFEST_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    RNG_JSON_FILE,
    RNG_TENSOR_FILE,
    STAGING_SUFFIX,
    CheckpointError,
    step_dir_name,
)
from trainer.checkpoint.manifest import build_manifest
from trainer.checkpoint.state import TrainingState
from trainer.model import hf
from trainer.model.llama import Llama

#: Writes one file; returns its manifest entry ({"sha256", "size"}, hashed while writing;
#: perhaps still pending), or None when the manifest must hash the file from disk.
Entry = dict[str, Any] | PendingEntry
Writer = Callable[[Path], Entry | None]
METADATA = {"format": "pt"}


@dataclass(frozen=True)
class Gathered:
    """The full state of a sharded model: its state dict and its optimizer's state dict
    keyed by parameter name (torch.distributed.checkpoint.state_dict, full_state_dict)."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]


def _boundary(event: str, directory: Path) -> None:
    """Called after each durable write (fault-injection point for the crash tests)."""


def _staging_dir(final: Path) -> Path:
    return final.with_name(final.name + STAGING_SUFFIX)


def _write_model(model: Llama, path: Path) -> Entry | None:
    # hf's refusals: empty / misshapen / aliased state
    return _write_safetensors(hf.weights_to_write(model, path), path)


def _write_gathered_model(
    model: Llama, path: Path, weights: dict[str, torch.Tensor]
) -> Entry | None:
    return _write_safetensors(hf.weights_to_write(model, path, state=weights), path)


def _write_optimizer(tensors: dict[str, torch.Tensor], path: Path) -> Entry | None:
    return _write_safetensors(tensors, path)


def _write_safetensors(tensors: dict[str, torch.Tensor], path: Path) -> Entry | None:
    """The file safetensors.torch.save_file writes, hashed while written, then fsynced;
    the hash may still be finishing when this returns (the next file is written meanwhile)."""
    if writable_here(tensors):
        entry = write_tensors(path, tensors, METADATA)
    else:  # a dtype or layout the hashing writer does not lay out: safetensors, read back
        save_file(tensors, str(path), metadata=METADATA)
        entry = None
    fsync_file(path)
    return entry


def _recorded(written: dict[str, Entry], write: Writer) -> Writer:
    """``write``, keeping the entry it returns for the manifest under the file's name."""

    def recording(path: Path) -> Entry | None:
        entry = write(path)
        if entry is None:
            written.pop(path.name, None)
        else:
            written[path.name] = entry
        return entry

    return recording


def _finished(written: dict[str, Entry]) -> dict[str, dict[str, Any]]:
    """Every entry, once its hash is done (asked for only when the manifest is built)."""
    return {n: e.entry() if isinstance(e, PendingEntry) else e for n, e in written.items()}


def _write_files(
    staging: Path, writers: list[tuple[str, Writer]], manifest_of: Callable[[], dict]
) -> None:
    """Data files first, each durable; the manifest of their bytes last."""
    for name, write in writers:
        write(staging / name)
        _boundary(f"wrote {name}", staging)
    write_json(staging / MANIFEST_FILE, manifest_of())
    _boundary(f"wrote {MANIFEST_FILE}", staging)


def _publish(staging: Path, final: Path) -> None:
    fsync_dir(staging)
    _boundary("before rename", staging)
    staging.rename(final)
    fsync_dir(final.parent)
    _boundary("after rename", final)


def save_checkpoint(
    run_dir: Path,
    *,
    step: int,
    model: Llama,
    optimizer: torch.optim.Optimizer,
    state: TrainingState,
    rng_state: tuple[dict[str, torch.Tensor], dict] | None = None,
    gathered: Gathered | None = None,
) -> Path:
    """Write checkpoint ``step`` of ``run_dir`` and point ``latest`` at it; returns its path.

    ``rng_state``: (tensors, states) of the RNG files; under data parallelism every rank's
    generators (``rng.merge_ranks``); None captures this process's. ``gathered``: the full
    state of a sharded ``model`` and ``optimizer`` (written instead of theirs)."""
    run_dir = Path(run_dir)
    if state.step != step:
        raise CheckpointError(f"state.json says step {state.step}, saving step {step}")
    final = run_dir / step_dir_name(step)
    if final.exists():
        raise CheckpointError(f"{final}: already exists; a checkpoint is never overwritten")
    run_dir.mkdir(parents=True, exist_ok=True)
    staging = _staging_dir(final)
    if staging != final and staging.exists():
        shutil.rmtree(staging)  # left by a crashed save; never loadable
    staging.mkdir()
    try:
        if gathered is None:
            opt_tensors, groups = optimizer_state.optimizer_tensors(model, optimizer)
            weights = model.state_dict()
        else:
            opt_tensors, groups = optimizer_state.named_state_tensors(gathered.optimizer)
            weights = gathered.weights
        rng_tensors, rng_states = rng.capture_rng() if rng_state is None else rng_state
        full_state = dataclasses.replace(state, optimizer_groups=groups)
        write_model: Writer = (
            (lambda p: _write_model(model, p))
            if gathered is None
            else (lambda p: _write_gathered_model(model, p, weights))
        )
        written: dict[str, Entry] = {}  # file name -> its entry, hashed as written
        writers: list[tuple[str, Writer]] = [
            (name, _recorded(written, write))
            for name, write in (
                (MODEL_FILE, write_model),
                (OPTIMIZER_FILE, lambda p: _write_optimizer(opt_tensors, p)),
                (RNG_TENSOR_FILE, lambda p: _write_safetensors(rng_tensors, p)),
                (RNG_JSON_FILE, lambda p: write_json(p, rng_states)),
                (CHECKPOINT_STATE_FILE, lambda p: write_json(p, full_state.to_json())),
            )
        ]
        _write_files(
            staging,
            writers,
            lambda: build_manifest(
                staging,
                [name for name, _ in writers],
                step=step,
                architecture=dataclasses.asdict(model.config),
                tensor_count=len(weights),
                parameter_count=sum(t.numel() for t in weights.values()),
                dtype=str(next(iter(weights.values())).dtype).removeprefix("torch."),
                entries=_finished(written),
            ),
        )
        _publish(staging, final)
    except Exception as exc:
        if staging != final:
            shutil.rmtree(staging, ignore_errors=True)
        raise CheckpointError(f"{final}: saving step {step} failed: {exc}") from exc
    atomic_write_text(run_dir / LATEST_POINTER, final.name + "\n")
    return final
