"""`gates report --out FILE` — contracts, gates, evidence and audit verdicts as one HTML page.

Every contract, invariant, falsification test (each mutant with its audit verdict) and gate
(threshold against the measured value, evidence, artifacts) on one static, self-contained page.

    gates report --out report.html                       # contracts/*.yaml, evidence/
    gates report --out report.html --audit runs/audit/audit.json --plot runs/demo/plots/loss.svg

Without --audit, runs/audit/audit.json under the project root is read when it exists (the page
says so); otherwise every mutant shows "not audited". The same inputs give the same bytes.

Exit status: 0 written; 1 the contracts do not validate, an evidence, audit or plot file is
missing or invalid, or --out exists and is not a page this command wrote (each message names
the file; nothing is written); 2 usage, or the page cannot be written (it keeps its old bytes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gates import atomic, exit_codes
from gates.cli.common import valid_contracts
from gates.report import ReportInputs, count, render
from gates.report_inputs import (
    DEFAULT_AUDIT,
    ReportError,
    check_replaceable,
    href,
    load_audit,
    load_evidence,
    load_plot,
    shown,
)
from gates.validate import find_root


def _inputs(args: argparse.Namespace) -> ReportInputs:
    contracts = valid_contracts(args, "gates")
    root = args.root or (find_root(contracts[0].path) if contracts else Path.cwd())
    base_dir = args.out.absolute().parent
    check_replaceable(args.out)
    audit_path, defaulted = args.audit, False
    if audit_path is None and (root / DEFAULT_AUDIT).exists():
        audit_path, defaulted = root / DEFAULT_AUDIT, True
    audit = load_audit(audit_path, root, base_dir, defaulted=defaulted) if audit_path else None
    return ReportInputs(
        contracts=contracts,
        evidence=load_evidence(contracts, root, base_dir),
        audit=audit,
        audit_note=f"not audited: no --audit given and no {DEFAULT_AUDIT.as_posix()}",
        plots=[load_plot(p) for p in args.plot],
        contract_files={c.id: (href(c.path, base_dir), shown(c.path, root)) for c in contracts},
    )


def cmd_report(args: argparse.Namespace) -> int:
    try:
        inputs = _inputs(args)
    except ReportError as exc:
        print(f"gates report: error: {exc}; nothing written", file=sys.stderr)
        return exit_codes.FINDINGS
    page = render(inputs).encode("utf-8")
    atomic.atomic_write(args.out, page)  # the old page or the new one, never a part
    counts = count(inputs.contracts)
    audit = (
        f"audit {inputs.audit.shown_path}" if inputs.audit is not None else "no audit (not audited)"
    )
    print(
        f"wrote {args.out}: {counts.gates} gates over {len(inputs.contracts)} contracts, "
        f"{counts.ship_blocking_met} of {counts.ship_blocking_total} ship-blocking PASS, "
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
