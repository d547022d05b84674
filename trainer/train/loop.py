"""The training loop: every optimizer step does what the math says, and nothing is made up.

    cfg = load_config("configs/quickstart-cpu.yaml")      # or config_from_values(...)
    data, T = cfg.data.shards, cfg.data.seq_len
    result = train(cfg, ShardSequences(data, "train", T), ShardSequences(data, "val", T),
                   options=RunOptions(out_dir=Path("runs/a"), checkpoint=True))
    result.losses, result.grad_norms, result.lrs, result.val_losses, result.stop_reason

The run is the RunConfig (trainer/config/sections.py): every value that defines it is read
from its sections, nowhere else. RunOptions (options.py) say how this process runs it:
device, run directory, checkpoints, an early stop, a resume.

One run, top to bottom (C-TRAINING-LOOP):

0. Refuse, with nothing built, trained or written: a stop_after past training.max_steps;
   the vocabulary preflight (preflight.py): model, tokenizer, shards and a resumed
   checkpoint must agree on the vocabulary (INV-ARCH-370M-006) - on a resume too; then
   a precision this device cannot honour (trainer/config/device.py: fp16 on any device,
   the loop runs no grad scaler; bf16 off CUDA).
1. Seed torch, random and numpy from the run seed; on CPU, deterministic algorithms.
2. Build the model (trainer/model/llama.py) and AdamW with decay/no-decay groups (optim.py).
3. Build the validation set once (the first sequences of the val split until
   ``training.eval_tokens`` target tokens, or the whole split) and refuse early stopping
   on a set too small to give signal (guards.check_validation_size).
4. Register the run's resumable state (components.py): model, optimizer, RNG, the run's
   identity, the data position, the schedule position, the guards, the validation losses.
   With ``options.resume_from`` every part is loaded from the checkpoint
   (checkpointing.resume) and the run continues at the step after it; metrics.jsonl first
   loses the lines of the steps after the checkpoint (metrics.rewind), so each step is in
   it once.
5. Write the run manifest (manifest.py) before step 1, when there is a run directory.
6. Take the steps from trainer/train/steps.py iterate_steps - the driver the
   C-TRAINCFG-001 preflight is checked against - up to ``options.stop_after`` or
   ``training.max_steps``, and for each step:
   - map its micro-batch index ranges through the epoch's order (sequences.epoch_order);
     a step in epoch >= 1 without wrap-around is DataExhaustedError naming the step,
     never a placeholder loss and never a quiet early end;
   - set lr(step) on every parameter group (schedule.lr_at over training.max_steps,
     whatever stop_after says; optim.apply_lr);
   - zero the gradients, accumulate them over the micro-batches (loss.py: the token mean
     of the global batch), clip them and measure the real pre-clip norm (optim.py);
   - check loss and norm are finite BEFORE optimizer.step (guards.check_finite), so a
     bad batch never reaches the weights or the AdamW moments;
   - step the optimizer, record and write the metrics;
   - every ``training.eval_interval`` steps: validation loss, divergence guard, early
     stopping;
   - the config's alert rules (``monitoring.alerts``, alerts.py) against the step's record:
     a warn rule is a logged warning and an ``alerts`` entry in the record; a stop rule
     ends the run after this step like SIGTERM does (checkpoint, stop_reason "alert"), on
     the first step that breaches it, agreed by every rank;
   - with ``options.checkpoint``, every ``training.save_interval`` steps, at the last
     step, and after the step in progress when SIGTERM/SIGINT arrives: a checkpoint of
     every registered part (train/checkpointing.py; a failed periodic save is loud and
     training goes on; a failed final save - the last step, early stopping, a signal, a
     stop alert - ends the run with status ``save_failed``, TrainResult.save_failed
     saying why, agreed by every rank).
7. However the run ends - its last step, early stopping, a signal, a stop alert, a final
   checkpoint that could not be written, or an exception (NonFiniteError,
   DivergenceError, DataExhaustedError, anything) - train() records it in
   training_state.json (MetricsWriter.finish: status, reason, ended_at), so `trainer
   monitor` shows how a run ended instead of calling it stale.

Data parallel (trainer/train/distributed.py): a process started by torchrun joins the
process group (gloo on CPU, NCCL on CUDA) and trains a DistributedDataParallel model.
A global batch is micro_batch x grad_accum x world_size sequences of the one order every
rank computes from the seed; rank r reads its fixed slice (StepPlan.micro_batches(r)).
The target count is all-reduced before backward, so every rank backpropagates its token
sum over the GLOBAL count and DDP sums (not averages) the gradients: the gradient and the
reported loss are those of one process running the whole global batch. The finite check
is agreed by all ranks before optimizer.step. Rank 0 alone writes the run manifest,
metrics and checkpoints (each rank's RNG state gathered into them); every rank
restores its own RNG on resume, and a checkpoint of another world size is refused.
Without torchrun's environment the run is world size 1: no process group, no DDP.
With ``data_parallel: fsdp`` (trainer/train/fsdp.py) the model is sharded over the ranks
instead (FSDP2, gradients summed in the same way) before AdamW is built; checkpoints
gather its full state for rank 0 and are the files a single process writes.

CPU runs in float32; CUDA runs the forward under bf16 autocast when the config asks.
Named seams (_run_seed, _planned_steps, _train_step, _zero_grad, _update, _start) let
tests/mutants/loop.py inject the contract's known bugs one at a time.
"""

