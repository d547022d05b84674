"""`gates audit` runs each gate's measurement under each mutant of its bound tests: it must
FAIL (caught). A measurement that still passes on a bug its test catches fails the audit,
unless the contract exempts that mutant with a reason; an exemption naming no mutant of the
gate's tests fails it too; a gate measured on an artifact is not run (the mutant cannot reach
its build). Run as a user runs it, in a subprocess, on the widget project
(tests/acceptance/widget_project.py): GATE-WIDGET-001 measured in process (line_count >= 3),
GATE-WIDGET-002 on a text file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance import widget_project
from tools import compare_audits

CONTRACT = Path("contracts") / "widget-v1.yaml"
OUT = Path("evidence") / "audit" / "audit.json"

#: count-nothing (0 lines) joins count-off-by-one (4 lines) under the bound test, which kills
#: both; GATE-WIDGET-001's ">= 3" FAILs on the first and still passes on the second.
BOTH_MUTANTS = """    mutants:
      - id: count-off-by-one
        description: count_lines adds one
      - id: count-nothing
        description: count_lines says 0
"""
GATE_001_STATUS = "    status: PENDING   # promoted only by gates promote\n"
EXEMPT = (
    GATE_001_STATUS
    + """    measurement_exempt:
      - mutants: [{ids}]
        reason: one more line still passes a lower bound
"""
)


def audit(root: Path, *extra: str, forked: bool = False) -> subprocess.CompletedProcess:
    """One run at a time in fresh processes; ``forked``: two at a time, forked (as CI runs)."""
    how = ["--jobs", "2"] if forked else ["--jobs", "1", "--no-fork"]
    return subprocess.run(
        [sys.executable, "-m", "gates.cli.gates", "audit", "--files", str(CONTRACT), *how,
         "--quiet", *extra],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def edit_contract(root: Path, old: str, new: str) -> None:
    path = root / CONTRACT
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    widget_project.build_measured_in_process(tmp_path)
    edit_contract(
        tmp_path,
        "    mutants:\n      - id: count-off-by-one\n        description: count_lines adds one\n",
        BOTH_MUTANTS,
    )
    widget_project.commit_all(tmp_path, "two mutants, a measurement without an artifact")
    return tmp_path


def measurement_rows(root: Path) -> dict[tuple[str, str], dict]:
    record = json.loads((root / OUT).read_text())
    return {(r["gate"], r["mutant"]): r for r in record["measurements"]}


@pytest.mark.slow
def test_a_measurement_passing_a_bug_fails_the_audit_until_exempted(project: Path):
    (project / OUT.parent).mkdir(parents=True)
    first = audit(project, "--out", str(OUT))
    assert first.returncode == 1, first.stdout + first.stderr
    assert "mutants killed: 2 of 2" in first.stdout  # the bound test is not what failed
    rows = measurement_rows(project)
    assert json.loads((project / OUT).read_text())["ok"] is False
    assert rows[("GATE-WIDGET-001", "count-nothing")]["outcome"] == "caught"
    survived = rows[("GATE-WIDGET-001", "count-off-by-one")]
    assert survived["outcome"] == "survived" and "PASS" in survived["reason"]
    for mutant in ("count-off-by-one", "count-nothing"):  # measured on a file: not run
        row = rows[("GATE-WIDGET-002", mutant)]
        assert row["outcome"] == "exempt" and "built in another process" in row["reason"]
        assert row["seconds"] == 0
    assert "measurements failing on their mutants: 1 of 2 run, 2 exempt" in first.stdout

    edit_contract(project, GATE_001_STATUS, EXEMPT.format(ids="count-off-by-one"))
    second = audit(project, "--out", str(OUT))
    assert second.returncode == 0, second.stdout + second.stderr
    exempt = measurement_rows(project)[("GATE-WIDGET-001", "count-off-by-one")]
    assert exempt == {**exempt, "outcome": "exempt", "seconds": 0}
    assert exempt["reason"] == "one more line still passes a lower bound"
    assert json.loads((project / OUT).read_text())["ok"] is True


@pytest.mark.slow
def test_an_exemption_of_no_mutant_of_the_gate_fails_and_measurements_can_be_skipped(
    project: Path,
):
    edit_contract(project, GATE_001_STATUS, EXEMPT.format(ids="count-off-by-one, count-twice"))
    proc = audit(project, "--gate", "GATE-WIDGET-001")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "INVALID" in proc.stdout
    assert "measurement_exempt names count-twice, not a mutant of its bound tests" in proc.stdout

    tests_only = audit(project, "--gate", "GATE-WIDGET-001", "--no-measurements")
    assert tests_only.returncode == 0, tests_only.stdout + tests_only.stderr
    assert "measurements failing" not in tests_only.stdout


@pytest.mark.slow
def test_forked_measurements_in_one_pool_with_the_tests_say_what_fresh_processes_say(
    project: Path,
):
    """The measurement runs forked from warm interpreters, two at a time among the test runs,
    measure what fresh processes one at a time measure: a caught row, a survived one (with
    its verdict) and the exempt ones; only the seconds differ."""
    (project / OUT.parent).mkdir(parents=True)
    fresh = audit(project, "--out", str(OUT))
    fresh_record = json.loads((project / OUT).read_text())
    forked = audit(project, "--out", str(OUT), forked=True)
    forked_record = json.loads((project / OUT).read_text())
    assert (fresh.returncode, forked.returncode) == (1, 1), forked.stdout + forked.stderr
    assert compare_audits.differences(fresh_record, forked_record) == []
    outcomes = sorted(r["outcome"] for r in forked_record["measurements"])
    assert outcomes == ["caught", "exempt", "exempt", "survived"]
