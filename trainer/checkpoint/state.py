"""state.json: where the run is (step, data position, schedule, early stopping, identity).

The data order is a pure function of (seed, epoch) (trainer/train/sequences.py), so the
data position is (epoch, step): the next step's batch is recomputed, never replayed.
config_hash and data_manifest_sha256 let a resume refuse another run's checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from trainer.checkpoint.layout import CheckpointError


@dataclass(frozen=True)
class TrainingState:
    step: int  # optimizer steps completed
    epoch: int  # 0-based epoch of the last completed step
    epoch_step: int  # steps of that epoch completed: the data position is (epoch, epoch_step)
    scheduler_step: int  # the step lr_at was last evaluated at
    config_hash: str  # sha256 of the resolved run config (config_hash())
    data_manifest_sha256: str | None  # sha256 of the data set's manifest.json
    val_loss: float | None = None  # the last validation loss (retention keeps the best)
    best_val_loss: float | None = None
    early_stopping: dict[str, Any] | None = None  # guards.EarlyStopping.state_dict()
    divergence: dict[str, Any] | None = None  # guards.DivergenceGuard.state_dict()
    seed: int | None = None
    tokenizer_dir: str | None = None  # exported next to the weights when set
    optimizer_groups: list[dict[str, Any]] = field(default_factory=list)
    # Data-parallel ranks of the run: the data split and the per-rank RNG states depend
    # on it, so a resume on another world size is refused (trainer/train/loop.py).
    world_size: int = 1

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_REQUIRED = ("step", "epoch", "epoch_step", "scheduler_step", "config_hash", "data_manifest_sha256")


def _finite_or_none(name: str, value: Any, source: str) -> float | None:
    if value is None:
        return None
    value = float(value)
    if not math.isfinite(value):
        raise CheckpointError(f"{source}: {name} is {value}")
    return value


def state_from_json(obj: dict[str, Any], *, source: str = "state.json") -> TrainingState:
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise CheckpointError(f"{source}: missing {', '.join(missing)}")
    known = {f.name for f in dataclasses.fields(TrainingState)}
    unknown = sorted(set(obj) - known)
    if unknown:
        raise CheckpointError(f"{source}: unknown fields {', '.join(unknown)}")
    values = dict(obj)
    for name in ("val_loss", "best_val_loss"):
        values[name] = _finite_or_none(name, values.get(name), source)
    return TrainingState(**values)


def config_hash(resolved_config: dict[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys): equal configs, equal hashes."""
    text = json.dumps(resolved_config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
