"""`pv init [DIR]` — scaffold shipgate into a project: an example contract bound to an
example test, its mutant and measurement, evidence/, and the pyproject.toml tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from gates.cli.common import UsageError
from gates.pv import scaffold

SUMMARY = "scaffold contracts/, an example gate and [tool.shipgate] into a project"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help=SUMMARY, description=SUMMARY)
    p.add_argument(
        "directory",
        nargs="?",
        type=Path,
        default=Path("."),
        help="the project root (default: the current directory)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    root: Path = args.directory
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    try:
        plan = scaffold.plan(root)
    except scaffold.ScaffoldError as e:
        raise UsageError(str(e)) from e
    scaffold.apply(plan)
    print(scaffold.next_steps(root, plan))
    return 0
