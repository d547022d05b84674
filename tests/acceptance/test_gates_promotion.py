"""`gates promote` / `demote` / `check` against a project and an artifact built in the test.

A promotion is a measurement: it changes exactly the intended contract lines, writes
evidence that records the artifact by sha256, and refuses (touching nothing) otherwise.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gates import check as gate_check
from gates import promotion
from gates.cli import gates as gates_cli
from gates.io import atomic, files
from gates.provenance import evidence
from gates.pv.validate import validate
from gates.refusal import RefusedError

TODAY = dt.date(2026, 11, 22)
EVIDENCE = Path("evidence") / "C-WIDGET" / "GATE-WIDGET-001.json"


def artifact(root: Path, lines: int, name: str = "artifact.txt") -> Path:
    path = root.parent / name
    path.write_text("".join(f"line {i}\n" for i in range(lines)))
    return path


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    for line in difflib.ndiff(before.splitlines(), after.splitlines()):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


def promote(root: Path, contract: Path, *artifacts: Path, **kw) -> gate_check.CheckResult:
    return promotion.promote(
        root,
        contract,
        "GATE-WIDGET-001",
        list(artifacts),
        command=["gates", "promote", "GATE-WIDGET-001"],
        today=TODAY,
        **kw,
    )


def test_promote_then_demote_changes_exactly_the_intended_lines(measured_widget):
    root, contract = measured_widget
    before = contract.read_text()
    art = artifact(root, 5)

    result = promote(root, contract, art)
    after = contract.read_text()

    assert result.verdict == "PASS"
    removed, added = changed_lines(before, after)
    assert removed == [
        "  version: 1.0.0   # bumped by gates promote",
        "  updated: 2026-01-05",
        "    status: PENDING   # promoted only by gates promote",
    ]
    assert added == [
        "  version: 1.1.0   # bumped by gates promote",
        "  updated: 2026-11-22",
        "    status: PASS   # promoted only by gates promote",
        "    evidence: evidence/C-WIDGET/GATE-WIDGET-001.json",
        "  - version: 1.1.0",
        "    date: 2026-11-22",
        '    text: "GATE-WIDGET-001 promoted to PASS: line_count = 5 lines '
        '(line_count >= 3 lines); evidence evidence/C-WIDGET/GATE-WIDGET-001.json."',
    ]
    record = json.loads((root / EVIDENCE).read_text())
    assert evidence.schema_errors(record) == []
    assert record["verdict"] == "PASS"
    assert record["contract"] == {"id": "C-WIDGET", "version": "1.1.0"}
    assert record["measurements"]["line_count"] == {"value": 5, "unit": "lines"}
    # Outside the project root: recorded by name and digest, never by a machine's path.
    digest, size = evidence.sha256_of(art)
    assert record["artifacts"] == [{"name": "artifact.txt", "sha256": digest, "bytes": size}]
    assert [t["outcome"] for t in record["tests"]] == ["passed"]
    assert record["git"]["dirty"] is False
    assert validate([contract], today=TODAY).report.findings == []

    promotion.demote(root, contract, "GATE-WIDGET-001", "artifact superseded", today=TODAY)
    demoted = contract.read_text()
    removed, added = changed_lines(before, demoted)
    assert removed == ["  version: 1.0.0   # bumped by gates promote", "  updated: 2026-01-05"]
    assert added[:2] == ["  version: 1.2.0   # bumped by gates promote", "  updated: 2026-11-22"]
    assert "demoted from PASS to PENDING: artifact superseded" in added[4]
    assert len(added) == 8  # two changelog entries of three lines each
    assert not (root / EVIDENCE).exists()
    assert validate([contract], today=TODAY).report.findings == []


def _snapshot(root: Path, contract: Path) -> tuple[str, bool]:
    return contract.read_text(), (root / EVIDENCE).exists()


def test_promotion_refuses_a_missed_threshold_and_touches_nothing(measured_widget):
    root, contract = measured_widget
    before = _snapshot(root, contract)
    with pytest.raises(RefusedError, match="line_count = 1 lines misses"):
        promote(root, contract, artifact(root, 1))
    assert _snapshot(root, contract) == before


def test_promotion_refuses_when_a_bound_test_fails(measured_widget):
    root, contract = measured_widget
    before = _snapshot(root, contract)
    (root / "widget.py").write_text("def count_lines(path):\n    return 0\n")
    with pytest.raises(RefusedError, match=r"FALSIFY-WIDGET-001 .* failed"):
        promote(root, contract, artifact(root, 5), allow_dirty="testing a broken widget")
    assert _snapshot(root, contract) == before


def test_promotion_refuses_uncommitted_code_unless_overridden_and_recorded(measured_widget):
    root, contract = measured_widget
    (root / "tests" / "test_widget.py").write_text(
        (root / "tests" / "test_widget.py").read_text() + "\n# an uncommitted edit\n"
    )
    before = _snapshot(root, contract)
    with pytest.raises(RefusedError, match="uncommitted changes"):
        promote(root, contract, artifact(root, 5))
    assert _snapshot(root, contract) == before
    with pytest.raises(RefusedError, match="must say why"):
        promote(root, contract, artifact(root, 5), allow_dirty="  ")
    assert _snapshot(root, contract) == before
    promote(root, contract, artifact(root, 5), allow_dirty="a comment, not code")
    record = json.loads((root / EVIDENCE).read_text())
    assert record["git"] == {
        **record["git"],
        "dirty": True,
        "dirty_override": {"reason": "a comment, not code"},
    }


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: root.parent / "missing.txt", "does not exist"),
        (lambda root: root / "tests", "is not a text file"),
    ],
)
def test_promotion_refuses_a_missing_or_wrong_kind_artifact(measured_widget, make, message):
    root, contract = measured_widget
    before = _snapshot(root, contract)
    with pytest.raises(RefusedError, match=message):
        promote(root, contract, make(root))
    assert _snapshot(root, contract) == before


def test_remeasuring_uses_the_recorded_artifact_and_refuses_a_changed_one(measured_widget):
    root, contract = measured_widget
    art = root / "runs" / "artifact.txt"  # under the root (git-ignored): recorded by path
    art.parent.mkdir()
    art.write_text("".join(f"line {i}\n" for i in range(5)))
    promote(root, contract, art)
    # Re-check without --artifact: the evidence's artifact, verified by sha256.
    c = validate([contract], today=TODAY).contracts[0]
    again = gate_check.check(root, c, c.gate("GATE-WIDGET-001"), [], command=["gates", "check"])
    assert again.verdict == "PASS"
    art.write_text("changed\n" * 9)
    with pytest.raises(RefusedError, match="no longer matches"):
        gate_check.check(root, c, c.gate("GATE-WIDGET-001"), [], command=["gates", "check"])
    art.unlink()
    with pytest.raises(RefusedError, match="is gone"):
        gate_check.check(root, c, c.gate("GATE-WIDGET-001"), [], command=["gates", "check"])


def test_a_read_only_evidence_directory_changes_nothing(measured_widget, monkeypatch):
    root, contract = measured_widget
    before = _snapshot(root, contract)
    real = files.write_new

    def refuse_evidence(path: Path, data: bytes, like: Path) -> None:
        # chmod cannot stop root (CI runs as root), so the refusal is injected.
        if "evidence" in Path(path).parts:
            raise PermissionError(13, "Permission denied", str(path))
        real(path, data, like)

    monkeypatch.setattr(files, "write_new", refuse_evidence)
    with pytest.raises(PermissionError):
        promote(root, contract, artifact(root, 5))
    assert _snapshot(root, contract) == before
    assert not list(root.rglob("*.tmp")) and not (root / atomic.JOURNAL_NAME).exists()
    assert not (root / "evidence").exists(), "the directories the commit made are removed"


def test_a_contract_that_fails_pv_validate_is_refused(measured_widget):
    root, contract = measured_widget
    contract.write_text(
        contract.read_text().replace("  kind: tooling\n", "  kind: tooling\n  kindd: x\n")
    )
    with pytest.raises(RefusedError, match="SCHEMA-UNKNOWN-KEY"):
        promote(root, contract, artifact(root, 5), allow_dirty="an invalid contract")


def test_corrupt_evidence_is_refused_as_a_source_and_replaced_by_a_re_measurement(measured_widget):
    """EVIDENCE-INVALID does not stop a promotion (re-measuring is how it is fixed), but
    evidence that cannot be read cannot say which artifact to re-measure either."""
    root, contract = measured_widget
    promote(root, contract, artifact(root, 5))
    (root / EVIDENCE).write_text("{not json")
    with pytest.raises(RefusedError, match="current evidence is unusable"):
        promote(root, contract)
    assert (root / EVIDENCE).read_text() == "{not json"
    promote(root, contract, artifact(root, 5))
    assert json.loads((root / EVIDENCE).read_text())["verdict"] == "PASS"


# A kill at every boundary of a promotion or demotion: tests/acceptance/test_gates_crash.py.
DRIVER = textwrap.dedent("""\
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    import widget_measurement  # registers the measurements
    from gates import promotion

    root, gate = Path(sys.argv[1]), sys.argv[2]
    promotion.promote(root, root / "contracts" / "widget-v1.yaml", gate,
                      [root.parent / "artifact.txt"], command=["driver"])
    """)


def run_driver(root: Path, gate: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(root), gate],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_promotions_at_once_on_one_contract_lose_no_edit(measured_widget):
    root, contract = measured_widget
    artifact(root, 5)
    procs = [run_driver(root, gate) for gate in ("GATE-WIDGET-001", "GATE-WIDGET-002")]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    result = validate([contract], today=dt.date.today() + dt.timedelta(days=1))
    assert result.report.findings == []
    c = result.contracts[0]
    assert {g.id: g.status for g in c.gates} == {
        "GATE-WIDGET-001": "PASS",
        "GATE-WIDGET-002": "PASS",
    }
    assert c.metadata.version == "1.2.0"
    assert [e.version for e in c.changelog] == ["1.2.0", "1.1.0", "1.0.0"]


def no_space(target: Path, data: bytes) -> Path:
    """files.write_temp on a full disk."""
    raise OSError(28, "No space left on device", str(target))


def test_cli_refusal_is_exit_1_and_io_failure_is_exit_2(measured_widget, monkeypatch, capsys):
    root, contract = measured_widget
    argv = ["promote", "GATE-WIDGET-001", "--files", str(contract), "--root", str(root)]
    assert gates_cli.main([*argv, "--artifact", str(root.parent / "missing.txt")]) == 1
    assert "refused, nothing changed: artifact" in capsys.readouterr().err

    monkeypatch.setattr(files, "write_temp", no_space)
    before = _snapshot(root, contract)
    assert gates_cli.main([*argv, "--artifact", str(artifact(root, 5))]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert _snapshot(root, contract) == before


def test_a_check_shows_its_verdict_before_its_evidence_and_even_when_that_cannot_be_written(
    measured_widget, monkeypatch, capsys
):
    """`gates check --out`: a disk that refuses the evidence must not hide the verdict that was
    measured (the verdict is printed first, then the write fails with exit 2); when the write
    succeeds, the file holds the evidence of that verdict."""
    root, contract = measured_widget
    out = root.parent / "evidence.json"
    argv = ["check", "GATE-WIDGET-001", "--files", str(contract), "--root", str(root)]
    argv += ["--artifact", str(artifact(root, 5)), "--out", str(out)]

    with monkeypatch.context() as patched:
        patched.setattr(files, "write_temp", no_space)
        assert gates_cli.main(argv) == 2
    shown = capsys.readouterr()
    assert "PASS" in shown.out and "No space left on device" in shown.err
    assert not out.exists()
    assert gates_cli.main(argv) == 0
    assert f"evidence written to {out}" in capsys.readouterr().out
    assert json.loads(out.read_text())["verdict"] == "PASS"
