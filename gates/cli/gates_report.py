"""`gates report --out FILE` — contracts, gates, evidence and audit verdicts as one HTML page.

Every contract, invariant, falsification test (each mutant with its audit verdict) and gate
(threshold against the measured value, evidence, artifacts) on one static, self-contained page.

    gates report --out report.html                       # contracts/*.yaml, evidence/
    gates report --out report.html --audit evidence/audit/audit.json --plot runs/demo/plots/loss.svg

Without --audit, evidence/audit/audit.json under the project root is read when it exists (the page
says so); otherwise every mutant shows "not audited". The same inputs give the same bytes.

Exit status: 0 written; 1 the contracts do not validate, an evidence, audit or plot file is
missing or invalid, or --out exists and is not a page this command wrote (each message names
the file; nothing is written); 2 usage, or the page cannot be written (it keeps its old bytes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gates import exit_codes
from gates.cli.common import valid_contracts
from gates.io import files
from gates.report.inputs import DEFAULT_AUDIT, ReportError, gather
from gates.report.page import ReportInputs, count, render


def _inputs(args: argparse.Namespace) -> ReportInputs:
    contracts = valid_contracts(args, "gates")
    return gather(contracts, args.out, root=args.root, audit=args.audit, plots=args.plot)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        inputs = _inputs(args)
    except ReportError as exc:
        print(f"gates report: error: {exc}; nothing written", file=sys.stderr)
        return exit_codes.FINDINGS
    page = render(inputs).encode("utf-8")
    files.atomic_write_bytes(args.out, page)  # the old page or the new one, never a part
    counts = count(inputs.contracts, inputs.stale)
    on_stale = (
        f", {len(counts.stale_blocking)} of them on stale evidence" if counts.stale_blocking else ""
    )
    audit = (
        f"audit {inputs.audit.shown_path}" if inputs.audit is not None else "no audit (not audited)"
    )
    print(
        f"wrote {args.out}: {counts.gates} gates over {len(inputs.contracts)} contracts, "
        f"{counts.ship_blocking_met} of {counts.ship_blocking_total} ship-blocking PASS{on_stale}, "
        f"ship-ready {'yes' if counts.ship_ready else 'no'}; {audit}; {len(inputs.plots)} plots"
    )
    return exit_codes.OK


def add_parser(sub: argparse._SubParsersAction, add_contract_arguments) -> None:
    p = sub.add_parser(
        "report",
        help="write one static HTML page of every contract, gate, evidence and audit verdict",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the HTML page")
    p.add_argument(
        "--audit",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"a gates audit --out file (default: {DEFAULT_AUDIT.as_posix()} when it exists)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help="SVG or PNG files to embed (e.g. trainer plot's loss.svg)",
    )
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_report)