from __future__ import annotations

import contextlib
import logging
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor, nn

from trainer.config.device import check_device
from trainer.config.schedule import lr_at
from trainer.config.sections import RunConfig
from trainer.model.llama import build_model
from trainer.runfiles.lock import writer_lock
from trainer.train import (
    alerts,
    checkpointing,
    components,
    distributed,
    fsdp,
    guards,
    loss,
    metrics,
    optim,
    preflight,
)
from trainer.train.hooks import Hooks, as_hooks
from trainer.train.manifest import write_run_manifest
from trainer.train.options import RunOptions
from trainer.train.sequences import DataExhaustedError, SequenceSource, epoch_order
from trainer.train.steps import StepPlan, iterate_steps

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def _compile_errors() -> tuple[type[BaseException], ...]:
    """What a failed torch.compile raises at its first call: Dynamo and Inductor wrap theirs
    in TorchDynamoException subclasses; a C++ build error of the lazily compiled backward
    can surface as Inductor's CppCompileError itself. Imported only when one is raised
    (importing torch._dynamo takes seconds)."""
    from torch._dynamo.exc import TorchDynamoException  # noqa: PLC0415 - see above
    from torch._inductor.exc import CppCompileError  # noqa: PLC0415

    return (TorchDynamoException, CppCompileError)


@dataclass
class TrainResult:
    steps_run: int
    val_losses: list[tuple[int, float]]
    stop_reason: str  # "last_step" | "early_stopping" | "signal" | "alert"
    model: nn.Module
    optimizer: torch.optim.Optimizer
    # Wraps taken: the 0-based epoch (StepPlan.epoch) of the last step.
    epochs_completed: int = 0
    # One per step this process took: its metrics record (step, loss, lr, grad_norm, ...).
    records: list[dict] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)  # steps saved by this process
    resumed_from: int = 0  # the checkpoint step this process started after (0: none)
    alert: alerts.Fired | None = None  # the stop rule that ended the run (stop_reason "alert")
    # Why the run's final checkpoint (its last step, early stop, alert or signal save) was
    # not written; None when it was, or the run saves none. Set: status "save_failed".
    save_failed: str | None = None
    # stop_reason "signal": the signal number this process received (SIGTERM, SIGINT), or
    # None when another rank's signal stopped it.
    signal: int | None = None

    @property
    def losses(self) -> list[float]:
        return [r["loss"] for r in self.records]

    @property
    def grad_norms(self) -> list[float]:
        return [r["grad_norm"] for r in self.records]

    @property
    def lrs(self) -> list[float]:
        return [r["lr"] for r in self.records]


# ---------------------------------------------------------------- device
def _resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was asked for but torch sees no CUDA device")
    if name not in ("cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {name!r}")
    return torch.device(name)


