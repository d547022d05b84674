"""`pv rules` — list every rule pv can report, with severity and fix hint."""

from __future__ import annotations

import argparse

from gates.model.rules import RULES

SUMMARY = "list the rules pv validate reports"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("rules", help=SUMMARY, description=SUMMARY)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    width = max(len(r) for r in RULES)
    for r in RULES.values():
        print(f"{r.id:<{width}}  {r.severity.value:<7}  {r.summary}")
    return 0
