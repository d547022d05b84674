"""`gates audit`: every bound test passes on the real code and fails on each mutant; a test
whose assertion is deleted lets its mutant survive, and the audit says so.

The audit of everything bound in this repository's contracts is `make audit`, which .ci/run
runs after the suite (about 25 minutes: one pytest process per bound test and mutant)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gates.cli import gates as gates_cli
from gates.runner import testrun
from tests.acceptance import widget_project


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "widget"
    root.mkdir()
    return root, widget_project.build(root)


def audit(root: Path, contract: Path, *extra: str) -> int:
    return gates_cli.main(
        ["audit", "--quiet", "--files", str(contract), "--root", str(root), *extra]
    )


@pytest.mark.slow
def test_audit_kills_the_mutant_then_fails_once_the_assertion_is_deleted(project, capsys):
    root, contract = project
    out = root / "audit.json"
    assert audit(root, contract, "--out", str(out)) == 0
    table = capsys.readouterr().out
    assert "count-off-by-one" in table and "killed" in table
    assert "mutants killed: 1 of 1" in table
    record = json.loads(out.read_text())
    assert record["ok"] is True and record["killed"] == record["mutants"] == 1

    test_file = root / "tests" / "test_widget.py"
    source = test_file.read_text()
    assertion = "    assert widget.count_lines(p) == 3\n"
    assert assertion in source
    test_file.write_text(source.replace(assertion, "    widget.count_lines(p)\n"))

    assert audit(root, contract) == 1
    table = capsys.readouterr().out
    assert "SURVIVED" in table and "mutants killed: 0 of 1" in table


def test_audit_fails_when_the_real_code_fails(project, capsys):
    root, contract = project
    (root / "widget.py").write_text("def count_lines(path):\n    return -1\n")
    assert audit(root, contract) == 1
    assert "REAL CODE FAILED" in capsys.readouterr().out


def test_an_unknown_mutant_is_an_error_not_a_kill(project):
    root, _ = project
    out = testrun.run_node(root, "tests/test_widget.py::test_count_lines", "no-such-mutant")
    assert out.outcome == "error"
    assert "no @mutant('no-such-mutant')" in out.output


def test_audit_of_an_unknown_gate_suggests_the_nearest(project, capsys):
    root, contract = project
    assert audit(root, contract, "--gate", "GATE-WIDGET-01") == 2
    assert "did you mean GATE-WIDGET-001?" in capsys.readouterr().err
