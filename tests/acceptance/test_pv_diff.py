"""`pv diff REF`: a contract change is checked like an API change. On the widget project
(tests/acceptance/widget_project.py, one commit), each edit below is committed and diffed
against the commit before it, as CI runs `pv diff HEAD~1`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gates.pv import contract_diff
from tests.acceptance import widget_project

CONTRACT = Path("contracts") / "widget-v1.yaml"
LOOSER = (
    '{metric: line_count, comparator: ">=", value: 3, unit: lines}',
    '{metric: line_count, comparator: ">=", value: 1, unit: lines}',
)
MUTANTS_BLOCK = (
    "    mutants:\n      - id: count-off-by-one\n        description: count_lines adds one\n"
)
RELEASE_1_1 = """\
  - version: 1.1.0
    date: 2026-01-06
    text: {text}
  - version: 1.0.0"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "widget"
    root.mkdir()
    widget_project.build(root)
    return root


def edit(root: Path, *pairs: tuple[str, str]) -> None:
    path = root / CONTRACT
    text = path.read_text()
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new)
    path.write_text(text)
    widget_project.commit_all(root, "edit")


def released(text: str) -> tuple[tuple[str, str], ...]:
    """The edits that make the contract version 1.1.0 with a changelog entry ``text``."""
    return (
        ("version: 1.0.0   # bumped by gates promote", "version: 1.1.0"),
        ("  - version: 1.0.0", RELEASE_1_1.format(text=text)),
    )


def pv_diff(root: Path, ref: str = "HEAD~1") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gates.cli.pv", "diff", ref, str(root / CONTRACT),
         "--root", str(root)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_loosened_threshold_without_a_version_bump_fails_naming_the_gate(project):
    edit(project, LOOSER)
    done = pv_diff(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GATE-WIDGET-001: threshold loosened: line_count >= 3 lines -> line_count >= 1" in (
        done.stdout
    )
    assert "without raising the contract's version" in done.stdout


def test_a_bump_whose_changelog_does_not_name_the_gate_still_fails(project):
    edit(project, LOOSER, *released("Small fixes."))
    done = pv_diff(project)
    assert done.returncode == 1
    assert "no changelog entry of a version after 1.0.0 names GATE-WIDGET-001" in done.stdout


def test_a_loosening_owned_up_to_passes_and_is_still_listed(project):
    edit(project, LOOSER, *released("GATE-WIDGET-001 bound lowered to 1 line, for short files."))
    done = pv_diff(project)
    assert done.returncode == 0, done.stdout
    assert "threshold loosened" in done.stdout and "0 unexplained" in done.stdout


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (("ship_blocking: true", "ship_blocking: false"), "ship_blocking dropped"),
        (
            (MUTANTS_BLOCK, ""),
            "count-off-by-one: mutant of FALSIFY-WIDGET-001 removed",
        ),
        (('"<=", value: 100', '"<=", value: 1000'), "threshold loosened"),
        (('comparator: ">=", value: 3', 'comparator: ">", value: 3'), "threshold line_count"),
    ],
    ids=["ship-blocking-dropped", "mutant-removed", "upper-bound-raised", "comparator"],
)
def test_every_kind_of_weakening_needs_the_bump(project, change, said):
    edit(project, change)
    done = pv_diff(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert said in done.stdout


def test_a_mutant_newly_exempted_from_a_measurement_needs_the_bump(project):
    """``measurement_exempt`` stops the audit asking the gate's measurement to catch a
    mutant: a weakening, like removing the mutant."""
    line = next(x for x in (project / CONTRACT).read_text().splitlines() if "ship_blocking" in x)
    indent = line[: len(line) - len(line.lstrip())]
    exempt = (
        f"{line}\n{indent}measurement_exempt:\n"
        f"{indent}  - {{mutants: [count-off-by-one], reason: the metric cannot see it}}"
    )
    edit(project, (line, exempt))
    done = pv_diff(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GATE-WIDGET-001: measurement exempt from count-off-by-one (weakens)" in done.stdout
    assert "without raising the contract's version" in done.stdout


def test_tightening_and_unrelated_edits_pass(project):
    edit(project, ('comparator: ">=", value: 3', 'comparator: ">=", value: 5'))
    done = pv_diff(project)
    assert done.returncode == 0, done.stdout
    assert "threshold tightened" in done.stdout
    edit(project, ("rule: the artifact has at least three lines", "rule: at least three lines"))
    assert pv_diff(project).returncode == 0


def test_an_unknown_ref_is_a_usage_error(project):
    done = pv_diff(project, "no-such-ref")
    assert done.returncode == 2 and "no-such-ref" in done.stderr


@pytest.mark.parametrize(
    ("comparator", "old", "new", "loosened"),
    [("<=", 1, 2, True), ("<=", 2, 1, False), ("<", 1, 2, True), (">=", 2, 1, True),
     (">=", 1, 2, False), (">", 1, 0, True), ("==", 0, 1, True), ("==", 1, 0, True)],
)  # fmt: skip
def test_which_way_loosens_depends_on_the_comparator(comparator, old, new, loosened):
    t = {"metric": "m", "comparator": comparator, "unit": "u"}
    _, weaker = contract_diff.threshold_change({**t, "value": old}, {**t, "value": new})
    assert weaker is loosened
    assert contract_diff.threshold_change({**t, "value": old}, {**t, "value": old}) is None
