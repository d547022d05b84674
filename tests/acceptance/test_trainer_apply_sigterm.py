"""`trainer apply` receiving SIGTERM mid-run (FALSIFY-TRAIN-LOOP-014, the process view):
it finishes the step in progress, saves a checkpoint of exactly that step, exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import encode_test_corpus, write_run_config
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint

ROOT = Path(__file__).resolve().parents[2]
# The CLI with $SHIPGATE_MUTANT applied as the pytest plugin does, so a mutant under audit
# reaches the training process too.
_CLI = (
    "import sys; from pathlib import Path; from gates import mutants; "
    "mutants.apply_from_env(Path.cwd()); from trainer.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_it_and_exits_0(tmp_path):
    data, tok = encode_test_corpus(tmp_path)
    config = write_run_config(
        tmp_path / "run.yaml",
        data,
        tok,
        tmp_path / "unused",
        max_steps=20_000,
        epochs=2_000,
        save_interval=25,
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLI, "apply", str(config), "--out", str(out)],
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not checkpoint_dirs(out / "checkpoints") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checkpoint_dirs(out / "checkpoints"), "no periodic checkpoint within 120 s"
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr[-2000:]
    assert "(signal" in stdout, stdout
    steps = [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()]
    newest = checkpoint_dirs(out / "checkpoints")[0]
    assert step_of(newest) == steps[-1] < 20_000, (step_of(newest), steps[-1])
    assert inspect_checkpoint(newest).valid
