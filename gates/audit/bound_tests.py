"""`gates audit`: every bound falsification test passes on the real code and fails on each
of its mutants. A surviving mutant is a test that cannot catch the bug it names.

Each run is one pytest process (gates.runner.testrun), and its outcome is one of

- ``passed``; ``failed``: the first failing report is an assertion of the test
  (AssertionError, pytest.fail, "DID NOT RAISE") — for a mutant, *killed*;
- ``crashed``: pytest failed, but on anything else (a TypeError, an ImportError at collection,
  a fixture's error) — the mutant broke the code instead of injecting the bug, not a kill;
- ``error``: pytest did not get to a verdict (usage error, internal error, no test found);
  ``timeout``;
- ``seam-broken``: before any test ran, applying the mutant dry (gates.audit.seams) found a patched
  attribute missing or a replacement that does not accept the original's calls; not run.

Only ``passed`` (real code) and ``failed`` (mutant) are ok; anything else fails the audit.

Each mutant row also carries its ``status`` in the mutation-testing convention (Stryker,
PIT): ``killed`` (an assertion of the test failed), ``survived``, ``timeout``, and
``runtime-error`` — the mutant is not viable (crashed, error, seam-broken): it fails the
audit and names the seam or exception. Each row records the repository files its pytest run
read (gates.provenance.trace), so pv can tell when the committed audit no longer matches the code.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from jsonschema import Draft202012Validator

from gates.audit import measurements as measurement_audit
from gates.audit import seams
from gates.io import files, jsonfile
from gates.model import project
from gates.model.contract import Contract
from gates.provenance import audit_record, evidence, trace
from gates.runner import forkrun, testrun

AUDIT_SCHEMA = audit_record.AUDIT_SCHEMA
AUDIT_EVIDENCE = audit_record.AUDIT_EVIDENCE


#: Each run's outcome (module docstring); the audit schema's enum.
OUTCOMES = ("passed", "failed", "crashed", "error", "timeout", "seam-broken")


@dataclass(frozen=True)
class AuditRow:
    contract: str
    test_id: str
    node: str
    mutant: str | None  # None: the real code
    outcome: str  # one of OUTCOMES
    seconds: float
    failure: testrun.Failure | None = None  # the first failing report, when pytest failed
    seam_check: seams.SeamReport | None = None  # mutant rows: what the dry application found
    note: str = ""  # for error and crashed: the last line the run printed; shown, not recorded
    sources: tuple[dict, ...] = ()  # [{"path", "sha256"}] the run read (gates.provenance.trace)

    @property
    def ok(self) -> bool:
        """Real code must pass; a mutant must make the test fail on an assertion."""
        return self.outcome == ("passed" if self.mutant is None else "failed")

    @property
    def status(self) -> str | None:
        """A mutant row's status in the mutation-testing convention (module docstring)."""
        if self.mutant is None:
            return None
        return {"failed": "killed", "passed": "survived", "timeout": "timeout"}.get(
            self.outcome, "runtime-error"
        )

    @property
    def verdict(self) -> str:
        if self.mutant is None:
            return "passes" if self.ok else f"REAL CODE {self.outcome.upper()}"
        return {"failed": "killed", "passed": "SURVIVED"}.get(self.outcome, self.outcome.upper())

    def why(self) -> list[str]:
        """What the output says under a row: how it failed, or which seams broke."""
        if self.outcome == "seam-broken" and self.seam_check is not None:
            return self.seam_check.problems()
        if self.failure is not None:
            return [self.failure.describe()]
        said = [f"last line: {self.note}"] if self.note else []
        if self.outcome == "crashed":
            return ["pytest failed but recorded no failure (is the shipgate plugin loaded?)", *said]
        return [self.note] if self.note else []


def outcome_of(run: testrun.TestOutcome) -> str:
    """The audit's outcome of one pytest run (the module docstring's list)."""
    if run.timed_out:
        return "timeout"
    if run.outcome == "failed":
        return "failed" if run.failed_on_assertion else "crashed"
    return run.outcome


def select_tests(contracts: list[Contract], contract_id: str | None, gate_id: str | None):
    for c in contracts:
        if contract_id and c.id != contract_id:
            continue
        wanted = None
        if gate_id:
            gate = c.gate(gate_id)
            if gate is None:
                continue
            wanted = set(gate.falsification_tests)
        for t in c.falsification_tests:
            if t.bound and t.test and (wanted is None or t.id in wanted):
                yield c, t


