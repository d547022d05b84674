"""`trainer runs ls`'s row of one registered run (store/commands.py ls_entry): whatever
keeps that run's store from being read - an OSError too (a permission, where the tests
run as a user) - is that row's error, never an exception that ends the listing of the
others (issue 31).

    .venv/bin/pytest -q tests/unit/trainer/test_store_ls.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.trainer.store_support import RUN_ID, write_run
from trainer.store import query
from trainer.store.commands import ls_entry
from trainer.store.registry import RegisteredRun
from trainer.store.sync import sync_run_dir


@pytest.fixture
def run(tmp_path, monkeypatch) -> RegisteredRun:
    monkeypatch.setenv("SHIPGATE_HOME", str(tmp_path / "home"))
    run_dir = sync_run_dir(write_run(tmp_path / "run", 3)).store.parent
    return RegisteredRun(RUN_ID, Path(run_dir), "hand-made", None)


def test_an_os_error_reading_one_run_is_its_rows_error(run, monkeypatch):
    def unreadable(target: query.Target) -> query.RunView:
        raise PermissionError(13, "Permission denied", str(target.run_dir / "runs.db"))

    monkeypatch.setattr(query, "load_view", unreadable)
    try:
        entry, error = ls_entry(run)
    except OSError as exc:  # the bug: one unreadable run ended `ls` for every run
        entry, error = {"status": f"raised {exc!r}"}, None
    assert entry["status"] == "error", entry
    assert error == f"{run.run_dir}: Permission denied" == entry["error"]


def test_a_readable_run_is_listed_with_its_progress(run):
    """Two-sided: the same run, readable, is a row with no error."""
    entry, error = ls_entry(run)
    assert error is None and (entry["status"], entry["last_step"]) == ("unknown", 3)
