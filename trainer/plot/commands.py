"""`trainer plot RUN_DIR... [--out DIR] [--format png,svg]` - draw runs' metrics.

    trainer plot runs/demo/train              # runs/demo/train/plots/loss.png and loss.svg
    trainer plot runs/a runs/b --out runs/ab --format svg    # two runs overlaid

Draws loss (validation loss as dashed markers where the run evaluated), learning rate and
gradient norm against the step (trainer/plot/figure.py), several runs overlaid, each named
by its directory (with parent names when two share one). One run writes RUN_DIR/plots/ by
default; several need --out, since no one run's directory is the obvious home.

Writes are atomic (temp file + os.replace in the target directory), so an interrupted plot
leaves the old file or the new one. Re-plotting replaces our own loss.png/loss.svg (they name
"shipgate trainer plot" as their creator); any other file at those paths is refused.

Exit status: 0 written; 1 a RUN_DIR that is missing, not a directory, has no metrics.jsonl,
an empty one or a bad line before the last (named with its line), or an output path that is
not ours - nothing written (a write that fails, disk full say, is exit 1 too, naming the
file, which keeps its old bytes); 2 usage (an unknown --format, several runs without --out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer import exit_codes
from trainer.runfiles.names import RunDir


def _fail(message: str) -> int:
    print(f"trainer plot: error: {message}; nothing written", file=sys.stderr)
    return exit_codes.FINDINGS


def formats(text: str) -> tuple[str, ...]:
    """``png,svg`` -> ("png", "svg"): known formats, each once, in the order given."""
    from trainer.plot.figure import FORMATS  # noqa: PLC0415 - no matplotlib at CLI start-up

    chosen = tuple(dict.fromkeys(f.strip().lower() for f in text.split(",")))
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown format {', '.join(map(repr, unknown))}; choose from {', '.join(FORMATS)}"
        )
    return chosen


def cmd_plot(args: argparse.Namespace) -> int:
    # matplotlib and torch only when plotting
    from trainer.plot.write import PlotError, PlotWriteError, write_plots  # noqa: PLC0415

    if len(args.runs) > 1 and args.out is None:
        args.parser.error("several runs need --out DIR (no one run's directory is their home)")
    out = args.out if args.out is not None else RunDir(args.runs[0]).plots
    try:
        result = write_plots(args.runs, out, args.format)
    except PlotWriteError as exc:
        print(f"trainer plot: error: {exc}", file=sys.stderr)
        return exit_codes.FINDINGS
    except PlotError as exc:
        return _fail(str(exc))
    print(f"{', '.join(result.drawn)}: wrote {', '.join(str(p) for p in result.files)}")
    return exit_codes.OK


def add_plot_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw loss, validation loss, LR and grad norm of one or more runs (PNG, SVG)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument(
        "runs",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="a directory trainer apply wrote (--out)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="output directory (default: RUN_DIR/plots; required for several runs)",
    )
    p.add_argument(
        "--format",
        type=formats,
        default=("png", "svg"),
        metavar="png,svg",
        help="comma-separated formats (default: png,svg)",
    )
    p.set_defaults(run=cmd_plot, parser=p)
