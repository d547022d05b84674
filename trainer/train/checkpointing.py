"""The loop's side of checkpoints: when to save, what a save holds, how a run resumes.

    checkpointer = Checkpointer(directory, save_interval=5, keep=2)
    if checkpointer.due(step): checkpointer.save(step, state, world)  # never raises
    resume("latest", directory, state, world)    # every part of state, from the checkpoint
    with StopSignals() as stop: ... if stop.requested: save, exit 0

``state`` is the run's registry of resumable parts (trainer/train/components.py): a save
walks it into the checkpoint's files and a resume walks the files back into it.

Saves (INV-TRAIN-LOOP-014): every ``save_interval`` steps, at the last step, and after the
step in progress when SIGTERM or SIGINT arrives. A failed save (disk full, permission) is
logged loudly and training goes on: the previous checkpoint is intact (saves are atomic,
trainer/checkpoint/save.py). Resume (INV-TRAIN-LOOP-012) restores weights, AdamW moments
and step counts, RNG states, the scheduler step, the data position and the guards; it
refuses a checkpoint of another config or data set unless told to override, and one of
another world size always.
"""

from __future__ import annotations

import logging
import signal
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gates.files import sha256_file
from trainer.checkpoint import load
from trainer.checkpoint.layout import LATEST_POINTER, CheckpointError
from trainer.checkpoint.retention import prune
from trainer.checkpoint.save import Gathered, save_checkpoint
from trainer.checkpoint.state import config_hash
from trainer.config.load import RunConfig
from trainer.model.llama import Llama
from trainer.train import components, distributed, fsdp

log = logging.getLogger(__name__)


def identity_hash(resolved: dict[str, Any]) -> str:
    """The config hash a resume must match, of a resolved config (RunConfig.to_json(), or
    a run manifest's ``config``): all of it but what changes no step - the ``apply`` block
    (how a process ran it: trainer/train/options.py RunOptions.record),
    training.data_parallel and monitoring.alerts."""
    cfg = {k: v for k, v in resolved.items() if k != "apply"}
    if isinstance(cfg.get("training"), dict):
        # The strategy is how the ranks share the work, not what a step computes (the
        # checkpoint format is one): a ddp checkpoint resumes under fsdp and back, and
        # the hashes of configs written before the key existed do not change.
        cfg["training"] = {k: v for k, v in cfg["training"].items() if k != "data_parallel"}
    if isinstance(cfg.get("monitoring"), dict):
        # Alert rules watch the run; they change no step. A run stopped by one resumes
        # with the rule adjusted, and configs written before the key keep their hash.
        cfg["monitoring"] = {k: v for k, v in cfg["monitoring"].items() if k != "alerts"}
    return config_hash(cfg)


def run_identity(config: RunConfig) -> tuple[str, str | None]:
    """(config hash, data manifest sha256) of a run config: what a resume must match.
    A config over in-memory sources (data.shards None) has no data manifest to hash."""
    manifest = config.data.manifest
    data_sha = sha256_file(manifest) if manifest is not None and manifest.is_file() else None
    return identity_hash(config.to_json()), data_sha


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
        self, step: int, state: components.TrainState, world: distributed.World = distributed.SINGLE
    ) -> Path | None:
        """Checkpoint ``state`` as it is after ``step``; the checkpoint's path, or None when
        nothing was written (a failure is logged, never raised). Every rank calls it: the
        gathers are collectives. Rank 0 alone writes."""
        model, optimizer = state.model, state.optimizer
        # Weights and AdamW state are identical on every rank (DDP) or sharded over them
        # (FSDP: gathered, in full, for rank 0); the RNGs differ: every rank's are gathered.
        gathered = Gathered(*fsdp.full_state(model, optimizer)) if fsdp.is_sharded(model) else None
        rng_files = state.rng.state_dict()
        training_state = components.state_json(state)
        if not world.is_main or step in self.saved:
            return None  # the final or signal save of a step already saved periodically
        try:
            path = save_checkpoint(
                self.directory,
                step=step,
                model=model,
                optimizer=optimizer,
                state=training_state,
                rng_state=(rng_files["tensors"], rng_files["states"]),
                gathered=gathered,
            )
        except (CheckpointError, OSError) as exc:
            previous = self.saved[-1] if self.saved else None
            message = f"CHECKPOINT FAILED at step {step}: {exc}. Training continues; " + (
                f"the last good checkpoint is step {previous}"
                if previous is not None
                else "there is no earlier checkpoint of this run"
            )
            log.error("%s", message)
            self.failures.append(message)
            return None
        self.saved.append(step)
        try:
            prune(self.directory, self.keep)
        except OSError as exc:  # the new checkpoint is safe; old ones merely stay on disk
            log.warning("checkpoint retention failed after step %d: %s", step, exc)
        if self.on_saved is not None:
            self.on_saved(step, path)
        return path


def resolve_checkpoint(spec: str | Path, directory: Path, model: Llama) -> Path:
    """``latest``: the newest valid checkpoint of ``directory`` (skipped ones said); or a path."""
    if str(spec) == "latest":
        chosen, skipped = load.latest_valid(directory, architecture=model.config)
        for path, why in skipped:
            log.warning("skipping checkpoint %s: %s", path, why)
        if chosen is None:
            raise CheckpointError(f"{directory}: no valid checkpoint to resume from")
        pointer = directory / LATEST_POINTER
        if skipped or not pointer.is_file() or pointer.read_text().strip() != chosen.name:
            log.info("resuming from %s", chosen)
        return chosen
    return Path(spec)


def resume(
    spec: str | Path,
    directory: Path | None,
    state: components.TrainState,
    world: distributed.World = distributed.SINGLE,
) -> None:
    """Load checkpoint ``spec`` (``latest`` in ``directory``, or a path) into every part of
    ``state``: state.json's parts in registry order (the identity first: another run's
    checkpoint is refused before anything is loaded), then the weights and AdamW state,
    then this rank's generators. CheckpointError when the checkpoint does not fit."""
    if directory is None:
        raise CheckpointError("resume_from needs a run directory (where its checkpoints are)")
    path = resolve_checkpoint(spec, directory, state.model)
    try:
        components.load_state_json(state, load.read_state(path))  # verified first
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    load.load_checkpoint(
        path,
        state.model,
        state.optimizer,
        restore_random=False,
        loaders=fsdp.LOADERS if fsdp.is_sharded(state.model) else None,
    )
    tensors, states = load.read_rng(path)
    try:
        state.rng.load_state_dict({"tensors": tensors, "states": states})
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


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
