"""`trainer apply CONFIG` - train the model a run config describes.

    trainer apply configs/quickstart-cpu.yaml                     # the whole run
    trainer apply configs/quickstart-cpu.yaml --stop-after 50 --out /tmp/run

Checks come first and write nothing: the config (schema, architecture, C-TRAINCFG-001
with the real sequence count), then the data, then the vocabulary preflight (model,
tokenizer, shards and a resumed checkpoint agree; trainer/train/preflight.py, run by the
loop itself before it builds the model, on a resume too). Then the run writes, in the
output directory, run_manifest.json (before step 1), metrics.jsonl (one line per step)
and training_state.json (replaced atomically every step). The checks and the run are
trainer/train/apply.py's (`trainer pipeline` calls them too); this module parses and reports.

``--resume [latest|PATH]`` continues a run from its newest valid checkpoint (or PATH):
weights, AdamW state, scheduler step, data position and RNG states are restored; a
checkpoint of another config or data set is refused unless ``--resume-other-run``.

A run stopped before its first checkpoint (killed after a step, before save_interval)
has nothing to resume: ``--resume`` says so, and ``--restart`` starts it over in the same
directory, its earlier files moved (never deleted) into ``before-restart-N/`` there.
``--restart`` is refused where the run has a checkpoint: that run is resumed.

``--stop-after N`` ends this run after step N of the configured schedule: the learning
rate still follows training.max_steps, the schedule's length, so a later ``--resume``
continues the same run (run_manifest.json records it as ``apply.stop_after``).

Data parallel: ``torchrun --standalone --nproc_per_node N -m trainer apply CONFIG`` (or
``trainer apply CONFIG --nproc N``, which execs exactly that) trains on N processes
(trainer/train/distributed.py): a global batch of micro_batch x grad_accum x N
sequences; rank 0 writes the metrics, the manifest and the checkpoints. A checkpoint is
resumed on the world size that wrote it, or refused (exit 1).

Alerts: the config's ``monitoring.alerts`` rules (``- when: loss > 12.0`` / ``action:
stop | warn``) are checked after every step; warn prints a line on stderr and adds an
``alerts`` entry to the step's metrics line, stop ends the run after the first step that
breaches the rule, with that step's checkpoint (trainer/train/alerts.py).

Exit status: 0 the run finished (its last step, early stopping, or SIGTERM/SIGINT after the
step in progress and a checkpoint); 1 the config or the data is unusable, the output
directory already holds a run, the vocabularies disagree, or the resume is refused
(nothing written); 4 a stop alert ended the run after a step (checkpointed when the run
has a checkpoint directory), with the rule, the step and the value on stderr; 5 the run
aborted (non-finite loss or gradient norm, divergence, exhausted data), with the step and
the value on stderr; 6 the run stopped (any of the ways above) but its final checkpoint
could not be written (disk full, a file size limit, permission), with the cause and the
last good checkpoint on stderr (trainer/exit_codes.py). Under torchrun the launcher's own
status is 1 whenever a rank exits non-zero (4, 5 or 6 included); rank 0's stderr says
which. training_state.json records how every run ended (status finished | early_stopping
| signal | alert | aborted | save_failed, and the reason).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Statuses are looked up at exit time (exit_codes.ABORTED: tests/mutants/loop.py's
# exit-zero-on-abort sets it to 0).
from trainer import exit_codes


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _fail(message: str) -> int:
    print(f"trainer apply: error: {message}", file=sys.stderr)
    return exit_codes.FINDINGS


def _torchrun_argv(args: argparse.Namespace) -> list[str]:
    """``python -m torch.distributed.run ... -m trainer apply`` with this call's options."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    argv += ["--nproc_per_node", str(args.nproc), "-m", "trainer", "apply", str(args.config)]
    if args.stop_after is not None:
        argv += ["--stop-after", str(args.stop_after)]
    if args.out is not None:
        argv += ["--out", str(args.out)]
    argv += ["--device", args.device]
    if args.compile:
        argv.append("--compile")
    if args.resume is not None:
        argv += ["--resume", str(args.resume)]
    if args.resume_other_run:
        argv.append("--resume-other-run")
    if args.restart:
        argv.append("--restart")
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
    return exit_codes.FINDINGS  # not reached: execvp returns only by raising


def cmd_apply(args: argparse.Namespace) -> int:
    if args.nproc is not None:
        return _exec_torchrun(args)
    # torch comes with the library, never at CLI start-up
    from trainer.train.apply import (  # noqa: PLC0415
        ApplyError,
        ApplyOptions,
        RunAbortedError,
        apply_config,
    )

    options = ApplyOptions(
        stop_after=args.stop_after,
        out=args.out,
        device=args.device,
        compile=args.compile,
        resume=args.resume,
        resume_other_run=args.resume_other_run,
        restart=args.restart,
    )
    try:
        result, out_dir = apply_config(args.config, options, say=_stderr)
    except ApplyError as exc:
        return _fail(str(exc))
    except RunAbortedError as exc:
        print(f"trainer apply: run aborted: {exc}", file=sys.stderr)
        return exit_codes.ABORTED
    return _report(result, args.config, out_dir)


def _report(result: Any, config: Path, out_dir: Path | None) -> int:
    """Rank 0's summary of a run that returned, and the exit status: SAVE_FAILED on every
    rank when its final checkpoint could not be written, ALERT_STOPPED when a stop rule
    ended the run (it did not finish), else 0."""
    from trainer.train.apply import alert_line, summary_line  # noqa: PLC0415

    status = exit_codes.ALERT_STOPPED if result.stop_reason == "alert" else exit_codes.OK
    save_failed = result.save_failed
    if save_failed is not None:
        status = exit_codes.SAVE_FAILED
    if os.environ.get("RANK", "0") != "0":
        return status  # rank 0 reports the run
    print(summary_line(result, config, out_dir))
    alert = alert_line(result)
    if alert is not None:
        print(f"trainer apply: {alert}", file=sys.stderr)
    if save_failed is not None:
        print(
            f"trainer apply: error: the final checkpoint of step {result.steps_run} was not "
            f"written: {save_failed}. The run is not finished (status save_failed); free "
            "space or fix the cause, then resume it with --resume",
            file=sys.stderr,
        )
    return status


class _RenamedOption(argparse.Action):
    """An option that was renamed: refused, naming the new one (never silently mapped)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(
            f"{option_string} is now --stop-after N: the last step of this run "
            "(training.max_steps, in the config, is the length of its schedule)"
        )


def add_stop_after(p: argparse.ArgumentParser, kind: Callable[[str], int]) -> None:
    """``--stop-after N``, the last step of this run, on `trainer apply` and `trainer
    pipeline`; its old name ``--max-steps`` is refused with the new one."""
    p.add_argument(
        "--stop-after",
        type=kind,
        default=None,
        metavar="N",
        help="end this run after step N (the LR schedule stays training.max_steps long)",
    )
    p.add_argument("--max-steps", action=_RenamedOption, help=argparse.SUPPRESS)


def add_apply_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apply",
        help="train the model a run config describes",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("config", type=Path, metavar="CONFIG")
    add_stop_after(p, int)
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
    p.add_argument(
        "--restart",
        action="store_true",
        help="start over a run in --out that stopped before its first checkpoint "
        "(its files are moved to --out/before-restart-N/)",
    )
    p.set_defaults(run=cmd_apply)
