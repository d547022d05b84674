"""`pv` — the contract validator. `pv validate contracts/*.yaml` is what CI runs.

Exit codes (gates/exit_codes.py): 0 clean, 1 findings, 2 usage or I/O error, 3 internal.
"""

from __future__ import annotations

import argparse
import sys

from gates import __version__
from gates.cli import pv_diff, pv_init, pv_rules, pv_status, pv_validate
from gates.cli.common import run_guarded


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pv", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pv {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (pv_validate, pv_status, pv_diff, pv_rules, pv_init):
        module.add_parser(sub)
    for p in sub.choices.values():  # --debug also after the subcommand
        p.add_argument(
            "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_guarded("pv", lambda: args.run(args), args.debug)


if __name__ == "__main__":
    sys.exit(main())
