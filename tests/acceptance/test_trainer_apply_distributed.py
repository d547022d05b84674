"""`trainer apply --nproc 2` (torchrun, gloo on CPU; issue 8): a rank SIGKILLed mid-run
takes the run down with a non-zero exit within a timeout and corrupts no checkpoint; a
relaunch resumes from the newest one; a one-process resume of the two-rank checkpoint
is refused naming both world sizes, with nothing written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tree import files_under
from tests.unit.trainer.distributed_support import child_env, children_of, rank_of
from tests.unit.trainer.loop_support import encode_test_corpus, write_run_config
from trainer import cli
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint

ROOT = Path(__file__).resolve().parents[2]
EXIT_WITHIN_S = 90  # torchrun notices the dead worker and ends the others well before


def _apply(config: Path, out: Path, *extra: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "trainer", "apply", str(config), "--out", str(out)]
    return subprocess.Popen(
        [*argv, "--device", "cpu", "--nproc", "2", *extra],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _worker(launcher: int, rank: int, deadline: float) -> int:
    """The pid of ``rank``'s worker under the torchrun process ``launcher``."""
    while time.monotonic() < deadline:
        for pid in children_of(launcher):
            if rank_of(pid) == rank:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no worker of rank {rank} under pid {launcher}")


@pytest.mark.distributed
@pytest.mark.slow
def test_killed_rank_stops_the_run_and_a_relaunch_resumes(tmp_path, capsys):
    data, tok = encode_test_corpus(tmp_path)
    config = write_run_config(
        tmp_path / "run.yaml",
        data,
        tok,
        tmp_path / "unused",
        max_steps=20_000,
        epochs=4_000,
        save_interval=2,
    )
    out = tmp_path / "out"
    proc = _apply(config, out)  # execs torchrun: the pid is torchrun's
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        if any(step_of(p) >= 4 for p in checkpoint_dirs(out / "checkpoints")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    victim = _worker(proc.pid, 1, deadline)
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    try:
        _, stderr = proc.communicate(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"the run outlived a dead rank by {EXIT_WITHIN_S} s") from None
    assert proc.returncode != 0, "a run with a killed rank exited 0"
    assert time.monotonic() - killed_at < EXIT_WITHIN_S
    assert "rank" in stderr.lower(), stderr[-2000:]

    saved = checkpoint_dirs(out / "checkpoints")
    assert saved, "no checkpoint before the kill"
    for path in saved:
        assert inspect_checkpoint(path).valid, inspect_checkpoint(path).problems
    newest = step_of(saved[0])

    # A one-process resume of the two-rank checkpoint: refused, nothing written.
    before = files_under(out)
    capsys.readouterr()
    rc = cli.main(["apply", str(config), "--out", str(out), "--device", "cpu", "--resume"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "world size 2" in err and "world size 1" in err, err
    assert files_under(out) == before, "a refused resume wrote to the run directory"

    relaunch = _apply(config, out, "--resume", "--stop-after", str(newest + 2))
    stdout, stderr = relaunch.communicate(timeout=240)
    assert relaunch.returncode == 0, stderr[-3000:]
    assert f"resumed after step {newest}" in stdout, stdout
    assert step_of(checkpoint_dirs(out / "checkpoints")[0]) == newest + 2
