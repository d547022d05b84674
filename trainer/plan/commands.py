"""`trainer plan CONFIG` — everything that can be known about a run before it starts.

    trainer plan configs/quickstart-cpu.yaml
    trainer plan configs/pretrain-350m-v1.yaml --sequences 22079 --no-timing
    trainer plan configs/llama-370m.yaml --device cuda --device-memory 24GiB --format json

Sections: config, architecture, parameters, memory budget, step algebra
(C-TRAINCFG-001), data, tokenizer, time estimate; each with a verdict (ok / warn / FAIL /
skipped) and its numbers. No training, no writes; no GPU needed. Exit 0 when nothing
fails, 1 otherwise (text and JSON alike); bad input is a message, never a traceback.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from trainer.config.commands import add_world_size_argument
from trainer.plan.memory import parse_size
from trainer.plan.report import render_json, render_text
from trainer.plan.sections import DEVICES, PlanOptions, make_plan


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _sequences(text: str) -> int:
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} sequences: must be >= 0")
    return value


def _hours(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be > 0 hours")
    return value


def cmd_plan(args: argparse.Namespace) -> int:
    report = make_plan(
        PlanOptions(
            config=args.config,
            sequences=args.sequences,
            device=args.device,
            device_memory=args.device_memory,
            timing=not args.no_timing,
            time_budget_hours=args.time_budget,
            world_size=args.world_size,
        )
    )
    print(render_json(report) if args.format == "json" else render_text(report))
    return report.exit_code


def add_plan_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="check a run config before training: architecture, memory, step algebra, data, "
        "tokenizer, time",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("config", type=Path, metavar="CONFIG")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--device",
        choices=DEVICES,
        default="auto",
        help="the device the run is planned for (auto: CUDA when present, else the CPU)",
    )
    p.add_argument(
        "--device-memory",
        type=_size,
        default=None,
        metavar="SIZE",
        help="memory to plan against instead of the device's own, e.g. 24GiB or 80GB",
    )
    p.add_argument(
        "--sequences",
        type=_sequences,
        default=None,
        metavar="N",
        help="what-if: use N training sequences instead of counting them from data.shards",
    )
    p.add_argument("--no-timing", action="store_true", help="skip the measured time estimate")
    p.add_argument(
        "--time-budget",
        type=_hours,
        default=None,
        metavar="HOURS",
        help="fail when the estimated run exceeds HOURS (default: warn above 24 h)",
    )
    add_world_size_argument(p)
    p.set_defaults(run=cmd_plan)
