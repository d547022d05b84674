"""Do two mutation-audit records say the same thing? Everything but the time it took.

    python tools/compare_audits.py A.json B.json

For each (test, mutant) row: the outcome, verdict, status, the first failure (exception,
message, phase, where raised), the seam check, and the files the run read (path and sha256).
Exit 0 when every row agrees and both hold the same rows; 1 with each difference printed.
Used to show the forked audit (gates.runner.forkrun) is the slow path's audit, only faster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: What a row says, besides its seconds.
FIELDS = ("contract", "node", "outcome", "verdict", "status", "failure", "seam_check")


def verdicts(record: dict) -> dict[tuple[str, str | None], dict]:
    sources = record["sources"]
    out = {}
    for row in record["rows"]:
        said = {field: row[field] for field in FIELDS}
        said["sources"] = sorted((sources[i]["path"], sources[i]["sha256"]) for i in row["sources"])
        out[(row["test"], row["mutant"])] = said
    return out


def differences(a: dict, b: dict) -> list[str]:
    rows_a, rows_b = verdicts(a), verdicts(b)
    found = []
    for key in sorted(rows_a.keys() | rows_b.keys(), key=lambda k: (k[0], k[1] or "")):
        name = f"{key[0]} {key[1] or '(real code)'}"
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
    print(
        f"{len(a['rows'])} and {len(b['rows'])} rows, {len(found)} differences; "
        f"test seconds {seconds[0]:.0f} and {seconds[1]:.0f}"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