#: A run, how long the last audit took for it (so the longest start first) and its group:
#: the test node or the gate it runs, whose runs are not started side by side while
#: another's can be (gates.runner.forkrun.run_pooled).
TimedTask = tuple[float, str, Callable[[forkrun.WarmInterpreter | None], None]]


def run_longest_first(root: Path, tasks: list[TimedTask], *, jobs: int, warm: bool) -> None:
    """Run ``tasks`` ``jobs`` at a time (gates.runner.forkrun.run_pooled), the longest by the
    last audit first, so the slowest is not left for last on one worker; in the given order
    otherwise."""
    ordered = sorted(tasks, key=lambda timed: -timed[0])
    forkrun.run_pooled(
        root,
        [task for _, _, task in ordered],
        jobs=jobs,
        warm=warm,
        groups=[group for _, group, _ in ordered],
    )


def finished(rows: list) -> list:
    """``rows`` once every planned run has filled its place."""
    assert all(row is not None for row in rows)
    return rows


def plan_audit(
    root: Path,
    contracts: list[Contract],
    *,
    contract_id: str | None = None,
    gate_id: str | None = None,
    progress=None,
    expected_seconds: dict[tuple[str, str | None], float] | None = None,
) -> tuple[list[AuditRow | None], list[TimedTask]]:
    """Every selected test on the real code and under each of its mutants, planned: the seams
    checked, a row for each test and mutant (None where a run will fill it) and the runs,
    each with its expected seconds (``(node, mutant)`` from the last audit), for
    :func:`run_longest_first`, alone or among the measurements' runs (gates.cli.gates_audit).
    Each run is a child forked from a warm interpreter when it is given one, else a fresh
    ``python -m pytest``; the rows are the same either way, only the seconds differ. A run
    fills its row in the contracts' order whatever order it ran in, and calls ``progress``."""
    selected = list(select_tests(contracts, contract_id, gate_id))
    # 1. Every seam of every selected mutant, checked once before any test runs.
    mutant_ids = list(dict.fromkeys(m.id for _, t in selected for m in t.mutants))
    checked = seams.check(root, mutant_ids)
    # 2. Each test on the real code, then under each mutant whose seams hold.
    rows: list[AuditRow | None] = []
    runs: list[tuple[int, Contract, object, str | None]] = []
    for c, t in selected:
        assert t.test is not None
        for mutant in [None, *(m.id for m in t.mutants)]:
            seam_check = checked[mutant] if mutant else None
            if seam_check is not None and seam_check.broken:
                row = AuditRow(c.id, t.id, t.test, mutant, "seam-broken", 0.0, None, seam_check)
                rows.append(row)
                if progress:
                    progress(row)
            else:
                rows.append(None)
                runs.append((len(rows) - 1, c, t, mutant))
    expected = expected_seconds or {}
    report = threading.Lock()

    def run_one(index: int, c: Contract, t, mutant: str | None, interpreter) -> None:
        with trace.recording(root, detached=True) as traced:
            run = testrun.run_node(root, t.test, mutant, traced=traced, warm=interpreter)
        outcome = outcome_of(run)
        rows[index] = AuditRow(
            c.id,
            t.id,
            t.test,
            mutant,
            outcome,
            run.seconds,
            run.failures[0] if run.failures else None,
            checked[mutant] if mutant else None,
            note_of(outcome, run.output),
            tuple(traced.sources()),
        )
        if progress:
            with report:
                progress(rows[index])

    tasks = [
        (expected.get((run[2].test, run[3]), 0.0), run[2].test, functools.partial(run_one, *run))
        for run in runs
    ]
    return rows, tasks


def expected_seconds(path: Path) -> dict[tuple[str, str | None], float]:
    """Seconds each run took in an earlier audit record at ``path``: ``(node, mutant)`` for a
    test run, ``(gate, mutant)`` for a measurement run (a gate id is never a test node);
    empty when there is none or it does not read (it only orders the runs)."""
    try:
        record = jsonfile.read_json(path, 64 * 1024 * 1024)
        seconds = {(r["node"], r["mutant"]): float(r["seconds"]) for r in record["rows"]}
        for r in record.get("measurements") or []:
            seconds[(r["gate"], r["mutant"])] = float(r["seconds"])
        return seconds
    except (OSError, jsonfile.JsonFileError, KeyError, TypeError, ValueError, AttributeError):
        return {}