def _autocast_dtype(config: RunConfig) -> torch.dtype | None:
    """bf16 autocast when configured (train() has refused it off CUDA, and fp16); else None."""
    return torch.bfloat16 if config.training.mixed_precision == "bf16" else None


@contextlib.contextmanager
def _deterministic(device: torch.device) -> Iterator[None]:
    """Deterministic kernels on CPU for the duration of the run (restored after)."""
    before = torch.are_deterministic_algorithms_enabled()
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


# ---------------------------------------------------------------- seeds
def _run_seed(config: RunConfig) -> int:
    """The one seed every generator of the run derives from."""
    return config.training.seed


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------- data
def _exhaustion_error(
    step: int, config: RunConfig, steps_per_epoch: int, last_step: int
) -> Exception:
    epochs = config.training.epochs
    if not config.training.wrap_around:
        why = f"one epoch is {steps_per_epoch} steps and wrap_around is off"
    else:
        total = epochs * steps_per_epoch
        why = f"epochs {epochs} x {steps_per_epoch} steps per epoch = {total} steps"
    return DataExhaustedError(
        f"step {step}: the training split is exhausted ({why}; the run ends at step "
        f"{last_step}). Turn wrap_around on, raise epochs, lower max_steps or add data"
    )


def _planned_steps(config: RunConfig, num_sequences: int, last_step: int) -> Iterator[StepPlan]:
    """iterate_steps plus the exhaustion rule: every step up to ``last_step``, or an error."""
    data, training = config.data, config.training
    world_size = distributed.current_world().world_size
    global_batch = data.micro_batch * training.gradient_accumulation * world_size
    steps_per_epoch = num_sequences // global_batch
    if steps_per_epoch == 0:
        raise ValueError(
            f"the training split has {num_sequences} sequences of {data.seq_len} tokens; "
            f"one global batch needs {global_batch} (micro_batch {data.micro_batch} x "
            f"grad_accum {training.gradient_accumulation} x world_size {world_size})"
        )
    epochs = training.epochs if training.wrap_around else max(training.epochs, 2)
    taken = 0
    for plan in iterate_steps(
        num_sequences,
        micro_batch=data.micro_batch,
        grad_accum=training.gradient_accumulation,
        epochs=epochs,
        last_step=last_step,
        world_size=world_size,
    ):
        if plan.epoch >= 1 and not training.wrap_around:
            raise _exhaustion_error(plan.step, config, steps_per_epoch, last_step)
        taken = plan.step
        yield plan
    if taken < last_step:  # epochs x steps_per_epoch < last_step
        raise _exhaustion_error(taken + 1, config, steps_per_epoch, last_step)


class _EpochOrders:
    """The visiting order of the current epoch, drawn once per epoch."""

    def __init__(self, num_sequences: int, seed: int) -> None:
        self.num_sequences, self.seed = num_sequences, seed
        self.epoch: int | None = None
        self.order: Tensor | None = None

    def indices(self, epoch: int, positions: range) -> list[int]:
        if epoch != self.epoch:
            self.order = epoch_order(self.num_sequences, seed=self.seed, epoch=epoch)
            self.epoch = epoch
        return [int(i) for i in self.order[positions.start : positions.stop]]


def _validation_batches(
    val_data: SequenceSource | None, config: RunConfig
) -> list[tuple[Tensor, Tensor]]:
    """The fixed validation set: val sequences 0, 1, ... until training.eval_tokens target
    tokens are in, or the whole split. Never the training source."""
    if val_data is None or val_data.num_sequences == 0:
        return []
    micro_batch = config.data.micro_batch
    batches, count, index = [], 0, 0
    while index < val_data.num_sequences and count < config.training.eval_tokens:
        indices = list(range(index, min(index + micro_batch, val_data.num_sequences)))
        inputs, targets = val_data.batch(indices)
        batches.append((inputs, targets))
        count += loss.count_targets(targets)
        index = indices[-1] + 1
    return batches


def _data_rank(world: distributed.World) -> int:
    """Which slice of every global batch this process reads: its rank."""
    return world.rank


