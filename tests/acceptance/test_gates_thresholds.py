"""A gate may carry several thresholds; all must hold (issue 19 item 6).

A refusal gate bounds what it wrongly accepts *and* what it wrongly refuses: here the widget
gate asks for at least 3 lines and at most 4, so an artifact meeting only one side fails,
from either side, in `gates check`/`promote` and in pv's reading of recorded evidence.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
from pathlib import Path

import pytest

from gates import check as gate_check
from gates import promotion
from gates.pv.validate import validate
from tests.acceptance import widget_project

TODAY = dt.date(2026, 11, 22)
GATE = "GATE-WIDGET-001"
ONE = 'threshold: {metric: line_count, comparator: ">=", value: 3, unit: lines}'
BOTH = (
    "threshold:\n"
    '          - {metric: line_count, comparator: ">=", value: 3, unit: lines}\n'
    '          - {metric: line_count, comparator: "<=", value: 4, unit: lines}'
)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "widget"
    root.mkdir()
    contract = widget_project.build(root)
    text = contract.read_text()
    assert text.count(ONE) == 1
    contract.write_text(text.replace(ONE, BOTH))
    widget_project.git(root, "commit", "-qam", "two thresholds")
    spec = importlib.util.spec_from_file_location(
        "widget_measurement", root / "widget_measurement.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return root, contract


def artifact(root: Path, lines: int) -> Path:
    path = root.parent / f"lines-{lines}.txt"
    path.write_text("".join(f"line {i}\n" for i in range(lines)))
    return path


def check(root: Path, contract: Path, lines: int) -> gate_check.CheckResult:
    c, gate = promotion.load_gate(root, contract, GATE)
    return gate_check.check(root, c, gate, [artifact(root, lines)], command=["gates", "check"])


def test_the_contract_reads_both_thresholds(project):
    _, contract = project
    gate = validate([contract]).contracts[0].gate(GATE)
    assert [str(t) for t in gate.thresholds] == [
        "line_count >= 3 lines",
        "line_count <= 4 lines",
    ]
    assert gate.threshold == gate.thresholds[0]


@pytest.mark.parametrize(("lines", "verdict"), [(3, "PASS"), (4, "PASS"), (2, "FAIL"), (5, "FAIL")])
def test_check_passes_only_when_every_threshold_holds(project, lines, verdict):
    root, contract = project
    result = check(root, contract, lines)
    assert result.verdict == verdict, result.reasons
    if verdict == "FAIL":
        missed = "line_count >= 3" if lines < 3 else "line_count <= 4"
        assert any(missed in r for r in result.reasons), result.reasons
    assert [t["comparator"] for t in result.evidence["thresholds"]] == [">=", "<="]


def test_pv_refuses_pass_evidence_that_misses_the_second_threshold(project):
    root, contract = project
    promotion.promote(
        root, contract, GATE, [artifact(root, 4)], command=["gates", "promote"], today=TODAY
    )
    assert not validate([contract], root=root).report.errors
    path = root / "evidence" / "C-WIDGET" / f"{GATE}.json"
    record = json.loads(path.read_text())
    record["measurements"]["line_count"]["value"] = 5  # meets >= 3, misses <= 4
    path.write_text(json.dumps(record))
    messages = [f.message for f in validate([contract], root=root).report.errors]
    assert any("misses line_count <= 4" in m for m in messages), messages


def test_pv_refuses_evidence_measured_against_fewer_thresholds(project):
    root, contract = project
    promotion.promote(
        root, contract, GATE, [artifact(root, 3)], command=["gates", "promote"], today=TODAY
    )
    path = root / "evidence" / "C-WIDGET" / f"{GATE}.json"
    record = json.loads(path.read_text())
    record["thresholds"] = record["thresholds"][:1]
    path.write_text(json.dumps(record))
    rules = [(f.rule, f.message) for f in validate([contract], root=root).report.errors]
    assert any(r == "EVIDENCE-MISMATCH" and "measured against" in m for r, m in rules), rules
