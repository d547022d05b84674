"""`gates audit` — every bound falsification test must pass on the real code and fail, on an
assertion, under each of its named mutants; a mutant whose seams do not hold is not run.

    gates audit [--contract C] [--gate G] [--out evidence/audit/audit.json] [--files FILE...]
                [--jobs N] [--no-fork] [--no-measurements]

Each gate's measurement also runs under each mutant of its bound tests and must FAIL
(gates.audit.measurements), unless the contract exempts that mutant with a reason.

Both kinds of run share one pool, ``--jobs`` at a time (the machine's cores by default), each
forked from a warm interpreter (gates.runner.forkrun); ``--no-fork`` starts a fresh process
per run instead (the same rows, slower). The longest runs of the last audit at ``--out``
start first.

Exit 0 when every run is as it must be, 1 otherwise (a survivor, a crash, a broken seam)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gates import exit_codes
from gates.audit import measurements as measurement_audit
from gates.audit.bound_tests import (
    expected_seconds,
    finished,
    plan_audit,
    render_table,
    run_longest_first,
    write_audit_evidence,
)
from gates.cli.common import positive_int, recorded_command, require_known, valid_contracts
from gates.pv.validate import find_root
from gates.runner import forkrun


def cmd_audit(args: argparse.Namespace) -> int:
    contracts = valid_contracts(args, "gates", remeasuring=True)
    require_known("contract", args.contract, [c.id for c in contracts])
    require_known("gate", args.gate, [g.id for c in contracts for g in c.gates])
    root = args.root or (find_root(contracts[0].path) if contracts else Path.cwd())

    def progress(row) -> None:
        print(f"  {row.test_id} {row.mutant or '(real code)'}: {row.verdict}", file=sys.stderr)
        for why in [] if row.ok else row.why():
            print(f"    {why}", file=sys.stderr)

    expected = expected_seconds(args.out) if args.out else None
    rows, tasks = plan_audit(
        root,
        contracts,
        contract_id=args.contract,
        gate_id=args.gate,
        progress=progress if not args.quiet else None,
        expected_seconds=expected,
    )
    if not rows:
        print("gates audit: no bound falsification test selected")
        return exit_codes.OK
    measured_rows: list = []
    if not args.no_measurements:
        measured_rows, measuring = measurement_audit.plan_measurement_audit(
            root,
            contracts,
            contract_id=args.contract,
            gate_id=args.gate,
            progress=None if args.quiet else _measurement_progress,
            expected_seconds=expected,
        )
        tasks += measuring
    # One pool for both kinds of run: a long measurement starts beside the tests, not after
    # the last of them, and the warm interpreters start once.
    warm = not args.no_fork and forkrun.AVAILABLE
    run_longest_first(root, tasks, jobs=args.jobs, warm=warm)
    rows, measured = finished(rows), finished(measured_rows)
    print(render_table(rows))
    if not args.no_measurements:
        print(measurement_audit.render_table(measured))
    if args.out:
        command = recorded_command("gates", root)
        write_audit_evidence(root, rows, command, args.out, measured if measured else None)
        print(f"audit evidence written to {args.out}")
    ok = all(r.ok for r in rows) and all(r.ok for r in measured)
    return exit_codes.OK if ok else exit_codes.FINDINGS


def _measurement_progress(row: measurement_audit.MeasurementRow) -> None:
    shown = row.outcome if row.ok else row.outcome.upper()
    print(f"  {row.gate} measured under {row.mutant}: {shown}", file=sys.stderr)


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
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=os.cpu_count() or 1,
        metavar="N",
        help="runs at a time (default: the number of CPUs, %(default)s here)",
    )
    p.add_argument(
        "--no-measurements",
        action="store_true",
        help="run only the bound tests, not each gate's measurement under their mutants",
    )
    p.add_argument(
        "--no-fork",
        action="store_true",
        help="a fresh python -m pytest per run instead of a fork of a warm interpreter",
    )
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_audit)
