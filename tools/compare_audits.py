"""Do two mutation-audit records say the same thing? Everything but the time it took.

    python tools/compare_audits.py A.json B.json

For each (test, mutant) row: the outcome, verdict, status, the first failure (exception,
message, phase, where raised), the seam check, and the files the run read (path and sha256).
For each (gate, mutant) measurement row: the outcome and its reason. Exit 0 when every row
agrees and both hold the same rows; 1 with each difference printed.
Used to show the forked audit (gates.runner.forkrun) is the slow path's audit, only faster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: What a row says, besides its seconds.
FIELDS = ("contract", "node", "outcome", "verdict", "status", "failure", "seam_check")
#: What a measurement row says, besides its seconds.
MEASUREMENT_FIELDS = ("contract", "outcome", "reason")


def verdicts(record: dict) -> dict[tuple[str, str | None], dict]:
    sources = record["sources"]
    out = {}
    for row in record["rows"]:
        said = {field: row[field] for field in FIELDS}
        said["sources"] = sorted((sources[i]["path"], sources[i]["sha256"]) for i in row["sources"])
        out[(row["test"], row["mutant"])] = said
    return out


def measured(record: dict) -> dict[tuple[str, str | None], dict]:
    """The measurement rows, keyed like the test rows: (gate, mutant)."""
    return {
        (row["gate"], row["mutant"]): {field: row[field] for field in MEASUREMENT_FIELDS}
        for row in record.get("measurements", [])
    }


def differences(a: dict, b: dict) -> list[str]:
    found = _differing(verdicts(a), verdicts(b))
    return found + _differing(measured(a), measured(b), prefix="measured ")


def _differing(rows_a: dict, rows_b: dict, prefix: str = "") -> list[str]:
    found = []
    for key in sorted(rows_a.keys() | rows_b.keys(), key=lambda k: (k[0], k[1] or "")):
        name = f"{prefix}{key[0]} {key[1] or '(real code)'}"
        if key not in rows_b or key not in rows_a:
            found.append(f"{name}: only in {'A' if key in rows_a else 'B'}")
            continue
        for field in rows_a[key]:
            said_a, said_b = rows_a[key][field], rows_b[key][field]
            if said_a == said_b:
                continue
            if field == "sources":  # long lists: only what differs
                said_a, said_b = (
                    sorted(path for path, _ in set(one) - set(other))
                    for one, other in ((said_a, said_b), (said_b, said_a))
                )
            found.append(f"{name}: {field} {said_a!r} != {said_b!r}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (args.a, args.b))
    found = differences(a, b)
    for line in found:
        print(line)
    seconds = [sum(r["seconds"] for r in rec["rows"]) for rec in (a, b)]
    measuring = [sum(r["seconds"] for r in rec.get("measurements", [])) for rec in (a, b)]
    print(
        f"{len(a['rows'])} and {len(b['rows'])} rows, "
        f"{len(a.get('measurements', []))} and {len(b.get('measurements', []))} measurement "
        f"rows, {len(found)} differences; test seconds {seconds[0]:.0f} and {seconds[1]:.0f}, "
        f"measurement seconds {measuring[0]:.0f} and {measuring[1]:.0f}"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