# ---------------------------------------------------------------- one step
def _zero_grad(optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad(set_to_none=True)


def _global_token_count(local: int, world: distributed.World) -> int:
    """The global batch's target count: all-reduced BEFORE backward, because each rank's
    backward divides by it (a rank's own count would weight its tokens differently)."""
    return distributed.sum_int(local, world)


def _accumulate(
    model: nn.Module,
    micro_batches: list[tuple[Tensor, Tensor]],
    autocast: torch.dtype | None,
    world: distributed.World,
    losses: loss.TokenLosses | None = None,
) -> tuple[float, int]:
    """Backward over the micro-batches: (the global batch's loss, its target count)."""
    if not world.distributed:
        return loss.accumulate_gradients(model, micro_batches, autocast=autocast, losses=losses)
    local = sum(loss.count_targets(targets) for _, targets in micro_batches)
    count = _global_token_count(local, world)
    share, _ = loss.accumulate_gradients(
        model,
        micro_batches,
        autocast=autocast,
        global_count=count,
        defer_sync=lambda: distributed.defer_sync(model),
        losses=losses,
    )
    return distributed.sum_float(share, world), count  # the shares add up to the mean


def _check_finite_on_every_rank(
    step: int, step_loss: float, grad_norm: float, world: distributed.World
) -> None:
    """guards.check_finite, agreed across ranks: when any rank sees a non-finite loss or
    norm, every rank raises before optimizer.step (none steps alone into a deadlock)."""
    try:
        guards.check_finite(step, step_loss, grad_norm)
    except guards.NonFiniteError as exc:
        mine: guards.NonFiniteError | None = exc
    else:
        mine = None
    if not world.distributed:
        if mine is not None:
            raise mine
        return
    if distributed.any_rank(mine is not None, world):
        if mine is not None:
            raise mine
        raise guards.NonFiniteError(
            f"step {step}: another rank's loss or gradient norm is not finite (this rank, "
            f"{world.rank}: loss {step_loss}, grad norm {grad_norm}); every rank stops "
            "before optimizer.step"
        )


def _update(
    optimizer: torch.optim.Optimizer,
    model: nn.Module,
    *,
    step: int,
    step_loss: float,
    grad_norm: float,
    world: distributed.World,
    hooks: Hooks,
) -> None:
    """The weights move only once every rank has found the loss and norm finite."""
    _check_finite_on_every_rank(step, step_loss, grad_norm, world)
    hooks.before_optimizer_step(step, optimizer, model)
    optimizer.step()


def _train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    micro_batches: list[tuple[Tensor, Tensor]],
    *,
    step: int,
    lr: float,
    grad_clip: float | None,
    autocast: torch.dtype | None,
    hooks: Hooks,
    losses: loss.TokenLosses | None = None,
) -> tuple[float, float, int]:
    """One optimizer step; returns (loss, pre-clip grad norm, target tokens).

    Under data parallelism: the global batch's loss and token count, and the norm of the
    all-reduced gradient (the same on every rank)."""
    world = distributed.current_world()
    optim.apply_lr(optimizer, lr)
    _zero_grad(optimizer)
    step_loss, count = _accumulate(model, micro_batches, autocast, world, losses)
    grad_norm = optim.clip_gradients(model.parameters(), grad_clip)
    _update(
        optimizer,
        model,
        step=step,
        step_loss=step_loss,
        grad_norm=grad_norm,
        world=world,
        hooks=hooks,
    )
    return step_loss, grad_norm, count


