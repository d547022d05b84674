"""The run store as the training loop writes it (trainer/store/recorder.py): every step of
metrics.jsonl once and equal to its line, the checkpoints on disk with their manifests'
sha256s, the run registered; a resume keeps the run's id and leaves each step once; the
store rebuilt from the files equals the one recorded live; and a store that cannot be
written never stops training: one warning naming it, metrics.jsonl complete.

Tiny model (hidden 16, one layer), CPU; about a second a run."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.unit.trainer.checkpoint_support import listed_digest
from tests.unit.trainer.loop_support import one_thread  # noqa: F401 - a fixture
from tests.unit.trainer.store_support import (
    column,
    metrics_lines,
    tables,
    tiny_train,
    write_run,
)
from trainer.checkpoint.layout import checkpoint_dirs
from trainer.store import db, registry
from trainer.store.recorder import RunRecorder
from trainer.store.rundir import metric_row
from trainer.store.sync import sync_run_dir

#: The store's warning (logged: `trainer` shows it on stderr as "trainer: WARNING: ...").
WARNING = "WARNING: run store"


def _logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every message logged so far, a line each."""
    return "\n".join(caplog.messages)


def _stored_metrics(run_dir: Path) -> list[tuple]:
    return [row[1:] for row in tables(run_dir / "runs.db")["metrics"]]


def _expected_metrics(run_dir: Path) -> list[tuple]:
    return [metric_row(x, "line") for x in metrics_lines(run_dir)]


def _checkpoint_files(run_dir: Path) -> list[tuple]:
    """(path, digest, bytes, step) of every file each checkpoint's manifest lists."""
    found = []
    for directory in checkpoint_dirs(run_dir / "checkpoints"):
        manifest = json.loads((directory / "manifest.json").read_text())
        for name, entry in manifest["files"].items():
            rel = f"checkpoints/{directory.name}/{name}"
            found.append((rel, listed_digest(entry), entry["size"], manifest["step"]))
    return sorted(found)


def test_a_run_records_every_step_of_metrics_jsonl_and_its_checkpoints(tmp_path, caplog):
    out = tmp_path / "run"
    seen: list[str] = []

    class WalProbe:  # the store's journal mode while the run writes it
        def after_step(self, step, record):
            conn = sqlite3.connect(out / "runs.db")
            seen.append(conn.execute("PRAGMA journal_mode").fetchone()[0])
            conn.close()

    tiny_train(out, 8, hooks=WalProbe(), keep_checkpoints=2)

    assert WARNING not in _logged(caplog)
    assert set(seen) == {"wal"}
    lines = metrics_lines(out)
    assert [x["step"] for x in lines] == list(range(1, 9))
    assert _stored_metrics(out) == _expected_metrics(out)
    assert [r[8] for r in _stored_metrics(out) if r[8] is not None] == [
        x["val_loss"] for x in lines if "val_loss" in x
    ], "val_loss of the evaluated steps"
    run = tables(out / "runs.db")["runs"]
    manifest = json.loads((out / "run_manifest.json").read_text())
    state = json.loads((out / "training_state.json").read_text())
    assert [(r[0], r[5], r[6], r[7], r[-1]) for r in run] == [
        (manifest["run_id"], state["ended_at"], "finished", "step 8: last step 8 reached", 8)
    ], "the end the loop recorded in training_state.json, word for word"
    stored = column(
        out / "runs.db",
        "SELECT path || ' ' || sha256 || ' ' || bytes || ' ' || step FROM artifacts "
        "WHERE kind = 'checkpoint' AND path NOT LIKE '%manifest.json' ORDER BY path",
    )
    on_disk = _checkpoint_files(out)
    assert stored == [" ".join(map(str, f)) for f in on_disk]
    steps = {f[3] for f in on_disk}
    assert 8 in steps and 2 not in steps, f"retention pruned step 2, the store with it: {steps}"
    assert [(r.run_id, r.run_dir) for r in registry.registered_runs()] == [
        (manifest["run_id"], out.resolve())
    ]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("runs.db")) == ["runs.db"]


@pytest.mark.parametrize("killed_mid_line", [False, True])
def test_a_resumed_run_keeps_its_id_and_stores_each_step_once(tmp_path, killed_mid_line):
    out = tmp_path / "run"
    tiny_train(out, 8, keep_checkpoints=10)  # checkpoints 2, 4, 6, 8; steps 1..8 stored
    first = json.loads((out / "run_manifest.json").read_text())
    if killed_mid_line:
        with (out / "metrics.jsonl").open("a") as fh:
            fh.write('{"step": 9, "epoch": 1, "lo')

    # Resume from step 4 and stop at 6: the store's rows of steps 5..8 are retaken or gone.
    tiny_train(out, 6, keep_checkpoints=10, resume_from=out / "checkpoints" / "step-00000004")

    again = json.loads((out / "run_manifest.json").read_text())
    assert again["run_id"] == first["run_id"] and again["run_started"] == first["run_started"]
    assert [x["step"] for x in metrics_lines(out)] == list(range(1, 7))
    assert _stored_metrics(out) == _expected_metrics(out)
    assert column(out / "runs.db", "SELECT run_id FROM runs") == [first["run_id"]]
    assert [r.run_id for r in registry.registered_runs()] == [first["run_id"]]


