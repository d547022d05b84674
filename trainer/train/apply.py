"""Train the run a config file describes, after every check `trainer apply` makes: the work
of `trainer apply CONFIG` (trainer/train/commands.py) and of `trainer pipeline`'s training
stage.

    result, out_dir = apply_config(Path("configs/quickstart-cpu.yaml"), ApplyOptions(stop_after=50))
    checked = check_config(config, options)   # the checks alone: config, data, options

Checks come first and write nothing: ``stop_after``, the config (schema, architecture,
the values this run's device cannot honour, C-TRAINCFG-001 with the real sequence count),
the data, and the output directory (a UTF-8 name, absent or a directory, under a writable
directory; a run already there is refused unless resumed; another process writing it -
its writer lock, trainer/runfiles/lock.py, held - is refused naming that process); the
vocabulary preflight is the loop's own (trainer/train/preflight.py), on a resume too.
The config's findings, warnings included, go to ``say`` as they are found (the
command's stderr; by default they are logged, at WARNING). A refusal
raises ApplyError (nothing written); a run that aborts after a step raises
RunAbortedError; a run that returns (finished, stopped early, by a signal or by a stop
alert) gives its TrainResult, described by ``summary_line`` and ``alert_line``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gates.io.files import fsync_dir
from trainer.checkpoint.layout import CheckpointError, checkpoint_dirs
from trainer.config.algebra import evaluate
from trainer.config.device import run_device
from trainer.config.sections import RunConfig
from trainer.config.validate import rule_finding, validate
from trainer.data.manifest import ShardError
from trainer.model.params import param_count
from trainer.runfiles.lock import RunDirLockedError, writer_lock
from trainer.runfiles.metrics_file import MetricsFileError, read_run_file
from trainer.runfiles.names import (
    CHECKPOINTS_DIR,
    METRICS_FILE,
    RUN_MANIFEST_FILE,
    RUNS_DB_FILE,
    TRAINING_STATE_FILE,
    RunDir,
)
from trainer.train import distributed, guards, loop, preflight
from trainer.train.options import RunOptions
from trainer.train.sequences import DataExhaustedError, ShardSequences
from trainer.userfiles import output_dir_problem

log = logging.getLogger(__name__)


class ApplyError(Exception):
    """The run is refused before its first step; the message says why. Nothing written."""


class RunAbortedError(Exception):
    """The run aborted after a step (non-finite loss or gradient norm, divergence, exhausted
    data); the message names the step and the value. Its checkpoints so far are kept."""


@dataclass(frozen=True)
class ApplyOptions:
    """`trainer apply`'s options; each default leaves the config's own setting. They
    become the loop's RunOptions (a run of apply always checkpoints), which
    run_manifest.json records as the config's ``apply`` block."""

    stop_after: int | None = None  # the last step of this run (the schedule stays the config's)
    out: Path | None = None  # output directory (None: the config's training.output_dir)
    device: str = "auto"  # auto | cpu | cuda
    compile: bool = False  # torch.compile the model (also on when the config says so)
    resume: str | None = None  # "latest" or a checkpoint directory
    resume_other_run: bool = False  # resume despite another config hash or data manifest
    restart: bool = False  # start over a run in ``out`` that stopped before any checkpoint


@dataclass(frozen=True)
class CheckedRun:
    """A run whose config, data and options check_config accepted."""

    cfg: RunConfig
    train_data: ShardSequences
    val_data: ShardSequences
    run: RunOptions
    out_dir: Path


