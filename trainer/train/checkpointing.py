"""The loop's side of checkpoints: when to save, what a save holds, how a run resumes.

    checkpointer = Checkpointer(directory, save_interval=5, keep=2)
    if checkpointer.due(step): checkpointer.save(step, state, world)  # never raises
    resume("latest", directory, state, world)    # every part of state, from the checkpoint
    with StopSignals() as stop: ... if stop.requested: save, exit 0

``state`` is the run's registry of resumable parts (trainer/train/components.py): a save
walks it into the checkpoint's files and a resume walks the files back into it.

Saves (INV-TRAIN-LOOP-014): every ``save_interval`` steps, at the last step, and after the
step in progress when SIGTERM or SIGINT arrives. A failed periodic save (disk full,
permission) is logged loudly and training goes on: the previous checkpoint is intact (saves
are atomic, trainer/checkpoint/save.py). A failed final save (``final=True``: the last
step, an early stop, a stop alert, a signal) is logged too, and the loop ends the run with
status ``save_failed`` (trainer/train/loop.py), never ``finished``. Resume
(INV-TRAIN-LOOP-012) restores weights, AdamW moments and step counts, RNG states, the
scheduler step, the data position and the guards; it refuses a checkpoint of another
config or data set unless told to override, and one of another world size always.

A resume from ``latest`` that falls back past newer checkpoints that do not verify
quarantines each of them once the resume has loaded (rank 0): ``step-NNNNNNNN`` is
renamed, never deleted, to ``step-NNNNNNNN.corrupt`` (``.corrupt-2``, ``-3``, ... when
that name is taken), a name no loader, retention or ``latest`` lists, so the run can save
that step again (a checkpoint is never overwritten); the warning names both paths, and
``latest`` is pointed at the checkpoint resumed from.
"""

from __future__ import annotations

import logging
import signal
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gates.io.files import atomic_write_text, fsync_dir, read_regular, sha256_file
from trainer.checkpoint import load
from trainer.checkpoint.layout import LATEST_POINTER, CheckpointError, step_of
from trainer.checkpoint.retention import prune
from trainer.checkpoint.save import Gathered, save_checkpoint
from trainer.checkpoint.state import config_hash
from trainer.config.sections import RunConfig
from trainer.model.llama import Llama
from trainer.train import components, distributed, fsdp

log = logging.getLogger(__name__)
#: The ``latest`` pointer is one line naming a checkpoint directory.
POINTER_LIMIT = 4096


#: Where a run reads and writes, not what it computes: left out of the identity hash, so a
#: run directory copied or moved elsewhere (its config's paths rewritten) resumes. The data
#: is identified by content all the same: its manifest's sha256 is the identity's other half.
LOCATION_KEYS = {"data": ("shards", "tokenizer"), "training": ("output_dir",)}


def identity_hash(resolved: dict[str, Any]) -> str:
    """The config hash a resume must match, of a resolved config (RunConfig.to_json(), or
    a run manifest's ``config``): all of it but what changes no step - the ``apply`` block
    (how a process ran it: trainer/train/options.py RunOptions.record),
    training.data_parallel, monitoring.alerts, the paths (LOCATION_KEYS) - and ``path``,
    the file the config was read from: the hash is of what the config says a step
    computes, so the same config under another file name or in a moved run directory
    resumes."""
    cfg = _without_location(_what_a_step_computes(resolved))
    return config_hash(cfg)


def legacy_identity_hash(resolved: dict[str, Any]) -> str:
    """identity_hash as checkpoints written before LOCATION_KEYS recorded it (paths
    included): a resume accepts either, so those checkpoints still resume where they are."""
    return config_hash(_what_a_step_computes(resolved))


def _what_a_step_computes(resolved: dict[str, Any]) -> dict[str, Any]:
    cfg = {k: v for k, v in resolved.items() if k not in ("apply", "path")}
    if isinstance(cfg.get("training"), dict):
        # The strategy is how the ranks share the work, not what a step computes (the
        # checkpoint format is one): a ddp checkpoint resumes under fsdp and back, and
        # the hashes of configs written before the key existed do not change.
        cfg["training"] = {k: v for k, v in cfg["training"].items() if k != "data_parallel"}
    if isinstance(cfg.get("monitoring"), dict):
        # Alert rules watch the run; they change no step. A run stopped by one resumes
        # with the rule adjusted, and configs written before the key keep their hash.
        cfg["monitoring"] = {k: v for k, v in cfg["monitoring"].items() if k != "alerts"}
    return cfg


