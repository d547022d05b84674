"""`pv status` — gates by status per contract, and what still blocks a ship."""

from __future__ import annotations

import argparse
import json

from gates import exit_codes
from gates.cli.common import add_contract_arguments, valid_contracts
from gates.contract import SHIP_STATUSES, Contract

SUMMARY = "show gates by status; --require-ship-ready fails while a ship-blocking gate is open"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help=SUMMARY, description=SUMMARY)
    add_contract_arguments(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--require-ship-ready",
        action="store_true",
        help="exit 1 unless every ship-blocking gate is PASS",
    )
    p.set_defaults(run=run)


def outstanding(contracts: list[Contract]) -> list[tuple[Contract, str, str]]:
    return [
        (c, g.id, g.status)
        for c in contracts
        for g in c.gates
        if g.ship_blocking and g.status != "PASS"
    ]


def status_json(contracts: list[Contract]) -> dict:
    return {
        "contracts": [
            {
                "id": c.id,
                "version": c.metadata.version,
                "status": c.metadata.status,
                "file": str(c.path),
                "counts": {s: sum(g.status == s for g in c.gates) for s in SHIP_STATUSES},
                "gates": [
                    {
                        "id": g.id,
                        "status": g.status,
                        "ship_blocking": g.ship_blocking,
                        "threshold": str(g.threshold),
                    }
                    for g in c.gates
                ],
            }
            for c in contracts
        ],
        "ship_blocking_outstanding": [gid for _, gid, _ in outstanding(contracts)],
    }


def status_text(contracts: list[Contract]) -> str:
    lines = []
    for c in contracts:
        counts = "  ".join(f"{s} {sum(g.status == s for g in c.gates)}" for s in SHIP_STATUSES)
        lines.append(f"{c.id} {c.metadata.version} [{c.metadata.status}]  {c.path}")
        lines.append(f"  {counts}")
        for g in c.gates:
            flag = "ship-blocking" if g.ship_blocking else ""
            lines.append(f"  {g.status:<8} {g.id:<26} {flag:<13} {g.threshold}")
    open_gates = outstanding(contracts)
    total = sum(g.ship_blocking for c in contracts for g in c.gates)
    lines.append(f"ship-blocking gates: {total - len(open_gates)} of {total} PASS")
    lines.extend(f"  outstanding: {gid} ({status}) in {c.id}" for c, gid, status in open_gates)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    contracts = valid_contracts(args, "pv status")
    print(
        json.dumps(status_json(contracts), indent=2)
        if args.format == "json"
        else status_text(contracts)
    )
    if args.require_ship_ready and outstanding(contracts):
        return exit_codes.FINDINGS
    return exit_codes.OK
