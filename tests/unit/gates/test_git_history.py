"""EVIDENCE-COMMIT-UNKNOWN's source: which commits a project's git history holds, asked in
one batch, and no answer at all where git cannot tell (no git, no work tree, shallow)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gates.provenance import git_history
from gates.provenance.git_history import CommitIndex

NEVER = "0123456789abcdef0123456789abcdef01234567"


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(root: Path, name: str) -> str:
    (root / name).write_text(name)
    git(root, "add", name)
    git(root, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", name)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    return root


def test_a_commit_of_the_history_exists_and_a_forged_one_does_not(repo: Path):
    first = commit(repo, "a")
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    index = CommitIndex(repo)
    assert index.exists(first) is True
    assert index.exists(NEVER) is False
    assert index.exists("0" * 40) is False
    assert index.exists(tree) is False, "a tree is an object, not a commit"


def test_all_evidence_commits_are_asked_in_one_batch(repo: Path, monkeypatch):
    first, second = commit(repo, "a"), commit(repo, "b")
    for i, sha in enumerate((first, second, NEVER)):
        path = repo / "evidence" / "C-X" / f"GATE-X-00{i}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"git": {{"commit": "{sha}", "dirty": false}}}}')
    calls = []
    real = CommitIndex._git

    def counted(self, *args, **kw):
        calls.append(args[0])
        return real(self, *args, **kw)

    monkeypatch.setattr(CommitIndex, "_git", counted)
    index = CommitIndex(repo)
    assert [index.exists(s) for s in (first, second, NEVER)] == [True, True, False]
    assert calls == ["rev-parse", "cat-file"]


def test_no_answer_outside_a_work_tree(tmp_path: Path):
    assert CommitIndex(tmp_path).exists(NEVER) is None


def test_no_answer_without_git(repo: Path, monkeypatch):
    commit(repo, "a")

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(git_history.subprocess, "run", no_git)
    assert CommitIndex(repo).exists(NEVER) is None


def test_no_answer_in_a_shallow_clone(repo: Path, tmp_path: Path):
    commit(repo, "a")
    commit(repo, "b")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(clone))
    assert git(clone, "rev-parse", "--is-shallow-repository") == "true"
    assert CommitIndex(clone).exists(NEVER) is None
