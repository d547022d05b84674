"""`pv validate FILE...` — strict validation of contracts for CI."""

from __future__ import annotations

import argparse
import sys

from gates import exit_codes
from gates.cli.common import add_contract_arguments, default_contracts
from gates.pv.render import FORMATS, render
from gates.pv.validate import validate

SUMMARY = "validate contracts: schema, semantics, references, bound tests, evidence"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help=SUMMARY, description=SUMMARY)
    add_contract_arguments(p)
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.add_argument("--strict", action="store_true", help="fail on warnings too")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    files = args.files or default_contracts()
    result = validate(files, root=args.root, debug=args.debug)
    for message in result.unreadable:
        print(f"pv: error: {message}", file=sys.stderr)
    if result.report.files:
        print(render(result.report, args.format))
    for note in result.notes:  # on stderr: --format json's stdout stays one document
        print(f"pv: note: {note}", file=sys.stderr)
    if result.unreadable:
        return exit_codes.USAGE
    failing = result.report.errors or (args.strict and result.report.warnings)
    return exit_codes.FINDINGS if failing else exit_codes.OK
