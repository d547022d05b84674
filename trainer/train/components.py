"""The training loop's resumable state: named parts, each with state_dict/load_state_dict
(C-TRAINING-LOOP: what a resume restores, INV-TRAIN-LOOP-012).

    state = TrainState(model=model, optimizer=optimizer, rng=RngState(world), ...)
    for key, part in state.parts().items(): ...        # "identity", "data", ..., "rng"
    saved = state_json(state)                          # state.json's parts -> TrainingState
    load_state_json(state, saved)                      # the reverse, the identity checked first

In torchtitan's manner (its checkpoint manager registers MODEL, OPTIMIZER, TRAIN_STATE, ...
as Stateful objects), every piece of state a resume must restore is one part under one key,
and trainer/train/checkpointing.py saves and resumes by walking ``parts()``:

- MODEL, OPTIMIZER: torch's own Stateful objects. trainer/checkpoint writes and reads them
  by parameter name (model.safetensors; optimizer.safetensors and state.json's
  ``optimizer_groups``); a sharded (FSDP) model is gathered for rank 0 first.
- RNG: every generator the run draws from, of every rank (rng.safetensors, rng.json).
- IDENTITY, DATA, SCHEDULE, GUARDS, METRICS: their ``state_dict()`` is their keys of
  state.json (trainer/checkpoint/state.py TrainingState), which stays one flat object: the
  parts organize the code; the bytes on disk are those written before they existed.
  ``load_state_dict`` takes the whole flat object and reads its own keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from trainer.checkpoint import rng
from trainer.checkpoint.layout import RNG_JSON_FILE, CheckpointError
from trainer.checkpoint.state import TrainingState, scheduler_problem
from trainer.train import distributed, guards
from trainer.train.steps import StepPlan

MODEL = "model"
OPTIMIZER = "optimizer"
RNG = "rng"
IDENTITY = "identity"
DATA = "data"
SCHEDULE = "schedule"
GUARDS = "guards"
METRICS = "metrics"
#: The parts whose state is tensor files, not keys of state.json.
TENSOR_PARTS = (MODEL, OPTIMIZER, RNG)


class Stateful(Protocol):
    """What every part has (nn.Module and torch.optim.Optimizer included)."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any], /) -> object: ...


