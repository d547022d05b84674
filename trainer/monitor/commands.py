"""`trainer monitor RUN_DIR` - watch a training run, read-only.

    trainer monitor runs/demo/train                 # live view, every 2 s, until Ctrl-C or the end
    trainer monitor runs/demo/train --once          # one view, then exit
    trainer monitor runs/demo/train --json          # one JSON object (the snapshot), then exit
    trainer monitor runs/demo/train --interval 10

It only reads (trainer/monitor/snapshot.py), so any number of monitors can watch one run
while it trains. The live view ends when the run does (finished, early stopping, a
signal, a stop alert, aborted, a final checkpoint not written: its end record in
training_state.json), after a last view.
Exit status: 0 (also on Ctrl-C, and when the run ends); 1 RUN_DIR is not a run directory
or its metrics cannot be trusted, the path named; 2 a usage error (--interval must be > 0).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from trainer import exit_codes


def _fail(message: str) -> int:
    print(f"trainer monitor: error: {message}", file=sys.stderr)
    return exit_codes.FINDINGS


def _interval(text: str) -> float:
    """--interval: seconds, finite and > 0 (0 would spin a core re-reading the run)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def watch(run_dir: Path, interval: float, console: object) -> int:
    """Refresh the view every ``interval`` seconds until the run ends (a final view, exit
    0) or Ctrl-C (exit 0)."""
    from rich.live import Live  # noqa: PLC0415 - rich only when a view is drawn

    from trainer.monitor.snapshot import take_snapshot  # noqa: PLC0415
    from trainer.monitor.view import render  # noqa: PLC0415
    from trainer.runfiles.training_state import END_STATUSES  # noqa: PLC0415

    snap = take_snapshot(run_dir)
    try:
        with Live(render(snap), console=console, auto_refresh=False) as live:
            while snap.status not in END_STATUSES:
                time.sleep(interval)
                snap = take_snapshot(run_dir)
                live.update(render(snap), refresh=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a watch ends: not an error
    return exit_codes.OK


def cmd_monitor(args: argparse.Namespace) -> int:
    from rich.console import Console  # noqa: PLC0415

    from trainer.monitor.snapshot import RunDirError, take_snapshot  # noqa: PLC0415
    from trainer.monitor.view import render  # noqa: PLC0415
    from trainer.runfiles.metrics_file import MetricsFileError  # noqa: PLC0415

    try:
        if args.json:
            print(json.dumps(take_snapshot(args.run_dir).to_json(), indent=2))
            return exit_codes.OK
        console = Console()
        if args.once:
            console.print(render(take_snapshot(args.run_dir)))
            return exit_codes.OK
        return watch(args.run_dir, args.interval, console)
    except (RunDirError, MetricsFileError, OSError) as exc:
        return _fail(str(exc))


def add_monitor_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "monitor",
        help="watch a training run (read-only): progress, loss, LR, ETA, checkpoints, alerts",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--json", action="store_true", help="print the snapshot as JSON, exit")
    mode.add_argument("--once", action="store_true", help="draw the view once, exit")
    p.add_argument(
        "--interval",
        type=_interval,
        default=2.0,
        metavar="S",
        help="seconds between refreshes of the live view (default 2)",
    )
    p.set_defaults(run=cmd_monitor)
