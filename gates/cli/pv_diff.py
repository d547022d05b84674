"""`pv diff REF` — what a change does to the contracts since REF, checked like an API.

Lists every change (gates.pv.contract_diff) and fails (exit 1) on a weakening — a threshold
loosened, a gate, invariant, test or mutant removed, ``ship_blocking`` dropped — that the
contract does not own up to with a raised version and a changelog entry naming it. CI runs
``pv diff HEAD~1``; a pull request's job can run ``pv diff origin/main``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gates import exit_codes
from gates.cli.common import UsageError
from gates.provenance import at_ref
from gates.pv import contract_diff
from gates.pv.validate import find_root

SUMMARY = "what a change does to the contracts since REF; fails on an unexplained weakening"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help=SUMMARY, description=SUMMARY)
    p.add_argument("ref", metavar="REF", help="a git revision: HEAD~1, origin/main, a tag")
    p.add_argument("files", nargs="*", type=Path, metavar="FILE",
                   help="contract YAML files (default: contracts/*.yaml)")  # fmt: skip
    p.add_argument("--root", type=Path, default=None, help="project root (default: nearest "
                   "ancestor with pyproject.toml)")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    files = args.files or sorted(Path("contracts").glob("*.yaml"))
    if not files:
        raise UsageError("no contract files given and none in contracts/")
    root = (args.root or find_root(files[0])).resolve()
    unreadable: list[str] = []
    now = at_ref.by_id({str(f): f.read_text(encoding="utf-8") for f in files}, unreadable)
    if unreadable:  # what it would remove is unknown: no verdict (pv validate says more)
        raise UsageError("cannot diff a contract that does not parse: " + "; ".join(unreadable))
    folders = {f.resolve().parent.relative_to(root).as_posix() for f in files}
    try:
        before = at_ref.contracts_at(root, args.ref, folders)
    except at_ref.RefError as exc:
        raise UsageError(str(exc)) from exc
    problems: list[str] = []
    changes = 0
    for cid in sorted(before.keys() | now.keys()):
        old, new = before.get(cid), now.get(cid)
        found = contract_diff.compare(old, new)
        changes += len(found)
        for change in found:
            print(change)
        problems += contract_diff.unexplained(found, old, new)
    for problem in problems:
        print(f"error: {problem}")
    print(f"pv diff {args.ref}: {changes} change(s), {len(problems)} unexplained weakening(s)")
    return exit_codes.FINDINGS if problems else exit_codes.OK
