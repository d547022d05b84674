"""`gates audit` — every bound falsification test must pass on the real code and fail, on an
assertion, under each of its named mutants; a mutant whose seams do not hold is not run.

    gates audit [--contract C] [--gate G] [--out evidence/audit/audit.json] [--files FILE...]

Exit 0 when every run is as it must be, 1 otherwise (a survivor, a crash, a broken seam)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gates import exit_codes
from gates.audit import render_table, run_audit, write_audit_evidence
from gates.cli.common import recorded_command, require_known, valid_contracts
from gates.validate import find_root


def cmd_audit(args: argparse.Namespace) -> int:
    contracts = valid_contracts(args, "gates", remeasuring=True)
    require_known("contract", args.contract, [c.id for c in contracts])
    require_known("gate", args.gate, [g.id for c in contracts for g in c.gates])
    root = args.root or (find_root(contracts[0].path) if contracts else Path.cwd())

    def progress(row) -> None:
        print(f"  {row.test_id} {row.mutant or '(real code)'}: {row.verdict}", file=sys.stderr)
        for why in [] if row.ok else row.why():
            print(f"    {why}", file=sys.stderr)

    rows = run_audit(
        root,
        contracts,
        contract_id=args.contract,
        gate_id=args.gate,
        progress=progress if not args.quiet else None,
    )
    if not rows:
        print("gates audit: no bound falsification test selected")
        return exit_codes.OK
    print(render_table(rows))
    if args.out:
        write_audit_evidence(root, rows, recorded_command("gates", root), args.out)
        print(f"audit evidence written to {args.out}")
    return exit_codes.OK if all(r.ok for r in rows) else exit_codes.FINDINGS


def add_parser(sub: argparse._SubParsersAction, add_contract_arguments) -> None:
    p = sub.add_parser(
        "audit",
        help="prove every bound test can fail: real code passes, each named mutant is killed "
        "by an assertion (seams checked first)",
    )
    p.add_argument("--contract", metavar="C")
    p.add_argument("--gate", metavar="G")
    p.add_argument("--out", type=Path, help="write the audit evidence JSON here")
    p.add_argument("--quiet", action="store_true", help="no per-run progress on stderr")
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_audit)
