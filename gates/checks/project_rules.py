"""Checks of one contract against the project around it: bound tests, markers, evidence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from gates import files, project, semver
from gates.contract import Contract, Gate
from gates.evidence import MAX_EVIDENCE_BYTES, schema_errors
from gates.evidence import evidence_path as expected_evidence_path
from gates.findings import Issue
from gates.mutants import discover as discover_mutants
from gates.pytest_nodes import NodeIndex


def bound_tests_exist(c: Contract, nodes: NodeIndex) -> Iterator[Issue]:
    """TEST-NOT-FOUND: each bound node id names a real test function (checked statically)."""
    for t in c.falsification_tests:
        if t.bound and t.test:
            info = nodes.lookup(t.test)
            if not info.exists:
                yield Issue(
                    "TEST-NOT-FOUND", (*t.where, "test"), f"{t.id}: {info.reason}", at_key=False
                )


def ship_blocking_marked(c: Contract, nodes: NodeIndex) -> Iterator[Issue]:
    """SHIP-BLOCKING-MARKER: tests behind a ship-blocking gate carry the marker."""
    for gate in c.gates:
        if not gate.ship_blocking:
            continue
        for ref in gate.falsification_tests:
            t = c.test(ref)
            if t is None or not t.bound or not t.test:
                continue
            info = nodes.lookup(t.test)
            if info.exists and "ship_blocking" not in info.markers:
                yield Issue(
                    "SHIP-BLOCKING-MARKER",
                    (*t.where, "test"),
                    f"{t.test} backs ship-blocking {gate.id} but is not marked ship_blocking",
                    at_key=False,
                )


def ship_blocking_mutants(c: Contract, root: Path) -> Iterator[Issue]:
    """MUTANT-MISSING / MUTANT-UNIMPLEMENTED: a ship-blocking gate's bound tests name the
    bugs they catch, and each named bug has an implementation `gates audit` can inject."""
    blocking = {ref for g in c.gates if g.ship_blocking for ref in g.falsification_tests}
    try:
        implemented = discover_mutants(root)
        where = ", ".join(
            str(d.relative_to(root.resolve()))
            for d in project.load_config(root).directories["mutants"]
        )
    except project.ProjectConfigError as e:
        first = next((t for t in c.falsification_tests if t.id in blocking and t.mutants), None)
        if first is not None:
            yield Issue("PROJECT-CONFIG", (*first.where, "mutants"), str(e), at_key=False)
        return
    for t in c.falsification_tests:
        if t.id not in blocking or not t.bound:
            continue
        if not t.mutants:
            yield Issue(
                "MUTANT-MISSING",
                (*t.where, "id"),
                f"{t.id} backs a ship-blocking gate but names no mutant",
            )
        for m in t.mutants:
            if m.id not in implemented:
                yield Issue(
                    "MUTANT-UNIMPLEMENTED",
                    (*m.where, "id"),
                    f"mutant `{m.id}` of {t.id} has no @mutant implementation under "
                    f"{where or 'no directory'} ([tool.shipgate] mutants)",
                    at_key=False,
                )


def evidence_agrees(c: Contract, root: Path) -> Iterator[Issue]:
    """EVIDENCE-*: a gate's status is what its evidence file shows, and nothing more."""
    for gate in c.gates:
        yield from _gate_evidence(c, gate, root)


