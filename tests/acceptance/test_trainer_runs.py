"""`trainer runs ls | show | compare | sync`: two real `trainer apply` runs recorded as they
train, listed, shown and compared (text and --json, numbers checked against their
metrics.jsonl and checkpoint manifests); bad input - no run directory, an unknown or
ambiguous id, a corrupt, locked or newer store - is one message naming it, exit 1, and
the file left byte for byte; read-only commands change nothing in a run directory."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.tree import files_under
from tests.unit.trainer.checkpoint_support import listed_digest
from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from tests.unit.trainer.store_support import RUN_ID, column, write_run
from trainer import cli
from trainer.store import db
from trainer.store.rundir import flatten


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """Two 10-step runs of one config but for seed and warmup, registered in ``home``."""
    root = tmp_path_factory.mktemp("runs")
    data, tok = encode_test_corpus(root / "corpus")
    home = root / "home"
    runs = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: see loop_support.one_thread
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SHIPGATE_HOME", str(home))
        for name, seed, warmup in (("a", 1, 1), ("b", 2, 0)):
            config = write_run_config(
                root / f"{name}.yaml",
                data,
                tok,
                root / "unused",
                max_steps=10,
                eval_interval=5,
                save_interval=5,
                seed=seed,
                warmup_steps=warmup,
            )
            out = root / name
            assert cli.main(["apply", str(config), "--out", str(out), "--device", "cpu"]) == 0
            runs[name] = out
    torch.set_num_threads(threads)
    return {"home": home, **runs}


@pytest.fixture
def runs(trained, monkeypatch) -> dict:
    monkeypatch.setenv("SHIPGATE_HOME", str(trained["home"]))
    return trained


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "run_manifest.json").read_text())["run_id"]


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _json(capsys, argv: list[str]) -> dict:
    assert cli.main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_ls_lists_the_registered_runs_with_their_progress_and_losses(runs, capsys):
    listed = _json(capsys, ["runs", "ls", "--json"])

    assert listed["registry"] == str(runs["home"] / "registry.db")
    by_id = {r["run_id"]: r for r in listed["runs"]}
    assert set(by_id) == {_run_id(runs["a"]), _run_id(runs["b"])}
    for name in ("a", "b"):
        entry, lines = by_id[_run_id(runs[name])], _lines(runs[name])
        vals = [(x["val_loss"], x["step"]) for x in lines if "val_loss" in x]
        assert (entry["status"], entry["stop_reason"]) == (
            "finished",
            "step 10: last step 10 reached",
        )
        assert (entry["last_step"], entry["max_steps"]) == (10, 10)
        assert entry["last_loss"] == lines[-1]["loss"]
        assert (entry["best_val_loss"], entry["best_val_step"]) == min(vals)
        assert entry["run_dir"] == str(runs[name].resolve()) and entry["name"] == "loop-test"

    assert cli.main(["runs", "ls"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].split() == [
        "ID", "NAME", "STATUS", "STEPS", "LOSS", "BEST", "VAL", "STARTED", "DIR",
    ]  # fmt: skip
    for name in ("a", "b"):
        row = next(x for x in text.splitlines() if x.startswith(_run_id(runs[name])[:8]))
        assert "  finished  " in row and " 10/10 " in row
        assert row.endswith(str(runs[name].resolve()))


def test_show_reports_params_metrics_and_checkpoint_sha256s(runs, capsys):
    run = runs["a"]
    view = _json(capsys, ["runs", "show", _run_id(run)[:6], "--json"])
    by_dir = _json(capsys, ["runs", "show", str(run), "--json"])

    assert view == by_dir, "an id prefix and the directory name the same run"
    manifest = json.loads((run / "run_manifest.json").read_text())
    assert view["run"]["run_id"] == manifest["run_id"]
    assert view["run"]["git_commit"] == manifest["git"]["commit"]
    assert view["params"] == {k: json.loads(v) for k, v in flatten(manifest["config"])}
    lines = _lines(run)
    m = view["metrics"]
    assert (m["steps"], m["first_step"], m["last_step"]) == (10, 1, 10)
    assert (m["first_loss"], m["last_loss"]) == (lines[0]["loss"], lines[-1]["loss"])
    vals = [(x["val_loss"], x["step"]) for x in lines if "val_loss" in x]
    assert (m["best_val_loss"], m["best_val_step"]) == min(vals) and m["evaluations"] == 2
    assert m["median_tokens_per_s"] == statistics.median(x["tokens_per_s"] for x in lines)
    stored = {a["path"]: a for a in view["artifacts"]}
    for step in (5, 10):
        ckpt = run / "checkpoints" / f"step-{step:08d}"
        for name, entry in json.loads((ckpt / "manifest.json").read_text())["files"].items():
            artifact = stored[f"checkpoints/{ckpt.name}/{name}"]
            assert (artifact["sha256"], artifact["bytes"], artifact["step"]) == (
                listed_digest(entry),
                entry["size"],
                step,
            )

    assert cli.main(["runs", "show", str(run)]) == 0
    text = capsys.readouterr().out
    assert f"run          {manifest['run_id']}" in text
    assert "status       finished: step 10: last step 10 reached" in text
    assert f"  optimizer.lr = {json.dumps(manifest['config']['optimizer']['lr'])}" in text
    model = stored["checkpoints/step-00000010/model.safetensors"]
    assert "checkpoints/step-00000010/model.safetensors" in text and model["sha256"] in text


def test_compare_shows_the_params_that_differ_and_the_metrics_side_by_side(runs, capsys):
    a, b = _run_id(runs["a"]), _run_id(runs["b"])
    result = _json(capsys, ["runs", "compare", a[:8], b[:8], "--json"])

    assert [r["run_id"] for r in result["runs"]] == [a, b]
    differ = result["params"]["differ"]
    assert differ["training.seed"] == ["1", "2"]
    assert differ["training.warmup_steps"] == ["1", "0"]
    assert differ["apply.out"] == [json.dumps(str(runs["a"])), json.dumps(str(runs["b"]))]
    assert differ["path"] == [
        json.dumps(str(runs["a"]) + ".yaml"),
        json.dumps(str(runs["b"]) + ".yaml"),
    ]
    assert set(differ) == {"training.seed", "training.warmup_steps", "apply.out", "path"}
    total = len(flatten(json.loads((runs["a"] / "run_manifest.json").read_text())["config"]))
    assert result["params"]["equal"] == total - 4
    last = result["metrics"]["last_loss"]
    la, lb = _lines(runs["a"])[-1]["loss"], _lines(runs["b"])[-1]["loss"]
    assert (last["a"], last["b"], last["difference"]) == (la, lb, lb - la)
    assert result["metrics"]["steps"] == {"a": 10, "b": 10, "difference": 0}

    assert cli.main(["runs", "compare", str(runs["a"]), str(runs["b"])]) == 0
    text = capsys.readouterr().out
    assert "params: 4 differ" in text
    assert any(x.split() == ["training.seed", "1", "2"] for x in text.splitlines()), text


def test_reading_commands_change_nothing_in_a_run_directory(runs, capsys):
    before = {name: files_under(runs[name]) for name in ("a", "b")}
    assert cli.main(["runs", "ls"]) == 0
    assert cli.main(["runs", "show", str(runs["a"])]) == 0
    assert cli.main(["runs", "compare", str(runs["a"]), str(runs["b"])]) == 0
    capsys.readouterr()
    assert {name: files_under(runs[name]) for name in ("a", "b")} == before


def test_a_run_made_before_the_store_is_recorded_by_sync(runs, tmp_path, capsys, monkeypatch):
    copy = tmp_path / "old"
    shutil.copytree(runs["a"], copy)
    (copy / "runs.db").unlink()
    manifest = json.loads((copy / "run_manifest.json").read_text())
    del manifest["run_id"], manifest["run_started"]  # as written before run ids existed
    (copy / "run_manifest.json").write_text(json.dumps(manifest))
    home = tmp_path / "home"
    monkeypatch.setenv("SHIPGATE_HOME", str(home))

    assert cli.main(["runs", "sync", str(copy)]) == 0
    out = capsys.readouterr().out
    assert "10 steps" in out and f"registered in {home / 'registry.db'}" in out
    original = _json(capsys, ["runs", "show", str(runs["a"]), "--json"])
    synced = _json(capsys, ["runs", "show", str(copy), "--json"])
    assert synced["metrics"] == original["metrics"]
    assert synced["params"] == original["params"]
    assert [a for a in synced["artifacts"] if a["kind"] == "checkpoint"] == [
        a for a in original["artifacts"] if a["kind"] == "checkpoint"
    ]
    assert synced["run"]["run_id"] != original["run"]["run_id"]  # derived, not the original's


# ---------------------------------------------------------------- bad input
def _err(capsys, argv: list[str]) -> str:
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.err


def test_a_path_that_is_not_a_run_directory_is_named_exit_1(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    for verb in (["show"], ["sync"]):
        err = _err(capsys, ["runs", *verb, str(empty)])
        assert f"{empty}: not a run directory: no run_manifest.json" in err
    assert list(empty.iterdir()) == [], "nothing created"
    assert f"{tmp_path / 'gone'}: no such directory" in _err(
        capsys, ["runs", "show", str(tmp_path / "gone")]
    )


def test_an_unknown_id_and_an_ambiguous_prefix_exit_1_naming_the_candidates(tmp_path, capsys):
    for suffix in ("1", "2"):
        run = write_run(tmp_path / suffix, 3, run_id=f"abc{suffix}" + "0" * 28)
        assert cli.main(["runs", "sync", str(run)]) == 0
    capsys.readouterr()
    assert "no registered run has the id 'fff'" in _err(capsys, ["runs", "show", "fff"])
    err = _err(capsys, ["runs", "compare", "abc", "abc2"])
    assert "the id prefix 'abc' is ambiguous" in err
    assert f"abc1{'0' * 28} hand-made ({tmp_path / '1'})" in err and f"abc2{'0' * 28}" in err


@pytest.mark.parametrize("damage", ["not sqlite", "newer schema"])
def test_a_damaged_store_exits_1_naming_it_and_is_left_byte_for_byte(tmp_path, capsys, damage):
    run = write_run(tmp_path / "run", 3)
    healthy = write_run(tmp_path / "healthy", 3, run_id="e" * 32)
    for path in (run, healthy):
        assert cli.main(["runs", "sync", str(path)]) == 0
    store = run / "runs.db"
    if damage == "not sqlite":
        store.write_bytes(b"\x89garbage" * 512)
    else:
        conn = sqlite3.connect(store)
        conn.execute("PRAGMA user_version = 99")
        conn.close()
    before = files_under(run)
    capsys.readouterr()

    says = "not a SQLite database" if damage == "not sqlite" else "schema version 99, newer"
    for argv in (["show", RUN_ID[:5]], ["show", str(run)], ["compare", str(run), "eee"]):
        assert f"{store}: " in (err := _err(capsys, ["runs", *argv])) and says in err, err
    assert says in _err(capsys, ["runs", "sync", str(run)])
    assert cli.main(["runs", "ls"]) == 1
    listed = capsys.readouterr()
    assert f"{store}: " in listed.err and says in listed.err
    assert "e" * 8 in listed.out, "the other runs are still listed"
    assert cli.main(["runs", "ls", "--json"]) == 1
    entries = {e["run_id"]: e for e in json.loads(capsys.readouterr().out)["runs"]}
    assert entries["e" * 32]["status"] == "unknown" and entries[RUN_ID]["status"] == "error"
    assert files_under(run) == before


def test_a_locked_store_refuses_sync_naming_the_writer_while_show_still_reads(
    tmp_path, capsys, monkeypatch
):
    run = write_run(tmp_path / "run", 3)
    assert cli.main(["runs", "sync", str(run)]) == 0
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(run / "runs.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")  # as the training run's recorder has it
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("DELETE FROM metrics")  # uncommitted
    try:
        capsys.readouterr()
        err = _err(capsys, ["runs", "sync", str(run)])
        assert f"{run / 'runs.db'}: locked by another writer (pid" in err, err
        shown = _json(capsys, ["runs", "show", str(run), "--json"])
        assert shown["metrics"]["steps"] == 3, "a reader sees the last commit"
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_registered_run_whose_directory_is_gone_is_listed_as_missing(tmp_path, capsys):
    run = write_run(tmp_path / "run", 3)
    assert cli.main(["runs", "sync", str(run)]) == 0
    shutil.rmtree(run)
    capsys.readouterr()

    listed = _json(capsys, ["runs", "ls", "--json"])

    assert [(e["run_id"], e["status"]) for e in listed["runs"]] == [(RUN_ID, "missing")]
    assert cli.main(["runs", "ls"]) == 0
    assert " missing " in capsys.readouterr().out
    err = _err(capsys, ["runs", "show", RUN_ID[:4]])
    assert f"its directory {run.resolve()} is missing" in err


def test_ls_with_no_registry_says_so(shipgate_home, capsys):
    assert cli.main(["runs", "ls"]) == 0
    assert f"no runs registered in {shipgate_home / 'registry.db'}" in capsys.readouterr().out
    assert not (shipgate_home / "registry.db").exists()


def test_a_store_behind_its_metrics_is_flagged_with_the_sync_that_catches_it_up(tmp_path, capsys):
    run = write_run(tmp_path / "run", 3)
    assert cli.main(["runs", "sync", str(run)]) == 0
    write_run(run, 5)  # two more steps the store did not record (it stopped, say)
    capsys.readouterr()

    shown = _json(capsys, ["runs", "show", str(run), "--json"])
    assert shown["status_note"] == (
        f"the store ends at step 3, training_state.json at step 5: run "
        f"`trainer runs sync {run.resolve()}` to catch it up"
    )
    assert cli.main(["runs", "ls"]) == 0
    assert "[store behind: sync]" in capsys.readouterr().out
    assert cli.main(["runs", "sync", str(run)]) == 0
    capsys.readouterr()
    assert _json(capsys, ["runs", "show", str(run), "--json"])["status_note"] is None


def test_show_summarises_the_stored_metrics(tmp_path, capsys):
    run = write_run(tmp_path / "run", 10)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    records[4]["val_loss"], records[9]["val_loss"] = 2.0, 3.0  # the best is not the last
    speeds = [900.0, 100.0, 500.0, 700.0, 300.0, 800.0, 200.0, 600.0, 400.0, 1000.0]
    for r, speed in zip(records, speeds, strict=True):
        r["tokens_per_s"] = speed
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli.main(["runs", "sync", str(run)]) == 0
    capsys.readouterr()

    m = _json(capsys, ["runs", "show", RUN_ID[:6], "--json"])["metrics"]

    assert m == {
        "steps": 10,
        "first_step": 1,
        "last_step": 10,
        "first_loss": 4.0,
        "last_loss": 0.4,
        "best_val_loss": 2.0,
        "best_val_step": 5,
        "evaluations": 2,
        "median_tokens_per_s": 550.0,
    }


def test_a_store_left_in_wal_by_a_killed_writer_is_read_without_being_changed(tmp_path, capsys):
    run = write_run(tmp_path / "run", 3)
    assert cli.main(["runs", "sync", str(run)]) == 0
    killed = (
        "import os, sys; from trainer.store import db; from trainer.store.schema import STORE; "
        "c = db.open_writer(sys.argv[1], STORE); "
        "c.execute(\"UPDATE runs SET status = 'killed-writer'\"); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", killed, str(run / "runs.db")], check=True)
    before = files_under(run)
    assert {"runs.db-wal", "runs.db-shm"} <= set(before), "the writer's WAL is left behind"
    capsys.readouterr()

    shown = _json(capsys, ["runs", "show", str(run), "--json"])

    assert shown["run"]["status"] == "killed-writer", "the committed write, read from the WAL"
    after = files_under(run)
    # runs.db-shm is SQLite's shared-memory index, rebuilt by whoever opens the WAL first;
    # the database and its WAL must be as the writer left them (not checkpointed, kept).
    assert after.keys() == before.keys()
    assert {k: v for k, v in after.items() if k != "runs.db-shm"} == {
        k: v for k, v in before.items() if k != "runs.db-shm"
    }, "a reader checkpointed the WAL into runs.db"


def test_a_run_stored_as_running_reads_crashed_once_no_process_holds_its_lock(
    tmp_path, capsys, request
):
    """What a SIGKILL or the OOM killer leaves: status running, no end record. While a
    process holds the run directory's writer lock it reads running; once that process is
    killed it reads crashed, with why, in show and ls alike; the probe changes no file. A
    run stored with any other status keeps it whoever holds the lock."""
    run = write_run(tmp_path / "run", 3)
    assert cli.main(["runs", "sync", str(run)]) == 0
    capsys.readouterr()
    (ended,) = column(run / "runs.db", "SELECT status FROM runs")  # as stored, not as shown
    assert ended not in ("running", "crashed")
    store = sqlite3.connect(run / "runs.db")
    with store:
        store.execute("UPDATE runs SET status = 'running', stop_reason = NULL, ended = NULL")
    store.close()
    take = (
        "import sys, time; from pathlib import Path; from trainer.runfiles.lock import "
        "writer_lock\nwith writer_lock(Path(sys.argv[1]), 'trainer apply'):\n"
        "    print('locked', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", take, str(run)], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    request.addfinalizer(holder.kill)  # never left holding the lock, whatever fails
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    before = files_under(run)

    def status() -> tuple[str, str | None, str]:
        shown = _json(capsys, ["runs", "show", str(run), "--json"])["run"]
        (listed,) = [
            e
            for e in _json(capsys, ["runs", "ls", "--json"])["runs"]
            if e["run_id"] == shown["run_id"]
        ]
        return shown["status"], shown["stop_reason"], listed["status"]

    assert status() == ("running", None, "running")
    holder.kill()
    holder.wait(timeout=60)
    holder.stdout.close()
    crashed, why, listed = status()
    assert (crashed, listed) == ("crashed", "crashed")
    assert why is not None and "no process holds its writer lock" in why
    assert files_under(run) == before, "a reading command changed the run directory"

    store = sqlite3.connect(run / "runs.db")
    with store:
        store.execute("UPDATE runs SET status = ?", (ended,))
    store.close()
    assert status()[0::2] == (ended, ended), "only a stored running is read as crashed"


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly_with_141(tmp_path):
    """`trainer runs show RUN | head -1`: the write after the reader left is no traceback,
    and the status is 128 + SIGPIPE (what a shell reports), not 0."""
    run = write_run(tmp_path / "run", 3)
    big = json.loads((run / "run_manifest.json").read_text())
    big["config"]["sweep"] = {f"p{i:05d}": "x" * 40 for i in range(4000)}  # ~250 KB of params
    (run / "run_manifest.json").write_text(json.dumps(big))
    assert cli.main(["runs", "sync", str(run)]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "runs", "show", str(run)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline().startswith(b"run          ")
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141, err.decode()
    assert err == b""
