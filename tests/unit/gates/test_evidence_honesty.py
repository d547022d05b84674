"""pv's honesty checks over evidence, without re-measuring (issue 19 item 4): each checker
run on the valid fixture's evidence (no finding) and on one forged field at a time."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gates.io.files import sha256_file
from gates.provenance.git_history import CommitIndex
from gates.pv.checks import project_rules
from gates.pv.validate import validate
from tests.fixture_cases import FIXTURE_TODAY

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "pv_project"
CONTRACT = validate(
    sorted((ROOT / "contracts" / "valid").glob("*.yaml")), today=FIXTURE_TODAY
).contracts[0]
GATE = CONTRACT.gate("GATE-DEMO-001")
EVIDENCE = json.loads((ROOT / "evidence" / "C-DEMO" / "GATE-DEMO-001.json").read_text())


def rules(ev: dict, measured_in: dict[str, str] | None = None) -> list[str]:
    where = (*GATE.where, "evidence")
    issues = project_rules._evidence_honesty(
        CONTRACT, GATE, ev, where, root=ROOT, commits=CommitIndex(ROOT),
        measured_in=measured_in or {},
    )  # fmt: skip
    return [i.rule for i in issues]


def test_evidence_whose_sources_miss_its_measurement_says_nothing_was_measured():
    """The fixture's GATE-DEMO-001 has no measurement pv can find; say it lives in
    tests/test_demo.py (recorded) or tests/demo_gates.py (not)."""
    assert rules(EVIDENCE, {"GATE-DEMO-001": "tests/test_demo.py"}) == []
    elsewhere = {"GATE-DEMO-001": "tests/demo_gates.py"}
    assert rules(EVIDENCE, elsewhere) == ["EVIDENCE-NOTHING-MEASURED"]
    assert rules(EVIDENCE, {"GATE-DEMO-002": "tests/demo_gates.py"}) == []  # another gate's


def forged(change) -> dict:
    ev = copy.deepcopy(EVIDENCE)
    change(ev)
    return ev


def test_the_valid_fixture_evidence_is_honest():
    assert rules(EVIDENCE) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda ev: ev["tests"][0].update(outcome="failed"),
        lambda ev: ev["tests"][0].update(outcome="error"),
        lambda ev: ev["tests"][0].update(outcome="skipped"),
        lambda ev: ev.update(tests=[]),
        lambda ev: ev.pop("tests"),
        lambda ev: ev["tests"][0].update(id="FALSIFY-DEMO-002"),  # the bound test unrecorded
    ],
    ids=["failed", "error", "skipped", "empty", "absent", "unrecorded"],
)
def test_pass_or_partial_needs_every_bound_test_recorded_as_passed(change):
    assert rules(forged(change)) == ["EVIDENCE-TESTS-NOT-PASSED"]
    partial = forged(lambda ev: (change(ev), ev.update(verdict="PARTIAL")))
    assert rules(partial) == ["EVIDENCE-TESTS-NOT-PASSED"]


def test_fail_evidence_may_record_any_outcome():
    assert rules(forged(lambda ev: ev.update(verdict="FAIL", tests=[]))) == []


@pytest.mark.parametrize(
    ("override", "found"),
    [
        (None, ["EVIDENCE-DIRTY"]),
        ({"reason": "  "}, ["EVIDENCE-DIRTY"]),
        ({"reason": "a comment, not code"}, []),
    ],
)
def test_dirty_evidence_needs_an_override_with_a_reason(override, found):
    def dirty(ev):
        ev["git"]["dirty"] = True
        if override is not None:
            ev["git"]["dirty_override"] = override

    assert rules(forged(dirty)) == found


def test_a_commit_not_in_the_history_is_reported():
    ev = forged(lambda ev: ev["git"].update(commit="0" * 40))
    assert rules(ev) == ["EVIDENCE-COMMIT-UNKNOWN"]


MUTANTS_FILE = "tests/mutants/demo.py"  # in the fixture now, not in the recorded commit


def _mutants_source() -> dict:
    return {"path": MUTANTS_FILE, "sha256": sha256_file(ROOT / MUTANTS_FILE)}


@pytest.mark.parametrize(
    "change",
    [
        lambda ev: ev["sources"][0].update(sha256="ab" * 32),  # not what the commit holds
        lambda ev: ev["sources"].append(_mutants_source()),  # a file the commit lacks
        lambda ev: ev.update(  # an artifact built from code the commit lacks
            artifacts=[
                {
                    "name": "a",
                    "sha256": "ab" * 32,
                    "bytes": 1,
                    "recipe": {"command": ["x"]},
                    "build_sources": [_mutants_source()],
                }
            ]
        ),
    ],
    ids=["other-content", "not-in-commit", "build-source"],
)
def test_clean_evidence_must_have_read_what_its_commit_holds(change):
    assert rules(forged(change)) == ["EVIDENCE-NOT-AT-COMMIT"]
    # Measured over a dirty tree (and saying why): not compared with the commit.
    said_why = {"dirty": True, "dirty_override": {"reason": "why"}}
    dirty = forged(lambda ev: (change(ev), ev["git"].update(said_why)))
    assert rules(dirty) == []
    # FAIL evidence asserts nothing about the code it ran on.
    assert rules(forged(lambda ev: (change(ev), ev.update(verdict="FAIL")))) == []


def test_an_artifact_must_exist_under_the_root_unless_a_recipe_rebuilds_it(tmp_path: Path):
    gone = {"path": "runs/gone", "sha256": "ab" * 32, "bytes": 1}
    outside = {**gone, "path": "../../../pyproject.toml"}  # exists, but not under the root
    assert rules(forged(lambda ev: ev.update(artifacts=[gone]))) == ["EVIDENCE-ARTIFACT-MISSING"]
    assert rules(forged(lambda ev: ev.update(artifacts=[outside]))) == ["EVIDENCE-ARTIFACT-MISSING"]
    rebuildable = {**gone, "recipe": {"command": ["make", "run"]}}
    assert rules(forged(lambda ev: ev.update(artifacts=[rebuildable]))) == []


def test_an_absolute_path_is_named_by_its_json_path():
    ev = forged(lambda ev: ev.update(command=["gates", "check", "--out", "/tmp/ev.json"]))
    where = (*GATE.where, "evidence")
    issues = list(project_rules.evidence_machine_paths(GATE, ev, where))
    assert [i.rule for i in issues] == ["EVIDENCE-ABSOLUTE-PATH"]
    assert "$.command[3] records the absolute path /tmp/ev.json" in issues[0].message


def test_many_absolute_paths_are_named_a_few_at_a_time():
    ev = forged(lambda ev: ev.update(notes=None, command=[f"/tmp/{i}" for i in range(10)]))
    ev.pop("notes")
    issues = list(project_rules.evidence_machine_paths(GATE, ev, ()))
    assert len(issues) == 3
    assert issues[-1].message.endswith("(and 7 more)")


def test_a_recorded_test_node_must_be_the_one_the_contract_binds():
    where = (*GATE.where, "evidence")

    def mismatches(ev: dict) -> list[str]:
        return [i.message for i in project_rules.evidence_mismatches(CONTRACT, GATE, ev, where)]

    assert mismatches(EVIDENCE) == []
    renamed = forged(lambda ev: ev["tests"][0].update(node="tests/test_demo.py::test_gone"))
    [message] = mismatches(renamed)
    assert "ran tests/test_demo.py::test_gone for FALSIFY-DEMO-001" in message
