"""A store built from a run directory's files (trainer/store/sync.py, rundir.py) and the
user's registry (registry.py): bad input is refused naming the path, with nothing
created; a run made before run ids existed gets the same id every time; what only the
store knows (how a run ended) survives a sync; a store that is corrupt or holds another
run is refused and left as it is; registering is idempotent."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from tests.unit.trainer.store_support import RUN_ID, column, tables, write_run
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import TRAINING_STATE_FILE
from trainer.store import db, registry
from trainer.store.compare import comparison
from trainer.store.identity import launch_identity
from trainer.store.query import load_view, locate
from trainer.store.recorder import RunRecorder
from trainer.store.rundir import RunDirError, flatten, read_run_dir
from trainer.store.schema import STORE
from trainer.store.sync import sync_run_dir


def test_a_run_directory_is_recorded_whole(tmp_path):
    run = write_run(tmp_path / "run", 10, max_steps=10)

    summary = sync_run_dir(run)

    assert (summary.run_id, summary.steps, summary.status) == (RUN_ID, 10, "finished")
    t = tables(run / "runs.db")
    assert [r[1:3] for r in t["runs"]] == [("hand-made", str(run.resolve()))]
    assert [row[1] for row in t["metrics"]] == list(range(1, 11))
    assert [row[9] for row in t["metrics"] if row[9] is not None] == [1.0, 0.5]  # val 5, 10
    params = {k: v for _, k, v in t["params"]}
    assert params["optimizer.lr"] == "0.003" and params["optimizer.betas"] == "[0.9, 0.95]"
    assert params["apply.stop_after"] == "null" and params["training.compile"] == "false"
    assert [a[1:3] for a in t["artifacts"]] == [("file", "run_manifest.json")]
    assert [(r.run_id, r.run_dir) for r in registry.registered_runs()] == [(RUN_ID, run.resolve())]


def _without(name: str):
    def make(root: Path) -> Path:
        run = write_run(root / "r", 3)
        (run / name).unlink()
        return run

    return make


def _a_file(root: Path) -> Path:
    (root / "file").write_text("x")
    return root / "file"


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda root: root / "nowhere", "nowhere: no such directory"),
        (_a_file, "file: not a directory"),
        (_without("run_manifest.json"), "r: not a run directory: no run_manifest.json"),
        (_without("metrics.jsonl"), "r: not a run directory: no metrics.jsonl"),
    ],
)
def test_what_is_not_a_run_directory_is_refused_naming_it_and_nothing_is_created(
    tmp_path, make, says
):
    target = make(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(RunDirError, match=says):
        sync_run_dir(target)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert registry.registered_runs() == []


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("{not json", "line 3 is not JSON"),
        ('{"step": 3, "loss": "low"}', "line 3: loss is not a number"),
        ('{"step": 3, "loss": 1.0, "tokens": 1.5}', "line 3: tokens is not an integer"),
        ('{"step": 3, "lr": 0.1}', "line 3: no loss"),
        ('{"step": 1, "loss": 1.0}', "line 3: step 1 after step 2"),
    ],
)
def test_a_bad_metrics_line_is_named_and_no_store_is_made(tmp_path, line, says):
    run = write_run(tmp_path / "run", 5)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[2] = line
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(RunDirError, match=f"metrics.jsonl: {says}"):
        sync_run_dir(run)
    assert not (run / "runs.db").exists()


def test_a_torn_last_line_is_left_out_and_non_finite_values_are_kept(tmp_path):
    run = write_run(tmp_path / "run", 3, tail='{"step": 4, "lo')
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    first = json.loads(lines[0]) | {"tokens_per_s": "inf", "grad_norm": "nan", "alerts": ["x"]}
    lines[0] = json.dumps(first) + "\n"
    (run / "metrics.jsonl").write_text("".join(lines))

    sync_run_dir(run)

    rows = tables(run / "runs.db")["metrics"]
    assert [r[1] for r in rows] == [1, 2, 3]
    assert rows[0][5] is None and rows[0][7] == math.inf  # NaN is NULL in SQLite
    assert rows[0][-1] == '{"alerts": ["x"]}', "keys beyond the columns kept in extra"


def test_a_run_without_an_id_gets_the_same_derived_id_every_time(tmp_path):
    run = write_run(tmp_path / "run", 4, run_id=None)
    first = sync_run_dir(run).run_id
    (run / "runs.db").unlink()
    assert sync_run_dir(run).run_id == first
    other = write_run(tmp_path / "other", 4, run_id=None, lr=1e-4)
    other_id = sync_run_dir(other).run_id
    assert other_id != first and len(first) == 32 and int(first, 16) >= 0
    assert sorted(r.run_id for r in registry.registered_runs()) == sorted([first, other_id])


def test_a_sync_keeps_how_the_run_ended(tmp_path):
    run = write_run(tmp_path / "run", 4, max_steps=10)
    recorder = RunRecorder(run)
    recorder.start()
    recorder.finish("early_stopping", "no improvement for 3 evaluations")
    recorder.close()
    ended = column(run / "runs.db", "SELECT ended FROM runs")

    assert sync_run_dir(run).status == "early_stopping"

    assert column(run / "runs.db", "SELECT stop_reason FROM runs") == [
        "no improvement for 3 evaluations"
    ]
    assert column(run / "runs.db", "SELECT ended FROM runs") == ended
    assert sync_run_dir(write_run(tmp_path / "short", 4, max_steps=10)).status == "unknown"


def _end_state(run: Path, **end: object) -> None:
    """Add an end record to training_state.json, as MetricsWriter.finish does."""
    state = json.loads((run / "training_state.json").read_text())
    (run / "training_state.json").write_text(json.dumps(state | end))


def test_a_rebuilt_store_takes_how_the_run_ended_from_training_state_json(tmp_path):
    run = write_run(tmp_path / "run", 4, max_steps=10)
    reason = "step 4: validation loss did not improve on 1.25 (evaluation 1) for 3 evaluations"
    _end_state(run, status="early_stopping", reason=reason, ended_at="2025-03-01T13:00:00+00:00")

    done = sync_run_dir(run)  # no runs.db yet: everything comes from the files

    assert done.status == "early_stopping"
    assert column(
        run / "runs.db", "SELECT status || '|' || stop_reason || '|' || ended FROM runs"
    ) == [f"early_stopping|{reason}|2025-03-01T13:00:00+00:00"]
    # The file outranks a stale store: a store that says "running" (its writer was stopped
    # before it heard the end) is corrected.
    conn = db.open_writer(run / "runs.db", STORE)
    with db.transaction(conn):
        conn.execute("UPDATE runs SET status = 'running', stop_reason = NULL, ended = NULL")
    db.close_writer(conn, STORE)
    assert sync_run_dir(run).status == "early_stopping"


@pytest.mark.parametrize(
    ("end", "says"),
    [
        ({"status": "done"}, "status 'done' is not one of finished, early_stopping"),
        ({"status": "aborted", "reason": 3}, "reason and ended_at are strings"),
        ({"last_step": "10"}, "last_step is not an integer: '10'"),
    ],
)
def test_a_bad_end_record_is_named_and_no_store_is_made(tmp_path, end, says):
    run = write_run(tmp_path / "run", 4, max_steps=10)
    _end_state(run, **end)
    with pytest.raises(RunDirError, match=rf"training_state\.json: {re.escape(says)}"):
        sync_run_dir(run)
    assert not (run / "runs.db").exists()


def test_a_corrupt_store_is_refused_by_sync_and_left_byte_for_byte(tmp_path):
    run = write_run(tmp_path / "run", 4)
    (run / "runs.db").write_bytes(b"\x00" * 4096)
    before = (run / "runs.db").read_bytes()
    with pytest.raises(db.StoreCorruptError, match=r"runs\.db: not a SQLite database"):
        sync_run_dir(run)
    assert (run / "runs.db").read_bytes() == before


def test_a_store_holding_another_run_is_refused(tmp_path):
    run = write_run(tmp_path / "run", 4)
    sync_run_dir(run)
    manifest = json.loads((run / "run_manifest.json").read_text())
    manifest["run_id"] = "f" * 32
    (run / "run_manifest.json").write_text(json.dumps(manifest))
    before = (run / "runs.db").read_bytes()
    with pytest.raises(db.StoreError, match=f"holds run {RUN_ID}, but .* is run f{{32}}"):
        sync_run_dir(run)
    assert (run / "runs.db").read_bytes() == before


def test_checkpoints_come_from_their_manifests_and_an_unfinished_one_is_left_out(tmp_path):
    run = write_run(tmp_path / "run", 4)
    whole = run / "checkpoints" / "step-00000004"
    whole.mkdir(parents=True)
    (whole / "model.safetensors").write_bytes(b"m" * 10)
    files = {"model.safetensors": {"sha256": "a" * 64, "size": 10}}  # not re-hashed
    (whole / "manifest.json").write_text(
        json.dumps(
            {
                "format": "shipgate-checkpoint",
                "format_version": 1,
                "step": 4,
                "files": files,
                "tensor_count": 1,
                "parameter_count": 1,
                "dtype": "float32",
                "architecture": {},
            }
        )
    )
    (run / "checkpoints" / "step-00000006").mkdir()  # a save cut short: no manifest
    (run / "export").mkdir()
    (run / "export" / "config.json").write_text("{}")

    summary = sync_run_dir(run)

    artifacts = {a[2]: a[1:] for a in tables(run / "runs.db")["artifacts"]}
    assert artifacts["checkpoints/step-00000004/model.safetensors"] == (
        "checkpoint",
        "checkpoints/step-00000004/model.safetensors",
        "a" * 64,
        10,
        4,
    )
    assert "checkpoints/step-00000004/manifest.json" in artifacts
    assert artifacts["export/config.json"][2] == (
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"  # sha256 of "{}"
    )
    assert not any("step-00000006" in p for p in artifacts)
    assert len(summary.skipped) == 1 and "step-00000006" in summary.skipped[0]


def test_flatten_gives_dotted_keys_and_json_values():
    config = {"a": {"b": 1, "c": {"d": "x"}, "e": {}}, "f": [1, 2], "g": None}
    assert flatten(config) == [
        ("a.b", "1"),
        ("a.c.d", '"x"'),
        ("a.e", "{}"),
        ("f", "[1, 2]"),
        ("g", "null"),
    ]


def test_registering_is_idempotent_and_follows_a_moved_run(tmp_path):
    path = tmp_path / "reg" / "registry.db"
    for _ in range(3):
        registry.register(RUN_ID, tmp_path / "a", "n", "2025", path=path)
    registry.register(RUN_ID, tmp_path / "moved", "n2", "2025", path=path)
    runs = registry.registered_runs(path)
    assert [(r.run_id, r.run_dir.name, r.name) for r in runs] == [(RUN_ID, "moved", "n2")]


def test_an_id_prefix_finds_one_run_and_an_ambiguous_one_lists_the_candidates(tmp_path):
    path = tmp_path / "registry.db"
    registry.register("abc1" + "0" * 28, tmp_path / "x", "x", None, path=path)
    registry.register("abc2" + "0" * 28, tmp_path / "y", "y", None, path=path)
    assert registry.find_run("abc2", path).name == "y"
    with pytest.raises(registry.RegistryError, match=r"ambiguous: abc10+ x .*; abc20+ y"):
        registry.find_run("abc", path)
    with pytest.raises(registry.RegistryError, match="no registered run has the id 'ffff'"):
        registry.find_run("ffff", path)


def test_the_registry_lives_in_shipgate_home_else_the_xdg_data_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("SHIPGATE_HOME", str(tmp_path / "sg"))
    assert registry.registry_path() == tmp_path / "sg" / "registry.db"
    monkeypatch.delenv("SHIPGATE_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert registry.registry_path() == tmp_path / "xdg" / "shipgate" / "registry.db"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry.registry_path() == tmp_path / "home/.local/share/shipgate/registry.db"


def test_every_test_has_a_registry_of_its_own(shipgate_home):
    assert registry.registry_path() == shipgate_home / "registry.db"
    assert Path.home() not in registry.registry_path().parents


def test_read_run_dir_does_not_write(tmp_path):
    run = write_run(tmp_path / "run", 4)
    before = sorted(p.name for p in run.iterdir())
    read_run_dir(run, exports=True)
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_launch_mints_an_id_and_a_resume_carries_it_over(tmp_path, caplog):
    fresh = launch_identity(None, created="T1")
    assert len(fresh["run_id"]) == 32 and fresh["run_started"] == "T1"
    assert launch_identity(None, created="T1")["run_id"] != fresh["run_id"]
    old = write_run(tmp_path / "run", 1) / "run_manifest.json"
    assert launch_identity(old, created="T2") == {
        "run_id": RUN_ID,
        "run_started": "2025-03-01T11:00:00+00:00",
    }
    legacy = write_run(tmp_path / "legacy", 1, run_id=None)
    derived = sync_run_dir(legacy).run_id
    carried = launch_identity(legacy / "run_manifest.json", created="T2")
    assert carried == {"run_id": derived, "run_started": "2025-03-01T12:00:00+00:00"}
    (legacy / "run_manifest.json").write_text("{torn")
    assert launch_identity(legacy / "run_manifest.json", created="T3")["run_id"] != derived
    assert "run_manifest.json cannot be read" in caplog.text


def test_compare_tells_an_absent_param_from_a_null_one(tmp_path):
    a = write_run(tmp_path / "a", 10)
    b = write_run(tmp_path / "b", 5, run_id="b" * 32, lr=1e-4)
    manifest = json.loads((b / "run_manifest.json").read_text())
    del manifest["config"]["apply"]["stop_after"]  # null in a, absent in b
    manifest["config"]["extra"] = None  # absent in a, null in b
    (b / "run_manifest.json").write_text(json.dumps(manifest))
    views = []
    for run in (a, b):
        sync_run_dir(run)
        views.append(load_view(locate(str(run))))

    result = comparison(*views)

    assert result["params"]["differ"] == {
        "apply.stop_after": ["null", None],
        "extra": [None, "null"],
        "optimizer.lr": ["0.003", "0.0001"],
    }
    assert result["params"]["equal"] == len(views[0].params) - 2
    assert result["metrics"]["last_step"] == {"a": 10, "b": 5, "difference": -5}


def test_a_run_written_before_stop_after_and_last_step_had_their_names_is_read(tmp_path):
    # run_manifest.json's apply.stop_after was apply.max_steps, training_state.json's
    # last_step was max_steps: such a run directory still gives its run's last step.
    run = write_run(tmp_path / "run", 4, max_steps=10)
    manifest = json.loads((run / "run_manifest.json").read_text())
    manifest["config"]["apply"] = {"max_steps": 6, "out": "somewhere"}
    (run / "run_manifest.json").write_text(json.dumps(manifest))
    assert read_run_dir(run).run["max_steps"] == 10  # training_state.json's, when it has one
    (run / TRAINING_STATE_FILE).unlink()
    assert read_run_dir(run).run["max_steps"] == 6  # the old manifest's stop-after
    manifest["config"]["apply"] = {"stop_after": 7, "out": "somewhere"}
    (run / "run_manifest.json").write_text(json.dumps(manifest))
    assert read_run_dir(run).run["max_steps"] == 7
    atomic_write_json(run / TRAINING_STATE_FILE, {"max_steps": 9, "last": None})
    assert read_run_dir(run).run["max_steps"] == 9
