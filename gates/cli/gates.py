"""`gates` — gates and their evidence: list, show, check, promote, demote, audit, report.

A gate's status changes only through `gates promote` / `gates demote`, never by hand:
promotion re-measures the gate against real artifacts and writes the evidence it shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gates import __version__, exit_codes
from gates.cli import gates_audit, gates_promotion, gates_report
from gates.cli.common import (
    UsageError,
    add_contract_arguments,
    require_known,
    run_guarded,
    valid_contracts,
)
from gates.io import files
from gates.model.contract import SHIP_STATUSES, Contract, Gate
from gates.provenance import attestation, evidence
from gates.pv.validate import find_root


def cmd_list(args: argparse.Namespace) -> int:
    contracts = valid_contracts(args, "gates")
    require_known("contract", args.contract, [c.id for c in contracts])
    rows = [
        (c, g)
        for c in contracts
        for g in c.gates
        if (not args.contract or c.id == args.contract)
        and (not args.status or g.status == args.status)
    ]
    for c, g in rows:
        flag = "ship-blocking" if g.ship_blocking else "-"
        print(f"{g.id:<26} {g.status:<8} {flag:<13} {c.id:<24} {g.thresholds_text()}")
    return exit_codes.OK


def _evidence_summary(c: Contract, g: Gate) -> dict | None:
    """Verdict, time, commit and measurements of the gate's current evidence file."""
    if not g.evidence:
        return None
    path = find_root(c.path) / g.evidence
    try:
        ev = evidence.load(path)
    except evidence.EvidenceError as exc:
        return {"error": str(exc)}
    return {
        "verdict": ev["verdict"],
        "captured_at": ev["captured_at"],
        "commit": ev["git"]["commit"][:12] + (" (dirty)" if ev["git"]["dirty"] else ""),
        "contract_version": ev["contract"]["version"],
        **{k: f"{m['value']:g} {m['unit']}" for k, m in ev["measurements"].items()},
        "artifacts": len(ev["artifacts"]),
    }


def cmd_show(args: argparse.Namespace) -> int:
    contracts = valid_contracts(args, "gates")
    c, g = gates_promotion.find_gate(contracts, args.gate)
    history = [e for e in c.changelog if g.id in e.text]
    info = {
        "gate": g.id,
        "contract": c.id,
        "contract_version": c.metadata.version,
        "status": g.status,
        "ship_blocking": g.ship_blocking,
        "rule": g.rule,
        "threshold": g.threshold.as_dict(),
        "thresholds": [t.as_dict() for t in g.thresholds],
        "falsification_tests": [
            {"id": t.id, "status": t.status, "test": t.test, "mutants": [m.id for m in t.mutants]}
            for t in (c.test(ref) for ref in g.falsification_tests)
            if t is not None
        ],
        "evidence": g.evidence,
        "evidence_summary": _evidence_summary(c, g),
        "partial_note": g.partial_note,
        "blocks_on": list(g.blocks_on),
        "history": [{"version": e.version, "date": e.date, "text": e.text} for e in history],
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return exit_codes.OK
    print(f"{g.id}  [{g.status}]{'  ship-blocking' if g.ship_blocking else ''}")
    print(f"  contract:  {c.id} {c.metadata.version} ({c.path})")
    print(f"  rule:      {' '.join(g.rule.split())}")
    print(f"  threshold: {g.thresholds_text()}")
    for t in info["falsification_tests"]:
        print(f"  test:      {t['id']} [{t['status']}] {t['test'] or ''}")
    print(f"  evidence:  {g.evidence or 'none'}")
    summary = info["evidence_summary"]
    if summary:
        for key, value in summary.items():
            print(f"    {key}: {value}")
    for item in g.blocks_on:
        print(f"  blocks on: {item}")
    for e in history:
        print(f"  history:   {e.version} {e.date}: {' '.join(e.text.split())}")
    return exit_codes.OK


def cmd_attest(args: argparse.Namespace) -> int:
    """The gate's current evidence as an in-toto Statement (gates.provenance.attestation)."""
    contracts = valid_contracts(args, "gates")
    c, g = gates_promotion.find_gate(contracts, args.gate)
    if not g.evidence:
        raise UsageError(f"{g.id} is {g.status} and has no evidence to attest")
    try:
        record = evidence.load(find_root(c.path) / g.evidence)
        text = json.dumps(attestation.statement(record), indent=2) + "\n"
    except (evidence.EvidenceError, ValueError) as exc:
        print(f"gates: {exc}", file=sys.stderr)
        return exit_codes.FINDINGS
    if args.out:
        files.atomic_write_bytes(args.out, text.encode())
        print(f"in-toto Statement of {g.id} written to {args.out}")
    else:
        sys.stdout.write(text)
    return exit_codes.OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gates", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"gates {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("list", help="list gates, optionally by contract or status")
    p.add_argument("--contract", metavar="C", help="only this contract id")
    p.add_argument("--status", choices=SHIP_STATUSES, help="only gates with this status")
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_list)
    p = sub.add_parser("show", help="show one gate: rule, threshold, tests, evidence, history")
    p.add_argument("gate", metavar="GATE")
    p.add_argument("--json", action="store_true")
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_show)
    p = sub.add_parser("attest", help="print a gate's evidence as an in-toto Statement")
    p.add_argument("gate", metavar="GATE")
    p.add_argument("--out", type=Path, help="write the Statement JSON here")
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_attest)
    gates_promotion.add_parsers(sub, add_contract_arguments)
    gates_audit.add_parser(sub, add_contract_arguments)
    gates_report.add_parser(sub, add_contract_arguments)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def run() -> int:
        # Recovery first: a crash-interrupted promotion can leave contracts that fail
        # validation, which every command below does before anything else.
        gates_promotion.recover_interrupted(args)
        return args.run(args)

    return run_guarded("gates", run, args.debug)


if __name__ == "__main__":
    sys.exit(main())
