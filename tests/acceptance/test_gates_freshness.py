"""Evidence freshness, end to end: `gates promote` records the files its bound tests and
measurement read (``sources``), `pv validate` warns EVIDENCE-STALE when one changes, `pv status
--require-ship-ready` fails on a stale ship-blocking gate, and `gates promote --stale`
refreshes it. Every command runs as a user runs it, in a subprocess, on the widget project
(tests/acceptance/widget_project.py) with a measurement that counts lines in a child process.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.acceptance import widget_project

EVIDENCE = Path("evidence") / "C-WIDGET" / "GATE-WIDGET-001.json"
CONTRACT = Path("contracts") / "widget-v1.yaml"

#: GATE-WIDGET-001 measured without an artifact: a child `python` reads data/lines.txt, so
#: only the child's trace can tell that the gate rests on it.
MEASUREMENT = textwrap.dedent("""\
    import subprocess
    import sys

    from gates.measure import Measurement, measures

    CHILD = "print(len(open('data/lines.txt').read().splitlines()))"


    @measures("GATE-WIDGET-001")
    def lines_counted_by_a_child(ctx):
        out = subprocess.run([sys.executable, "-c", CHILD], cwd=ctx.root, check=True,
                             capture_output=True, text=True).stdout
        return Measurement(values={"line_count": (int(out), "lines")},
                           workload="lines of data/lines.txt, counted by a child process")
    """)


OTHER_MEASUREMENT = textwrap.dedent("""\
    from gates.measure import Measurement, measures


    @measures("GATE-WIDGET-999")
    def another_gate(ctx):
        return Measurement(values={"n": (1, "things")}, workload="not this contract's")
    """)


def run(root: Path, *args: str) -> subprocess.CompletedProcess:
    tool, *rest = args
    return subprocess.run(
        [sys.executable, "-m", f"gates.cli.{tool}", *rest],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def lines(n: int) -> str:
    return "".join(f"line {i}\n" for i in range(n))


def sources(root: Path) -> dict[str, str]:
    record = json.loads((root / EVIDENCE).read_text())
    return {s["path"]: s["sha256"] for s in record["sources"]}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def status_line(root: Path) -> int:
    """The line of GATE-WIDGET-001's `status:` in the contract (where pv puts the finding)."""
    text = (root / CONTRACT).read_text().splitlines()
    gate = next(i for i, line in enumerate(text) if "id: GATE-WIDGET-001" in line)
    return next(i for i in range(gate, len(text)) if text[i].lstrip().startswith("status:")) + 1


