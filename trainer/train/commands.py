"""`trainer apply CONFIG` - train the model a run config describes.

    trainer apply configs/quickstart-cpu.yaml                     # the whole run
    trainer apply configs/quickstart-cpu.yaml --max-steps 50 --out /tmp/run

Checks come first and write nothing: the config (schema, architecture, C-TRAINCFG-001
with the real sequence count), then the data, then the vocabulary preflight (model,
tokenizer, shards and a resumed checkpoint agree; trainer/train/preflight.py, run by the
loop itself before it builds the model, on a resume too). Then the run writes, in the
output directory, run_manifest.json (before step 1), metrics.jsonl (one line per step)
and training_state.json (replaced atomically every step).

``--resume [latest|PATH]`` continues a run from its newest valid checkpoint (or PATH):
weights, AdamW state, scheduler step, data position and RNG states are restored; a
checkpoint of another config or data set is refused unless ``--resume-other-run``.

``--max-steps N`` stops the run after N steps of the configured schedule (the learning
rate follows the configured max_steps; the manifest records the override).

Data parallel: ``torchrun --standalone --nproc_per_node N -m trainer apply CONFIG`` (or
``trainer apply CONFIG --nproc N``, which execs exactly that) trains on N processes
(trainer/train/distributed.py): a global batch of micro_batch x grad_accum x N
sequences; rank 0 writes the metrics, the manifest and the checkpoints. A checkpoint is
resumed on the world size that wrote it, or refused (exit 1).

Alerts: the config's ``monitoring.alerts`` rules (``- when: loss > 12.0`` / ``action:
stop | warn``) are checked after every step; warn prints a line on stderr and adds an
``alerts`` entry to the step's metrics line, stop ends the run after the first step that
breaches the rule, with that step's checkpoint (trainer/train/alerts.py).

Exit status: 0 the run finished (max_steps, early stopping, or SIGTERM/SIGINT after the
step in progress and a checkpoint); 1 the config or the data is unusable, the output
directory already holds a run, the vocabularies disagree, or the resume is refused
(nothing written); 3 the run aborted (non-finite loss or gradient norm, divergence,
exhausted data), with the step and the value on stderr; 4 a stop alert ended the run
after a step (checkpointed when the run has a checkpoint directory), with the rule, the
step and the value on stderr. Under torchrun the launcher's own status is 1 whenever a
rank exits non-zero (3 or 4 included); rank 0's stderr says which. training_state.json
records how every run ended (status finished | early_stopping | signal | alert | aborted,
and the reason).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

INPUT_ERROR_STATUS = 1
ABORT_STATUS = 3  # looked up at exit time (tests/mutants/loop.py: exit-zero-on-abort)
ALERT_STATUS = 4  # a stop rule of monitoring.alerts ended the run


def _fail(message: str) -> int:
    print(f"trainer apply: error: {message}", file=sys.stderr)
    return INPUT_ERROR_STATUS


def _torchrun_argv(args: argparse.Namespace) -> list[str]:
    """``python -m torch.distributed.run ... -m trainer apply`` with this call's options."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc_per_node", str(args.nproc), "-m", "trainer", "apply", str(args.config)]
    if args.max_steps is not None:
        argv += ["--max-steps", str(args.max_steps)]
    if args.out is not None:
        argv += ["--out", str(args.out)]
    argv += ["--device", args.device]
    if args.compile:
        argv.append("--compile")
    if args.resume is not None:
        argv += ["--resume", str(args.resume)]
    if args.resume_other_run:
        argv.append("--resume-other-run")
    return argv


def _exec_torchrun(args: argparse.Namespace) -> int:
    """Replace this process with torchrun running the same apply on ``--nproc`` ranks."""
    from trainer.train.distributed import launched_by_torchrun  # noqa: PLC0415

    if args.nproc < 1:
        return _fail(f"--nproc must be >= 1, got {args.nproc}")
    if launched_by_torchrun():
        return _fail("--nproc inside a torchrun launch: torchrun already chose the processes")
    argv = _torchrun_argv(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)  # argv built above; no shell
    return INPUT_ERROR_STATUS  # not reached: execvp returns only by raising