def check_config(
    config: Path, options: ApplyOptions, *, say: Callable[[str], None] | None = None
) -> CheckedRun:
    """Every check of apply_config that reads the config, the data and the options but not
    what the output directory holds; ApplyError when one refuses, and nothing written.
    `trainer pipeline` runs it before it sets a finished training aside for a new config.
    Each finding is one line to ``say`` (None: logged)."""
    say = say if say is not None else _log_finding
    if options.stop_after is not None and options.stop_after < 1:
        raise ApplyError(f"--stop-after must be >= 1, got {options.stop_after}")
    # The device the run gets, not "auto": bf16 without CUDA is refused here, not warned.
    findings, cfg, _ = validate(config, device=run_device(options.device))
    errors = [f for f in findings if f.severity == "error"]
    for finding in findings:
        say(finding.render())
    if errors or cfg is None:
        raise ApplyError(f"{config}: invalid config ({len(errors)} error(s)); nothing written")

    try:
        train_data = ShardSequences(cfg.data.shards, "train", cfg.data.seq_len)
        val_data = ShardSequences(cfg.data.shards, "val", cfg.data.seq_len)
    except (ShardError, OSError, ValueError) as exc:
        raise ApplyError(f"data {cfg.data.shards}: {exc}") from exc
    report = evaluate(
        cfg.algebra_inputs(
            sequences=train_data.num_sequences,
            params=param_count(cfg.model),
            world_size=distributed.env_world_size(),
        )
    )
    if report.violations:
        for violation in report.violations:
            say(rule_finding(cfg, violation, "error").render())
        raise ApplyError(f"{config}: the step algebra refuses this run; nothing written")

    max_steps = cfg.training.max_steps
    if options.stop_after is not None and options.stop_after > max_steps:
        raise ApplyError(
            f"--stop-after {options.stop_after} is past the config's training.max_steps "
            f"{max_steps}, the end of its LR schedule; nothing written"
        )
    out_dir = options.out if options.out is not None else cfg.training.output_dir
    run = RunOptions(
        device=options.device,
        out_dir=out_dir,
        checkpoint=True,
        stop_after=options.stop_after,
        resume_from=options.resume,
        resume_override=options.resume_other_run,
        compile=options.compile,
    )
    unusable = output_dir_problem(Path(out_dir))
    if unusable:  # before the loop makes it: a file, under a file, unwritable, not UTF-8
        raise ApplyError(f"output directory {unusable}; nothing written")
    if options.restart and options.resume is not None:
        raise ApplyError("--restart starts a run over, --resume continues it: pass one")
    return CheckedRun(cfg, train_data, val_data, run, Path(out_dir))


def apply_config(
    config: Path, options: ApplyOptions, *, say: Callable[[str], None] | None = None
) -> tuple[loop.TrainResult, Path | None]:
    """Check and train the run ``config`` describes; (its result, its output directory).
    Each finding of the config's checks is one line to ``say`` (None: logged)."""
    checked = check_config(config, options, say=say)
    out_dir = checked.out_dir
    _check_run_dir(out_dir, options)  # read-only: refused before the lock writes
    try:  # the loop's own first check (milliseconds), here before the lock makes out_dir
        preflight.check_run(checked.cfg, checked.run, checked.train_data, checked.val_data)
    except preflight.PreflightError as exc:
        raise ApplyError(f"{config}: {exc}") from exc
    with _one_writer(out_dir):
        _check_run_dir(out_dir, options)  # again, now that nobody else writes it
        if options.restart:
            _set_aside(out_dir)
        result = _train(checked.cfg, config, checked.train_data, checked.val_data, checked.run)
        return result, out_dir


def _check_run_dir(out_dir: Path, options: ApplyOptions) -> None:
    """A run already in ``out_dir`` is continued (--resume) or set aside (--restart), never
    appended to; --resume needs a checkpoint to continue from."""
    previous = [name for name in (RUN_MANIFEST_FILE, METRICS_FILE) if (out_dir / name).exists()]
    if previous and options.resume is None and not options.restart:
        # Appending a second run's steps to the first's metrics would make both unreadable.
        raise ApplyError(
            f"{out_dir} already holds a run ({', '.join(previous)}); "
            f"{_what_to_do(out_dir)}; nothing written"
        )
    if options.resume is not None and str(options.resume) == "latest":
        _check_resumable(out_dir, previous)


@contextlib.contextmanager
def _one_writer(out_dir: Path) -> Iterator[None]:
    """The run directory's writer lock (trainer/runfiles/lock.py), taken by rank 0 alone:
    under torchrun every rank runs this, and only rank 0 writes."""
    if os.environ.get("RANK", "0") != "0":
        yield
        return
    try:
        with writer_lock(out_dir, "trainer apply"):
            yield
    except RunDirLockedError as exc:
        raise ApplyError(f"{exc}; nothing written") from None


def _train(
    cfg: RunConfig,
    config: Path,
    train_data: ShardSequences,
    val_data: ShardSequences,
    run: RunOptions,
) -> loop.TrainResult:
    """loop.train, its refusals as ApplyError and its aborts as RunAbortedError."""
    try:
        # loop.train runs the vocabulary preflight (model, tokenizer, shards, resumed
        # checkpoint) before it builds anything: one check for the CLI and the library.
        return loop.train(cfg, train_data, val_data, options=run)
    except preflight.PreflightError as exc:
        raise ApplyError(f"{config}: {exc}") from exc
    except (CheckpointError, MetricsFileError) as exc:  # refused before any step
        raise ApplyError(f"cannot resume: {exc}") from exc
    except (guards.NonFiniteError, guards.DivergenceError, DataExhaustedError) as exc:
        raise RunAbortedError(str(exc)) from exc


