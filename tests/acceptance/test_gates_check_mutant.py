"""`gates check GATE --mutant ID`: the gate's measurement run with a declared mutant applied,
its bound tests not run. Caught (the gate FAILs on the bug) exits 0, survived exits 1, and a
gate measured on an artifact built in another process is refused: the mutant cannot reach
the build. Run as a user runs it, in a subprocess, on the widget project
(tests/acceptance/widget_project.py) with a measurement that needs no artifact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance import widget_project

CONTRACT = Path("contracts") / "widget-v1.yaml"


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gates.cli.gates", "check", *args, "--files", str(CONTRACT)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    widget_project.build_measured_in_process(tmp_path)
    widget_project.commit_all(tmp_path, "a measurement without an artifact")
    return tmp_path


def test_a_caught_mutant_exits_zero_and_one_that_survives_exits_one(project: Path):
    real = run(project, "GATE-WIDGET-001")
    assert real.returncode == 0, real.stdout + real.stderr
    assert "line_count = 3 lines" in real.stdout
    assert "test FALSIFY-WIDGET-001: passed" in real.stdout

    caught = run(project, "GATE-WIDGET-001", "--mutant", "count-nothing")
    assert caught.returncode == 0, caught.stdout + caught.stderr
    assert "GATE-WIDGET-001: FAIL" in caught.stdout and "line_count = 0 lines" in caught.stdout
    assert "mutant count-nothing: caught" in caught.stdout
    assert "test FALSIFY-WIDGET-001" not in caught.stdout  # bound tests are the audit's

    survived = run(project, "GATE-WIDGET-001", "--mutant", "count-off-by-one")
    assert survived.returncode == 1, survived.stdout + survived.stderr
    assert "line_count = 4 lines" in survived.stdout
    assert "mutant count-off-by-one: SURVIVED (GATE-WIDGET-001 is PASS on the bug)" in (
        survived.stdout
    )


def test_unknown_mutants_artifact_gates_and_evidence_are_refused(project: Path):
    unknown = run(project, "GATE-WIDGET-001", "--mutant", "no-such-bug")
    assert unknown.returncode == 1 and "no mutant 'no-such-bug' is declared" in unknown.stderr
    assert "caught" not in unknown.stdout

    measured_on_artifact = widget_project.MEASUREMENT  # both gates, on a text file
    (project / "gatework" / "widget_gates.py").write_text(measured_on_artifact)
    artifact = project / "three.txt"
    artifact.write_text("a\nb\nc\n")
    on_artifact = run(project, "GATE-WIDGET-002", "--mutant", "count-nothing")
    assert on_artifact.returncode == 1
    assert "built in another process" in on_artifact.stderr

    for extra in (["--out", "ev.json"], ["--artifact", str(artifact)], ["--all"]):
        usage = run(project, "GATE-WIDGET-001", "--mutant", "count-nothing", *extra)
        assert usage.returncode == 2, (extra, usage.stderr)
    assert not (project / "ev.json").exists()