# ---------------------------------------------------------------- the run
@dataclass
class _Run:
    """One run's live objects and what it does: take a step, evaluate, save, stop."""

    config: RunConfig
    last_step: int  # the step this run stops after (RunOptions.last_step)
    train_data: SequenceSource
    val_batches: list[tuple[Tensor, Tensor]]
    forward: nn.Module  # what forward runs through: the model, DDP or torch.compile of it
    state: components.TrainState  # everything a checkpoint holds
    device: torch.device
    autocast: torch.dtype | None
    orders: _EpochOrders
    writer: metrics.MetricsWriter
    result: TrainResult
    hooks: Hooks
    checkpointer: checkpointing.Checkpointer | None = None
    world: distributed.World = distributed.SINGLE
    stop: checkpointing.StopSignals | None = None
    # With compile: the forward before torch.compile (evaluation, and the fallback).
    eager: nn.Module | None = None
    # With compile: torch.compile of loss.token_losses (None: eager).
    losses: loss.TokenLosses | None = None

    def compiled_or_eager(self, train_step: Callable[[nn.Module], _T]) -> _T:
        """``train_step(self.forward)``; when that is torch.compile's forward and compiling
        fails (no C++ compiler, an unsupported op: the first step's forward or backward, or
        the compiled loss), one warning, then this step again and the rest of the run
        eager. Safe to repeat: _train_step zeroes the gradients first and the optimizer
        had not stepped."""
        if self.eager is None or self.forward is self.eager:
            return train_step(self.forward)
        try:
            return train_step(self.forward)
        except _compile_errors() as exc:
            log.warning(
                "torch.compile failed (%s: %s); training on without it (eager)",
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
            )
            self.forward, self.losses = self.eager, None
            return train_step(self.forward)

    def step(self, plan: StepPlan) -> dict:
        adamw = self.config.optimizer
        started = time.perf_counter()
        rank = _data_rank(self.world)
        index_lists = [self.orders.indices(plan.epoch, r) for r in plan.micro_batches(rank)]
        micro_batches = [self.train_data.batch(ix) for ix in index_lists]
        self.hooks.step_batches(plan.step, plan.epoch, index_lists, micro_batches)
        self.state.schedule.step = plan.step  # lr_at is a pure function of the step
        lr = lr_at(  # over the configured schedule, however early this run stops
            plan.step,
            peak=adamw.lr,
            warmup=self.config.training.warmup_steps,
            max_steps=self.config.training.max_steps,
            min_lr=adamw.min_lr,
        )
        step_loss, grad_norm, tokens = self.compiled_or_eager(
            lambda forward: _train_step(
                forward,
                self.state.optimizer,
                micro_batches,
                step=plan.step,
                lr=lr,
                grad_clip=adamw.grad_clip,
                autocast=self.autocast,
                hooks=self.hooks,
                losses=self.losses,
            )
        )
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # honest step times
        record = self.writer.step_record(
            plan.step,
            epoch=plan.epoch,
            loss=step_loss,
            lr=lr,
            grad_norm=grad_norm,
            tokens=tokens,
            seconds=time.perf_counter() - started,
        )
        self.result.steps_run, self.result.epochs_completed = plan.step, plan.epoch
        self.result.records.append(record)
        return record

    def evaluate(self, step: int, record: dict) -> None:
        """Validation loss, then the guards: divergence, then early stopping."""
        # Eager: a compiled forward would compile a second (no_grad) graph for a few batches.
        forward = self.forward if self.eager is None else self.eager
        val_loss, _ = loss.evaluate_loss(forward, self.val_batches, autocast=self.autocast)
        self.state.metrics.add(step, val_loss)
        record["val_loss"] = val_loss
        self.hooks.evaluation(step, self.val_batches, val_loss)
        if self.state.guards.check(val_loss):
            self.result.stop_reason = "early_stopping"

    def save(self, plan: StepPlan, *, final: bool = False) -> None:
        """Checkpoint the state after ``plan``'s step (a failure is logged, not raised).
        ``final``: the run's last save; when it fails (on any rank's word: rank 0 writes)
        the result says why (save_failed) and the run ends with status save_failed."""
        assert self.checkpointer is not None, "save() on a run without checkpoints"
        if final and self.result.save_failed is not None:
            return  # the final save of the last step failed just now: said once
        self.state.data.completed(plan)
        failures = len(self.checkpointer.failures)
        if final:
            path = self.checkpointer.save(plan.step, self.state, self.world, final=True)
        else:
            path = self.checkpointer.save(plan.step, self.state, self.world)
        if path is not None:
            self.result.checkpoints.append(plan.step)
        if not final:
            return
        failed = len(self.checkpointer.failures) > failures
        if distributed.any_rank(failed, self.world):
            self.result.save_failed = (
                self.checkpointer.failures[-1]
                if failed
                else f"rank 0 could not write the checkpoint of step {plan.step}"
            )

    def run(self) -> None:
        training = self.config.training
        self.hooks.on_start(self.result.model, self.state.optimizer)
        last: StepPlan | None = None
        for plan in _planned_steps(self.config, self.train_data.num_sequences, self.last_step):
            self.state.data.check(plan)  # resumed: the driver agrees with the checkpoint
            if plan.step < self.state.data.first_step:
                continue  # done before the checkpoint this run resumed from
            record = self.step(plan)
            last = plan
            if plan.step % training.eval_interval == 0 and self.val_batches:
                self.evaluate(plan.step, record)
            fired = self.check_alerts(record)
            self.writer.write(
                record,
                last_step=self.last_step,
                log_interval=self.config.monitoring.log_interval,
            )
            if self.checkpointer is not None and self.checkpointer.due(plan.step):
                # The schedule's last step: this save is the final one (not tried twice).
                self.save(plan, final=plan.step == self.last_step)
            self.hooks.after_step(plan.step, record)
            # A stop alert, early stopping or a signal: the checkpoint below, then the end.
            if self.stop_on_alert(fired) or self.result.stop_reason != "last_step":
                break
            if self.signalled():
                break
        if last is not None and self.checkpointer is not None:
            # The last step, early stop, signal or alert (no-op if just saved); a failure
            # here ends the run with status save_failed.
            self.save(last, final=True)

    def signalled(self) -> bool:
        """SIGTERM/SIGINT: save, then a clean stop. Every rank stops after the same step,
        even when only one got the signal."""
        requested = self.stop is not None and self.stop.requested is not None
        if distributed.any_rank(requested, self.world):
            self.result.stop_reason = "signal"
            self.result.signal = self.stop.requested if self.stop is not None else None
            return True
        return False

    def check_alerts(self, record: dict) -> list[alerts.Fired]:
        """The config's alert rules against this step's record (val_loss included when it
        was an evaluation step): fired rules go into the record, and each warn rule is
        one logged warning from rank 0 (the stop rules are reported by whoever stops)."""
        fired = alerts.check(self.config.monitoring.alerts, record)
        alerts.annotate(record, fired)
        if self.world.is_main:
            for warning in (f for f in fired if f.rule.action == "warn"):
                log.warning("alert: %s", warning.message())
        return fired

    def stop_on_alert(self, fired: list[alerts.Fired]) -> bool:
        """Whether a stop rule ends the run after this step, agreed by every rank the way
        SIGTERM is (any_rank), so none steps alone into a collective the others left.
        Loss, grad norm, lr and val loss are the same on every rank; step times are not,
        so the ranks then exchange which rule fired where and all name the first rank's.
        A config without stop rules (the same on every rank) costs no collective."""
        rules = self.config.monitoring.alerts
        if not alerts.has_stop_rules(rules):
            return False
        mine = alerts.first_stop(fired)
        if not distributed.any_rank(mine is not None, self.world):
            return False
        if self.world.distributed:
            exchanged = distributed.gather_json({"stop": alerts.encode(mine)}, self.world)
            stops = [r["stop"] for r in exchanged]
            mine = alerts.decode(stops, rules, self.result.steps_run)
        self.result.alert = mine
        self.result.stop_reason = "alert"
        return True

    def end_status(self) -> tuple[str, str]:
        """(status, reason) of a run that returned: training_state.json's end record. A run
        whose final checkpoint was not written is save_failed, however it stopped."""
        r, early = self.result, self.state.guards.early
        if r.save_failed is not None:
            return "save_failed", (
                f"step {r.steps_run} ({r.stop_reason}): the final checkpoint was not "
                f"written: {r.save_failed}"
            )
        if r.stop_reason == "alert" and r.alert is not None:
            return "alert", r.alert.message()
        if r.stop_reason == "early_stopping" and early is not None:
            return "early_stopping", (
                f"step {r.steps_run}: validation loss did not improve on {early.best!r} "
                f"(evaluation {early.best_eval}) for {early.patience} evaluations"
            )
        if r.stop_reason == "signal":
            got = self.stop.requested if self.stop is not None else None
            name = signal.Signals(got).name if got else "a signal to another rank"
            return "signal", f"{name}: stopped after step {r.steps_run}"
        if r.stop_reason != "last_step":
            raise RuntimeError(f"no end status for stop reason {r.stop_reason!r}")
        return "finished", f"step {r.steps_run}: last step {self.last_step} reached"

    def record_end(self, status: str, reason: str) -> None:
        """MetricsWriter.finish; a failure to write it is logged but does not replace the
        run's own outcome (its result, or the exception that aborted it)."""
        try:
            self.writer.finish(status, reason, last_step=self.last_step)
        except (OSError, metrics.MetricsFileError) as exc:
            log.error("could not record the end status %r: %s", status, exc)


