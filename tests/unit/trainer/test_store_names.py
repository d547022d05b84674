"""A run directory whose name is not UTF-8 (issue 20, defect 4): the registry, whose TEXT
column cannot hold it, refuses it with a StoreError naming the directory, which the run's
recorder turns into its one warning: the store never stops a run. A UTF-8 name (any
script) still registers."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from trainer.store import db, registry
from trainer.store.recorder import RunRecorder


def test_a_non_utf8_run_directory_is_a_store_error_not_a_unicode_error(tmp_path):
    run_dir = tmp_path / os.fsdecode(b"run-\xff")
    with pytest.raises(db.StoreError, match="not a UTF-8 name"):
        registry.register("a" * 32, run_dir, "demo", None, path=tmp_path / "registry.db")
    utf8 = tmp_path / "ряд-運行"
    registry.register("b" * 32, utf8, "demo", None, path=tmp_path / "registry.db")
    assert [r.run_dir for r in registry.registered_runs(tmp_path / "registry.db")] == [
        utf8.resolve()
    ]


def test_the_recorder_warns_and_carries_on_for_a_non_utf8_run_directory(
    tmp_path, monkeypatch, caplog
):
    run_dir = tmp_path / os.fsdecode(b"run-\xff")
    run_dir.mkdir()
    monkeypatch.setattr(
        "trainer.store.recorder.read_run_manifest",
        lambda path: ({}, "c" * 32, None),
    )
    monkeypatch.setattr(
        "trainer.store.recorder.run_columns", lambda path, manifest, started: {"name": "x"}
    )
    recorder = RunRecorder(Path(run_dir))
    with caplog.at_level(logging.WARNING, logger="trainer"):
        recorder._register()  # raised UnicodeEncodeError before: the run died at its start
    assert recorder.registry_failure is not None
    assert "not a UTF-8 name" in recorder.registry_failure
    # What reaches a log is text any UTF-8 sink can write: "run-\xff", not a lone surrogate.
    assert "run-\\xff" in recorder.registry_failure
    for record in caplog.records:
        record.getMessage().encode("utf-8")