#: What a run leaves in its directory; ``--restart`` moves them into SET_ASIDE_DIR-N/.
_RUN_FILES = (RUN_MANIFEST_FILE, METRICS_FILE, TRAINING_STATE_FILE, CHECKPOINTS_DIR)
SET_ASIDE_DIR = "before-restart"


def _has_checkpoint(out_dir: Path) -> bool:
    return bool(checkpoint_dirs(RunDir(out_dir).checkpoints))


def _what_to_do(out_dir: Path) -> str:
    """The way on for a run already in ``out_dir``: resume it from its checkpoints, or,
    when it stopped before its first one (nothing to resume), start it over."""
    if _has_checkpoint(out_dir):
        return "continue it with --resume, or choose another --out or remove it"
    return (
        "it stopped before its first checkpoint, so there is nothing to resume: start it "
        f"over with --restart (its files are kept in {out_dir / SET_ASIDE_DIR}-N/), or "
        "choose another --out"
    )


def _check_resumable(out_dir: Path, previous: list[str]) -> None:
    """``--resume`` (latest) where no checkpoint was ever written: say so and what to do."""
    if _has_checkpoint(out_dir):
        return  # a valid one, or damaged ones: the loop's resume decides, and says
    if previous:
        steps = _steps_recorded(out_dir)
        raise ApplyError(
            f"cannot resume: {out_dir} holds a run ({steps}) but no checkpoint in "
            f"{RunDir(out_dir).checkpoints}: {_what_to_do(out_dir)}; nothing written"
        )
    raise ApplyError(
        f"cannot resume: {out_dir} holds no run and no checkpoint; start the run without "
        "--resume; nothing written"
    )


def _steps_recorded(out_dir: Path) -> str:
    try:  # the one read rule: a FIFO in its place is named, never waited on
        lines = read_run_file(RunDir(out_dir).metrics).splitlines()
    except FileNotFoundError:
        return "no metrics"
    except (OSError, MetricsFileError) as exc:
        return f"an unreadable {METRICS_FILE} ({exc})"
    return f"{len(lines)} step(s) in {METRICS_FILE}, none checkpointed"


def _set_aside(out_dir: Path) -> Path | None:
    """``--restart``: move the earlier run's files (its manifest, metrics, state, run store
    and an empty checkpoints directory) into ``out_dir/before-restart-N/`` - renamed,
    never deleted - so the run starts over. Refused (ApplyError) when the earlier run
    has a checkpoint: that run is resumed, not restarted. None when there was no run."""
    if _has_checkpoint(out_dir):
        raise ApplyError(
            f"--restart: {out_dir} holds checkpoints of a run: continue it with --resume, "
            "or choose another --out; nothing written"
        )
    found = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
    names = [n for n in found if n in _RUN_FILES or n.startswith(RUNS_DB_FILE)]
    if not names:
        return None
    n = 1
    while os.path.lexists(out_dir / f"{SET_ASIDE_DIR}-{n}"):  # a planted symlink included
        n += 1
    aside = out_dir / f"{SET_ASIDE_DIR}-{n}"
    try:
        aside.mkdir()
        for name in names:
            os.rename(out_dir / name, aside / name)
        fsync_dir(aside)
        fsync_dir(out_dir)
    except OSError as exc:
        raise ApplyError(f"--restart: cannot move the earlier run into {aside}: {exc}") from None
    log.warning("restart: the earlier run's %s moved to %s", ", ".join(names), aside)
    return aside


def _log_finding(line: str) -> None:
    log.warning("%s", line)


def summary_line(result: loop.TrainResult, config: Path, out_dir: Path | None) -> str:
    """One line on a run that returned: its steps, how it stopped, its loss, its files."""
    first = result.resumed_from + 1  # a resumed run's first step is the one after it
    losses = (
        f"loss {result.losses[0]:.4f} at step {first} -> {result.losses[-1]:.4f}"
        if result.losses
        else "no step left to run"
    )
    resumed = f", resumed after step {result.resumed_from}" if result.resumed_from else ""
    saved = f"; checkpoints at steps {result.checkpoints}" if result.checkpoints else ""
    return (
        f"{config}: {result.steps_run} steps ({result.stop_reason}{resumed}), {losses}; "
        f"metrics in {out_dir}{saved}"
    )


def alert_line(result: loop.TrainResult) -> str | None:
    """What stopped a run that a stop alert ended (None for any other run)."""
    if result.alert is None:
        return None
    step = result.alert.step
    kept = f"; checkpoint of step {step} saved" if step in result.checkpoints else ""
    return f"stopped by an alert: {result.alert.message()}{kept}"
