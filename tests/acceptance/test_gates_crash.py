"""A killed `gates promote` or `gates demote` never strands the project (issue 20, item 2).

Crash-point enumeration (tests/crash_points.py, shared with the trainer's checkpoint
tests): a promotion, a re-promotion and a demotion each first run once in a
forked child that records every boundary of its commit (BOUNDARIES counts them) — each call
that changes the disk: a create, write, chmod, fsync, rename, unlink, mkdir or rmdir. Then,
for every k from 0 (killed as the commit begins) to the last boundary, a fresh copy of the
project is promoted in a child that SIGKILLs itself right after boundary k, and the next
`gates list` recovers it — once from the project root, once (on a second copy of the same
crash) from another working directory, with the contract named by a relative path. After
recovery:

- the project is exactly the old one or exactly the new one, file for file (evidence
  compared without its capture time), with no temp file, journal or directory left over;
- the new state, once reached at some k, holds for every later k (no rollback of a commit);
- the unkilled commit fsyncs every file after its last write and before any rename (what a
  power loss, unlike a kill, would show: tests/crash_points.py durability_problems);
- `pv validate` passes, and the other working directory is still empty;
- stderr says what was recovered whenever there was something to recover, and nothing when
  there was not; a second command finds nothing left.

The child promotes with the project root and contract given relative to the project's
parent directory, as a user does who runs `gates promote --root widget` from there.
The bound test is not run in the child (stubbed to pass): the commit is what is attacked, and
the real test run is covered by test_gates_promotion.py.

The three full enumerations are marked slow (about half a minute each on two cores); the
fast slice kills a re-promotion between its two renames, the crash that stranded projects
before recovery ran ahead of validation, and once before its commit point.

Run: .venv/bin/pytest tests/acceptance/test_gates_crash.py   (add -m "not slow" for the slice)
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from gates import promotion
from gates.cli import gates as gates_cli
from gates.cli import pv as pv_cli
from gates.io import atomic
from gates.runner import testrun
from tests import crash_points
from tests.acceptance import widget_project
from tests.crash_points import NEVER

GATE = "GATE-WIDGET-001"
CONTRACT = Path("contracts") / "widget-v1.yaml"
EVIDENCE = Path("evidence") / "C-WIDGET" / f"{GATE}.json"
#: The day the contract's changelog gets: today (UTC), so pv finds no date in the future.
TODAY = dt.datetime.now(dt.UTC).date()
#: Disk-changing calls of each commit, as docs/gates.md states them: a change to the commit
#: sequence changes these, and the docs with them.
BOUNDARIES = {"promote": 32, "re-promote": 28, "demote": 23}


def run_crashing(op: Callable[[], object], cwd: Path, kill_at: int) -> tuple[int, list[str]]:
    """Run ``op`` in a forked child in ``cwd``; the child SIGKILLs itself right after the
    ``kill_at``-th disk-changing call inside atomic.commit (0: as commit is entered). Return
    the child's wait status and the boundaries it passed, as labels (tests/crash_points.py)."""
    return crash_points.run_crashing(op, cwd, kill_at, scope=(atomic, "commit"))