def _gate_evidence(c: Contract, gate: Gate, root: Path) -> Iterator[Issue]:
    needs = gate.status in ("PASS", "PARTIAL", "FAIL")
    if gate.evidence is None:
        if needs:
            yield Issue(
                "EVIDENCE-MISSING",
                (*gate.where, "status"),
                f"{gate.id} is {gate.status} but names no evidence file",
                f"promote with `gates promote {gate.id}` (writes "
                f"{expected_evidence_path(c.id, gate.id)})",
            )
        return
    where = (*gate.where, "evidence")
    expected = expected_evidence_path(c.id, gate.id)
    if gate.evidence != expected:
        yield Issue(
            "EVIDENCE-PATH",
            where,
            f"{gate.id}'s evidence is {gate.evidence}",
            f"evidence for {gate.id} lives at {expected}",
            at_key=False,
        )
    try:
        raw = files.read_regular(root / gate.evidence, MAX_EVIDENCE_BYTES)
    except FileNotFoundError:
        yield Issue(
            "EVIDENCE-MISSING", where, f"{gate.evidence} does not exist under {root}", at_key=False
        )
        return
    except OSError as exc:  # a FIFO, a device, a symlink loop, a directory, too large
        yield Issue(
            "EVIDENCE-INVALID", where, f"{gate.evidence}: {exc.strerror or exc}", at_key=False
        )
        return
    try:
        evidence = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        yield Issue("EVIDENCE-INVALID", where, f"{gate.evidence} is not UTF-8 text", at_key=False)
        return
    except json.JSONDecodeError as exc:
        yield Issue(
            "EVIDENCE-INVALID",
            where,
            f"{gate.evidence}:{exc.lineno}:{exc.colno}: not JSON ({exc.msg})",
            at_key=False,
        )
        return
    errors = schema_errors(evidence)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        yield Issue("EVIDENCE-INVALID", where, f"{gate.evidence}: {errors[0]}{more}", at_key=False)
        return
    yield from evidence_mismatches(c, gate, evidence, where)


def evidence_mismatches(c: Contract, gate: Gate, ev: dict, where: tuple) -> Iterator[Issue]:
    """EVIDENCE-MISMATCH findings for a parsed, schema-valid evidence record."""

    def mismatch(message: str) -> Issue:
        return Issue("EVIDENCE-MISMATCH", where, f"{gate.evidence}: {message}", at_key=False)

    if ev["contract"]["id"] != c.id:
        yield mismatch(f"records contract {ev['contract']['id']}, not {c.id}")
    if ev["gate"] != gate.id:
        yield mismatch(f"records gate {ev['gate']}, not {gate.id}")
    # Evidence records the contract version its promotion produced. Later minor/patch
    # releases keep it valid; a major release (a breaking change) voids it.
    versions = {e.version for e in c.changelog}
    recorded, current = semver.parse(ev["contract"]["version"]), semver.parse(c.metadata.version)
    if ev["contract"]["version"] not in versions:
        yield mismatch(
            f"records contract version {ev['contract']['version']}, "
            "which the changelog does not list"
        )
    elif recorded and current and (recorded > current or recorded.major != current.major):
        yield mismatch(f"records contract version {recorded}, incompatible with {current}")
    if gate.status in ("PASS", "PARTIAL", "FAIL") and ev["verdict"] != gate.status:
        yield mismatch(f"verdict is {ev['verdict']} but the gate says {gate.status}")
    if ev["threshold"] != gate.threshold.as_dict():
        yield mismatch(
            f"was measured against {ev['threshold']}, the gate now says {gate.threshold.as_dict()}"
        )
    if set(ev["falsification_tests"]) != set(gate.falsification_tests):
        yield mismatch(
            f"covers {sorted(ev['falsification_tests'])}, the gate rests on "
            f"{sorted(gate.falsification_tests)}"
        )
    measured = ev["measurements"].get(gate.threshold.metric)
    if measured is None:
        yield mismatch(f"has no measurement of {gate.threshold.metric}")
        return
    if measured["unit"] != gate.threshold.unit:
        yield mismatch(
            f"measures {gate.threshold.metric} in {measured['unit']}, "
            f"the threshold is in {gate.threshold.unit}"
        )
        return
    holds = gate.threshold.holds(measured["value"])
    if ev["verdict"] in ("PASS", "PARTIAL") and not holds:
        yield mismatch(
            f"verdict {ev['verdict']} but {gate.threshold.metric} = "
            f"{measured['value']:g} misses {gate.threshold}"
        )


def all_issues(c: Contract, root: Path, nodes: NodeIndex) -> Iterator[Issue]:
    yield from bound_tests_exist(c, nodes)
    yield from ship_blocking_marked(c, nodes)
    yield from ship_blocking_mutants(c, root)
    yield from evidence_agrees(c, root)
