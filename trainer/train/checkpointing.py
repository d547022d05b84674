"""The loop's side of checkpoints: when to save, what a save holds, how a run resumes.

    checkpointer = Checkpointer(directory, save_interval=5, keep=2)
    if checkpointer.due(step): checkpointer.save(step, model, optimizer, state)  # never raises
    state = resume_state(path_or_latest, directory, model, optimizer, identity=..., override=False)
    with StopSignals() as stop: ... if stop.requested: save, exit 0

Saves (INV-TRAIN-LOOP-014): every ``save_interval`` steps, at the last step, and after the
step in progress when SIGTERM or SIGINT arrives. A failed save (disk full, permission) is
printed loudly to stderr and training goes on: the previous checkpoint is intact (saves are
atomic, trainer/checkpoint/save.py). Resume (INV-TRAIN-LOOP-012) restores weights, AdamW
moments and step counts, RNG states (trainer/checkpoint/load.py), and hands back the
scheduler step, data position and guard states; it refuses a checkpoint of another config
or data set unless told to override.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gates.files import sha256_file
from trainer.checkpoint import load
from trainer.checkpoint.layout import LATEST_POINTER, CheckpointError
from trainer.checkpoint.retention import prune
from trainer.checkpoint.save import Gathered, save_checkpoint
from trainer.checkpoint.state import TrainingState, config_hash
from trainer.model.llama import Llama

# Settings that do not change what a step computes: a resume may differ in these.
_NOT_IDENTITY = {
    "max_steps",
    "out_dir",
    "device",
    "compile",
    "data_parallel",
    "log_interval",
    "resolved_config",
    "data_manifest",
    "checkpoint_dir",
    "save_interval",
    "keep_checkpoints",
    "resume_from",
    "resume_override",
    "alerts",
}


def run_identity(settings: Any) -> tuple[str, str | None]:
    """(config hash, data manifest sha256) of a LoopSettings: what a resume must match."""
    if settings.resolved_config is not None:
        cfg = {k: v for k, v in settings.resolved_config.items() if k != "apply"}
        if isinstance(cfg.get("training"), dict):
            # The strategy is how the ranks share the work, not what a step computes (the
            # checkpoint format is one): a ddp checkpoint resumes under fsdp and back, and
            # the hashes of configs written before the key existed do not change.
            cfg["training"] = {k: v for k, v in cfg["training"].items() if k != "data_parallel"}
        if isinstance(cfg.get("monitoring"), dict):
            # Alert rules watch the run; they change no step. A run stopped by one resumes
            # with the rule adjusted, and configs written before the key keep their hash.
            cfg["monitoring"] = {k: v for k, v in cfg["monitoring"].items() if k != "alerts"}
    else:
        cfg = {
            f.name: getattr(settings, f.name)
            for f in dataclasses.fields(settings)
            if f.name not in _NOT_IDENTITY
        }
        cfg["model"] = dataclasses.asdict(settings.model)
        cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}
        cfg = {k: str(v) if isinstance(v, Path) else v for k, v in cfg.items()}
    manifest = settings.data_manifest
    data_sha = sha256_file(manifest) if manifest is not None and Path(manifest).is_file() else None
    return config_hash(cfg), data_sha


class Checkpointer:
    """Periodic saves into ``directory`` with retention; a failed save is loud, not fatal."""

    def __init__(self, directory: Path, save_interval: int | None, keep: int) -> None:
        if save_interval is not None and save_interval < 1:
            raise ValueError(f"save_interval must be >= 1 (or None), got {save_interval}")
        if keep < 2:
            raise ValueError(f"keep_checkpoints must be >= 2, got {keep}")
        self.directory, self.save_interval, self.keep = Path(directory), save_interval, keep
        self.saved: list[int] = []
        self.failures: list[str] = []
        # Called with (step, path) after each successful save: the run store records it.
        self.on_saved: Callable[[int, Path], None] | None = None

    def due(self, step: int) -> bool:
        return self.save_interval is not None and step % self.save_interval == 0

    def save(
        self,
        step: int,
        model: Llama,
        optimizer: torch.optim.Optimizer,
        state: TrainingState,
        *,
        rank_rng: list | None = None,
        gathered: Gathered | None = None,
    ) -> Path | None:
        """``rank_rng``: every rank's RNG states under data parallelism; ``gathered``: the
        full state of a sharded (FSDP) model and optimizer (save_checkpoint)."""
        if step in self.saved:
            return None  # the final or signal save of a step already saved periodically
        try:
            path = save_checkpoint(
                self.directory,
                step=step,
                model=model,
                optimizer=optimizer,
                state=state,
                rank_rng=rank_rng,
                gathered=gathered,
            )
        except (CheckpointError, OSError) as exc:
            previous = self.saved[-1] if self.saved else None
            message = (
                f"trainer: CHECKPOINT FAILED at step {step}: {exc}. Training continues; the "
                f"last good checkpoint is step {previous}"
                if previous is not None
                else f"trainer: CHECKPOINT FAILED at step {step}: {exc}. Training continues; "
                "there is no earlier checkpoint of this run"
            )
            print(message, file=sys.stderr, flush=True)
            self.failures.append(message)
            return None
        self.saved.append(step)
        try:
            prune(self.directory, self.keep)
        except OSError as exc:  # the new checkpoint is safe; old ones merely stay on disk
            print(f"trainer: checkpoint retention failed after step {step}: {exc}", file=sys.stderr)
        if self.on_saved is not None:
            self.on_saved(step, path)
        return path


def first_step_after(state: TrainingState) -> int:
    """The step a resumed run takes first: the one after the checkpoint's."""
    return state.step + 1


