"""`trainer pipeline` - the main job: corpus to trained, exported, gated model, in one command.

    trainer pipeline                                    # configs/quickstart-cpu.yaml -> runs/demo
    trainer pipeline --config my.yaml --input corpus/ --out runs/mine
    trainer pipeline --stop-after 50 --out runs/smoke    # a shorter run of the same schedule

Stages (trainer/pipeline/run.py), each reused when its inputs hash as before:
tokenizer (BPE at the config's vocab_size) -> data (train/val shards) -> train
(`trainer apply`; an interrupted run is resumed from its newest checkpoint) -> export ->
baseline (validation perplexity vs a Kneser-Ney trigram on the same tokens) -> plots ->
gates (`gates check` of the gates this run can discharge, evidence in RUN/evidence/) ->
report. It ends with a summary, also written to RUN/summary.json.

The config's data paths and output_dir are replaced by the run directory's (RUN/run.yaml
is the config actually trained). The run directory must be new, empty or the pipeline's
own (its pipeline.json): one holding other files is refused unless --force, which moves
them into --out/before-pipeline-N/. Nothing the pipeline did not make is deleted: a stage
redone moves its old output aside as NAME.superseded-N unless it is exactly the files the
stage left. One pipeline writes a run directory at a time (a second is refused, naming the
first's pid). Exit status (trainer/exit_codes.py): 0 done; 1 bad input, a run directory
in use or not the pipeline's, a stage that failed (its message names the stage and the
cause), or a gate the gate stage checked that reads FAIL (every stage done, the summary and
report written; the gate and its evidence named on stderr); 130 or 143 the training run was
stopped by SIGINT or SIGTERM after a step and its checkpoint: nothing exported, run again to
resume; 4 a stop alert of the config ended the training run (its checkpoint is kept); 5 the
training run aborted (non-finite loss, divergence, exhausted data) - run it again after
fixing the cause: the stages before training are reused; 6 the training run's final
checkpoint could not be written (disk full, a file size limit): nothing is exported or
scored - free space and run it again, the training run resumes from its last good
checkpoint.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from trainer import exit_codes
from trainer.train.commands import add_stop_after

DEFAULT_CONFIG = Path("configs/quickstart-cpu.yaml")
DEFAULT_OUT = Path("runs/demo")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {value}")
    return value


def _stdout(line: str) -> None:
    print(line, flush=True)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from trainer.pipeline.run import Pipeline, PipelineOptions  # noqa: PLC0415
    from trainer.pipeline.state import PipelineError  # noqa: PLC0415
    from trainer.pipeline.summary import failed_checks, render_summary  # noqa: PLC0415

    if not args.config.is_file():
        print(f"trainer pipeline: error: {args.config}: no such config file", file=sys.stderr)
        return exit_codes.FINDINGS
    if args.out.exists() and not args.out.is_dir():
        print(f"trainer pipeline: error: --out {args.out} is not a directory", file=sys.stderr)
        return exit_codes.FINDINGS
    options = PipelineOptions(
        config=args.config,
        out=args.out,
        inputs=tuple(args.input),
        stop_after=args.stop_after,
        device=args.device,
        val_fraction=args.val_fraction,
        gates=not args.no_gates,
        force=args.force,
    )
    try:
        summary = Pipeline(options, say=_stdout, progress=_stderr).run()
    except PipelineError as exc:
        print(f"trainer pipeline: error: {exc}", file=sys.stderr)
        return exc.status
    except KeyboardInterrupt:  # outside training (which stops after its step, saved)
        print(
            "trainer pipeline: interrupted (SIGINT): the stage in progress is not recorded "
            "done; run the pipeline again to redo it (finished stages are reused)",
            file=sys.stderr,
        )
        return exit_codes.SIGNALLED_BASE + signal.SIGINT
    print(render_summary(summary))
    failed = failed_checks(summary)
    for line in failed:
        print(f"trainer pipeline: error: gate stage: {line}", file=sys.stderr)
    return exit_codes.FINDINGS if failed else exit_codes.OK


def add_pipeline_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pipeline",
        help="the main job: tokenizer, shards, training, export, baseline, plots, gates",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help=f"default {DEFAULT_CONFIG}")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"run directory ({DEFAULT_OUT})")
    p.add_argument(
        "--input",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="corpus file or directory (repeatable); default: the embedded corpus",
    )
    add_stop_after(p, _positive)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--val-fraction", type=_fraction, default=0.02)
    p.add_argument("--no-gates", action="store_true", help="skip the gate stage")
    p.add_argument(
        "--force",
        action="store_true",
        help="an --out holding files the pipeline did not write: move them into "
        "--out/before-pipeline-N/ (never deleted) instead of refusing",
    )
    p.set_defaults(run=cmd_pipeline)
