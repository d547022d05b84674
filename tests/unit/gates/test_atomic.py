"""gates/io/atomic.py: the commit journal names paths relative to the project root, so a commit
made from one working directory is recovered from any other, into the project and nowhere
else; a journal gates cannot trust is refused, never guessed at.

The kill at every boundary of a real promotion: tests/acceptance/test_gates_crash.py.
Run: .venv/bin/pytest tests/unit/gates/test_atomic.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gates.io import atomic


class Killed(BaseException):
    """Stands in for SIGKILL at the commit point: raised where nothing catches it."""


def _files(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _commit_then_die(monkeypatch, root: Path, writes: dict[Path, bytes | None]) -> dict:
    """Run commit until its commit point (the journal says committed), then stop it there;
    return the journal it left."""

    def killed(root: Path, record: dict) -> None:
        raise Killed

    real = atomic._roll_forward
    monkeypatch.setattr(atomic, "_roll_forward", killed)
    with pytest.raises(Killed):
        atomic.commit(root, writes)
    monkeypatch.setattr(atomic, "_roll_forward", real)
    return json.loads((root / atomic.JOURNAL_NAME).read_text())


def test_a_commit_made_from_outside_the_root_is_recovered_from_anywhere(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "contracts").mkdir(parents=True)
    (project / "contracts" / "c-v1.yaml").write_text("old\n")
    (project / "evidence" / "C").mkdir(parents=True)
    (project / "evidence" / "C" / "G.json").write_text("{}\n")
    monkeypatch.chdir(tmp_path)  # the commit runs from the project's parent, paths relative
    root = Path("project")
    journal = _commit_then_die(
        monkeypatch,
        root,
        {
            root / "evidence" / "C" / "NEW.json": b"{}\n",
            root / "contracts" / "c-v1.yaml": b"new\n",
            root / "evidence" / "C" / "G.json": None,
        },
    )
    assert journal["state"] == atomic.COMMITTED
    assert [m["target"] for m in journal["moves"]] == [
        "evidence/C/NEW.json",
        "contracts/c-v1.yaml",
        "evidence/C/G.json",
    ]
    assert all(m["tmp"] is None or not Path(m["tmp"]).is_absolute() for m in journal["moves"])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    done = atomic.recover(project)
    assert done.action == "rolled forward"
    assert "contracts/c-v1.yaml" in done.describe()
    assert _files(project) == {"contracts/c-v1.yaml": b"new\n", "evidence/C/NEW.json": b"{}\n"}
    assert list(elsewhere.iterdir()) == []
    assert not atomic.recover(project)  # nothing left


def test_a_prepared_commit_is_rolled_back_with_the_directories_it_made(tmp_path, monkeypatch):
    root = tmp_path
    (root / "contracts").mkdir()
    (root / "contracts" / "c-v1.yaml").write_text("old\n")
    before = _files(root)
    target = root / "evidence" / "C" / "G.json"

    def die_after_the_first_temp(path: Path, data: bytes, like: Path) -> None:
        real_write_new(path, data, like)
        raise Killed

    real_write_new = atomic.files.write_new
    monkeypatch.setattr(atomic.files, "write_new", die_after_the_first_temp)
    monkeypatch.setattr(atomic, "_roll_back", lambda root, record: [])  # as if killed
    with pytest.raises(Killed):
        atomic.commit(root, {target: b"{}\n", root / "contracts" / "c-v1.yaml": b"new\n"})
    monkeypatch.undo()
    assert json.loads((root / atomic.JOURNAL_NAME).read_text())["state"] == atomic.PREPARED
    assert (root / "evidence" / "C").is_dir()

    done = atomic.recover(root)
    assert done.action == "rolled back"
    assert "evidence/C/" in done.removed and "evidence/" in done.removed
    assert _files(root) == before
    assert not (root / "evidence").exists()


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"moves": [["a", "b", "write"]]}', b'{"state": "committed", "moves": 3}'],
    ids=["not-json", "older-format", "wrong-shape"],
)
def test_a_journal_gates_cannot_trust_is_refused_and_left_alone(tmp_path, content):
    journal = tmp_path / atomic.JOURNAL_NAME
    journal.write_bytes(content)
    with pytest.raises(atomic.JournalError, match="gates-journal"):
        atomic.recover(tmp_path)
    assert journal.read_bytes() == content


# --- nothing outside the project (issue 31) ------------------------------------------------

TOKEN = "0123abcd"


def _everything(directory: Path) -> dict[str, object]:
    """Every entry under ``directory``: files by content, directories and symlinks by kind."""
    out: dict[str, object] = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if path.is_symlink():
            out[rel] = f"-> {path.readlink()}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = path.read_bytes()
    return out


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A project with a contract and evidence, beside an outside folder holding a victim file
    and an empty directory; ``link`` in the project leads to the outside folder."""
    root = tmp_path / "project"
    (root / "contracts").mkdir(parents=True)
    (root / "contracts" / "c-v1.yaml").write_text("contract\n")
    (root / "evidence" / "C").mkdir(parents=True)
    (root / "evidence" / "C" / "G.json").write_text("{}\n")
    (root / "evidence" / "C" / f".G.json.{TOKEN}.tmp").write_text("a temp file of ours\n")
    (root / "keep").mkdir()  # empty, and no commit's: a rollback must not remove it
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    outside = tmp_path / "outside"
    (outside / "empty").mkdir(parents=True)
    (outside / "victim.txt").write_text("not the project's\n")
    (outside / f".victim.txt.{TOKEN}.tmp").write_text("planted\n")
    (root / "link").symlink_to(outside)
    return root


