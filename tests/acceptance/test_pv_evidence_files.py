"""pv names the evidence file for every failure to read it (issue 31): an evidence file
nested 200,000 deep, too large, not UTF-8 or not JSON is an EVIDENCE-INVALID finding at the
gate's ``evidence:`` line whose message starts with the evidence path and, where there is
one, its line and column — never PV-INTERNAL at the contract's 1:1. The same for the
committed audit (AUDIT-INVALID). The contract is still checked, so the other gate is still
checked by `gates check`; the commands that refuse over an invalid contract (`gates list`,
`gates show`, `pv status`) say which file, with no traceback.

Special files standing for evidence (FIFO, device, socket, symlink loop, dangling symlink):
tests/acceptance/test_pv_special_files.py; the reader itself: tests/unit/gates/test_jsonfile.py.

Run: .venv/bin/pytest tests/acceptance/test_pv_evidence_files.py
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gates import promotion
from gates.cli import gates as gates_cli
from gates.cli import pv as pv_cli
from gates.io.jsonfile import MAX_DEPTH
from gates.provenance import audit_record, evidence
from gates.runner import testrun
from tests.acceptance import widget_project

BROKEN, OTHER = "GATE-WIDGET-001", "GATE-WIDGET-002"
EVIDENCE = f"evidence/C-WIDGET/{BROKEN}.json"
CONTRACT = Path("contracts") / "widget-v1.yaml"


#: content (bytes, or a size for a sparse file), what the message says, where (line:col)
UNREADABLE = {
    "200000-deep": (b"[" * 200_000, f"JSON nested deeper than {MAX_DEPTH} levels", ":1:257"),
    "too-large": (evidence.MAX_EVIDENCE_BYTES + 1, "too large", ""),  # sparse: a size
    "not-utf8": (b'{\n "gate": "\xff"\n}\n', "not UTF-8 text", ":2:11"),
    "not-json": (b'{\n "gate": GATE\n}\n', "not JSON", ":2:10"),
}


def _stub_test_run(root: Path, node: str, mutant: str | None = None, timeout_s=900, *, warm=None):
    return testrun.TestOutcome(node, mutant, "passed", 0.0, "")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The widget project with GATE-WIDGET-001 promoted (its bound test stubbed for the whole
    module), its measurement registered in this process."""
    root = tmp_path_factory.mktemp("evidence-files") / "widget"
    root.mkdir()
    widget_project.build(root)
    (root / "artifact.txt").write_text("a\nb\nc\n")
    widget_project.git(root, "add", "artifact.txt")
    widget_project.git(root, "-c", "user.name=t", "-c", "user.email=t@t.invalid",
                       "commit", "-qm", "artifact")  # fmt: skip
    spec = importlib.util.spec_from_file_location(
        "widget_measurement", root / "widget_measurement.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the GATE-WIDGET-* measurements
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(testrun, "run_node", _stub_test_run)
        promotion.promote(root, root / CONTRACT, BROKEN, [root / "artifact.txt"])
        yield root


@contextlib.contextmanager
def _broken(root: Path, case: str) -> Iterator[None]:
    """GATE-WIDGET-001's evidence replaced as ``case`` says, restored after."""
    path = root / EVIDENCE
    kept = path.read_bytes()
    content = UNREADABLE[case][0]
    try:
        if isinstance(content, int):
            path.write_bytes(b"")
            with path.open("r+b") as fh:
                fh.truncate(content)
        else:
            path.write_bytes(content)
        yield
    finally:
        path.write_bytes(kept)


def _run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err, out + err
    return code, out, err


def test_the_promoted_evidence_reads_cleanly(project, monkeypatch, capsys):
    """The control: unbroken, the project validates and lists."""
    monkeypatch.chdir(project)
    code, out, _ = _run(pv_cli.main, ["validate", "--format", "json"], capsys)
    assert code == 0 and json.loads(out)["findings"] == []
    assert _run(gates_cli.main, ["list"], capsys)[0] == 0


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_an_unreadable_evidence_file_is_a_finding_naming_it(project, monkeypatch, capsys, case):
    _, problem, place = UNREADABLE[case]
    monkeypatch.chdir(project)
    with _broken(project, case):
        code, out, _ = _run(pv_cli.main, ["validate", "--format", "json"], capsys)
    findings = json.loads(out)["findings"]
    assert (code, [(f["rule"], f["file"]) for f in findings]) == (
        1,
        [("EVIDENCE-INVALID", str(CONTRACT))],
    ), findings
    lines = (project / CONTRACT).read_text().splitlines()
    assert lines[findings[0]["line"] - 1].strip() == f"evidence: {EVIDENCE}"  # the gate's
    assert findings[0]["message"].startswith(f"{EVIDENCE}{place}: "), findings[0]
    assert problem in findings[0]["message"], findings[0]


def test_evidence_nested_200000_deep_blocks_no_other_gate(project, monkeypatch, capsys):
    """The other gate of the contract is still checked (a re-measurement is not stopped by
    findings about recorded evidence); the commands that refuse over an invalid contract
    (`gates list`, `gates show`, `pv status`) refuse with the finding naming the file."""
    monkeypatch.chdir(project)
    named = f"{EVIDENCE}:1:257: JSON nested deeper than {MAX_DEPTH} levels"
    with _broken(project, "200000-deep"):
        argv = ["check", OTHER, "--artifact", "artifact.txt"]
        code, out, err = _run(gates_cli.main, argv, capsys)
        assert code == 0 and f"{OTHER}: PASS" in out, out + err
        # Freshness reads every PASS gate's evidence: the broken one is left to pv.
        code, out, err = _run(gates_cli.main, ["promote", "--stale", "--dry-run"], capsys)
        assert code == 0 and "no gate is stale" in out, out + err
        refusing = [(gates_cli.main, ["list"]), (gates_cli.main, ["show", BROKEN])]
        for main, argv in [*refusing, (pv_cli.main, ["status"])]:
            code, out, err = _run(main, argv, capsys)
            assert code == 1 and "EVIDENCE-INVALID" in err and named in err, (argv, err)


def test_an_audit_file_nested_200000_deep_is_an_audit_finding_naming_it(
    project, monkeypatch, capsys
):
    monkeypatch.chdir(project)
    audit = project / audit_record.AUDIT_EVIDENCE
    audit.parent.mkdir()
    try:
        audit.write_bytes(b"[" * 200_000)
        code, out, _ = _run(pv_cli.main, ["validate", "--format", "json"], capsys)
    finally:
        audit.unlink()
        audit.parent.rmdir()
    findings = json.loads(out)["findings"]
    assert (code, [f["rule"] for f in findings]) == (1, ["AUDIT-INVALID"]), findings
    assert f"{audit}:1:257: JSON nested deeper than {MAX_DEPTH} levels" in findings[0]["message"]
