"""One writer per run directory (trainer/runfiles/lock.py, issue 31): a second process is
refused naming the first's pid, a dead holder is no obstacle, the lock is re-entrant in
one process and covers the run directories around the one locked, and the lock file is
never followed through a symlink. Other processes are real ones (a flock is per open file
description, so only another process shows what another writer sees)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.runfiles.lock import RunDirLockedError, owning_run_dir, writer_lock
from trainer.runfiles.names import PIPELINE_STATE_FILE, RUN_MANIFEST_FILE, WRITER_LOCK_FILE

ROOT = Path(__file__).resolve().parents[3]
_TAKE = """
import sys, time
from pathlib import Path
from trainer.runfiles.lock import RunDirLockedError, writer_lock
try:
    with writer_lock(Path(sys.argv[1]), "test writer"):
        print("locked", flush=True)
        if sys.argv[2] == "hold":
            time.sleep(60)
except RunDirLockedError as exc:
    print(exc)
    sys.exit(1)
"""


def other_writer(directory: Path) -> subprocess.CompletedProcess:
    """Another process taking ``directory``'s lock and letting it go at once."""
    return subprocess.run(
        [sys.executable, "-c", _TAKE, str(directory), "release"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_second_writer_is_refused_naming_the_holders_pid(tmp_path):
    run = tmp_path / "run"
    with writer_lock(run, "trainer apply"):
        refused = other_writer(run)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "another process is writing this run directory" in refused.stdout
    assert f"pid {os.getpid()} (trainer apply, since " in refused.stdout
    taken = other_writer(run)  # released: the next writer gets it
    assert (taken.returncode, taken.stdout) == (0, "locked\n"), taken.stderr


def test_a_lock_left_by_a_killed_process_is_no_obstacle(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", _TAKE, str(run), "hold"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    with (
        pytest.raises(RunDirLockedError, match=f"pid {holder.pid} "),
        writer_lock(run, "trainer apply"),
    ):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=60)
    holder.stdout.close()
    assert f'"pid": {holder.pid}' in (run / WRITER_LOCK_FILE).read_text()  # its record stays
    with writer_lock(run, "trainer apply"):
        assert f'"pid": {os.getpid()}' in (run / WRITER_LOCK_FILE).read_text()


def test_the_lock_is_reentrant_in_one_process_and_held_until_the_outermost_ends(tmp_path):
    run = tmp_path / "run"
    with writer_lock(run, "trainer pipeline"):
        with writer_lock(run, "trainer apply"):
            pass
        assert other_writer(run).returncode == 1, "the inner release let the lock go"
    assert other_writer(run).returncode == 0


def test_a_directory_inside_a_run_directory_locks_that_one_too(tmp_path):
    """A pipeline's run directory (its pipeline.json) encloses train/: `trainer apply`
    there and a pipeline on the run directory exclude each other, both ways round."""
    run = tmp_path / "run"
    run.mkdir()
    (run / PIPELINE_STATE_FILE).write_text("{}")
    with writer_lock(run / "train", "trainer apply"):
        assert other_writer(run).returncode == 1
    with writer_lock(run, "trainer pipeline"):
        refused = other_writer(run / "train")
        assert refused.returncode == 1 and str(run) in refused.stdout
    elsewhere = tmp_path / "elsewhere"  # two-sided: unrelated directories never collide
    with writer_lock(run / "train", "trainer apply"):
        assert other_writer(elsewhere).returncode == 0


def test_a_symlink_in_place_of_the_lock_file_is_refused_and_not_followed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (run / WRITER_LOCK_FILE).symlink_to(victim)
    with (
        pytest.raises(RunDirLockedError, match="cannot open the run directory's writer lock"),
        writer_lock(run, "trainer apply"),
    ):
        pass
    assert victim.read_text() == "precious"


def test_the_run_directory_owning_a_path_is_the_nearest_with_a_run_file(tmp_path):
    pipeline, train = tmp_path / "run", tmp_path / "run" / "train"
    train.mkdir(parents=True)
    assert owning_run_dir(pipeline / "export") is None
    (pipeline / PIPELINE_STATE_FILE).write_text("{}")
    assert owning_run_dir(pipeline / "export") == pipeline
    (train / RUN_MANIFEST_FILE).write_text("{}")
    assert owning_run_dir(train / "export" / "x") == train
