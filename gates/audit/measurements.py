"""`gates audit`'s second half: mutants against measurements. A gate's measurement must FAIL
on the bugs of its invariant, not only its bound tests; a measurement that passes a bug its
tests catch is a verdict that can be wrong.

For every gate with a measurement, each mutant of its bound tests is measured as
`gates check GATE --mutant ID` measures it (gates.check.check: the mutant applied in the
measuring process and named to its children, no bound test run), each run a fork of a warm
interpreter (gates.runner.forkrun) or a fresh process. The run is gates/cli/audit_measurement.py,
that command less its validation of the project: the audit validated these contract files
before its first run, and `gates check` spent 1.5 s of its 2 s of fixed cost doing it again
each time. A row's outcome is one of

- ``caught``: the gate FAILed on a threshold;
- ``survived``: the gate still PASSes (or is PARTIAL) on the bug;
- ``crashed``: the check ended any other way (an exception, a refusal, a timeout): no verdict;
- ``exempt``: not run, for the reason the contract gives (``measurement_exempt``: the
  measurement does not measure what this mutant breaks), or because the gate is measured
  on an artifact built in another process (which the mutant does not reach), or times the
  machine (it runs alone, never beside other runs).

Only ``caught`` and ``exempt`` are ok. An exemption naming no mutant of the gate's bound
tests is an error (``invalid``): it would exempt nothing and hide a typo.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gates import measure, mutants
from gates.model.contract import Contract, Gate
from gates.runner import forkrun

OUTCOMES = ("caught", "survived", "crashed", "exempt", "invalid")
TIMEOUT_S = 900.0
#: The command each run is (its ``main(args)`` in a fork, ``python -m`` it without one).
COMMAND = "gates.cli.audit_measurement"


@dataclass(frozen=True)
class MeasurementRow:
    contract: str
    gate: str
    mutant: str
    outcome: str  # one of OUTCOMES
    seconds: float
    reason: str = ""  # exempt: why; survived: the verdict; crashed, invalid: what happened

    @property
    def ok(self) -> bool:
        return self.outcome in ("caught", "exempt")


@dataclass(frozen=True)
class _Run:
    index: int
    contract: Contract
    gate: Gate
    mutant: str


def _gate_mutants(c: Contract, gate: Gate) -> list[str]:
    """The mutants of ``gate``'s bound tests, each once, in the contract's order."""
    return list(
        dict.fromkeys(
            m.id for ref in gate.falsification_tests if (t := c.test(ref)) for m in t.mutants
        )
    )


def _not_run_reason(measurer: measure.Measurer) -> str | None:
    if measurer.artifact is not None:
        return (
            f"measured on a {measurer.artifact} built in another process, which the mutant "
            "does not reach"
        )
    if measurer.timed:
        return "times the machine: measured alone, never beside other runs"
    return None


def plan(
    root: Path, contracts: list[Contract], contract_id: str | None, gate_id: str | None
) -> tuple[list[MeasurementRow | None], list[_Run]]:
    """One row per (gate, mutant) selected: filled for what is not run, None for a run."""
    rows: list[MeasurementRow | None] = []
    runs: list[_Run] = []
    for c in contracts:
        if contract_id and c.id != contract_id:
            continue
        for gate in c.gates:
            if gate_id and gate.id != gate_id:
                continue
            measurer = measure.lookup(gate.id, root)
            if measurer is None:
                continue
            ids = _gate_mutants(c, gate)
            exempt = dict(gate.measurement_exempt)
            for mutant in exempt.keys() - set(ids):
                why = f"measurement_exempt names {mutant}, not a mutant of its bound tests"
                rows.append(MeasurementRow(c.id, gate.id, mutant, "invalid", 0.0, why))
            not_run = _not_run_reason(measurer)
            for mutant in ids:
                why = exempt.get(mutant) or not_run
                if why:
                    rows.append(MeasurementRow(c.id, gate.id, mutant, "exempt", 0.0, why))
                else:
                    rows.append(None)
                    runs.append(_Run(len(rows) - 1, c, gate, mutant))
    return rows, runs


def _classify(run: _Run, code: int, out: str, err: str, timed_out: bool) -> tuple[str, str]:
    if timed_out:
        return "crashed", f"timed out after {TIMEOUT_S:.0f} s"
    if code == 0 and f"mutant {run.mutant}: caught" in out:
        return "caught", ""
    if code == 1 and f"mutant {run.mutant}: SURVIVED" in out:
        verdict = next(line for line in out.splitlines() if "SURVIVED" in line)
        return "survived", verdict.split(": ", 1)[1]
    last = [line.strip() for line in (err + "\n" + out).splitlines() if line.strip()]
    return "crashed", f"exit {code}: {last[-1] if last else 'no output'}"


def _measure(root: Path, run: _Run, interpreter: forkrun.WarmInterpreter | None) -> MeasurementRow:
    args = [run.gate.id, run.mutant, str(run.contract.path), str(root)]
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    started = time.perf_counter()
    if interpreter is not None:
        with tempfile.TemporaryDirectory(prefix="shipgate-measure-") as tmp:
            done = interpreter.run(args, env, Path(tmp), TIMEOUT_S, module=COMMAND)
        code, out, err, timed_out = done.returncode, done.stdout, done.stderr, done.timed_out
    else:
        try:
            proc = subprocess.run(
                [sys.executable, "-m", COMMAND, *args],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
            code, out, err, timed_out = proc.returncode, proc.stdout, proc.stderr, False
        except subprocess.TimeoutExpired:
            code, out, err, timed_out = -1, "", "", True
    outcome, reason = _classify(run, code, out, err, timed_out)
    seconds = time.perf_counter() - started
    return MeasurementRow(run.contract.id, run.gate.id, run.mutant, outcome, seconds, reason)


def plan_measurement_audit(
    root: Path,
    contracts: list[Contract],
    *,
    contract_id: str | None = None,
    gate_id: str | None = None,
    progress: Callable[[MeasurementRow], None] | None = None,
    expected_seconds: dict[tuple[str, str | None], float] | None = None,
) -> tuple[list[MeasurementRow | None], list[tuple[float, Callable]]]:
    """Every selected gate's measurement under each mutant of its bound tests, planned: a row
    for each (gate, mutant), None where a run will fill it, and the runs, each with its
    expected seconds (``(gate, mutant)`` from the last audit); ``progress`` is called for
    each row not run now and by each run as it finishes."""
    rows, runs = plan(root, contracts, contract_id, gate_id)
    expected = expected_seconds or {}
    report = threading.Lock()
    if progress:
        for row in rows:
            if row is not None:
                progress(row)

    def measure_one(run: _Run, interpreter: forkrun.WarmInterpreter | None) -> None:
        rows[run.index] = row = _measure(root, run, interpreter)
        if progress:
            with report:
                progress(row)

    tasks = [
        (
            expected.get((run.gate.id, run.mutant), 0.0),
            run.gate.id,
            lambda interpreter, run=run: measure_one(run, interpreter),
        )
        for run in runs
    ]
    return rows, tasks


def render_table(rows: list[MeasurementRow]) -> str:
    head = f"{'gate':<26} {'mutant':<40} {'outcome':<9} {'seconds':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        shown = r.outcome if r.ok else r.outcome.upper()
        lines.append(f"{r.gate:<26} {r.mutant:<40} {shown:<9} {r.seconds:>8.2f}")
        if r.reason and (not r.ok or r.outcome == "exempt"):
            lines.append(f"    {r.reason}")
    run = [r for r in rows if r.outcome != "exempt"]
    caught = sum(r.outcome == "caught" for r in run)
    lines.append(
        f"measurements failing on their mutants: {caught} of {len(run)} run, "
        f"{len(rows) - len(run)} exempt"
    )
    return "\n".join(lines)


def to_json(rows: list[MeasurementRow]) -> list[dict]:
    return [
        {
            "contract": r.contract,
            "gate": r.gate,
            "mutant": r.mutant,
            "outcome": r.outcome,
            "seconds": round(r.seconds, 3),
            "reason": r.reason,
        }
        for r in rows
    ]
