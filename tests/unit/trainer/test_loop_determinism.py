"""FALSIFY-TRAIN-LOOP-011: the same seed on CPU gives the same run, bit for bit.

Two 30-step runs (seed 1234, crossing the epoch boundary at step 16, where the data
order is reshuffled) in separate processes with PYTHONHASHSEED 0 and 99. The children
apply $SHIPGATE_MUTANT themselves (tests/unit/trainer/loop_child.py), so the mutants of
this test reach both runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_two_processes_with_the_same_seed_train_bitwise_identically(tmp_path):
    children = []
    for hash_seed in ("0", "99"):
        out = tmp_path / f"run-{hash_seed}.json"
        # One intra-op thread each: the two children share the machine's cores.
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
        command = [sys.executable, "-m", "tests.unit.trainer.loop_child", str(out)]
        children.append((out, subprocess.Popen(command, cwd=ROOT, env=env)))
    for out, child in children:
        assert child.wait(timeout=300) == 0, f"{out.name}: the child run failed"
    first, second = (json.loads(out.read_text()) for out, _ in children)
    assert len(first["losses"]) == 30
    assert first["losses"] == second["losses"], "per-step losses differ between the runs"
    assert first["grad_norms"] == second["grad_norms"], "gradient norms differ"
    assert first["weights_sha256"] == second["weights_sha256"], "final weights differ"
