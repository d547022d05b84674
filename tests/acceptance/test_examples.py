"""The projects under examples/ — trainers written without shipgate in mind — work with the
framework from their own directories, as a user of each would run it: `pv validate`, the
project's own pytest suite, and `gates check` on every gate (bound tests + measurement).

Two-sided: one bound test of each project run under one of its mutants must fail with an
assertion (not a crash), so the green runs cannot be vacuous; and the committed evidence
records no absolute path. The full mutation audit of both runs in `make audit`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gates import mutants
from gates.pv.validate import validate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: example → (a bound test, one of its mutants): the positive control
CONTROLS = {
    "nanogpt": (
        "tests/test_accumulation.py::"
        "test_accumulated_gradient_is_the_token_mean_gradient_of_the_global_batch",
        "micro-loss-not-divided-by-grad-accum",
    ),
    "hf-trainer": (
        "tests/test_learning_rate.py::"
        "test_the_scheduled_lr_is_on_every_param_group_before_every_optimizer_step",
        "lr-applied-to-first-group-only",
    ),
    "hf-team-trainer": (
        "tests/test_token_mean.py::"
        "test_short_last_windows_and_label_smoothing_give_each_windows_token_mean",
        "last-partial-micro-batch-dropped",
    ),
}
#: seconds per command; each takes 5 to 30 on 2 busy cores
TIMEOUT_S = 300

pytestmark = pytest.mark.slow  # about a minute each: four measurements, a suite, a mutant


def test_every_example_has_a_positive_control():
    assert sorted(CONTROLS) == sorted(p.parent.name for p in EXAMPLES.glob("*/pyproject.toml"))


def run(example: Path, args: tuple[str, ...], mutant: str | None = None) -> tuple[int, str]:
    # Never inherit a mutant from an enclosing `gates audit`; never reach a model hub.
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    env["HF_HUB_OFFLINE"] = "1"
    if mutant:
        env[mutants.ENV_VAR] = mutant
    try:
        done = subprocess.run(
            [sys.executable, *args],
            cwd=example,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        return -1, f"timed out after {TIMEOUT_S} s\n{e.output or ''}"
    return done.returncode, done.stdout


def contracts_of(example: Path) -> list[str]:
    return sorted(str(p.relative_to(example)) for p in (example / "contracts").glob("*.yaml"))


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_example_validates_passes_its_suite_checks_its_gates_and_can_fail(name: str):
    example = EXAMPLES / name
    contracts = contracts_of(example)
    assert contracts, f"examples/{name} has no contracts"
    rc, out = run(example, ("-m", "gates.cli.pv", "validate", *contracts))
    assert rc == 0, out
    gates = [g.id for c in validate([example / c for c in contracts]).contracts for g in c.gates]
    assert gates, f"examples/{name} declares no gate"

    node, mutant = CONTROLS[name]
    # (command, mutant, the exit status it must give): two at a time, since each example
    # pins torch to one thread and the machine has two cores.
    runs = [(("-m", "pytest", "-q", "-p", "no:cacheprovider"), None, 0)]
    runs += [(("-m", "gates.cli.gates", "check", gate), None, 0) for gate in gates]
    runs += [(("-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", node), mutant, 1)]

    def outcome(args: tuple[str, ...], mutant: str | None, want: int) -> str | None:
        rc, out = run(example, args, mutant)
        if rc == want and (not mutant or "AssertionError" in out):
            return None
        under = f" under mutant {mutant}" if mutant else ""
        return f"{' '.join(args)}{under} exited {rc}, not {want}:\n{out[-3000:]}"

    with ThreadPoolExecutor(max_workers=2) as pool:
        failures = [f for f in pool.map(lambda r: outcome(*r), runs) if f]
    assert not failures, "\n\n".join(failures)


def test_the_team_trainers_first_compute_loss_fails_its_gate_and_the_fix_passes():
    # The third example's story as its README tells it: the team's first compute_loss (kept
    # as a mutant) FAILs GATE-TEAM-TRAINER-001, naming it; the Trainer as fixed PASSes.
    example, gate = EXAMPLES / "hf-team-trainer", "GATE-TEAM-TRAINER-001"
    first = (
        "-m",
        "gates.cli.gates",
        "check",
        gate,
        "--mutant",
        "compute-loss-mean-per-micro-batch",
    )
    (rc_first, out_first), (rc_fixed, out_fixed) = ThreadPoolExecutor(max_workers=2).map(
        lambda args: run(example, args), [first, ("-m", "gates.cli.gates", "check", gate)]
    )
    assert rc_first == 0 and f"{gate}: FAIL" in out_first, out_first  # 0: the gate caught it
    assert "caught" in out_first and "misses max_loss_grad_relative_error" in out_first, out_first
    assert rc_fixed == 0 and f"{gate}: PASS" in out_fixed, out_fixed


def strings(value: object):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_the_examples_evidence_is_there_and_records_no_absolute_path(name: str):
    example = EXAMPLES / name
    gates = [
        g for c in validate([example / c for c in contracts_of(example)]).contracts for g in c.gates
    ]
    measured = [g for g in gates if g.status != "PENDING"]
    assert measured and len(measured) == len(gates), "every example gate carries evidence"
    for gate in measured:
        record = json.loads((example / gate.evidence).read_text())
        absolute = [s for s in strings(record) if s.startswith("/")]
        assert not absolute, f"{gate.evidence} records {absolute}"
        assert record["git"]["dirty"] is False, f"{gate.evidence} was measured on a dirty tree"
