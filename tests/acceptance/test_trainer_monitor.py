"""`trainer monitor RUN_DIR`: --json for scripts, --once, the live view ending on a finished
run or Ctrl-C, bad input as one message (exit 1, usage errors exit 2), nothing in the run
directory touched, and a real tiny `trainer apply` run read back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from tests.unit.trainer.monitor_support import make_run, tree_fingerprint
from trainer import cli
from trainer.monitor import commands

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT_KEYS = {
    "run_dir",
    "status",
    "step",
    "last_step",
    "percent",
    "loss",
    "losses",
    "lr",
    "lrs",
    "grad_norm",
    "grad_norm_median",
    "tokens_per_s",
    "step_s",
    "eta_s",
    "elapsed_s",
    "updated_s_ago",
    "val_loss",
    "val_losses",
    "last_checkpoint",
    "alerts",
    "reason",
    "ended_at",
}


def test_json_prints_one_snapshot_object(tmp_path, capsys):
    run = make_run(tmp_path / "run", overrides={30: {"grad_norm": 9.0}})
    assert cli.main(["monitor", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == SNAPSHOT_KEYS
    assert (data["step"], data["last_step"], data["run_dir"]) == (30, 50, str(run))
    assert set(data["last_checkpoint"]) == {"step", "path", "age_s"}
    assert data["last_checkpoint"]["step"] == 20
    assert data["alerts"][0]["kind"] == "grad_norm_spike" and "message" in data["alerts"][0]


def test_once_draws_the_view_and_exits(tmp_path, capsys):
    assert cli.main(["monitor", str(make_run(tmp_path / "run")), "--once"]) == 0
    out = capsys.readouterr().out
    assert "30 / 50" in out and "checkpoint" in out


def test_live_view_of_a_finished_run_draws_once_and_exits_0(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(commands.time, "sleep", _must_not_sleep)
    assert cli.main(["monitor", str(make_run(tmp_path / "run", steps=50))]) == 0
    assert "50 / 50" in capsys.readouterr().out


def _must_not_sleep(seconds: float) -> None:
    raise AssertionError("an ended run needs no refresh")


@pytest.mark.parametrize("status", ["alert", "aborted", "signal", "early_stopping"])
def test_live_view_of_a_run_that_ended_early_draws_once_and_exits_0(
    tmp_path, capsys, monkeypatch, status
):
    monkeypatch.setattr(commands.time, "sleep", _must_not_sleep)
    run = make_run(tmp_path / "run", steps=30, end=(status, "stopped on purpose"))
    assert cli.main(["monitor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "30 / 50" in out and f"{status}: stopped on purpose" in out


def test_live_view_refreshes_until_the_run_finishes_or_ctrl_c(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path / "run", steps=49)
    sleeps = []

    def finish_run(seconds: float) -> None:
        sleeps.append(seconds)
        make_run(tmp_path / "done", steps=50)
        for name in ("metrics.jsonl", "training_state.json"):
            (run / name).write_bytes((tmp_path / "done" / name).read_bytes())

    monkeypatch.setattr(commands.time, "sleep", finish_run)
    assert cli.main(["monitor", str(run), "--interval", "0.25"]) == 0
    assert sleeps == [0.25] and "50 / 50" in capsys.readouterr().out

    def ctrl_c(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(commands.time, "sleep", ctrl_c)
    running = make_run(tmp_path / "running")
    assert cli.main(["monitor", str(running)]) == 0
    captured = capsys.readouterr()
    assert "30 / 50" in captured.out and "Traceback" not in captured.err


def test_no_mode_writes_into_the_run_directory(tmp_path, capsys, monkeypatch):
    run = make_run(tmp_path / "run")
    before = tree_fingerprint(run)
    monkeypatch.setattr(commands.time, "sleep", lambda s: (_ for _ in ()).throw(KeyboardInterrupt))
    for extra in (["--json"], ["--once"], []):
        assert cli.main(["monitor", str(run), *extra]) == 0
    assert tree_fingerprint(run) == before


@pytest.mark.parametrize("make", ["missing", "file", "empty"])
def test_not_a_run_directory_is_one_message_exit_1(tmp_path, capsys, make):
    path = tmp_path / "x"
    if make == "file":
        path.write_text("hi")
    if make == "empty":
        path.mkdir()
    before = tree_fingerprint(tmp_path)
    for extra in (["--json"], ["--once"], []):
        assert cli.main(["monitor", str(path), *extra]) == 1
        err = capsys.readouterr().err
        assert err.startswith("trainer monitor: error: ") and str(path) in err
        assert "Traceback" not in err
    assert tree_fingerprint(tmp_path) == before


def test_a_damaged_metrics_file_is_named_exit_1(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[4] = "garbage"
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert cli.main(["monitor", str(run), "--json"]) == 1
    assert "metrics.jsonl: line 5 is not JSON" in capsys.readouterr().err


def _monitor(*argv: str) -> subprocess.CompletedProcess:
    """`python -m trainer monitor ARGV` in a process of its own: a monitor that blocks on
    a FIFO fails the test by assertion after the timeout, and is killed."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "trainer", "monitor", *argv],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"trainer monitor {' '.join(argv)} blocked for {exc.timeout} s"
        ) from None