def _journal(state: str, moves: list[dict], dirs: list[str] | None = None) -> dict:
    return {"state": state, "dirs": dirs or [], "moves": moves}


def _refusal(root: Path) -> str:
    """What :func:`atomic.recover` says when it refuses; any other outcome fails the test."""
    try:
        done = atomic.recover(root)
    except atomic.JournalError as exc:
        return str(exc)
    except Exception as exc:  # a crash on a journal is the bug shown here
        pytest.fail(f"recovery crashed instead of refusing: {exc!r}")
    pytest.fail(f"recovery acted on a journal it must refuse: {done.describe()}")


def _victim(root: Path) -> str:
    return str(root.parent / "outside" / "victim.txt")


FORGED = {
    # A committed journal unlinks each target whose tmp is None: the victim, by any name.
    "absolute-target": (
        lambda root: _journal("committed", [{"target": _victim(root), "tmp": None}]),
        "victim.txt",
    ),
    "dotdot-target": (
        lambda root: _journal("committed", [{"target": "../outside/victim.txt", "tmp": None}]),
        "../outside/victim.txt",
    ),
    "symlinked-target": (
        lambda root: _journal("committed", [{"target": "link/victim.txt", "tmp": None}]),
        "link/victim.txt",
    ),
    "git-target": (
        lambda root: _journal("committed", [{"target": ".git/config", "tmp": None}]),
        ".git/config",
    ),
    "nul-target": (
        lambda root: _journal("committed", [{"target": "evidence/C/G.json\0x", "tmp": None}]),
        "NUL",
    ),
    "backslash-target": (
        lambda root: _journal("committed", [{"target": "..\\outside\\victim.txt", "tmp": None}]),
        "backslash",
    ),
    # A committed journal renames tmp over target: a planted temp file replaces the victim.
    "symlinked-rename": (
        lambda root: _journal(
            "committed", [{"target": "link/victim.txt", "tmp": f"link/.victim.txt.{TOKEN}.tmp"}]
        ),
        "link/victim.txt",
    ),
    # A prepared journal unlinks each tmp: one that is not the target's temp name is anything.
    "tmp-names-a-contract": (
        lambda root: _journal(
            "prepared", [{"target": "evidence/C/G.json", "tmp": "contracts/c-v1.yaml"}]
        ),
        "contracts/c-v1.yaml",
    ),
    "tmp-absolute": (
        lambda root: _journal(
            "prepared",
            [{"target": "evidence/C/G.json", "tmp": str(root / "contracts" / "c-v1.yaml")}],
        ),
        "c-v1.yaml",
    ),
    "tmp-in-another-folder": (
        lambda root: _journal(
            "prepared", [{"target": "evidence/C/G.json", "tmp": f"evidence/.G.json.{TOKEN}.tmp"}]
        ),
        f"evidence/.G.json.{TOKEN}.tmp",
    ),
    "tmps-of-two-commits": (
        lambda root: _journal(
            "prepared",
            [
                {"target": "evidence/C/G.json", "tmp": f"evidence/C/.G.json.{TOKEN}.tmp"},
                {"target": "contracts/c-v1.yaml", "tmp": "contracts/.c-v1.yaml.ffffffff.tmp"},
            ],
        ),
        "2 commits",
    ),
    # A prepared journal removes each directory it lists (rmdir: empty ones).
    "dirs-outside": (
        lambda root: _journal("prepared", [], dirs=["../outside/empty"]),
        "../outside/empty",
    ),
    "dirs-through-a-symlink": (
        lambda root: _journal(
            "prepared",
            [{"target": "link/empty/x.json", "tmp": f"link/empty/.x.json.{TOKEN}.tmp"}],
            dirs=["link/empty"],
        ),
        "link/empty",
    ),
    "dirs-unrelated": (
        lambda root: _journal(
            "prepared",
            [{"target": "evidence/C/G.json", "tmp": f"evidence/C/.G.json.{TOKEN}.tmp"}],
            dirs=["keep"],
        ),
        "'keep'",
    ),
}


