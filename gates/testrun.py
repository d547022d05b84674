"""Run bound falsification tests (pytest node ids) in a subprocess, optionally mutated."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gates import mutants

#: pytest exit codes: 0 all passed, 1 some failed; anything else is not a verdict.
_OUTCOMES = {0: "passed", 1: "failed"}


@dataclass(frozen=True)
class TestOutcome:
    node: str
    mutant: str | None
    outcome: str  # passed | failed | error
    seconds: float
    output: str

    __test__ = False  # not a pytest test class, despite the name


def run_node(
    root: Path, node: str, mutant: str | None = None, timeout_s: float = 900
) -> TestOutcome:
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    # Derandomized: the same examples every run. Projects following shipgate's conftest
    # convention read HYPOTHESIS_PROFILE; under a mutant, shrinking is wasted time.
    env["HYPOTHESIS_PROFILE"] = "ci"
    if mutant:
        env[mutants.ENV_VAR] = mutant
        env["HYPOTHESIS_PROFILE"] = "audit"
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", node]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        outcome, output = _OUTCOMES.get(proc.returncode, "error"), proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        outcome, output = "error", f"timed out after {timeout_s} s"
    return TestOutcome(node, mutant, outcome, round(time.perf_counter() - start, 3), output)