def _register(
    config: RunConfig,
    options: RunOptions,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    world: distributed.World,
) -> components.TrainState:
    """Every resumable part of a fresh run under its key (components.py)."""
    tokenizer = config.data.tokenizer
    return components.TrainState(
        identity=components.RunIdentity(
            *checkpointing.run_identity(config),  # (config hash, data manifest sha256)
            seed=config.training.seed,
            tokenizer_dir=None if tokenizer is None else str(tokenizer),
            world_size=world.world_size,
            override=options.resume_override,
            legacy_config_hash=checkpointing.legacy_identity_hash(config.to_json()),
        ),
        data=components.DataPosition(),
        schedule=components.SchedulePosition(),
        guards=components.Guards(
            guards.DivergenceGuard(config.model.vocab_size),
            guards.EarlyStopping() if config.training.early_stopping else None,
        ),
        metrics=components.ValidationHistory(),
        model=model,
        optimizer=optimizer,
        rng=components.RngState(world),
    )


def _start(
    config: RunConfig,
    options: RunOptions,
    train_data: SequenceSource,
    val_data: SequenceSource | None,
    *,
    hooks: Hooks,
    device: torch.device,
    world: distributed.World = distributed.SINGLE,
) -> _Run:
    """Seed, build model and optimizer, fix the validation set, register the state (from
    the checkpoint on a resume), write the manifest."""
    data, training, adamw = config.data, config.training, config.optimizer
    if train_data.seq_len != data.seq_len:
        raise ValueError(
            f"training data has seq_len {train_data.seq_len}, data.seq_len is {data.seq_len}"
        )
    seed = _run_seed(config)
    _seed_everything(seed)
    distributed.check_strategy(training.data_parallel)
    model = build_model(config.model, device=device, seed=seed)
    if training.data_parallel == "fsdp":
        # FSDP swaps the parameters for sharded ones: AdamW must be built over those (and
        # a resume re-shards the checkpoint's full state into them). DDP wraps below.
        model = fsdp.wrap(model, world, device, mixed_precision=training.mixed_precision)
    optimizer = optim.build_adamw(
        model,
        lr=adamw.lr,
        betas=(adamw.beta1, adamw.beta2),
        eps=adamw.eps,
        weight_decay=adamw.weight_decay,
    )
    val_batches = _validation_batches(val_data, config)
    val_tokens = sum(loss.count_targets(t) for _, t in val_batches)
    guards.check_validation_size(val_tokens, training.early_stopping)
    checkpointer = None
    if options.checkpoint:
        checkpointer = checkpointing.Checkpointer(
            options.checkpoint_dir, training.save_interval, training.keep_checkpoints
        )
    state = _register(config, options, model, optimizer, world)
    last_step = options.last_step(config)
    if options.resume_from is not None:
        checkpointing.resume(options.resume_from, options.checkpoint_dir, state, world)
    resumed_from = state.data.resumed_from
    if checkpointer is not None and resumed_from:
        checkpointer.resumed_from = resumed_from  # the last good checkpoint before any save
    out_dir = options.out_dir if world.is_main else None  # rank 0 alone writes
    if resumed_from and out_dir is not None:
        # The steps after the checkpoint are taken again: their earlier lines (and a line
        # torn by a kill) leave metrics.jsonl first, so every step appears once.
        metrics.rewind(Path(out_dir), resumed_from, last_step=last_step)
    if out_dir is not None:
        write_run_manifest(config, options, Path(out_dir), seed=seed, device=device, world=world)
    # DDP after the resume (every rank holds the checkpoint's weights), compile after DDP.
    forward = distributed.wrap_data_parallel(model, world, device)
    compiled = torch.compile(forward) if options.compile or training.compile else None
    writer = metrics.MetricsWriter(out_dir, config.model, data.seq_len, device)
    if checkpointer is not None:
        checkpointer.on_saved = writer.checkpoint  # runs.db lists the saved checkpoints
    return _Run(
        config=config,
        last_step=last_step,
        train_data=train_data,
        val_batches=val_batches,
        forward=forward if compiled is None else compiled,
        eager=None if compiled is None else forward,
        losses=None if compiled is None else torch.compile(loss.token_losses),
        state=state,
        device=device,
        autocast=_autocast_dtype(config),
        orders=_EpochOrders(train_data.num_sequences, seed),
        writer=writer,
        # val_losses is the METRICS part's own list: the result sees every evaluation.
        result=TrainResult(
            steps_run=resumed_from,
            val_losses=state.metrics.losses,
            stop_reason="last_step",
            model=model,
            optimizer=optimizer,
            resumed_from=resumed_from,
        ),
        hooks=hooks,
        checkpointer=checkpointer,
        world=world,
    )