def resolve_checkpoint(spec: str | Path, directory: Path, model: Llama) -> Path:
    """``latest``: the newest valid checkpoint of ``directory`` (skipped ones said); or a path."""
    if str(spec) == "latest":
        chosen, skipped = load.latest_valid(directory, architecture=model.config)
        for path, why in skipped:
            print(f"trainer: skipping checkpoint {path}: {why}", file=sys.stderr)
        if chosen is None:
            raise CheckpointError(f"{directory}: no valid checkpoint to resume from")
        pointer = directory / LATEST_POINTER
        if skipped or not pointer.is_file() or pointer.read_text().strip() != chosen.name:
            print(f"trainer: resuming from {chosen}", file=sys.stderr)
        return chosen
    return Path(spec)


def resume_state(
    path: Path,
    model: Llama,
    optimizer: torch.optim.Optimizer,
    *,
    identity: tuple[str, str | None],
    override: bool,
    world_size: int = 1,
    rank: int = 0,
    loaders: load.StateLoaders | None = None,
) -> TrainingState:
    """Verify and load ``path`` into model, optimizer and RNGs (rank ``rank``'s); refuse
    another run's state, and a checkpoint of another data-parallel world size.
    ``loaders``: for a sharded model (load.load_checkpoint)."""
    state = load.read_state(path)
    if state.world_size != world_size:
        # Refused, not converted: the data split and each rank's RNG stream are functions
        # of the world size, so another world size could not continue the same run.
        raise CheckpointError(
            f"{path}: written by a run of world size {state.world_size}; this run has world "
            f"size {world_size}. Resuming on another world size is refused (the data split "
            f"and the per-rank RNG states depend on it): relaunch with {state.world_size} "
            f"process(es) (trainer apply --nproc {state.world_size})"
        )
    config, data = identity
    differs = []
    if state.config_hash != config:
        differs.append(f"config hash {state.config_hash[:12]}... (this run {config[:12]}...)")
    if state.data_manifest_sha256 != data:
        differs.append(f"data manifest sha256 {state.data_manifest_sha256} (this run {data})")
    if differs and not override:
        raise CheckpointError(
            f"{path}: written by another run: {'; '.join(differs)}; pass the override flag "
            "to resume anyway"
        )
    return load.load_checkpoint(path, model, optimizer, rank=rank, loaders=loaders)


class StopSignals:
    """SIGTERM / SIGINT set ``requested``; the loop finishes its step, saves and stops."""

    _SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.requested: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: types.FrameType | None) -> None:
        self.requested = signum

    def __enter__(self) -> StopSignals:
        # Only the main thread may install handlers; elsewhere signals keep their default.
        if threading.current_thread() is threading.main_thread():
            for sig in self._SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
