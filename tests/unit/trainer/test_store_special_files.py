"""A FIFO in place of a run's file, read by the run store (issue 31): `trainer runs sync`
and `show` refuse it at once, saying it is a FIFO - not "no such file", not a silent skip,
never a read that waits for a writer. Regular files sync as before.

    .venv/bin/pytest -q tests/unit/trainer/test_store_special_files.py
"""

from __future__ import annotations

import re

import pytest

from tests.unit.trainer.special_files_support import make_fifo, returns_promptly
from tests.unit.trainer.store_support import write_run
from trainer.store import db, query
from trainer.store.rundir import RunDirError
from trainer.store.sync import sync_run_dir

FIFO_WORDS = "a FIFO (named pipe), not a regular file"


@pytest.fixture(autouse=True)
def shipgate_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SHIPGATE_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("name", ["run_manifest.json", "metrics.jsonl", "training_state.json"])
def test_sync_refuses_a_fifo_run_file_naming_it(name, tmp_path):
    run = write_run(tmp_path / "run", 4)
    fifo = make_fifo(run / name)
    outcome = returns_promptly(lambda: sync_run_dir(run), fifo)
    assert outcome.returned, outcome.why
    assert isinstance(outcome.error, RunDirError), repr(outcome.error)
    assert f"{fifo}: " in str(outcome.error) and FIFO_WORDS in str(outcome.error)
    assert not (run / "runs.db").exists(), "nothing written"


def test_a_fifo_store_is_named_as_one(tmp_path):
    run = write_run(tmp_path / "run", 4)
    make_fifo(run / "runs.db")
    said = re.escape(f"runs.db: {FIFO_WORDS}, so not a run store")
    with pytest.raises(db.StoreError, match=said):
        sync_run_dir(run)
    with pytest.raises(db.StoreError, match=said):
        query.load_view(query.locate(str(run)))


def test_show_reads_past_a_fifo_training_state_without_waiting(tmp_path):
    """show reads training_state.json only for its "store behind" note: a FIFO there is
    no state, read at once (the note left out), never a wait."""
    run = write_run(tmp_path / "run", 4)
    sync_run_dir(run)
    fifo = make_fifo(run / "training_state.json")
    outcome = returns_promptly(lambda: query.load_view(query.locate(str(run))), fifo)
    assert outcome.returned, outcome.why
    assert outcome.error is None, repr(outcome.error)
    assert outcome.value.metrics.last_step == 4 and outcome.value.behind is None


def test_regular_files_sync_as_before(tmp_path):
    """Two-sided: the same run with regular files syncs."""
    run = write_run(tmp_path / "run", 4)
    done = sync_run_dir(run)
    assert done.steps == 4 and (run / "runs.db").is_file()