@pytest.mark.parametrize("case", sorted(FORGED))
def test_a_journal_naming_a_path_gates_never_writes_is_refused_and_nothing_moves(
    checkout: Path, case: str
):
    make, named = FORGED[case]
    journal = checkout / atomic.JOURNAL_NAME
    journal.write_text(json.dumps(make(checkout)))
    stale_journal_temp = checkout / f".{atomic.JOURNAL_NAME}.x1y2z3.tmp"
    stale_journal_temp.write_text("{")  # what a crash in a journal write leaves: kept too
    before = _everything(checkout.parent)
    message = _refusal(checkout)
    assert atomic.JOURNAL_NAME in message and named in message, message
    assert _everything(checkout.parent) == before


@pytest.mark.parametrize("state", [atomic.PREPARED, atomic.COMMITTED])
def test_a_journal_of_our_own_temp_names_is_still_recovered(checkout: Path, state: str):
    """Two-sided: the checks refuse the forged journals above, not the ones commit writes;
    here through a root named by a symlink, and a folder that is a symlink inside it."""
    (checkout / "evidence" / "D").mkdir()
    (checkout / "alias").symlink_to("evidence/D")  # inside the project: allowed
    (checkout / "evidence" / "D" / f".H.json.{TOKEN}.tmp").write_text("new\n")
    record = _journal(
        state,
        [
            {"target": "evidence/C/G.json", "tmp": f"evidence/C/.G.json.{TOKEN}.tmp"},
            {"target": "alias/H.json", "tmp": f"alias/.H.json.{TOKEN}.tmp"},
            {"target": "contracts/c-v1.yaml", "tmp": None},
        ],
        dirs=["evidence/C"],
    )
    (checkout / atomic.JOURNAL_NAME).write_text(json.dumps(record))
    named_by_link = checkout.parent / "project-link"
    named_by_link.symlink_to(checkout.name)
    done = atomic.recover(named_by_link)
    outside = _everything(checkout.parent / "outside")
    assert outside[f".victim.txt.{TOKEN}.tmp"] == b"planted\n"  # not ours: untouched
    if state == atomic.COMMITTED:
        assert done.action == "rolled forward"
        assert (checkout / "evidence" / "C" / "G.json").read_text() == "a temp file of ours\n"
        assert (checkout / "evidence" / "D" / "H.json").read_text() == "new\n"
        assert not (checkout / "contracts" / "c-v1.yaml").exists()
    else:
        assert done.action == "rolled back"
        assert not (checkout / "evidence" / "C" / f".G.json.{TOKEN}.tmp").exists()
        assert (checkout / "evidence" / "C" / "G.json").read_text() == "{}\n"
        assert (checkout / "contracts" / "c-v1.yaml").exists()
    assert not (checkout / atomic.JOURNAL_NAME).exists()


@pytest.mark.parametrize(
    "target",
    [
        lambda root: root.parent / "outside" / "new.json",
        lambda root: root / ".." / "outside" / "new.json",
        lambda root: root / "link" / "new.json",
        lambda root: root / ".git" / "new",
    ],
    ids=["absolute", "dotdot", "through-a-symlink", "in-git"],
)
def test_a_commit_outside_the_project_is_refused_before_anything_is_written(checkout, target):
    before = _everything(checkout.parent)
    with pytest.raises(atomic.OutsideProjectError, match="new"):
        atomic.commit(
            checkout, {checkout / "evidence" / "C" / "N.json": b"{}\n", target(checkout): b"x"}
        )
    assert _everything(checkout.parent) == before
    # Two-sided: the same commit inside the project is written, named through a symlinked root.
    named_by_link = checkout.parent / "project-link"
    named_by_link.symlink_to(checkout.name)
    atomic.commit(named_by_link, {checkout / "evidence" / "C" / "N.json": b"{}\n"})
    assert (checkout / "evidence" / "C" / "N.json").read_bytes() == b"{}\n"
    assert not (checkout / atomic.JOURNAL_NAME).exists()


def test_a_journal_nested_200000_deep_is_refused_naming_it(checkout: Path):
    """Parsed by gates.io.jsonfile: a RecursionError would be an internal error naming nothing."""
    (checkout / atomic.JOURNAL_NAME).write_bytes(b"[" * 200_000)
    before = _everything(checkout.parent)
    message = _refusal(checkout)
    assert f"{atomic.JOURNAL_NAME}:1:257: JSON nested deeper than 256 levels" in message
    assert _everything(checkout.parent) == before


def test_a_held_lock_times_out_naming_the_lock_and_what_to_do(tmp_path: Path):
    lock = tmp_path / ".gates.lock"
    with atomic.locked(lock), pytest.raises(TimeoutError) as caught, atomic.locked(lock, 0.2):
        pytest.fail("took a lock another holder has")
    message = str(caught.value)
    assert str(lock) in message and "waited 0.2 s" in message and "let it finish" in message
    with atomic.locked(lock, timeout_s=0.2):  # two-sided: released, it is taken at once
        pass
