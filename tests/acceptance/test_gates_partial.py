"""A gate's verdict is what its measurement says: a measurement that names something it
does not discharge is PARTIAL, never PASS, whether or not the caller asked for one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates import check as gate_check
from gates import measure
from gates.measure import Measurement
from gates.pv.validate import validate
from tests.acceptance import widget_project

GATE = "GATE-WIDGET-001"
NOT_DISCHARGED = ["micro-batches of unequal token counts"]


@pytest.fixture
def widget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    root = tmp_path / "widget"
    root.mkdir()
    contract_path = widget_project.build(root)
    (artifact := tmp_path / "artifact.txt").write_text("a\nb\nc\n")

    def partial_line_count(ctx):
        n = len(ctx.artifacts[0].read_text().splitlines())
        return Measurement(
            values={"line_count": (n, "lines")},
            workload="lines of the artifact",
            partial={"discharged": ["equal token counts"], "not_discharged": NOT_DISCHARGED},
        )

    monkeypatch.setitem(
        measure.REGISTRY,
        GATE,
        measure.Measurer(GATE, partial_line_count, "text file", lambda p: None),
    )
    monkeypatch.setattr(measure.project, "import_all", lambda root, kind: [])
    contract = validate([contract_path]).contracts[0]
    return root, contract, contract.gate(GATE), artifact


def check(widget, **kw) -> gate_check.CheckResult:
    root, contract, gate, artifact = widget
    return gate_check.check(root, contract, gate, [artifact], command=["gates", "check"], **kw)


def test_without_a_wish_the_verdict_is_what_the_measurement_says(widget):
    result = check(widget)
    assert result.verdict == "PARTIAL"
    assert result.evidence["partial"]["not_discharged"] == NOT_DISCHARGED


def test_asking_for_pass_on_a_partial_measurement_fails_naming_what_is_missing(widget):
    result = check(widget, want="PASS")
    assert result.verdict == "FAIL"
    assert any("does not discharge micro-batches of unequal" in r for r in result.reasons)


def test_a_complete_measurement_is_pass_without_a_wish(widget, monkeypatch):
    measurer = measure.REGISTRY[GATE]
    whole = measure.Measurer(
        GATE,
        lambda ctx: Measurement(values={"line_count": (3, "lines")}, workload="lines"),
        measurer.artifact,
        measurer.check,
    )
    monkeypatch.setitem(measure.REGISTRY, GATE, whole)
    assert check(widget).verdict == "PASS"