def note_of(outcome: str, output: str) -> str:
    """What a row shows under it beside its failure: the last line a run printed when it
    ended in an error, or crashed (a crash pytest could not record - a segfault in C, an
    os._exit - leaves nothing else to go on)."""
    return _last_line(output) if outcome in ("error", "crashed") else ""


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def render_table(rows: list[AuditRow]) -> str:
    head = f"{'test':<24} {'mutant':<34} {'verdict':<18} {'seconds':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        cause = f"  {_short(r.failure.exception)}" if r.ok and r.failure else ""
        lines.append(
            f"{r.test_id:<24} {(r.mutant or '(real code)'):<34} {r.verdict:<18} "
            f"{r.seconds:>8.2f}{cause}"
        )
        if not r.ok:
            lines += [f"    {why}" for why in r.why()]
    mutant_rows = [r for r in rows if r.mutant]
    killed = sum(r.ok for r in mutant_rows)
    real_ok = all(r.ok for r in rows if r.mutant is None)
    not_killed = Counter(r.verdict for r in mutant_rows if not r.ok)
    lines.append(
        f"mutants killed: {killed} of {len(mutant_rows)}"
        + "".join(f", {n} {verdict}" for verdict, n in sorted(not_killed.items()))
        + "; real code "
        + ("passes every test" if real_ok else "FAILS a test")
    )
    unchecked = sorted(
        {
            s.target
            for r in mutant_rows
            if r.seam_check
            for s in r.seam_check.seams
            if s.status == seams.UNCHECKED
        }
    )
    if unchecked:
        lines.append(f"seams without a signature to check: {', '.join(unchecked)}")
    return "\n".join(lines)


def _short(exception: str | None) -> str:
    return (exception or "no exception").rsplit(".", 1)[-1]


# A path from the filesystem root: not preceded by a name character (so ``a/b`` and ``1/2``
# stay) nor by ``…`` (a path already cut, e.g. by gates.io.machine_paths.portable_command), up
# to the next space or quote-like character.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/…-])/[^\s'\"`,;()<>\[\]{}]+")


def portable(text: str, root: Path) -> str:
    """``text`` with nothing of this machine in it: paths under the project root made
    relative, any other absolute path cut to ``…/`` and its last part."""
    for prefix in dict.fromkeys((str(root.resolve()), str(root.absolute()))):
        text = text.replace(prefix + os.sep, "").replace(prefix, ".")
    return _ABSOLUTE_PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def _portable_strings(data, root: Path):
    if isinstance(data, str):
        return portable(data, root)
    if isinstance(data, dict):
        return {k: _portable_strings(v, root) for k, v in data.items()}
    if isinstance(data, list):
        return [_portable_strings(v, root) for v in data]
    return data


def _row_record(r: AuditRow, root: Path, index: dict[str, int]) -> dict:
    failure = None
    if r.failure is not None:  # its node is the row's
        failure = {k: v for k, v in asdict(r.failure).items() if k != "node"}
    seam_check = r.seam_check.to_json() if r.seam_check is not None else None
    return {
        "contract": r.contract,
        "test": r.test_id,
        "node": r.node,
        "mutant": r.mutant,
        "outcome": r.outcome,
        "verdict": r.verdict,
        "status": r.status,
        "seconds": r.seconds,
        "sources": sorted({index[f["path"]] for f in r.sources}),
        "failure": _portable_strings(failure, root),
        "seam_check": _portable_strings(seam_check, root),
    }


def _all_sources(rows: list[AuditRow]) -> list[dict]:
    """Every file some run read, once, sorted by path (rows point into it by index)."""
    union = {f["path"]: f for r in rows for f in r.sources}
    return [union[p] for p in sorted(union)]


def write_audit_evidence(
    root: Path,
    rows: list[AuditRow],
    command: list[str],
    out: Path,
    measured: list[measurement_audit.MeasurementRow] | None = None,
) -> None:
    sources = _all_sources(rows)
    index = {f["path"]: n for n, f in enumerate(sources)}
    record = {
        "kind": "mutation-audit",
        "captured_at": evidence.utc_now(),
        "host": evidence.host_info(project.load_config(root).packages),
        "git": evidence.git_info(root),
        "command": [portable(arg, root) for arg in command],
        "sources": sources,
        "contracts": sorted({r.contract for r in rows}),
        "rows": [_row_record(r, root, index) for r in rows],
        "mutants": sum(1 for r in rows if r.mutant),
        "killed": sum(r.ok for r in rows if r.mutant),
        "ok": all(r.ok for r in rows) and all(r.ok for r in measured or ()),
    }
    if measured is not None:
        record["measurements"] = [
            {**row, "reason": portable(row["reason"], root)}
            for row in measurement_audit.to_json(measured)
        ]
    schema = json.loads(AUDIT_SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator(schema).validate(record)  # a bug here must not write bad evidence
    files.atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