@pytest.mark.parametrize("name", ["training_state.json", "metrics.jsonl"])
def test_a_fifo_run_file_is_named_at_once_not_waited_on(tmp_path, name):
    """Issue 31: `trainer monitor --once` read a FIFO training_state.json and waited for a
    writer forever. Now: exit 1 at once, the file named as a FIFO; nothing else changes."""
    run = make_run(tmp_path / "run")
    (run / name).unlink()
    os.mkfifo(run / name)
    before = tree_fingerprint(run)
    for mode in ("--once", "--json"):
        proc = _monitor(str(run), mode)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        said = f"trainer monitor: error: {run / name}: a FIFO (named pipe), not a regular file"
        assert said in proc.stderr, proc.stderr[-2000:]
    assert tree_fingerprint(run) == before
    (run / name).unlink()  # two-sided: the run without its FIFO is read
    make_run(tmp_path / "whole")
    shutil.copy(tmp_path / "whole" / name, run / name)
    assert _monitor(str(run), "--json").returncode == 0


@pytest.mark.parametrize("interval", ["0", "-1", "nan", "soon"])
def test_interval_must_be_positive(tmp_path, capsys, interval):
    with pytest.raises(SystemExit) as exc:
        cli.main(["monitor", str(tmp_path), "--interval", interval])
    assert exc.value.code == 2
    assert "--interval" in capsys.readouterr().err


def test_a_real_tiny_run_read_back_with_json(tmp_path, capsys):
    data, tok = encode_test_corpus(tmp_path)
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=20, save_interval=4
    )
    out = tmp_path / "out"
    argv = ["apply", str(config), "--stop-after", "8", "--out", str(out), "--device", "cpu"]
    rc = cli.main(argv)
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    before = tree_fingerprint(out)
    assert cli.main(["monitor", str(out), "--json"]) == 0
    snap = json.loads(capsys.readouterr().out)
    assert tree_fingerprint(out) == before
    assert (snap["status"], snap["step"], snap["last_step"]) == ("finished", 8, 8)
    assert snap["percent"] == 100.0 and snap["eta_s"] == 0.0
    assert snap["last_checkpoint"]["step"] == 8
    assert Path(snap["last_checkpoint"]["path"]).parent == out / "checkpoints"
    assert snap["tokens_per_s"] > 0 and snap["step_s"] > 0 and snap["elapsed_s"] > 0
    assert len(snap["losses"]) == 8 and snap["loss"] == snap["losses"][-1]
    assert snap["alerts"] == []
    assert snap["reason"] == "step 8: last step 8 reached" and snap["ended_at"]