def _run_dir_lock(
    options: RunOptions, world: distributed.World
) -> contextlib.AbstractContextManager:
    """The run directory's writer lock (trainer/runfiles/lock.py), held by the rank that
    writes it from before its first file to after its end record: no second writer shares
    the directory, and a run stored as running with no holder was killed (`trainer runs`).
    Re-entrant: `trainer apply` and `trainer pipeline` hold it already."""
    if options.out_dir is None or not world.is_main:
        return contextlib.nullcontext()
    return writer_lock(Path(options.out_dir), "trainer.train.loop.train")


def train(
    config: RunConfig,
    train_data: SequenceSource,
    val_data: SequenceSource | None,
    *,
    options: RunOptions = RunOptions(),
    hooks: Hooks | None = None,
) -> TrainResult:
    """Run ``config``'s training.max_steps optimizer steps (or ``options.stop_after``, or
    until early stopping).

    ``options``: how this process runs it (options.py; the default writes nothing).
    ``hooks``: what the caller watches (hooks.py Hooks: on_start, step_batches,
    before_optimizer_step, after_step, evaluation); an object with only some of those
    methods is adapted (as_hooks). Raises before anything is built or written:
    ValueError for a stop_after past training.max_steps, preflight.PreflightError when
    the model, tokenizer, shards or resumed checkpoint disagree on the vocabulary (fresh
    start and resume alike), trainer.config.messages.ConfigError for a precision the device
    cannot honour, trainer.runfiles.lock.RunDirLockedError when another process writes
    options.out_dir. DataExhaustedError, guards.NonFiniteError or guards.DivergenceError
    during the run; a run never ends early without saying why (TrainResult.stop_reason,
    and training_state.json's status and reason, written however the run ends).
    """
    options.last_step(config)  # a stop_after past the schedule: ValueError
    preflight.check_run(config, options, train_data, val_data)  # milliseconds; before the model
    device = _resolve_device(options.device)
    check_device(config, device.type)  # fp16 anywhere, bf16 off CUDA: ConfigError
    signals = checkpointing.StopSignals() if options.checkpoint else contextlib.nullcontext()
    # torchrun's process group (world size 1 and no group without torchrun's environment)
    with (
        _deterministic(device),
        distributed.process_group(device) as world,
        signals as stop,
        _run_dir_lock(options, world),
    ):
        run = _start(
            config, options, train_data, val_data, hooks=as_hooks(hooks), device=device, world=world
        )
        run.stop = stop
        try:
            run.run()
        except BaseException as exc:
            # NaN, divergence, exhausted data, Ctrl-C without checkpoints, any bug:
            # the run records that it aborted, and the exception goes on to the caller.
            run.record_end("aborted", f"{type(exc).__name__}: {exc}")
            raise
        else:
            run.record_end(*run.end_status())
        finally:
            run.writer.close()
            # The DDP wrapper goes before its process group does (a DDP reducer freed
            # after destroy_process_group can block forever).
            run.forward = run.result.model
    return run.result
