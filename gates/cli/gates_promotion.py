"""`gates check`, `gates promote`, `gates demote` — re-measure a gate, and change its status
only through that measurement."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gates import exit_codes, files, promotion
from gates.cli.common import recorded_command, require_known, valid_contracts
from gates.contract import Contract, Gate
from gates.validate import find_root


def recover_interrupted(args: argparse.Namespace) -> None:
    """Before a `gates` command reads any contract: finish or undo a promotion or demotion a
    crash interrupted in the project of the contracts it was given (``--root``, else each
    file's nearest pyproject.toml, from any working directory), and say what was done."""
    if args.root:
        roots = {args.root}
    else:
        given = args.files or sorted(Path("contracts").glob("*.yaml"))
        roots = {find_root(path) for path in given}
    for root in sorted(roots):
        done = promotion.recover_before_reading(root)
        if done:
            print(f"gates: {done.describe()} (in {root})", file=sys.stderr)


def find_gate(contracts: list[Contract], gate_id: str) -> tuple[Contract, Gate]:
    require_known("gate", gate_id, [g.id for c in contracts for g in c.gates])
    return next((c, g) for c in contracts for g in c.gates if g.id == gate_id)


def _target(args: argparse.Namespace) -> tuple[Path, Contract, Gate]:
    contracts = valid_contracts(args, "gates")
    contract, gate = find_gate(contracts, args.gate)
    root = args.root or find_root(contract.path)
    return root, contract, gate


def _print_check(result: promotion.CheckResult) -> None:
    ev = result.evidence
    print(f"{ev['gate']}: {result.verdict}")
    for name, m in ev["measurements"].items():
        print(f"  {name} = {m['value']:g} {m['unit']}")
    t = ev["threshold"]
    print(f"  threshold: {t['metric']} {t['comparator']} {t['value']:g} {t['unit']}")
    for test in ev.get("tests", []):
        print(f"  test {test['id']}: {test['outcome']} ({test['seconds']:.1f} s)")
    for a in ev["artifacts"]:
        print(f"  artifact {a['path']} sha256:{a['sha256'][:16]}… {a['bytes']} bytes")
    for reason in result.reasons:
        print(f"  ! {reason}")


def cmd_check(args: argparse.Namespace) -> int:
    root, contract, gate = _target(args)
    result = promotion.check(
        root,
        contract,
        gate,
        args.artifact,
        command=recorded_command("gates", root),
        allow_dirty=True,
    )
    _print_check(result)
    if args.out:
        files.atomic_write_bytes(args.out, (json.dumps(result.evidence, indent=2) + "\n").encode())
        print(f"evidence written to {args.out}")
    return exit_codes.OK if result.verdict in ("PASS", "PARTIAL") else exit_codes.FINDINGS


def cmd_promote(args: argparse.Namespace) -> int:
    root, contract, gate = _target(args)
    result = promotion.promote(
        root,
        contract.path,
        gate.id,
        args.artifact,
        to=args.to,
        allow_dirty=args.allow_dirty,
        command=recorded_command("gates", root),
    )
    _print_check(result)
    print(
        f"promoted {gate.id} to {args.to}: {contract.path} is now "
        f"{result.evidence['contract']['version']}, evidence "
        f"evidence/{contract.id}/{gate.id}.json"
    )
    return exit_codes.OK


def cmd_demote(args: argparse.Namespace) -> int:
    root, contract, gate = _target(args)
    version = promotion.demote(root, contract.path, gate.id, args.reason)
    print(f"demoted {gate.id} to PENDING: {contract.path} is now {version}")
    return exit_codes.OK


def add_parsers(sub: argparse._SubParsersAction, add_contract_arguments) -> None:
    p = sub.add_parser(
        "check",
        help="run a gate's tests and measurement; write nothing "
        "to the contract (evidence only with --out)",
    )
    p.add_argument("gate", metavar="GATE")
    p.add_argument("--artifact", action="append", type=Path, default=[], metavar="PATH")
    p.add_argument("--out", type=Path, help="write the evidence JSON here")
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_check)

    p = sub.add_parser(
        "promote",
        help="re-measure a gate, write its evidence and update the "
        "contract (status, version, changelog)",
    )
    p.add_argument("gate", metavar="GATE")
    p.add_argument("--artifact", action="append", type=Path, default=[], metavar="PATH")
    p.add_argument("--to", choices=("PASS", "PARTIAL"), default="PASS")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="promote despite uncommitted changes to the code under test "
        "(recorded in the evidence as dirty_override)",
    )
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_promote)

    p = sub.add_parser("demote", help="return a gate to PENDING, with the reason in the changelog")
    p.add_argument("gate", metavar="GATE")
    p.add_argument("--reason", required=True)
    add_contract_arguments(p, flag=True)
    p.set_defaults(run=cmd_demote)
