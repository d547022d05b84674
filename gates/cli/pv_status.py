"""`pv status` — gates by status per contract, and what still blocks a ship.

STALE counts the PASS/PARTIAL gates whose evidence no longer matches the source files it
records (gates.provenance.freshness; `pv validate` reports each as EVIDENCE-STALE): they are counted
under their status too, and a stale ship-blocking gate is not ship-ready.
"""

from __future__ import annotations

import argparse
import json

from gates import exit_codes
from gates.cli.common import add_contract_arguments, valid_contracts
from gates.model.contract import SHIP_STATUSES, Contract
from gates.pv.staleness import Staleness, staleness

SUMMARY = "show gates by status; --require-ship-ready fails while a ship-blocking gate is open"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help=SUMMARY, description=SUMMARY)
    add_contract_arguments(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--require-ship-ready",
        action="store_true",
        help="exit 1 unless every ship-blocking gate is PASS on fresh evidence",
    )
    p.set_defaults(run=run)


def outstanding(contracts: list[Contract]) -> list[tuple[Contract, str, str]]:
    return [
        (c, g.id, g.status)
        for c in contracts
        for g in c.gates
        if g.ship_blocking and g.status != "PASS"
    ]


def stale_blocking(contracts: list[Contract], stale: Staleness) -> list[tuple[Contract, str]]:
    return [(c, g.id) for c in contracts for g in c.gates if g.ship_blocking and g.id in stale]


def status_json(contracts: list[Contract], stale: Staleness | None = None) -> dict:
    stale = stale or {}
    return {
        "contracts": [
            {
                "id": c.id,
                "version": c.metadata.version,
                "status": c.metadata.status,
                "file": str(c.path),
                "counts": {
                    **{s: sum(g.status == s for g in c.gates) for s in SHIP_STATUSES},
                    "STALE": sum(g.id in stale for g in c.gates),
                },
                "gates": [
                    {
                        "id": g.id,
                        "status": g.status,
                        "ship_blocking": g.ship_blocking,
                        "threshold": g.thresholds_text(),
                        "stale": stale.get(g.id),
                    }
                    for g in c.gates
                ],
            }
            for c in contracts
        ],
        "ship_blocking_outstanding": [gid for _, gid, _ in outstanding(contracts)],
        "ship_blocking_stale": [gid for _, gid in stale_blocking(contracts, stale)],
    }


def status_text(contracts: list[Contract], stale: Staleness | None = None) -> str:
    stale = stale or {}
    lines = []
    for c in contracts:
        counts = "  ".join(f"{s} {sum(g.status == s for g in c.gates)}" for s in SHIP_STATUSES)
        counts += f"  STALE {sum(g.id in stale for g in c.gates)}"
        lines.append(f"{c.id} {c.metadata.version} [{c.metadata.status}]  {c.path}")
        lines.append(f"  {counts}")
        for g in c.gates:
            flag = "ship-blocking" if g.ship_blocking else ""
            lines.append(f"  {g.status:<8} {g.id:<26} {flag:<13} {g.thresholds_text()}")
            if g.id in stale:
                lines.append(f"  {'':<8} STALE: {stale[g.id]}")
    open_gates = outstanding(contracts)
    total = sum(g.ship_blocking for c in contracts for g in c.gates)
    stale_gates = stale_blocking(contracts, stale)
    on_stale = f", {len(stale_gates)} of them on stale evidence" if stale_gates else ""
    lines.append(f"ship-blocking gates: {total - len(open_gates)} of {total} PASS{on_stale}")
    lines.extend(f"  outstanding: {gid} ({status}) in {c.id}" for c, gid, status in open_gates)
    lines.extend(f"  stale: {gid} in {c.id}: {stale[gid]}" for c, gid in stale_gates)
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    contracts = valid_contracts(args, "pv status")
    stale = staleness(contracts, args.root)
    print(
        json.dumps(status_json(contracts, stale), indent=2)
        if args.format == "json"
        else status_text(contracts, stale)
    )
    if args.require_ship_ready and (outstanding(contracts) or stale_blocking(contracts, stale)):
        return exit_codes.FINDINGS
    return exit_codes.OK
