"""`pytest -m ship_blocking` runs exactly the tests bound to ship-blocking gates.

Both directions: every test behind a ship-blocking gate carries the marker (pv's
SHIP-BLOCKING-MARKER rule), and no test carries it without such a gate (checked here,
because only the whole set of contracts can say so).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gates.pv.validate import validate

ROOT = Path(__file__).resolve().parents[2]


def marked_nodes() -> set[str]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "ship_blocking",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr
    nodes = {line.split("[", 1)[0] for line in proc.stdout.splitlines() if "::" in line}
    return nodes


def bound_to_ship_blocking_gates() -> set[str]:
    # The project's own contracts carry real dates (promotions stamp them), so they are
    # checked against the real clock, as `pv validate` does in CI, not the fixtures' date.
    result = validate(sorted((ROOT / "contracts").glob("*.yaml")))
    assert not result.report.errors
    nodes = set()
    for c in result.contracts:
        for gate in c.gates:
            if gate.ship_blocking:
                for ref in gate.falsification_tests:
                    t = c.test(ref)
                    if t and t.bound and t.test:
                        nodes.add(t.test.split("[", 1)[0])
    return nodes


@pytest.mark.slow
def test_marker_and_contracts_agree_both_ways():
    marked, bound = marked_nodes(), bound_to_ship_blocking_gates()
    assert bound, "no test is bound to a ship-blocking gate yet"
    assert marked - bound == set(), "marked ship_blocking but no ship-blocking gate rests on it"
    assert bound - marked == set(), "behind a ship-blocking gate but not marked"
