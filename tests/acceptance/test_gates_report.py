"""`gates report --out FILE` as a user runs it: a page written atomically and byte-identical on a
re-run, the audit found at its default place, and every bad input (audit, plot, contracts, an
--out that is not our page) one message naming the file, exit 1, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gates.cli import gates as gates_cli
from gates.report.page import MARKER
from tests.conftest import FIXTURE_PROJECT
from tests.unit.gates.report_support import PageParser, copy_demo_project, write_json


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the fixture project's valid contract, its evidence, tests and pyproject."""
    return copy_demo_project(tmp_path / "project")


def demo_audit(**changes) -> dict:
    row = {
        "contract": "C-DEMO",
        "test": "FALSIFY-DEMO-001",
        "node": "tests/test_demo.py::test_add_zero",
        "outcome": "passed",
        "seconds": 0.5,
    }
    record = {
        "kind": "mutation-audit",
        "captured_at": "2026-02-02T10:00:00Z",
        "host": {},
        "git": {"commit": "f" * 40, "dirty": False},
        "command": ["gates", "audit"],
        "rows": [
            {**row, "mutant": None, "verdict": "passes"},
            {**row, "mutant": "add-one", "outcome": "failed", "verdict": "killed"},
        ],
        "mutants": 1,
        "killed": 1,
        "ok": True,
    }
    return {**record, **changes}


def report(root: Path, out: Path, *extra: str) -> int:
    contract = root / "contracts" / "demo-v1.yaml"
    return gates_cli.main(
        ["report", "--out", str(out), "--root", str(root), *extra, "--files", str(contract)]
    )


