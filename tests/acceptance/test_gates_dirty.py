"""Evidence's `git.dirty`: any uncommitted change in the project counts, wherever it lives,
except what gates writes itself (contracts, evidence, its lock and journal) — the framework
cannot know which files of a foreign project a measurement reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates.provenance import evidence
from tests.acceptance import widget_project


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "widget"
    root.mkdir()
    widget_project.build(root)
    return root


def test_a_clean_checkout_is_clean(root: Path):
    assert evidence.git_info(root)["dirty"] is False


@pytest.mark.parametrize(
    "change",
    ["widget.py", "new_helper.py", "tests/mutants/widget_mutants.py", "pyproject.toml"],
)
def test_a_change_anywhere_in_the_project_is_dirty(root: Path, change: str):
    path = root / change
    path.write_text((path.read_text() if path.exists() else "") + "# changed\n")
    assert evidence.git_info(root)["dirty"] is True


@pytest.mark.parametrize(
    "change",
    [
        "contracts/widget-v1.yaml",
        "evidence/C-WIDGET/x.json",
        ".gates.lock",
        "__pycache__/w.pyc",
        # A concurrent command's commit journal and its temp file (issue 31): not the user's.
        ".gates-journal.json",
        "..gates-journal.json.a1b2c3d4.tmp",
    ],
)
def test_what_gates_writes_itself_is_not_dirt(root: Path, change: str):
    path = root / change
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((path.read_text() if path.exists() else "") + "# changed\n")
    assert evidence.git_info(root)["dirty"] is False