def tree(root: Path) -> dict[str, object]:
    """Every directory and file under ``root`` but .git, files by content; evidence by its
    record less the capture time (each run stamps its own)."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] == ".git":
            continue
        if path.is_dir():
            out[f"{rel}/"] = "dir"
        elif rel.parts[0] == "evidence" and not path.name.startswith("."):
            record = json.loads(path.read_text())
            record.pop("captured_at")
            out[str(rel)] = record
        else:
            out[str(rel)] = path.read_bytes()
    return out


def promote_op(root: Path) -> Callable[[], object]:
    def op() -> object:
        return promotion.promote(
            Path(root.name),
            Path(root.name) / CONTRACT,
            GATE,
            [Path(root.name) / "artifact.txt"],
            command=["gates", "promote", GATE],
            today=TODAY,
        )

    return op


def demote_op(root: Path) -> Callable[[], object]:
    def op() -> object:
        return promotion.demote(
            Path(root.name), Path(root.name) / CONTRACT, GATE, "a crash test", today=TODAY
        )

    return op


@pytest.fixture
def pristine(tmp_path: Path, monkeypatch) -> Path:
    """The widget project and its artifact, committed (so evidence records the artifact by a
    path every copy shares); the bound test stubbed."""
    root = tmp_path / "pristine" / "widget"
    root.mkdir(parents=True)
    widget_project.build(root)
    (root / "artifact.txt").write_text("".join(f"line {i}\n" for i in range(5)))
    widget_project.git(root, "add", "artifact.txt")
    widget_project.git(
        root, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", "a"
    )
    spec = importlib.util.spec_from_file_location(
        "widget_measurement", root / "widget_measurement.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the GATE-WIDGET-* measurements in-process

    def passed(root: Path, node: str, mutant: str | None = None, timeout_s=900, *, warm=None):
        return testrun.TestOutcome(node, mutant, "passed", 0.0, "")

    monkeypatch.setattr(testrun, "run_node", passed)
    return root


def fresh_copy(source: Path, dest_parent: Path) -> Path:
    """The project and its artifact, copied under ``dest_parent`` (same names)."""
    shutil.copytree(source.parent, dest_parent, symlinks=True)
    return dest_parent / source.name


def recover_with_gates_list(root: Path, cwd: Path, monkeypatch, capsys) -> tuple[int, str]:
    """`gates list` from ``cwd``: from the root with no arguments, else naming the contract
    by a path relative to ``cwd``."""
    monkeypatch.chdir(cwd)
    argv = ["list"] if cwd == root else ["list", "--files", os.path.relpath(root / CONTRACT)]
    capsys.readouterr()
    code = gates_cli.main(argv)
    return code, capsys.readouterr().err


def pending(root: Path) -> bool:
    """Something a crash left for recovery: the journal, or a temp file of it."""
    return any(
        p.name.startswith((atomic.JOURNAL_NAME, f".{atomic.JOURNAL_NAME}")) for p in root.iterdir()
    )


def enumerate_crashes(
    start: Path,
    op_for: Callable[[Path], Callable[[], object]],
    work: Path,
    monkeypatch,
    capsys,
    *,
    only: Callable[[list[str]], list[int]] | None = None,
) -> dict[str, object]:
    """Kill ``op`` at every boundary of its commit (or at the crash points ``only`` picks
    from the boundaries' labels), recover each crash from two working directories, and check
    each ends old or new. Returns what the test reports."""
    old = tree(start)
    # The control: no kill. It counts the boundaries and gives the new state.
    control = fresh_copy(start, work / "control")
    status, labels = run_crashing(op_for(control), control.parent, NEVER)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, labels
    new = tree(control)
    assert new != old
    assert not pending(control)
    old = {**old, ".gates.lock": new[".gates.lock"]}  # the lock file predates the commit
    assert labels, "no boundary was seen: the harness no longer sees the commit's writes"
    problems = crash_points.durability_problems(labels)
    assert not problems, "a power loss could lose a committed file:\n" + "\n".join(problems)

    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    states: list[str] = []
    points = list(range(len(labels) + 1)) if only is None else only(labels)
    for k in points:
        crashed = fresh_copy(start, work / f"k{k}")
        status, passed = run_crashing(op_for(crashed), crashed.parent, k)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, passed)
        assert passed == labels[:k], f"the commit took another path at crash point {k}"
        left = pending(crashed)
        backup = crashed.parent.with_name(crashed.parent.name + "-copy")
        shutil.copytree(crashed.parent, backup, symlinks=True)
        ends = []
        for cwd in (crashed, elsewhere):
            code, err = recover_with_gates_list(crashed, cwd, monkeypatch, capsys)
            where = f"crash point {k} ({labels[k - 1] if k else 'commit entered'}), from {cwd}"
            assert code == 0, f"{where}: gates list exited {code}: {err}"
            after = tree(crashed)
            assert after in (old, new), f"{where}: neither old nor new:\n{sorted(after)}"
            state = "new" if after == new else "old"
            if left:
                assert (
                    "recovered" in err
                    and ("rolled forward" if state == "new" else "rolled back") in err
                ), f"{where}: recovery said {err!r}"
            else:
                assert "recovered" not in err, f"{where}: {err!r}"
            if state == "new" and left:
                assert str(CONTRACT) in err, f"{where}: {err!r}"
            assert list(elsewhere.iterdir()) == [], f"{where}: wrote into the working directory"
            assert gates_cli.main(argv := ["list", "--files", str(crashed / CONTRACT)]) == 0, argv
            assert "recovered" not in capsys.readouterr().err, "a second recovery"
            assert pv_cli.main(["validate", str(crashed / CONTRACT)]) == 0, capsys.readouterr()
            ends.append(state)
            monkeypatch.chdir(work)
            shutil.rmtree(crashed.parent)
            shutil.copytree(backup, crashed.parent, symlinks=True)
        assert ends[0] == ends[1], f"crash point {k}: the two working directories disagree"
        states.append(ends[0])
        shutil.rmtree(backup)
        shutil.rmtree(crashed.parent)
    if only is not None:
        return {"boundaries": labels, "states": states}
    # Old until the commit point, new from there on: a finished commit is never undone.
    assert states[0] == "old", "killed before its first boundary, nothing had changed"
    assert states[-1] == "new", "killed after its last boundary, the operation had finished"
    assert "old" not in states[states.index("new") :], states
    return {"boundaries": labels, "states": states}


def test_a_promotion_without_a_crash_writes_the_new_evidence_and_contract(pristine, tmp_path):
    project = fresh_copy(pristine, tmp_path / "control")
    before = (project / CONTRACT).read_text()
    status, _ = run_crashing(promote_op(project), project.parent, NEVER)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    text = (project / CONTRACT).read_text()
    assert text != before and "version: 1.1.0" in text
    assert f"evidence: {EVIDENCE}" in text
    record = json.loads((project / EVIDENCE).read_text())
    assert (record["gate"], record["verdict"], record["contract"]["version"]) == (
        GATE,
        "PASS",
        "1.1.0",
    )
    assert pv_cli.main(["validate", str(project / CONTRACT)]) == 0
    assert not pending(project)


@pytest.mark.slow
def test_a_promotion_killed_at_any_boundary_is_recovered_by_the_next_command(
    pristine, tmp_path, monkeypatch, capsys
):
    seen = enumerate_crashes(pristine, promote_op, tmp_path, monkeypatch, capsys)
    assert len(seen["boundaries"]) == BOUNDARIES["promote"], seen["boundaries"]


def promoted_copy(pristine: Path, dest_parent: Path) -> Path:
    """A copy of the project with GATE-WIDGET-001 promoted to PASS (contract 1.1.0)."""
    promoted = fresh_copy(pristine, dest_parent)
    status, _ = run_crashing(promote_op(promoted), promoted.parent, NEVER)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    return promoted


def test_a_re_promotion_killed_between_its_renames_is_recovered_before_validation(
    pristine, tmp_path, monkeypatch, capsys
):
    # The fast slice of the enumeration below: the crash that stranded the project (new
    # evidence, recording 1.2.0, beside the old contract, which names that evidence file
    # and fails pv validate) and one before the commit point (temp files to roll back).
    def between_renames(labels: list[str]) -> list[int]:
        evidence_renamed = labels.index(f"replace .{EVIDENCE.name}.*.tmp") + 1
        contract_written = labels.index(f"fsync .{CONTRACT.name}.*.tmp") + 1
        return [contract_written, evidence_renamed]

    promoted = promoted_copy(pristine, tmp_path / "promoted")
    seen = enumerate_crashes(
        promoted, promote_op, tmp_path / "again", monkeypatch, capsys, only=between_renames
    )
    assert seen["states"] == ["old", "new"]


@pytest.mark.slow
def test_a_re_promotion_killed_at_any_boundary_is_recovered_by_the_next_command(
    pristine, tmp_path, monkeypatch, capsys
):
    # The case that stranded the project: new evidence (recording 1.2.0) beside the old
    # contract (1.1.0, which names that evidence file) fails pv validate, so a command that
    # validates before it recovers refuses for ever.
    promoted = promoted_copy(pristine, tmp_path / "promoted")
    seen = enumerate_crashes(promoted, promote_op, tmp_path / "again", monkeypatch, capsys)
    assert len(seen["boundaries"]) == BOUNDARIES["re-promote"], seen["boundaries"]


@pytest.mark.slow
def test_a_demotion_killed_at_any_boundary_is_recovered_by_the_next_command(
    pristine, tmp_path, monkeypatch, capsys
):
    promoted = promoted_copy(pristine, tmp_path / "promoted")
    seen = enumerate_crashes(promoted, demote_op, tmp_path / "demote", monkeypatch, capsys)
    assert len(seen["boundaries"]) == BOUNDARIES["demote"], seen["boundaries"]


def test_a_command_with_nothing_to_recover_writes_nothing(pristine, monkeypatch, capsys):
    before = tree(pristine)
    monkeypatch.chdir(pristine)
    assert gates_cli.main(["list"]) == 0
    assert "recovered" not in capsys.readouterr().err
    assert tree(pristine) == before  # not even the lock file


def test_a_journal_gates_cannot_read_is_a_refusal_that_touches_nothing(
    pristine, monkeypatch, capsys
):
    (pristine / atomic.JOURNAL_NAME).write_text('{"moves": [["a", "b", "write"]]}')
    before = tree(pristine)
    monkeypatch.chdir(pristine)
    assert gates_cli.main(["list"]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and atomic.JOURNAL_NAME in err and "by hand" in err
    assert tree(pristine) == {**before, ".gates.lock": b""}


@pytest.mark.parametrize("command", [["list"], ["promote", GATE, "--artifact", "artifact.txt"]])
@pytest.mark.parametrize(
    "target", ["{victim}", "../outside/victim.txt"], ids=["absolute", "dotdot"]
)
def test_a_journal_naming_a_file_outside_the_project_is_refused_by_every_command(
    pristine, monkeypatch, capsys, command, target
):
    """Issue 31: a journal committed or dropped into a checkout must not make the next
    command remove a file outside it ("removed /tmp/victim.txt"); the refusal names the
    journal and the path, and leaves both where they are."""
    victim = pristine.parent.parent / "outside" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("someone else's\n")
    forged = {"state": "committed", "dirs": [], "moves": []}
    forged["moves"] = [{"target": target.format(victim=victim), "tmp": None}]
    (pristine / atomic.JOURNAL_NAME).write_text(json.dumps(forged))
    before = tree(pristine)
    monkeypatch.chdir(pristine)
    capsys.readouterr()
    assert gates_cli.main(command) == 1
    err = capsys.readouterr().err
    assert "refused, nothing changed" in err and atomic.JOURNAL_NAME in err, err
    assert "victim.txt" in err and "Traceback" not in err, err
    assert victim.read_text() == "someone else's\n"
    assert tree(pristine) == {**before, ".gates.lock": b""}


def test_a_contract_outside_the_project_root_is_refused_before_it_is_measured(
    pristine, tmp_path, monkeypatch, capsys
):
    """commit() writes only inside the root: a contract given from elsewhere with --root is
    refused up front (no measurement, nothing written); the same contract inside promotes."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(pristine / CONTRACT, elsewhere / CONTRACT.name)
    before, outside = tree(pristine), tree(elsewhere)
    real_check, measured = promotion.check, []

    def counted(*args, **kwargs) -> promotion.CheckResult:
        measured.append(args)
        return real_check(*args, **kwargs)

    monkeypatch.setattr(promotion, "check", counted)
    with pytest.raises(promotion.RefusedError, match="outside the project root"):
        promotion.promote(pristine, elsewhere / CONTRACT.name, GATE, [pristine / "artifact.txt"])
    assert measured == []
    assert tree(elsewhere) == outside
    assert tree(pristine) == {**before, ".gates.lock": b""}
    result = promotion.promote(pristine, pristine / CONTRACT, GATE, [pristine / "artifact.txt"])
    assert result.verdict == "PASS" and len(measured) == 1
    # A demotion of a contract outside (it measures nothing): refused at its commit, exit 1.
    shutil.copy(pristine / CONTRACT, elsewhere / CONTRACT.name)
    before, outside = tree(pristine), tree(elsewhere)
    argv = ["demote", GATE, "--reason", "r", "--files", str(elsewhere / CONTRACT.name)]
    capsys.readouterr()
    assert gates_cli.main([*argv, "--root", str(pristine)]) == 1
    err = capsys.readouterr().err
    assert "refused, nothing changed" in err and "outside the project root" in err, err
    assert (tree(pristine), tree(elsewhere)) == (before, outside)
