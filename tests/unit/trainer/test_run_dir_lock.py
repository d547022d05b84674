"""One writer per run directory (trainer/runfiles/lock.py, issue 31): a second process is
refused naming the first's pid, a dead holder is no obstacle, the lock is re-entrant in
one process and covers the run directories around the one locked, the lock file is
never followed through a symlink, and a reader's probe (writer_active) tells a held lock
from a dead holder's without writing anything or refusing a writer. Other processes are
real ones (a flock is per open file description, so only another process shows what
another writer sees)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (
    TensorSequences,
    loop_config,
    one_thread,  # noqa: F401 - autouse fixture
    random_rows,
)
from trainer.runfiles.lock import (
    RunDirLockedError,
    owning_run_dir,
    writer_active,
    writer_lock,
)
from trainer.runfiles.names import PIPELINE_STATE_FILE, RUN_MANIFEST_FILE, WRITER_LOCK_FILE
from trainer.train.loop import train
from trainer.train.options import RunOptions

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
    """By a writer (refused) and by a reader's probe (it cannot tell): neither opens the
    file the link points at."""
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
    assert writer_active(run) is None
    assert victim.read_text() == "precious"


def test_the_run_directory_owning_a_path_is_the_nearest_with_a_run_file(tmp_path):
    pipeline, train = tmp_path / "run", tmp_path / "run" / "train"
    train.mkdir(parents=True)
    assert owning_run_dir(pipeline / "export") is None
    (pipeline / PIPELINE_STATE_FILE).write_text("{}")
    assert owning_run_dir(pipeline / "export") == pipeline
    (train / RUN_MANIFEST_FILE).write_text("{}")
    assert owning_run_dir(train / "export" / "x") == train


def test_writer_active_tells_a_live_holder_from_a_killed_one_and_writes_nothing(tmp_path, request):
    run = tmp_path / "run"
    run.mkdir()
    assert writer_active(run) is False  # no lock file: nobody ever locked it here
    assert list(run.iterdir()) == [], "the probe created the lock file"
    holder = subprocess.Popen(
        [sys.executable, "-c", _TAKE, str(run), "hold"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    request.addfinalizer(holder.kill)  # never left holding the lock, whatever fails
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    record = (run / WRITER_LOCK_FILE).read_bytes()
    assert writer_active(run) is True
    holder.send_signal(signal.SIGKILL)  # the kernel drops its flock; its record stays
    holder.wait(timeout=60)
    holder.stdout.close()
    assert writer_active(run) is False
    assert (run / WRITER_LOCK_FILE).read_bytes() == record, "the probe wrote the lock file"
    with writer_lock(run, "trainer apply"):  # this process, through another descriptor
        assert writer_active(run) is True


def test_a_probe_in_the_instant_a_writer_locks_never_refuses_the_writer(tmp_path):
    """A reader's probe holds a shared lock for microseconds; a writer that tries then
    waits it out (here 20 ms, longer than any probe) instead of refusing. A holder that
    stays is still refused (test_a_second_writer_is_refused_naming_the_holders_pid)."""
    run = tmp_path / "run"
    with writer_lock(run, "trainer apply"):
        pass  # the lock file exists, nobody holds it
    probe = os.open(run / WRITER_LOCK_FILE, os.O_RDONLY)
    fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
    threading.Timer(0.02, os.close, args=(probe,)).start()
    try:
        with writer_lock(run, "trainer apply"):
            outcome = "locked"
    except RunDirLockedError as exc:
        outcome = str(exc)
    assert outcome == "locked"


def test_the_training_loop_holds_its_run_directorys_lock_from_start_to_end(tmp_path):
    """A library call of the loop, not only `trainer apply`: a run in progress has a holder
    (so `trainer runs` can tell it from a killed one) and a second writer is refused."""
    out = tmp_path / "run"
    seen = []

    class Watch:
        def after_step(self, step: int, record: dict) -> None:
            seen.append((writer_active(out), other_writer(out).returncode if step == 1 else 1))

    data = TensorSequences(random_rows(16, 8, seed=1))
    config = loop_config({"training.max_steps": 3, "training.epochs": 1})
    train(config, data, None, options=RunOptions(out_dir=out), hooks=Watch())
    assert seen == [(True, 1)] * 3  # held at every step; another writer refused
    assert writer_active(out) is False  # let go when the run ended