def _without_location(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(cfg)
    for section, keys in LOCATION_KEYS.items():
        if isinstance(cfg.get(section), dict):
            cfg[section] = {k: v for k, v in cfg[section].items() if k not in keys}
    return cfg


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
        # The checkpoint step a resumed run started after: the last good one before any
        # save of this process (None: a fresh run).
        self.resumed_from: int | None = None
        # Called with (step, path) after each successful save: the run store records it.
        self.on_saved: Callable[[int, Path], None] | None = None

    def due(self, step: int) -> bool:
        return self.save_interval is not None and step % self.save_interval == 0

    def save(
        self,
        step: int,
        state: components.TrainState,
        world: distributed.World = distributed.SINGLE,
        *,
        final: bool = False,
    ) -> Path | None:
        """Checkpoint ``state`` as it is after ``step``; the checkpoint's path, or None when
        nothing was written (a failure is logged and appended to ``failures``, never
        raised). ``final``: the run's last save (its last step, an early stop, an alert, a
        signal): no training goes on after a failure of it. Every rank calls it: the
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
            previous = self.saved[-1] if self.saved else self.resumed_from
            message = (
                f"CHECKPOINT FAILED at step {step}: {exc}. "
                + ("The run cannot end cleanly; " if final else "Training continues; ")
                + (
                    f"the last good checkpoint is step {previous}"
                    if previous is not None
                    else "there is no earlier checkpoint of this run"
                )
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


def _resolve(
    spec: str | Path, directory: Path, model: Llama, *, keep: bool = False
) -> tuple[Path, list[tuple[Path, str]], load.Inspection | None]:
    """(the checkpoint ``spec`` names, the newer ones ``latest`` skipped and why, the
    verification that chose it - holding the files a load reads, mapped, when ``keep`` - or None
    when ``spec`` is a path: not verified yet)."""
    if str(spec) != "latest":
        return Path(spec), [], None
    if keep:
        chosen, verified, skipped = load.latest_verified(directory, architecture=model.config)
    else:
        (chosen, skipped), verified = load.latest_valid(directory, architecture=model.config), None
    for path, why in skipped:
        log.warning("skipping checkpoint %s: %s", path, why)
    if chosen is None:
        raise CheckpointError(f"{directory}: no valid checkpoint to resume from")
    if skipped or _pointed_at(directory) != chosen.name:
        log.info("resuming from %s", chosen)
    return chosen, skipped, verified


def _pointed_at(directory: Path) -> str | None:
    """The checkpoint name the ``latest`` pointer holds; None when it is not a readable
    regular file (the one read rule: a FIFO there is never waited on)."""
    try:
        data = read_regular(directory / LATEST_POINTER, POINTER_LIMIT)
    except OSError:
        return None
    return data.decode("utf-8", "replace").strip()


def resolve_checkpoint(spec: str | Path, directory: Path, model: Llama) -> Path:
    """``latest``: the newest valid checkpoint of ``directory`` (skipped ones said); or a path."""
    return _resolve(spec, directory, model)[0]


QUARANTINE_SUFFIX = ".corrupt"


def quarantine_name(path: Path) -> Path:
    """Where a skipped checkpoint goes: ``step-NNNNNNNN.corrupt``, or ``.corrupt-2``, ``-3``,
    ... beside it when that name is taken (a step quarantined before). Not a checkpoint
    name (layout.step_of): no loader, retention or ``latest`` sees it."""
    target = path.with_name(path.name + QUARANTINE_SUFFIX)
    n = 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}{QUARANTINE_SUFFIX}-{n}")
    return target


def quarantine(directory: Path, skipped: list[tuple[Path, str]], chosen: Path) -> list[Path]:
    """Rename each skipped checkpoint directory of ``directory`` out of the way (never
    delete it), so the resumed run can save its step again; then point ``latest`` at
    ``chosen``. The new paths. CheckpointError when a rename fails: the run would fail to
    save that step, so it is refused before it trains."""
    moved: list[Path] = []
    for path, why in skipped:
        if step_of(path) is None or not path.is_dir():
            continue  # gone already, or not a checkpoint name
        target = quarantine_name(path)
        try:
            path.rename(target)
            fsync_dir(directory)
        except OSError as exc:
            raise CheckpointError(
                f"{path} does not verify ({why}) and cannot be quarantined as {target.name} "
                f"({exc}); move it aside by hand, then resume"
            ) from None
        log.warning(
            "quarantined checkpoint %s as %s (renamed, not deleted): it does not verify (%s); "
            "the run resumes from %s and can save step %d again",
            path,
            target,
            why,
            chosen,
            step_of(path),
        )
        moved.append(target)
    pointer = directory / LATEST_POINTER
    try:
        if moved and _pointed_at(directory) != chosen.name:
            atomic_write_text(pointer, chosen.name + "\n")
    except (OSError, UnicodeDecodeError) as exc:  # the next save rewrites it
        log.warning("could not point %s at %s: %s", pointer, chosen.name, exc)
    return moved


def resume(
    spec: str | Path,
    directory: Path | None,
    state: components.TrainState,
    world: distributed.World = distributed.SINGLE,
) -> None:
    """Load checkpoint ``spec`` (``latest`` in ``directory``, or a path) into every part of
    ``state``: state.json's parts in registry order (the identity first: another run's
    checkpoint is refused before anything is loaded), then the weights and AdamW state,
    then this rank's generators. CheckpointError when the checkpoint does not fit. Rank 0
    then quarantines the newer checkpoints ``latest`` skipped (quarantine).

    The checkpoint is verified once (sizes, sha256, contents): the verification that
    chose it (``latest``) or, for a path, one before state.json is read; the load builds
    its tensors over the files that verification hashed (trainer/checkpoint/load.py)."""
    if directory is None:
        raise CheckpointError("resume_from needs a run directory (where its checkpoints are)")
    path, skipped, verified = _resolve(spec, directory, state.model, keep=True)
    try:
        if verified is None:
            verified = load.verify_for_load(path)  # the architecture: load_checkpoint's
        components.load_state_json(state, load.read_state(path, verified=verified))
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    load.load_checkpoint(
        path,
        state.model,
        state.optimizer,
        restore_random=False,
        loaders=fsdp.LOADERS if fsdp.is_sharded(state.model) else None,
        verified=verified,
    )
    tensors, states = load.read_rng(path)
    try:
        state.rng.load_state_dict({"tensors": tensors, "states": states})
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    if skipped and world.is_main:  # loaded: the newer ones it fell back past go aside
        quarantine(Path(directory), skipped, path)


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
