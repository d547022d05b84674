"""gates.service: the one way through a project's contracts (validate them, find a gate, check
it, write its evidence) that the CLI, a promotion and the trainer's pipeline share."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gates import promotion, service

GATE = "GATE-WIDGET-001"
MEASURING = (
    "gates.promotion",
    "gates.measure",
    "gates.provenance.recipes",
    "gates.provenance.trace",
    "gates.runner.testrun",
)


def lines(root: Path, count: int) -> Path:
    path = root.parent / f"{count}-lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(count)))
    return path


def _loaded_by(module: str) -> list[str]:
    probe = f"import sys, {module}; print(' '.join(m for m in {MEASURING!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_a_pv_command_loads_none_of_the_measuring_code():
    """`pv validate` and `pv status` read contracts only: importing the measuring code (the
    whole promotion graph) into them cost every `pv` run and tied it to what it never uses.
    The probe sees that code where it is imported (`gates`), so an empty answer is real."""
    assert _loaded_by("gates.cli.pv") == []
    assert "gates.promotion" in _loaded_by("gates.cli.gates")


def test_an_invalid_contract_is_refused_naming_its_first_error_at_file_and_line(measured_widget):
    root, contract = measured_widget
    contract.write_text(
        contract.read_text().replace("  kind: tooling\n", "  kind: tooling\n  colour: red\n")
    )
    with pytest.raises(service.ContractsUnusableError) as refused:
        service.usable_contracts([contract], root=root)
    assert refused.value.unreadable == [] and refused.value.errors
    assert str(refused.value).startswith(f"{contract}:7: ")
    assert "colour" in str(refused.value)


def test_a_contract_that_cannot_be_read_is_named(tmp_path):
    missing = tmp_path / "contracts" / "absent-v1.yaml"
    with pytest.raises(service.ContractsUnusableError) as refused:
        service.usable_contracts([missing])
    assert refused.value.unreadable and str(missing) in str(refused.value)


def test_a_re_measurement_goes_on_over_findings_about_recorded_evidence(measured_widget):
    """A threshold edited after the promotion: the evidence disagrees with the contract
    (EVIDENCE-*). A status read from it would be a guess; re-measuring is how it is fixed."""
    root, contract = measured_widget
    promotion.promote(root, contract, GATE, [lines(root, 5)], command=["gates", "promote", GATE])
    contract.write_text(contract.read_text().replace('">=", value: 3,', '">=", value: 4,'))
    with pytest.raises(service.ContractsUnusableError) as refused:
        service.usable_contracts([contract], root=root)
    assert {f.rule.split("-")[0] for f in refused.value.errors} == {"EVIDENCE"}
    usable = service.usable_contracts([contract], root=root, remeasuring=True)
    assert [c.id for c in usable.contracts] == ["C-WIDGET"]
    assert usable.waived == len(refused.value.errors)


def test_a_gate_is_found_in_any_contract_and_an_unknown_one_gets_the_nearest_id(measured_widget):
    root, contract = measured_widget
    contracts = service.usable_contracts([contract], root=root).contracts
    found, gate = service.find_gate(contracts, "GATE-WIDGET-002")
    assert (found.id, gate.id) == ("C-WIDGET", "GATE-WIDGET-002")
    with pytest.raises(service.UnknownGateError, match="did you mean GATE-WIDGET-001"):
        service.find_gate(contracts, "GATE-WIDGET-01")


@pytest.mark.parametrize(("count", "verdict"), [(5, "PASS"), (2, "FAIL")])
def test_a_check_writes_its_evidence_whatever_the_verdict(
    measured_widget, tmp_path, count, verdict
):
    root, contract = measured_widget
    contracts = service.usable_contracts([contract], root=root).contracts
    c, gate = service.find_gate(contracts, GATE)
    out = tmp_path / "evidence.json"
    result = service.check_gate(c, gate, [lines(root, count)], command=["gates", "check"], out=out)
    assert result.verdict == verdict
    written = json.loads(out.read_text())
    assert written == result.evidence and written["verdict"] == verdict
    assert out.read_bytes() == service.evidence_bytes(result.evidence)


SECOND_TEST = """