def cmd_apply(args: argparse.Namespace) -> int:
    if args.nproc is not None:
        return _exec_torchrun(args)
    from trainer.checkpoint.layout import CHECKPOINTS_DIR, CheckpointError  # noqa: PLC0415
    from trainer.config.algebra import evaluate  # noqa: PLC0415 - keep torch out of CLI start-up
    from trainer.config.commands import rule_finding, validate  # noqa: PLC0415
    from trainer.data.loader import DataExhaustedError  # noqa: PLC0415
    from trainer.data.manifest import ShardError  # noqa: PLC0415
    from trainer.model.params import param_count  # noqa: PLC0415
    from trainer.train import distributed, guards, loop, preflight  # noqa: PLC0415
    from trainer.train.metrics_file import (  # noqa: PLC0415
        METRICS_FILE,
        RUN_MANIFEST,
        MetricsFileError,
    )
    from trainer.train.sequences import ShardSequences  # noqa: PLC0415

    if args.max_steps is not None and args.max_steps < 1:
        return _fail(f"--max-steps must be >= 1, got {args.max_steps}")
    findings, cfg, _ = validate(args.config)
    errors = [f for f in findings if f.severity == "error"]
    for finding in findings:
        print(finding.render(), file=sys.stderr)
    if errors or cfg is None:
        return _fail(f"{args.config}: invalid config ({len(errors)} error(s)); nothing written")

    try:
        train_data = ShardSequences(cfg.data.shards, "train", cfg.data.seq_len)
        val_data = ShardSequences(cfg.data.shards, "val", cfg.data.seq_len)
    except (ShardError, OSError, ValueError) as exc:
        return _fail(f"data {cfg.data.shards}: {exc}")
    report = evaluate(
        cfg.algebra_inputs(
            sequences=train_data.num_sequences,
            params=param_count(cfg.model),
            world_size=distributed.env_world_size(),
        )
    )
    if report.violations:
        for violation in report.violations:
            print(rule_finding(cfg, violation, "error").render(), file=sys.stderr)
        return _fail(f"{args.config}: the step algebra refuses this run; nothing written")

    settings = loop.settings_from_config(cfg)
    if args.max_steps is not None and args.max_steps > settings.max_steps:
        return _fail(
            f"--max-steps {args.max_steps} is past the config's training.max_steps "
            f"{settings.max_steps}, the end of its LR schedule; nothing written"
        )
    overrides: dict = {"device": args.device, "compile": args.compile or settings.compile}
    if args.out is not None:
        overrides |= {"out_dir": args.out, "checkpoint_dir": args.out / CHECKPOINTS_DIR}
    if args.resume is not None:
        overrides |= {"resume_from": args.resume, "resume_override": args.resume_other_run}
    if args.max_steps is not None and args.max_steps < settings.max_steps:
        overrides |= {"max_steps": args.max_steps, "schedule_steps": settings.max_steps}
    settings = dataclasses.replace(settings, **overrides)
    previous = [
        name
        for name in (RUN_MANIFEST, METRICS_FILE)
        if settings.out_dir is not None and (Path(settings.out_dir) / name).exists()
    ]
    if previous and args.resume is None:
        # Appending a second run's steps to the first's metrics would make both unreadable.
        return _fail(
            f"{settings.out_dir} already holds a run ({', '.join(previous)}); "
            "choose another --out or remove it; nothing written"
        )
    if settings.resolved_config is not None:
        settings.resolved_config["apply"] = {
            "max_steps": args.max_steps,
            "out": str(settings.out_dir),
            "device": args.device,
            "compile": settings.compile,
            "resume": args.resume,
        }

    try:
        # loop.train runs the vocabulary preflight (model, tokenizer, shards, resumed
        # checkpoint) before it builds anything: one check for the CLI and the library.
        result = loop.train(settings, train_data, val_data)
    except preflight.PreflightError as exc:
        return _fail(f"{args.config}: {exc}")
    except (CheckpointError, MetricsFileError) as exc:  # refused before any step
        return _fail(f"cannot resume: {exc}")
    except (guards.NonFiniteError, guards.DivergenceError, DataExhaustedError) as exc:
        print(f"trainer apply: run aborted: {exc}", file=sys.stderr)
        return ABORT_STATUS
    return _report(result, args.config, settings.out_dir)


def _report(result: Any, config: Path, out_dir: Path | None) -> int:
    """Rank 0's summary of a run that returned, and the exit status: ALERT_STATUS on every
    rank when a stop rule ended the run (it did not finish), else 0."""
    status = ALERT_STATUS if result.stop_reason == "alert" else 0
    if os.environ.get("RANK", "0") != "0":
        return status  # rank 0 reports the run
    first = result.resumed_from + 1  # a resumed run's first step is the one after it
    losses = (
        f"loss {result.losses[0]:.4f} at step {first} -> {result.losses[-1]:.4f}"
        if result.losses
        else "no step left to run"
    )
    resumed = f", resumed after step {result.resumed_from}" if result.resumed_from else ""
    saved = f"; checkpoints at steps {result.checkpoints}" if result.checkpoints else ""
    print(
        f"{config}: {result.steps_run} steps ({result.stop_reason}{resumed}), {losses}; "
        f"metrics in {out_dir}{saved}"
    )
    if result.alert is not None:
        step = result.alert.step
        kept = f"; checkpoint of step {step} saved" if step in result.checkpoints else ""
        print(
            f"trainer apply: stopped by an alert: {result.alert.message()}{kept}", file=sys.stderr
        )
    return status


def add_apply_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apply",
        help="train the model a run config describes",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("config", type=Path, metavar="CONFIG")
    p.add_argument("--max-steps", type=int, default=None, help="stop after N steps")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: config)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument(
        "--nproc",
        type=int,
        default=None,
        metavar="N",
        help="data parallel on N local processes: exec torchrun --nproc_per_node N",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        default=None,
        metavar="latest|PATH",
        help="continue from the newest valid checkpoint (default) or the checkpoint PATH",
    )
    p.add_argument(
        "--resume-other-run",
        action="store_true",
        help="resume even when the checkpoint's config hash or data manifest differ",
    )
    p.set_defaults(run=cmd_apply)
