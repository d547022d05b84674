"""gates/atomic.py: the commit journal names paths relative to the project root, so a commit
made from one working directory is recovered from any other, into the project and nowhere
else; a journal gates cannot trust is refused, never guessed at.

The kill at every boundary of a real promotion: tests/acceptance/test_gates_crash.py.
Run: .venv/bin/pytest tests/unit/gates/test_atomic.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gates import atomic


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
