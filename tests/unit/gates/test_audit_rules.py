"""pv reads the committed mutation audit like a gate's evidence (issue 19 item 7): a failed
run is an error at the mutant, a changed file or an unaudited mutant is AUDIT-STALE, an
unreadable audit is AUDIT-INVALID; a fresh, all-killed audit gives no finding."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from gates.audit import bound_tests as audit
from gates.io.files import sha256_file
from gates.pv.staleness import audit_findings_by_test
from gates.pv.validate import validate

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "pv_project"
CONTRACT = Path("contracts") / "invalid" / "audit-not-ok" / "audited-v1.yaml"
TEST_FILE = "tests/test_demo.py"
RUNS = [
    ("FALSIFY-AUDITED-001", "tests/test_demo.py::test_add_zero", "add-one"),
    ("FALSIFY-AUDITED-002", "tests/test_demo.py::TestGroup::test_in_class", "marker-dropped"),
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(FIXTURE, root)
    return root


def write_audit(
    root: Path,
    *,
    survived: str | None = None,
    drop: str | None = None,
    row_sources: list[int] | None = None,
) -> None:
    sources = [{"path": TEST_FILE, "sha256": sha256_file(root / TEST_FILE)}]
    rows = []
    for test, node, mutant in RUNS:
        for m in (None, mutant):
            if m is not None and m == drop:
                continue
            outcome = "passed" if m is None or m == survived else "failed"
            rows.append(
                {
                    "contract": "C-AUDITED",
                    "test": test,
                    "node": node,
                    "mutant": m,
                    "outcome": outcome,
                    "verdict": "passes"
                    if m is None
                    else ("killed" if outcome == "failed" else "SURVIVED"),
                    "status": None
                    if m is None
                    else ("killed" if outcome == "failed" else "survived"),
                    "seconds": 0.5,
                    "sources": [0] if row_sources is None else row_sources,
                }
            )
    mutant_rows = [r for r in rows if r["mutant"]]
    record = {
        "kind": "mutation-audit",
        "captured_at": "2026-01-10T12:00:00Z",
        "host": {},
        "git": {"commit": "a" * 40, "dirty": False},
        "command": ["gates", "audit"],
        "sources": sources,
        "rows": rows,
        "mutants": len(mutant_rows),
        "killed": sum(r["outcome"] == "failed" for r in mutant_rows),
        "ok": all(r["outcome"] == ("passed" if r["mutant"] is None else "failed") for r in rows),
    }
    (root / audit.AUDIT_EVIDENCE).write_text(json.dumps(record))


def findings(root: Path) -> list[tuple[str, int, str]]:
    report = validate([root / CONTRACT], root=root).report
    return [(f.rule, f.line, f.message) for f in report.findings if f.rule.startswith("AUDIT-")]


def test_a_fresh_audit_with_every_mutant_killed_gives_no_finding(project):
    write_audit(project)
    assert findings(project) == []


def test_a_surviving_mutant_is_an_error_at_its_line(project):
    write_audit(project, survived="marker-dropped")
    [(rule, line, message)] = findings(project)
    assert rule == "AUDIT-NOT-OK" and "marker-dropped" in message and "survived" in message
    text = (project / CONTRACT).read_text().splitlines()
    assert "id: marker-dropped" in text[line - 1]


def test_an_audit_rewritten_in_place_at_its_old_size_and_mtime_is_read_again(project):
    """pv parses the audit once per file version, known by what stat says of it: a rewrite
    in place, padded to the old size and its mtime set back, is still a new version."""
    path = project / audit.AUDIT_EVIDENCE
    write_audit(project, survived="marker-dropped")
    survived = path.read_text()
    write_audit(project)
    healthy = path.read_text()
    width = max(len(survived), len(healthy))  # JSON allows trailing blanks
    path.write_text(healthy.ljust(width))
    assert findings(project) == []  # parsed and cached
    before = path.stat()
    path.write_text(survived.ljust(width))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_ino) == (before.st_size, before.st_ino)
    assert [rule for rule, _, _ in findings(project)] == ["AUDIT-NOT-OK"]


def test_a_changed_source_makes_the_audit_stale_and_reverting_makes_it_fresh(project):
    write_audit(project)
    test_file = project / TEST_FILE
    original = test_file.read_bytes()
    test_file.write_bytes(original + b"\n# edited\n")
    stale = findings(project)
    assert {rule for rule, _, _ in stale} == {"AUDIT-STALE"}
    assert all(TEST_FILE in message and "changed" in message for _, _, message in stale)
    assert len(stale) == 2  # one per audited test that read it
    test_file.write_bytes(original)
    assert findings(project) == []


def test_rows_that_record_no_sources_are_stale(project):
    """An empty list vouches for nothing, as no list does (issue 33)."""
    write_audit(project, row_sources=[])
    stale = findings(project)
    assert stale and {rule for rule, _, _ in stale} == {"AUDIT-STALE"}
    assert all("records no sources" in message for _, _, message in stale)


def test_a_mutant_without_a_row_is_stale(project):
    write_audit(project, drop="add-one")
    [(rule, _, message)] = findings(project)
    assert rule == "AUDIT-STALE" and "add-one" in message and "not in" in message


@pytest.mark.parametrize("content", [b"{not json", b'{"kind": "mutation-audit"}'])
def test_an_unreadable_audit_is_invalid(project, content):
    (project / audit.AUDIT_EVIDENCE).write_bytes(content)
    rules = [rule for rule, _, _ in findings(project)]
    assert rules == ["AUDIT-INVALID"]
    assert validate([project / CONTRACT], root=project).report.errors


def test_without_an_audit_file_there_is_no_audit_finding(project):
    (project / audit.AUDIT_EVIDENCE).unlink()
    assert findings(project) == []


def test_pv_status_maps_each_audit_finding_to_the_tests_a_gate_rests_on(project):
    """What `pv status --require-ship-ready` counts against a gate: the AUDIT-* findings
    about the tests it rests on (here both tests read the edited file)."""
    write_audit(project)
    contract = validate([project / CONTRACT], root=project).contracts[0]
    assert audit_findings_by_test(contract, project) == {}
    test_file = project / TEST_FILE
    test_file.write_bytes(test_file.read_bytes() + b"\n# edited\n")
    said = audit_findings_by_test(contract, project)
    assert set(said) == {"FALSIFY-AUDITED-001", "FALSIFY-AUDITED-002"}
    assert all(v.startswith("AUDIT-STALE: ") and TEST_FILE in v for v in said.values())