@pytest.fixture(scope="module")
def promoted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The widget project with GATE-WIDGET-001 promoted to PASS by `gates promote`."""
    root = tmp_path_factory.mktemp("fresh") / "widget"
    root.mkdir()
    widget_project.build(root)
    widget_project.use_measurement_dir(root, MEASUREMENT)
    (root / "data").mkdir()
    (root / "data" / "lines.txt").write_text(lines(5))
    (root / "unread.txt").write_text("tracked, and read by nothing the gate runs\n")
    # Another gate's measurement module: read to find the one that measures this gate, but
    # never imported by its check, so not among its sources.
    (root / "gatework" / "other_gates.py").write_text(OTHER_MEASUREMENT)
    widget_project.commit_all(root, "a measurement that reads data through a child")
    proc = run(root, "gates", "promote", "GATE-WIDGET-001", "--files", str(CONTRACT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


@pytest.fixture
def project(promoted: Path, tmp_path: Path) -> Path:
    """A copy of the promoted project (its git history too) for a test to change."""
    root = tmp_path / "widget"
    shutil.copytree(promoted, root, symlinks=True)
    return root


def test_sources_are_the_files_the_tests_and_the_measurement_read(promoted: Path):
    recorded = sources(promoted)
    assert "widget.py" in recorded  # imported by the bound test, in the pytest child
    assert "tests/test_widget.py" in recorded  # the bound test itself
    assert "data/lines.txt" in recorded  # opened only by the measurement's own child
    assert "gatework/widget_gates.py" in recorded  # the measurement's module
    assert "unread.txt" not in recorded  # tracked, but nothing read it
    assert "gatework/other_gates.py" not in recorded  # another gate's measurement module
    assert not [p for p in recorded if p.startswith(("contracts/", "evidence/", "/"))]
    assert ".gates.lock" not in recorded
    assert list(recorded) == sorted(recorded)
    for path, digest in recorded.items():
        assert digest == sha256(promoted / path), path


def test_a_changed_source_is_stale_and_reverting_it_is_fresh(project: Path):
    before = (project / "widget.py").read_text()
    record = json.loads((project / EVIDENCE).read_text())
    commit_12 = record["git"]["commit"][:12]

    clean = run(project, "pv", "validate", str(CONTRACT))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "EVIDENCE-STALE" not in clean.stdout
    assert run(project, "pv", "status", "--require-ship-ready").returncode == 0

    (project / "unread.txt").write_text("changed, but no source of the gate\n")
    assert "EVIDENCE-STALE" not in run(project, "pv", "validate", str(CONTRACT)).stdout

    (project / "widget.py").write_text(before + "# one more line\n")
    stale = run(project, "pv", "validate", str(CONTRACT))
    assert stale.returncode == 0, stale.stdout + stale.stderr  # a warning, never a failure
    assert (
        f"{CONTRACT}:{status_line(project)}:" in stale.stdout
        and "warning EVIDENCE-STALE: GATE-WIDGET-001" in stale.stdout
    ), stale.stdout
    assert f"widget.py changed since commit {commit_12}" in stale.stdout
    assert run(project, "pv", "validate", "--strict", str(CONTRACT)).returncode == 1

    ready = run(project, "pv", "status", "--require-ship-ready")
    assert ready.returncode == 1, ready.stdout + ready.stderr
    assert "stale: GATE-WIDGET-001" in ready.stdout
    assert "STALE 1" in ready.stdout
    status = json.loads(run(project, "pv", "status", "--format", "json").stdout)
    (widget,) = status["contracts"]
    assert widget["counts"]["STALE"] == 1
    assert status["ship_blocking_stale"] == ["GATE-WIDGET-001"]

    (project / "widget.py").write_text(before)
    assert "EVIDENCE-STALE" not in run(project, "pv", "validate", str(CONTRACT)).stdout
    assert run(project, "pv", "status", "--require-ship-ready").returncode == 0


def test_a_source_read_only_by_a_child_of_the_measurement_is_gone_then_stale(project: Path):
    (project / "data" / "lines.txt").unlink()
    stale = run(project, "pv", "validate", str(CONTRACT))
    assert stale.returncode == 0
    assert "data/lines.txt gone since commit" in stale.stdout


def test_promote_stale_refreshes_every_stale_gate(project: Path):
    (project / "data" / "lines.txt").write_text(lines(6))
    widget_project.commit_all(project, "one more line")
    assert "data/lines.txt changed" in run(project, "pv", "validate", str(CONTRACT)).stdout

    dry = run(project, "gates", "promote", "--stale", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "GATE-WIDGET-001: PASS, stale: data/lines.txt changed" in dry.stdout
    assert "data/lines.txt changed" in run(project, "pv", "validate", str(CONTRACT)).stdout

    proc = run(project, "gates", "promote", "--stale")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GATE-WIDGET-001: re-promoted to PASS" in proc.stdout
    fresh = run(project, "pv", "validate", str(CONTRACT))
    assert fresh.returncode == 0 and "EVIDENCE-STALE" not in fresh.stdout, fresh.stdout
    record = json.loads((project / EVIDENCE).read_text())
    assert record["measurements"]["line_count"]["value"] == 6
    recorded = sources(project)
    assert recorded["data/lines.txt"] == sha256(project / "data" / "lines.txt")
    # Imported from its byte-code cache where one was written: still its .py that counts.
    assert "widget.py" in recorded
    assert run(project, "gates", "promote", "--stale").stdout.strip() == "no gate is stale"


def test_promote_stale_re_measures_a_gate_whose_threshold_changed(project: Path):
    """A threshold edited in the contract leaves the evidence measured against the old one
    (EVIDENCE-MISMATCH, not stale): --stale re-measures it too, and leaves the others."""
    contract = project / CONTRACT
    old = 'threshold: {metric: line_count, comparator: ">=", value: 3, unit: lines}'
    assert old in contract.read_text()
    contract.write_text(contract.read_text().replace(old, old.replace("value: 3", "value: 2")))
    widget_project.commit_all(project, "a lower bound")
    assert "EVIDENCE-MISMATCH" in run(project, "pv", "validate", str(CONTRACT)).stdout

    dry = run(project, "gates", "promote", "--stale", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert len(dry.stdout.splitlines()) == 1, dry.stdout  # the one gate out of date
    assert "GATE-WIDGET-001: PASS, stale: its evidence disagrees with the contract" in dry.stdout

    proc = run(project, "gates", "promote", "--stale")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GATE-WIDGET-001: re-promoted to PASS" in proc.stdout
    after = run(project, "pv", "validate", str(CONTRACT))
    assert after.returncode == 0 and "EVIDENCE-MISMATCH" not in after.stdout, after.stdout
    assert json.loads((project / EVIDENCE).read_text())["threshold"]["value"] == 2
    assert run(project, "gates", "promote", "--stale").stdout.strip() == "no gate is stale"


def test_promote_stale_fails_naming_a_gate_that_no_longer_passes(project: Path):
    (project / "data" / "lines.txt").write_text(lines(2))
    widget_project.commit_all(project, "too few lines")
    before = (project / EVIDENCE).read_text()
    proc = run(project, "gates", "promote", "--stale")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "GATE-WIDGET-001: FAILED" in proc.stdout
    assert (project / EVIDENCE).read_text() == before


def test_promote_needs_a_gate_or_stale(project: Path):
    assert run(project, "gates", "promote").returncode == 2
    assert run(project, "gates", "promote", "GATE-WIDGET-001", "--stale").returncode == 2


def test_check_ship_blocking_re_measures_each_and_writes_nothing(project: Path):
    """What CI runs at HEAD: the ship-blocking gate only (GATE-WIDGET-002 needs an artifact
    nobody gave: checking it would be refused), a verdict table, nothing changed."""
    widget_project.commit_all(project, "the promotion")

    def tree() -> tuple[str, dict]:
        status = subprocess.run(
            ["git", "-C", str(project), "status", "--porcelain", "--ignored"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return status, {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}

    before = tree()
    proc = run(project, "gates", "check", "--ship-blocking", "--files", str(CONTRACT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== gates check GATE-WIDGET-001" in proc.stdout
    assert "GATE-WIDGET-002" not in proc.stdout
    assert "re-measured: 1 of 1 as recorded" in proc.stdout
    assert tree() == before


def test_check_all_re_measures_every_promoted_gate_and_only_those(project: Path):
    """`--all`: every PASS/PARTIAL gate, whether ship-blocking or not; a PENDING one (here
    GATE-WIDGET-002) has nothing recorded to re-measure."""
    widget_project.commit_all(project, "the promotion")
    proc = run(project, "gates", "check", "--all", "--files", str(CONTRACT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== gates check GATE-WIDGET-001" in proc.stdout
    assert "GATE-WIDGET-002" not in proc.stdout
    assert "gates re-measured: 1 of 1 as recorded" in proc.stdout
    (project / "data" / "lines.txt").write_text(lines(2))
    widget_project.commit_all(project, "too few lines")
    failed = run(project, "gates", "check", "--all", "--files", str(CONTRACT))
    assert failed.returncode == 1 and "not as recorded: GATE-WIDGET-001" in failed.stdout
    both = run(project, "gates", "check", "--all", "--ship-blocking", "--files", str(CONTRACT))
    assert both.returncode == 2 and "not both" in both.stderr


def test_each_gate_of_check_all_is_measured_as_gates_check_measures_it(project: Path):
    """`--all` runs each gate in a `python -m gates.cli.check_one` child, which skips the
    contract's validation (the parent did it, once): the child's evidence is what `gates
    check GATE --out` writes but for the moment and the seconds; an unknown gate is refused,
    and a contract that does not validate is still refused, by the parent, before any run."""
    widget_project.commit_all(project, "the promotion")
    out = project.parent  # outside the work tree: evidence written in it would make it dirty
    one = run(project, "check_one", "GATE-WIDGET-001", str(CONTRACT), str(out / "one.json"))
    assert one.returncode == 0, one.stdout + one.stderr
    full = run(project, "gates", "check", "GATE-WIDGET-001", "--files", str(CONTRACT),
               "--out", str(out / "full.json"))  # fmt: skip
    assert full.returncode == 0, full.stdout + full.stderr
    assert one.stdout.splitlines()[:2] == full.stdout.splitlines()[:2] == [
        "GATE-WIDGET-001: PASS", "  line_count = 5 lines"]  # fmt: skip
    evidence = [json.loads((out / name).read_text()) for name in ("one.json", "full.json")]
    for record in evidence:
        del record["captured_at"]
        for test in record["tests"]:
            del test["seconds"]
    assert evidence[0].pop("command") == ["gates", "check", "GATE-WIDGET-001", "--out",
                                          "…/one.json", "--files", str(CONTRACT)]  # fmt: skip
    evidence[1].pop("command")
    assert evidence[0] == evidence[1]

    unknown = run(project, "check_one", "GATE-WIDGET-404", str(CONTRACT), str(out / "no.json"))
    assert unknown.returncode == 1 and "no gate GATE-WIDGET-404" in unknown.stderr
    assert not (out / "no.json").exists()

    contract = project / CONTRACT
    contract.write_text(contract.read_text().replace("kind: tooling", "kind: toolin"))
    refused = run(project, "gates", "check", "--all", "--files", str(CONTRACT))
    assert refused.returncode == 1 and "SCHEMA-ENUM" in refused.stderr, refused.stderr
    assert "== gates check" not in refused.stdout


def test_check_ship_blocking_fails_when_one_does_not_pass(project: Path):
    (project / "data" / "lines.txt").write_text(lines(2))
    widget_project.commit_all(project, "too few lines")
    proc = run(project, "gates", "check", "--ship-blocking", "--files", str(CONTRACT))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "0 of 1 as recorded" in proc.stdout
    assert "not as recorded: GATE-WIDGET-001" in proc.stdout


def test_forged_evidence_does_not_stop_the_re_measurement_that_fixes_it(project: Path):
    """pv rejects evidence recording an absolute path; `gates promote` re-measures over that
    finding (it is how it is fixed), but still refuses a contract error."""
    widget_project.commit_all(project, "the promotion")
    record = json.loads((project / EVIDENCE).read_text())
    record["command"][0] = "/home/someone/.venv/bin/gates"
    (project / EVIDENCE).write_text(json.dumps(record))
    widget_project.commit_all(project, "forged")
    assert "EVIDENCE-ABSOLUTE-PATH" in run(project, "pv", "validate", str(CONTRACT)).stdout
    proc = run(project, "gates", "promote", "GATE-WIDGET-001", "--files", str(CONTRACT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "do not stop a re-measurement" in proc.stderr
    assert json.loads((project / EVIDENCE).read_text())["command"][0] == "gates"
    assert run(project, "pv", "validate", str(CONTRACT)).returncode == 0

    contract = project / CONTRACT
    contract.write_text(contract.read_text().replace("kind: tooling", "kind: toolin"))
    widget_project.commit_all(project, "a contract error")
    proc = run(project, "gates", "promote", "GATE-WIDGET-001", "--files", str(CONTRACT))
    assert proc.returncode == 1 and "SCHEMA-ENUM" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_check_changed_since_re_measures_only_the_gates_a_change_reaches(project: Path):
    """`--changed-since REF` (a pull request's job): a gate whose recorded sources, evidence,
    contract entry or bound tests' entries differ from REF, working tree included; a gate
    with no recorded verdict is named, not run; an unknown REF is a usage error."""
    widget_project.commit_all(project, "the promotion")
    none = run(project, "gates", "check", "--changed-since", "HEAD", "--files", str(CONTRACT))
    assert none.returncode == 0, none.stdout + none.stderr
    assert "no gate changed since HEAD" in none.stdout and "== gates check" not in none.stdout

    (project / "unread.txt").write_text("changed, and still read by nothing\n")
    (project / "data" / "lines.txt").write_text(lines(6))  # read by GATE-WIDGET-001's child
    source = run(project, "gates", "check", "--changed-since", "HEAD", "--files", str(CONTRACT))
    assert source.returncode == 0, source.stdout + source.stderr
    assert "GATE-WIDGET-001 changed since HEAD: sources data/lines.txt\n" in source.stdout
    assert "== gates check GATE-WIDGET-001" in source.stdout
    assert "gates changed since HEAD re-measured: 1 of 1 as recorded" in source.stdout
    widget_project.commit_all(project, "six lines")

    original = (project / CONTRACT).read_text()
    text = original.replace("rule: the artifact has at most a hundred lines", "rule: at most 100")
    (project / CONTRACT).write_text(text.replace('prediction: "3"', "prediction: three"))
    entry = run(project, "gates", "check", "--changed-since", "HEAD", "--files", str(CONTRACT))
    assert entry.returncode == 0, entry.stdout + entry.stderr
    assert "GATE-WIDGET-001 changed since HEAD: FALSIFY-WIDGET-001's entry\n" in entry.stdout
    assert (
        "GATE-WIDGET-002 changed since HEAD: its contract entry; FALSIFY-WIDGET-001's entry "
        "(PENDING: not re-measured)" in entry.stdout
    )
    assert "== gates check GATE-WIDGET-002" not in entry.stdout

    (project / CONTRACT).write_text(original)
    evidence = json.loads((project / EVIDENCE).read_text())
    (project / EVIDENCE).write_text(json.dumps(evidence, indent=1) + "\n")  # same, re-spaced
    ev = run(project, "gates", "check", "--changed-since", "HEAD", "--files", str(CONTRACT))
    assert f"GATE-WIDGET-001 changed since HEAD: its evidence {EVIDENCE.as_posix()}\n" in ev.stdout
    assert "GATE-WIDGET-002" not in ev.stdout

    bad = run(project, "gates", "check", "--changed-since", "no-such-ref", "--files", str(CONTRACT))
    assert bad.returncode == 2 and "no-such-ref" in bad.stderr
    both = run(project, "gates", "check", "--all", "--changed-since", "HEAD")
    assert both.returncode == 2 and "--all or --changed-since, not both" in both.stderr


def test_pv_says_so_where_git_cannot_tell_evidence_from_its_commit(project: Path, tmp_path: Path):
    """Evidence is compared with its commit through git; where git cannot tell (a shallow
    clone, a copy without .git) pv notes what it did not check instead of passing in silence."""
    widget_project.commit_all(project, "the promotion")
    with_git = run(project, "pv", "validate", str(CONTRACT))
    assert with_git.returncode == 0, with_git.stdout + with_git.stderr
    assert "git cannot tell" not in with_git.stderr

    shallow = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{project}", str(shallow)], check=True
    )
    note = run(shallow, "pv", "validate", str(CONTRACT))
    assert note.returncode == 0, note.stdout + note.stderr
    assert "git cannot tell here, a shallow clone" in note.stderr
    assert "EVIDENCE-NOT-AT-COMMIT" in note.stderr

    copy = tmp_path / "copy"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(".git"))
    bare = run(copy, "pv", "validate", str(CONTRACT), "--format", "json")
    assert "git cannot tell here, no git work tree" in bare.stderr
    json.loads(bare.stdout)  # the note stays off the JSON document
