"""Crash safety with real SIGKILL (issue 7, FALSIFY-TRAIN-LOOP-012/013): a training
process killed at arbitrary moments - mid-step or mid-save - three times, resumed from
its newest valid checkpoint each time, ends with the weights and AdamW state of the run
that was never killed; no partial checkpoint is ever chosen.

Each kill waits until the child has written a checkpoint past the one it resumed from
(so slow imports on a loaded machine cannot push a kill before training starts), then
sleeps a delay drawn from a seeded generator: the child saves every step, so most kills
land near or inside a save.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tests.unit.trainer.loop_support import one_thread  # noqa: F401 - autouse fixture
from tests.unit.trainer.resume_support import run_and_record, tensors_equal
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.load import latest_valid
from trainer.checkpoint.verify import inspect_checkpoint

ROOT = Path(__file__).resolve().parents[3]
STEPS = 640  # 8 steps per epoch: 80 epochs


def _child(spec: dict, out: Path) -> subprocess.Popen:
    spec_file = out.parent / f"{out.name}.spec.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    with open(out.parent / f"{out.name}.stderr", "wb") as err:  # the child keeps its own fd
        return subprocess.Popen(
            [sys.executable, "-m", "tests.unit.trainer.checkpoint_child", str(spec_file), str(out)],
            cwd=ROOT,
            env=os.environ.copy(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _wait_for_progress(proc: subprocess.Popen, ckpt: Path, past: int) -> None:
    """Block until a checkpoint newer than step `past` exists or the child has exited."""
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if any(step_of(path) > past for path in checkpoint_dirs(ckpt)):
            return
        time.sleep(0.05)


def _stderr(out: Path) -> str:
    return (out.parent / f"{out.name}.stderr").read_text(errors="replace")[-2000:]


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_the_uninterrupted_weights(tmp_path):
    base = {"max_steps": STEPS, "epochs": 80}
    run_and_record(base, tmp_path / "straight")
    expected = load_file(str(tmp_path / "straight" / "final.safetensors"))
    run = tmp_path / "run"
    ckpt = run / "checkpoints"
    spec = base | {"save_interval": 1, "run_dir": str(run)}
    delays = random.Random(2026)
    kills = 0
    progress: list[int] = []  # the newest valid checkpoint's step after each kill
    for attempt in range(12):
        chosen, _ = latest_valid(ckpt)
        proc = _child(spec | {"resume": "latest" if chosen else None}, tmp_path / f"run{attempt}")
        _wait_for_progress(proc, ckpt, step_of(chosen) if chosen else 0)
        time.sleep(delays.uniform(0.0, 1.5))  # somewhere in training, often inside a save
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            for path in checkpoint_dirs(ckpt):  # no final name ever holds a partial one
                report = inspect_checkpoint(path)
                assert report.valid, f"after kill {kills}: {path}: {report.problems}"
            newest, _ = latest_valid(ckpt)
            progress.append(step_of(newest) if newest else 0)
            if kills == 3:
                break
        else:
            assert proc.returncode == 0, _stderr(tmp_path / f"run{attempt}")
            break
    assert kills == 3, f"the child finished after {kills} kills; raise STEPS"
    assert 0 < progress[0] < progress[-1] < STEPS, f"kills landed outside training: {progress}"
    chosen, _ = latest_valid(ckpt)
    assert chosen is not None
    final = tmp_path / "final"
    proc = _child(spec | {"resume": "latest"}, final)
    assert proc.wait(timeout=300) == 0, _stderr(final)
    differ = tensors_equal(load_file(str(final / "final.safetensors")), expected)
    assert not differ, f"after {kills} SIGKILLs: final tensors differ: {differ[:5]}"