def files_in(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


def test_a_report_is_written_and_a_rerun_gives_the_same_bytes(
    project, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "site" / "report.html"
    assert report(project, out) == 0
    said = capsys.readouterr().out
    assert f"wrote {out}: 2 gates over 1 contracts, 1 of 1 ship-blocking PASS" in said
    first = out.read_bytes()
    page = PageParser(first.decode())
    assert page.counts["gates"] == "2" and page.counts["ship-ready"] == "yes"
    assert MARKER in first.decode()
    (href,) = [a["href"] for t, a in page.tags if t == "a" and "data-evidence" in a]
    assert (out.parent / str(href)).resolve() == project / "evidence/C-DEMO/GATE-DEMO-001.json"
    assert "not audited: no --audit given and no evidence/audit/audit.json" in first.decode()

    monkeypatch.chdir(tmp_path)
    assert report(project, out) == 0, "our own page is replaced"
    assert out.read_bytes() == first, "same inputs, same bytes, from any directory"
    assert sorted(files_in(out.parent)) == ["report.html"], "no temp file left"


def test_a_source_changed_since_the_evidence_makes_the_page_not_ship_ready(
    project, tmp_path, capsys
):
    """The bound test a PASS rests on is edited after its evidence: `pv status` calls it
    stale and not ship-ready, and so does the page (and the command's line)."""
    out = tmp_path / "report.html"
    with (project / "tests" / "test_demo.py").open("a") as source:
        source.write("\n# edited after the evidence was measured\n")
    assert report(project, out) == 0
    said = capsys.readouterr().out
    assert "1 of 1 ship-blocking PASS, 1 of them on stale evidence, ship-ready no" in said
    page = PageParser(out.read_text())
    counts = page.counts
    assert (counts["PASS"], counts["stale"], counts["ship-ready"]) == ("1", "1", "no")
    assert page.attrs_of("li", "data-stale") == ["GATE-DEMO-001"]
    assert "tests/test_demo.py changed since commit" in out.read_text()


def test_the_default_audit_is_read_and_the_page_says_so(project, tmp_path):
    default = project / "evidence" / "audit" / "audit.json"
    default.parent.mkdir(parents=True)
    write_json(default, demo_audit())
    out = tmp_path / "report.html"
    assert report(project, out) == 0
    page = out.read_text()
    assert "found at its default location" in page
    verdicts = PageParser(page).attrs_of("span", "data-audit")
    assert verdicts == ["passes", "killed", "not audited", "not audited"], "DEMO-002: unaudited"


BAD_AUDITS = [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (json.dumps({"kind": "mutation-audit"}).encode(), "not a gates audit file"),
    (json.dumps(demo_audit(kind="evidence")).encode(), "not a gates audit file"),
    (json.dumps(demo_audit(killed=0)).encode(), "totals"),
    (
        json.dumps(demo_audit(rows=[{**demo_audit()["rows"][1], "verdict": "SURVIVED"}])).encode(),
        "verdict 'SURVIVED' but outcome 'failed' means 'killed'",
    ),
    (
        json.dumps(demo_audit(rows=demo_audit()["rows"] * 2, mutants=2, killed=2)).encode(),
        "listed twice",
    ),
]


def _refused(project: Path, tmp_path: Path, capsys, audit: Path, why: str, *extra: str) -> None:
    out = tmp_path / "site" / "report.html"
    assert report(project, out, *extra) == 1
    err = capsys.readouterr().err
    assert f"audit file {audit}" in err and why in err and "nothing written" in err
    assert not out.parent.exists()


@pytest.mark.parametrize(("content", "why"), [*BAD_AUDITS, (None, "No such file")])
def test_a_bad_audit_file_is_named_and_nothing_is_written(project, tmp_path, capsys, content, why):
    audit = tmp_path / "audit.json"
    if content is not None:
        audit.write_bytes(content)
    _refused(project, tmp_path, capsys, audit, why, "--audit", str(audit))


@pytest.mark.parametrize(("content", "why"), BAD_AUDITS[:3])
def test_a_bad_default_audit_file_is_an_error_too(project, tmp_path, capsys, content, why):
    """At its default place the audit is committed evidence, so pv (which the report runs
    first) refuses it already: AUDIT-INVALID, naming the file and why; no page."""
    audit = project / "evidence" / "audit" / "audit.json"
    audit.parent.mkdir(parents=True)
    audit.write_bytes(content)
    out = tmp_path / "site" / "report.html"
    assert report(project, out) == 1
    err = capsys.readouterr().err
    assert "AUDIT-INVALID" in err and f"audit file {audit}" in err and why in err
    assert not out.exists()


def test_a_bad_audit_leaves_the_previous_page_as_it_was(project, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert report(project, out) == 0
    before = out.read_bytes()
    bad = write_json(tmp_path / "audit.json", demo_audit(ok=False))
    assert report(project, out, "--audit", str(bad)) == 1
    assert "totals" in capsys.readouterr().err
    assert files_in(tmp_path) == {"report.html": before, "audit.json": bad.read_bytes()}


@pytest.mark.parametrize("name", ["missing.svg", "broken.svg"])
def test_a_missing_or_broken_plot_is_named_and_nothing_is_written(project, tmp_path, capsys, name):
    plot = tmp_path / name
    if name == "broken.svg":
        plot.write_text("<svg xmlns='http://www.w3.org/2000/svg'>")
    out = tmp_path / "out" / "report.html"
    assert report(project, out, "--plot", str(plot)) == 1
    err = capsys.readouterr().err
    assert f"plot {plot}" in err and "nothing written" in err
    assert not out.parent.exists()


def test_a_file_that_is_not_our_page_is_never_replaced(project, tmp_path, capsys):
    out = tmp_path / "report.html"
    out.write_text("<html>my own notes</html>\n")
    assert report(project, out) == 1
    err = capsys.readouterr().err
    assert f"--out {out} exists and was not written by gates report" in err
    assert out.read_text() == "<html>my own notes</html>\n"
    assert sorted(files_in(tmp_path)) == ["report.html"]


def test_a_symlink_or_directory_at_out_is_refused(project, tmp_path, capsys):
    target = tmp_path / "target.html"
    assert report(project, target) == 0
    link = tmp_path / "link.html"
    link.symlink_to(target)
    assert report(project, link) == 1, "even a link to our own page is refused"
    assert "symbolic link" in capsys.readouterr().err
    assert link.is_symlink()
    (tmp_path / "dir.html").mkdir()
    assert report(project, tmp_path / "dir.html") == 1
    assert "not a regular file" in capsys.readouterr().err


def test_invalid_contracts_write_nothing(tmp_path, capsys):
    bad = FIXTURE_PROJECT / "contracts/invalid/evidence-verdict-mismatch/demo-v1.yaml"
    out = tmp_path / "report.html"
    assert gates_cli.main(["report", "--out", str(out), "--files", str(bad)]) == 1
    assert "EVIDENCE-MISMATCH" in capsys.readouterr().err
    assert not out.exists()


def test_a_failed_write_keeps_the_old_page_and_leaves_no_temp_file(
    project, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "report.html"
    assert report(project, out) == 0
    before = out.read_bytes()

    def disk_full(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", disk_full)
    assert report(project, out) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert files_in(tmp_path) == {"report.html": before}