def test_the_store_rebuilt_from_the_files_equals_the_one_recorded_live(tmp_path):
    out = tmp_path / "run"
    tiny_train(out, 4, keep_checkpoints=2)  # checkpoints 2 and 4
    # Resumed: steps 5-8 recorded live (step 6 with a val_loss), saves 6 and 8, prunes 2.
    tiny_train(out, 8, keep_checkpoints=2, resume_from="latest")
    live = tables(out / "runs.db")
    (out / "runs.db").unlink()

    summary = sync_run_dir(out)

    rebuilt = tables(out / "runs.db")
    assert summary.steps == 8 and summary.status == "finished"
    assert [r[1] for r in live["metrics"] if r[9] is not None] == [3, 6]
    assert rebuilt["metrics"] == live["metrics"]
    assert rebuilt["params"] == live["params"]
    assert rebuilt["artifacts"] == live["artifacts"]
    ended = 5  # the end time: the close's clock live, training_state.json's mtime rebuilt
    strip = [r[:ended] + r[ended + 1 :] for r in live["runs"]]
    assert [r[:ended] + r[ended + 1 :] for r in rebuilt["runs"]] == strip
    steps = {row[5] for row in live["artifacts"] if row[1] == "checkpoint"}
    on_disk = {int(p.name[5:]) for p in checkpoint_dirs(out / "checkpoints")}
    assert steps == on_disk and 2 not in steps and 8 in steps, (steps, on_disk)


def test_a_directory_in_place_of_runs_db_warns_once_and_training_goes_on(tmp_path, caplog):
    out = tmp_path / "run"
    (out / "runs.db").mkdir(parents=True)

    result = tiny_train(out, 6)

    err = _logged(caplog)
    assert err.count(WARNING) == 1, err
    assert f"{out / 'runs.db'}: not a file" in err and "trainer runs sync" in err
    assert result.steps_run == 6 and [x["step"] for x in metrics_lines(out)] == [1, 2, 3, 4, 5, 6]
    assert (out / "runs.db").is_dir()


def test_a_corrupt_runs_db_is_left_alone_and_training_goes_on(tmp_path, caplog):
    out = tmp_path / "run"
    out.mkdir()
    (out / "runs.db").write_bytes(b"garbage, not a database\n" * 64)
    before = (out / "runs.db").read_bytes()

    result = tiny_train(out, 6)

    err = _logged(caplog)
    assert err.count(WARNING) == 1 and "not a SQLite database" in err, err
    assert result.steps_run == 6 and len(metrics_lines(out)) == 6
    assert (out / "runs.db").read_bytes() == before


def test_a_store_locked_mid_run_stops_recording_whole_steps_and_sync_completes_it(
    tmp_path, caplog, monkeypatch
):
    out = tmp_path / "run"
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.1)
    holder: list[sqlite3.Connection] = []

    class Lock:  # another writer takes the store's write lock after step 3
        def after_step(self, step, record):
            if step == 3:
                conn = sqlite3.connect(out / "runs.db", isolation_level=None)
                conn.execute("BEGIN IMMEDIATE")
                holder.append(conn)

    result = tiny_train(out, 6, hooks=Lock())
    holder[0].execute("ROLLBACK")
    holder[0].close()

    err = _logged(caplog)
    assert err.count(WARNING) == 1 and "locked by another writer" in err, err
    assert result.steps_run == 6 and len(metrics_lines(out)) == 6
    stored = _stored_metrics(out)
    assert stored == _expected_metrics(out)[:3], "steps 1-3, each whole, then nothing"
    assert column(out / "runs.db", "SELECT status FROM runs") == ["running"]
    sync_run_dir(out)
    assert _stored_metrics(out) == _expected_metrics(out)
    assert column(out / "runs.db", "SELECT status FROM runs") == ["finished"]


def test_an_unwritable_registry_warns_and_the_store_is_still_recorded(
    tmp_path, caplog, monkeypatch
):
    blocker = tmp_path / "home-is-a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SHIPGATE_HOME", str(blocker))
    out = tmp_path / "run"

    tiny_train(out, 4)

    err = _logged(caplog)
    assert err.count("was not registered in") == 1 and str(blocker) in err, err
    assert WARNING not in err
    assert len(_stored_metrics(out)) == 4


def test_finish_records_status_and_reason_and_close_does_not_override_it(tmp_path):
    run = write_run(tmp_path / "run", 3, max_steps=10)
    recorder = RunRecorder(run)
    recorder.start()
    recorder.finish("early_stopping", "validation loss stopped improving")
    recorder.close()
    recorder.close()  # idempotent
    rows = column(run / "runs.db", "SELECT status || ': ' || stop_reason FROM runs")
    assert rows == ["early_stopping: validation loss stopped improving"]


def test_close_without_finish_says_ended_unless_the_last_step_was_max_steps(tmp_path):
    run = write_run(tmp_path / "run", 3, max_steps=10)
    recorder = RunRecorder(run)
    recorder.start()
    recorder.close()
    assert column(run / "runs.db", "SELECT status FROM runs") == ["ended"]


def test_a_thousand_steps_are_a_thousand_rows_with_nothing_given_up(tmp_path):
    """Its cost per step is measured, not asserted: tools/bench_store.py."""
    run = write_run(tmp_path / "run", 0, max_steps=1000)
    recorder = RunRecorder(run)
    recorder.start()
    for step in range(1, 1001):
        line = {"step": step, "epoch": 0, "loss": 1.0 / step, "lr": 1e-3, "grad_norm": 0.5}
        recorder.step(line, last_step=1000)
    recorder.close()
    assert recorder.failure is None
    assert column(run / "runs.db", "SELECT step FROM metrics ORDER BY step") == list(range(1, 1001))
    assert column(run / "runs.db", "SELECT loss FROM metrics WHERE step = 800") == [1.0 / 800]