def test_an_empty_file_has_no_lines(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("")
    assert widget.count_lines(p) == 0
"""

#: Not ship-blocking: its bound tests need no mutant of their own.
OTHER_GATE = "- id: GATE-WIDGET-002"
SECOND_BOUND = """\
  - id: FALSIFY-WIDGET-002
    rule: count an empty file
    prediction: "0"
    status: bound
    test: tests/test_widget.py::test_an_empty_file_has_no_lines
    if_fails: an empty file is counted as a line
gates:"""


@pytest.mark.parametrize("empty_counts_as", [0, 1])
def test_several_bound_tests_run_in_forks_and_report_what_fresh_processes_report(
    measured_widget, monkeypatch, empty_counts_as
):
    """A gate with two bound tests (GATE-WIDGET-002, line_count <= 100) runs them in forks
    of one warm interpreter (gates.check, gates.runner.forkrun): outcomes, the failing test's
    reason and the traced sources are those of a fresh ``python -m pytest`` per test. With an
    empty file counted as a line, the second test fails and the gate FAILs naming it, either
    way."""
    from gates import check  # noqa: PLC0415
    from gates.runner import testrun  # noqa: PLC0415
    from tests.acceptance import widget_project  # noqa: PLC0415

    root, contract = measured_widget
    with (root / "tests" / "test_widget.py").open("a") as fh:
        fh.write(SECOND_TEST)
    first, second = contract.read_text().replace("gates:", SECOND_BOUND, 1).split(OTHER_GATE)
    bound = "- FALSIFY-WIDGET-001\n"
    second = second.replace(bound, bound + "      - FALSIFY-WIDGET-002\n", 1)
    contract.write_text(first + OTHER_GATE + second)
    if empty_counts_as:
        (root / "widget.py").write_text(
            widget_project.WIDGET.replace("return ", "return 1 if not path.read_text() else ")
        )
    widget_project.commit_all(root, "a second bound test")
    contracts = service.usable_contracts([contract], root=root).contracts
    c, gate = service.find_gate(contracts, "GATE-WIDGET-002")
    assert len(gate.falsification_tests) == 2

    forked_runs = []
    real_run_node = testrun.run_node

    def run_node(*args, **kwargs):
        forked_runs.append(kwargs.get("warm") is not None)
        return real_run_node(*args, **kwargs)

    monkeypatch.setattr(testrun, "run_node", run_node)
    results = {}
    for how in ("forked", "fresh"):
        if how == "fresh":
            no_warm = lambda root, gate: contextlib.nullcontext()  # noqa: E731
            monkeypatch.setattr(check, "_warm_interpreter", no_warm)
        results[how] = service.check_gate(c, gate, [lines(root, 5)], command=["gates", "check"])
    assert forked_runs == [True, True, False, False]
    forked, fresh = (results[k].evidence for k in ("forked", "fresh"))
    second_outcome = "failed" if empty_counts_as else "passed"
    for evidence in (forked, fresh):
        outcomes = [(t["id"], t["outcome"]) for t in evidence["tests"]]
        assert outcomes == [
            ("FALSIFY-WIDGET-001", "passed"),
            ("FALSIFY-WIDGET-002", second_outcome),
        ]
    assert forked["sources"] == fresh["sources"]
    assert {"widget.py", "tests/test_widget.py"} <= {s["path"] for s in forked["sources"]}
    verdict = "FAIL" if empty_counts_as else "PASS"
    assert {k: r.verdict for k, r in results.items()} == {"forked": verdict, "fresh": verdict}
    if empty_counts_as:
        for result in results.values():
            (reason,) = result.reasons
            assert (
                reason.startswith("FALSIFY-WIDGET-002 (tests/test_widget.py::")
                and "assert 1 == 0" in reason
            )