class RunIdentity:
    """IDENTITY: what a resume must match, and what a checkpoint records of its run.

    A checkpoint of another config or data set is refused unless ``override``; one of
    another world size always is (the data split and each rank's RNG stream are
    functions of it, so it could not continue the same run). Checked, never adopted.
    ``legacy_config_hash``: the same config's hash as older checkpoints recorded it
    (checkpointing.legacy_identity_hash), also accepted."""

    def __init__(
        self,
        config_hash: str,
        data_manifest_sha256: str | None,
        *,
        seed: int,
        tokenizer_dir: str | None,
        world_size: int,
        override: bool = False,
        legacy_config_hash: str | None = None,
    ) -> None:
        self.config_hash, self.data_manifest_sha256 = config_hash, data_manifest_sha256
        self.seed, self.tokenizer_dir, self.world_size = seed, tokenizer_dir, world_size
        self.override = override
        self.legacy_config_hash = legacy_config_hash

    def state_dict(self) -> dict[str, Any]:
        return {
            "config_hash": self.config_hash,
            "data_manifest_sha256": self.data_manifest_sha256,
            "seed": self.seed,
            "tokenizer_dir": self.tokenizer_dir,
            "world_size": self.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["world_size"] != self.world_size:
            raise CheckpointError(
                f"written by a run of world size {state['world_size']}; this run has world "
                f"size {self.world_size}. Resuming on another world size is refused (the "
                "data split and the per-rank RNG states depend on it): relaunch with "
                f"{state['world_size']} process(es) (trainer apply --nproc {state['world_size']})"
            )
        saved_config, saved_data = state["config_hash"], state["data_manifest_sha256"]
        differs = []
        if saved_config not in (self.config_hash, self.legacy_config_hash):
            differs.append(
                f"config hash {saved_config[:12]}... (this run {self.config_hash[:12]}...)"
            )
        if saved_data != self.data_manifest_sha256:
            differs.append(
                f"data manifest sha256 {saved_data} (this run {self.data_manifest_sha256})"
            )
        if differs and not self.override:
            raise CheckpointError(
                f"written by another run: {'; '.join(differs)}; pass the override flag to "
                "resume anyway"
            )


def epoch_step(plan: StepPlan) -> int:
    """Steps of ``plan.epoch`` completed once ``plan`` is done: the data position."""
    return plan.first_sequence // (plan.micro_batch * plan.grad_accum * plan.world_size) + 1


def first_step_after(step: int) -> int:
    """The step a run resumed from the checkpoint of ``step`` takes first."""
    return step + 1


class DataPosition:
    """DATA: the step a checkpoint is taken after and where the data stands then, (epoch,
    steps of it done). Batches are a pure function of (seed, epoch), so this is all a
    resume needs: the next step's batch is recomputed, never replayed."""

    def __init__(self) -> None:
        self.position: tuple[int, int, int] = (0, 0, 0)  # (step, epoch, epoch_step)
        self.resumed: tuple[int, int, int] | None = None  # the checkpoint's, when resumed

    def completed(self, plan: StepPlan) -> None:
        self.position = (plan.step, plan.epoch, epoch_step(plan))

    @property
    def resumed_from(self) -> int:
        """The step of the checkpoint this run resumed from (0: a fresh start)."""
        return 0 if self.resumed is None else self.resumed[0]

    @property
    def first_step(self) -> int:
        return 1 if self.resumed is None else first_step_after(self.resumed[0])

    def check(self, plan: StepPlan) -> None:
        """At the checkpoint's step, the step driver and the checkpoint must agree on
        where the data stands (another batch size or data set would not)."""
        if self.resumed is None or plan.step != self.resumed[0]:
            return
        step, epoch, done = self.resumed
        if (plan.epoch, epoch_step(plan)) != (epoch, done):
            raise CheckpointError(
                f"step {step}: the checkpoint's data position (epoch {epoch}, step {done} of "
                f"it) is not this run's (epoch {plan.epoch}, step {epoch_step(plan)}): "
                "another batch size or data set?"
            )

    def state_dict(self) -> dict[str, Any]:
        step, epoch, done = self.position
        return {"step": step, "epoch": epoch, "epoch_step": done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = self.resumed = (state["step"], state["epoch"], state["epoch_step"])


class SchedulePosition:
    """SCHEDULE: the step the LR schedule was last evaluated at (lr_at is a pure function
    of it, so the schedule needs nothing else)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"scheduler_step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # state.json's own check (`trainer inspect` makes it too), for a state built in code.
        problem = scheduler_problem(state["step"], state["scheduler_step"])
        if problem:
            raise CheckpointError(problem)
        self.step = state["scheduler_step"]


class Guards:
    """GUARDS: what the divergence guard and early stopping remember of earlier
    evaluations (``early`` is None when early stopping is off)."""

    def __init__(self, divergence: guards.DivergenceGuard, early: guards.EarlyStopping | None):
        self.divergence, self.early = divergence, early

    def check(self, val_loss: float) -> bool:
        """The divergence guard first (it rejects NaN/inf before early stopping sees the
        value), then early stopping: whether the run should stop."""
        self.divergence.check(val_loss)
        return self.early is not None and self.early.update(val_loss)

    def state_dict(self) -> dict[str, Any]:
        return {
            "early_stopping": None if self.early is None else self.early.state_dict(),
            "divergence": self.divergence.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The guards' states (their shapes checked by state.json's reading); one that
        does not fit this run (a divergence guard of another vocabulary) is a
        CheckpointError, as every refused part is."""
        try:
            if state["divergence"] is not None:
                self.divergence.load_state_dict(state["divergence"])
            if self.early is not None and state["early_stopping"] is not None:
                self.early.load_state_dict(state["early_stopping"])
        except (ValueError, TypeError) as exc:
            raise CheckpointError(str(exc)) from None


class ValidationHistory:
    """METRICS: this process's validation losses, and the best one of the run before it
    (retention keeps the checkpoint with the best across resumes)."""

    def __init__(self) -> None:
        self.losses: list[tuple[int, float]] = []  # (step, validation loss)
        self.best_before: float | None = None

    def add(self, step: int, val_loss: float) -> None:
        self.losses.append((step, val_loss))

    def state_dict(self) -> dict[str, Any]:
        values = [v for _, v in self.losses]
        best = values if self.best_before is None else [*values, self.best_before]
        last = values[-1] if values else None
        return {"val_loss": last, "best_val_loss": min(best, default=None)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_before = state["best_val_loss"]


class RngState:
    """RNG: every rank's generators, as the rng files hold them (trainer/checkpoint/rng.py:
    rank 0's under the single-process names). Restored, not reseeded: a resumed run draws
    exactly the numbers the uninterrupted run would have drawn next."""

    def __init__(self, world: distributed.World = distributed.SINGLE) -> None:
        self.world = world

    def state_dict(self) -> dict[str, Any]:
        """A collective under torchrun: every rank calls it, and every rank gets them all."""
        tensors, states = rng.capture_rng()
        if self.world.distributed:
            tensors, states = rng.merge_ranks(_every_rank(tensors, states, self.world))
        return {"tensors": tensors, "states": states}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """This rank's generators out of every rank's."""
        tensors, states = rng.rank_rng(
            state["tensors"], state["states"], rank=self.world.rank, source=RNG_JSON_FILE
        )
        rng.restore_rng(tensors, states, source=RNG_JSON_FILE)


def _every_rank(
    tensors: dict[str, Tensor], states: dict[str, Any], world: distributed.World
) -> list[tuple[dict[str, Tensor], dict[str, Any]]]:
    """Every rank's generator states, in rank order (JSON over tensor collectives: no pickle)."""
    mine = {"tensors": {k: v.tolist() for k, v in tensors.items()}, "states": states}
    return [
        ({k: torch.tensor(v, dtype=torch.uint8) for k, v in r["tensors"].items()}, r["states"])
        for r in distributed.gather_json(mine, world)
    ]


@dataclass
class TrainState:
    """The registry: every resumable part of a run under its key, in the order a resume
    loads them (the identity first: another run's checkpoint is refused before anything
    of it is loaded)."""

    identity: RunIdentity
    data: DataPosition
    schedule: SchedulePosition
    guards: Guards
    metrics: ValidationHistory
    model: nn.Module
    optimizer: torch.optim.Optimizer
    rng: RngState

    def parts(self) -> dict[str, Stateful]:
        return {
            IDENTITY: self.identity,
            DATA: self.data,
            SCHEDULE: self.schedule,
            GUARDS: self.guards,
            METRICS: self.metrics,
            MODEL: self.model,
            OPTIMIZER: self.optimizer,
            RNG: self.rng,
        }


def state_json(state: TrainState) -> TrainingState:
    """state.json of ``state``: the keys of every part that is not a tensor file."""
    fields: dict[str, Any] = {}
    for key, part in state.parts().items():
        if key not in TENSOR_PARTS:
            fields |= part.state_dict()
    return TrainingState(**fields)


def load_state_json(state: TrainState, saved: TrainingState) -> None:
    """Load ``saved`` into every part of ``state`` that is not a tensor file, in registry
    order; CheckpointError (without the checkpoint's path) when a part refuses it."""
    values = saved.to_json()
    for key, part in state.parts().items():
        if key not in TENSOR_PARTS:
            part.load_state_dict(values)
