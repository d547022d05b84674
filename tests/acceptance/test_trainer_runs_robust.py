"""`trainer runs` when one run is bad (issue 31): `ls` lists every other run and marks the
bad one with why (exit 1), `forget` unregisters it (its files kept), `sync` refuses text the
store cannot hold (a non-UTF-8 directory name, a lone surrogate in a run's name) and a run
directory another process writes (its writer lock, naming the pid) - each a message, never
a traceback.

    .venv/bin/pytest -q tests/acceptance/test_trainer_runs_robust.py
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tree import files_under
from tests.unit.trainer.store_support import write_run
from trainer.runfiles.lock import writer_lock
from trainer.store.sync import sync_run_dir

ROOT = Path(__file__).resolve().parents[2]
GOOD, GONE = "1" * 32, "2" * 32
#: Runs that cannot be read, each by another fault, and the words ls says of it.
BAD = {
    "3" * 32: "holds text that is not UTF-8 (run_dir)",  # the registry's row
    "4" * 32: "param 'name' holds",  # a store whose params are not JSON
    "5" * 32: "a FIFO (named pipe), not a regular file, so not a run store",
    "6" * 32: "not a SQLite database",
}


def runs(home: Path, *argv: str) -> subprocess.CompletedProcess:
    """`python -m trainer runs ARGV` with the registry in ``home``."""
    return subprocess.run(
        [sys.executable, "-m", "trainer", "runs", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "SHIPGATE_HOME": str(home)},
        capture_output=True,
        text=True,
        errors="backslashreplace",
        timeout=60,
        check=False,
    )


@pytest.fixture
def registry(tmp_path, monkeypatch) -> tuple[Path, dict[str, Path]]:
    """(home, run id -> directory): a good run, a gone one and one bad run of each kind,
    all registered by a sync, then damaged."""
    home = tmp_path / "home"
    monkeypatch.setenv("SHIPGATE_HOME", str(home))
    dirs = {run_id: write_run(tmp_path / run_id[:4], 3, run_id=run_id) for run_id in (GOOD, GONE)}
    dirs |= {run_id: write_run(tmp_path / run_id[:4], 3, run_id=run_id) for run_id in BAD}
    for path in dirs.values():
        sync_run_dir(path)
    for path in sorted(dirs[GONE].iterdir()):
        path.unlink()
    dirs[GONE].rmdir()
    conn = sqlite3.connect(home / "registry.db")
    with conn:  # a row written by something else: its run_dir is not UTF-8
        conn.execute(
            "UPDATE runs SET run_dir = CAST(X'2f72756e2fff' AS TEXT) WHERE run_id = ?",
            ("3" * 32,),
        )
    conn.close()
    conn = sqlite3.connect(dirs["4" * 32] / "runs.db")
    with conn:
        conn.execute("UPDATE params SET value = '{not json' WHERE key = 'name'")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    (dirs["5" * 32] / "runs.db").unlink()
    os.mkfifo(dirs["5" * 32] / "runs.db")
    (dirs["6" * 32] / "runs.db").write_bytes(b"not a database at all" * 10)
    return home, dirs


def listing(proc: subprocess.CompletedProcess) -> dict[str, dict]:
    """run id -> row of `trainer runs ls --json`'s output; an assertion when it printed
    none (the whole listing failed)."""
    try:
        rows = json.loads(proc.stdout)["runs"]
    except (ValueError, KeyError, TypeError):
        rows = None
    assert rows is not None, f"ls listed nothing: {proc.stderr[-2000:]}"
    return {row["run_id"]: row for row in rows}


def test_one_bad_run_never_keeps_ls_from_listing_the_others(registry):
    home, _ = registry
    proc = runs(home, "ls", "--json")
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    listed = listing(proc)
    assert proc.returncode == 1, proc.stderr[-3000:]  # it says each bad one
    assert set(listed) == {GOOD, GONE, *BAD}, sorted(listed)
    assert (listed[GOOD]["status"], listed[GOOD]["last_step"]) == ("unknown", 3)
    assert (listed[GONE]["status"], listed[GONE]["error"]) == ("missing", None)
    for run_id, words in BAD.items():
        assert listed[run_id]["status"] == "error" and words in listed[run_id]["error"], (
            run_id,
            listed[run_id],
        )
        said = f"trainer runs ls: error: run {run_id[:8]}: "
        line = next((x for x in proc.stderr.splitlines() if x.startswith(said)), "")
        assert words in line and f"`trainer runs forget {run_id[:8]}`" in line, proc.stderr
    table = runs(home, "ls")
    assert table.returncode == 1 and "Traceback" not in table.stderr
    assert all(run_id[:8] in table.stdout for run_id in (GOOD, *BAD)), table.stdout


def test_forget_unregisters_a_bad_run_and_leaves_its_files(registry):
    home, dirs = registry
    before = {run_id: files_under(path) for run_id, path in dirs.items()}
    for run_id in BAD:
        proc = runs(home, "forget", run_id[:6])
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert f"forgot run {run_id}" in proc.stdout and "left as it is" in proc.stdout
    proc = runs(home, "ls", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]  # nothing bad is registered any more
    assert set(listing(proc)) == {GOOD, GONE}
    assert {run_id: files_under(path) for run_id, path in dirs.items()} == before
    assert (dirs["5" * 32] / "runs.db").is_fifo(), "the run's own files are not touched"


def test_forget_of_an_unknown_id_is_a_message_and_a_good_run_registers_again(registry):
    home, dirs = registry
    proc = runs(home, "forget", "f00d")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "trainer runs forget: error: no registered run has the id 'f00d'" in proc.stderr
    assert runs(home, "forget", GOOD[:4]).returncode == 0
    assert runs(home, "show", GOOD[:8]).returncode == 1  # no longer registered
    assert runs(home, "sync", str(dirs[GOOD])).returncode == 0
    assert runs(home, "show", GOOD[:8]).returncode == 0


def test_sync_refuses_a_directory_name_that_is_not_utf8(tmp_path):
    run = write_run(Path(os.fsdecode(bytes(tmp_path) + b"/run-\xff")), 3)
    proc = runs(tmp_path / "home", "sync", str(run))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "run-\\xff: not a UTF-8 name" in proc.stderr and "rename the directory" in proc.stderr
    assert sorted(p.name for p in run.iterdir()) == [
        "metrics.jsonl",
        "run_manifest.json",
        "training_state.json",
    ], "nothing written, not even the lock file"


def test_sync_refuses_a_run_name_holding_a_lone_surrogate(tmp_path):
    """JSON can spell a lone surrogate ("\\udcff"): the name is read, SQLite cannot hold
    it. Refused naming the file and the field, nothing recorded; the same run with a
    proper name syncs (two-sided)."""
    run = write_run(tmp_path / "run", 3)
    manifest = json.loads((run / "run_manifest.json").read_text())
    manifest["config"]["name"] = "bad-\udcff"
    (run / "run_manifest.json").write_text(json.dumps(manifest))  # ASCII: "\\udcff"
    proc = runs(tmp_path / "home", "sync", str(run))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    said = f'{run / "run_manifest.json"}: name "bad-\\xff" holds a lone surrogate'  # its byte
    assert said in proc.stderr, proc.stderr[-2000:]
    assert not (run / "runs.db").exists()
    manifest["config"]["name"] = "good"
    (run / "run_manifest.json").write_text(json.dumps(manifest))
    assert runs(tmp_path / "home", "sync", str(run)).returncode == 0


def test_sync_is_refused_while_another_process_writes_the_run_directory(tmp_path):
    run = write_run(tmp_path / "run", 3)
    with writer_lock(run, "a training run (this test)"):
        proc = runs(tmp_path / "home", "sync", str(run))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "trainer runs sync: error: " in proc.stderr
    assert f"another process is writing this run directory: pid {os.getpid()} " in proc.stderr
    assert not (run / "runs.db").exists(), "nothing written while the lock was held"
    done = runs(tmp_path / "home", "sync", str(run))  # released: it syncs
    assert done.returncode == 0, done.stderr[-2000:]
    assert (run / "runs.db").is_file()
