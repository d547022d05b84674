"""Checks of one contract against the project around it: bound tests, markers, evidence."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from gates.io import jsonfile, machine_paths
from gates.io.jsonpath import json_path
from gates.model import project, semver
from gates.model.contract import Contract, Gate
from gates.model.findings import Issue
from gates.mutants import discover as discover_mutants
from gates.provenance import freshness
from gates.provenance.evidence import MAX_EVIDENCE_BYTES, schema_errors
from gates.provenance.evidence import evidence_path as expected_evidence_path
from gates.provenance.git_history import CommitIndex
from gates.pv.checks import audit_rules
from gates.pv.pytest_nodes import NodeIndex


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


def evidence_agrees(c: Contract, root: Path, commits: CommitIndex | None = None) -> Iterator[Issue]:
    """EVIDENCE-*: a gate's status is what its evidence file shows, and nothing more."""
    commits = commits or CommitIndex(root)
    measured_in = _measurement_modules(root)
    for gate in c.gates:
        yield from _gate_evidence(c, gate, root, commits, measured_in)


def _measurement_modules(root: Path) -> dict[str, str]:
    """Gate id -> the module (path under ``root``) that measures it, as far as pv can tell
    without importing (a function decorated ``@measures("GATE-…")``)."""
    try:
        found = project.discover(root, "measurements")
    except project.ProjectConfigError:
        return {}  # PROJECT-CONFIG is reported where the mutants are looked up
    return {gate_id: at.rsplit(":", 1)[0] for gate_id, at in found.items()}


def _gate_evidence(
    c: Contract, gate: Gate, root: Path, commits: CommitIndex, measured_in: dict[str, str]
) -> Iterator[Issue]:
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
        evidence = jsonfile.read_json(root / gate.evidence, MAX_EVIDENCE_BYTES)
    except FileNotFoundError:
        yield Issue(
            "EVIDENCE-MISSING", where, f"{gate.evidence} does not exist under {root}", at_key=False
        )
        return
    except jsonfile.JsonFileError as exc:  # special, too large, not UTF-8, not JSON, too deep
        yield Issue("EVIDENCE-INVALID", where, exc.located(gate.evidence), at_key=False)
        return
    errors = schema_errors(evidence)
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        yield Issue("EVIDENCE-INVALID", where, f"{gate.evidence}: {errors[0]}{more}", at_key=False)
        return
    yield from evidence_mismatches(c, gate, evidence, where)
    yield from _evidence_honesty(
        c, gate, evidence, where, root=root, commits=commits, measured_in=measured_in
    )


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
    measured_against = ev.get("thresholds", [ev["threshold"]])
    wanted = [t.as_dict() for t in gate.thresholds]
    if ev["threshold"] != wanted[0] or measured_against != wanted:
        yield mismatch(f"was measured against {measured_against}, the gate now says {wanted}")
    if set(ev["falsification_tests"]) != set(gate.falsification_tests):
        yield mismatch(
            f"covers {sorted(ev['falsification_tests'])}, the gate rests on "
            f"{sorted(gate.falsification_tests)}"
        )
    for run in ev.get("tests") or []:
        bound = c.test(run.get("id", ""))
        if bound is not None and bound.test and run.get("node") != bound.test:
            # a node the contract does not bind (renamed, or run from another contract)
            yield mismatch(f"ran {run.get('node')} for {run['id']}, which is bound to {bound.test}")
    for t in gate.thresholds:
        measured = ev["measurements"].get(t.metric)
        if measured is None:
            yield mismatch(f"has no measurement of {t.metric}")
        elif measured["unit"] != t.unit:
            yield mismatch(
                f"measures {t.metric} in {measured['unit']}, the threshold is in {t.unit}"
            )
        elif ev["verdict"] in ("PASS", "PARTIAL") and not t.holds(measured["value"]):
            yield mismatch(
                f"verdict {ev['verdict']} but {t.metric} = {measured['value']:g} misses {t}"
            )


def _evidence_honesty(
    c: Contract,
    gate: Gate,
    ev: dict,
    where: tuple,
    *,
    root: Path,
    commits: CommitIndex,
    measured_in: dict[str, str],
) -> Iterator[Issue]:
    """What a schema-valid evidence record must show about itself, checked without
    re-measuring anything (issue 19): each rule its own checker, so that removing any one
    of them is noticed by a fixture."""
    yield from evidence_tests_passed(c, gate, ev, where)
    yield from evidence_dirty_overridden(gate, ev, where)
    yield from evidence_commit_known(gate, ev, where, commits)
    yield from evidence_sources_at_commit(gate, ev, where, commits)
    yield from evidence_artifacts_exist(gate, ev, where, root)
    yield from evidence_machine_paths(gate, ev, where)
    yield from evidence_measured(gate, ev, where, measured_in)


def evidence_tests_passed(c: Contract, gate: Gate, ev: dict, where: tuple) -> Iterator[Issue]:
    """EVIDENCE-TESTS-NOT-PASSED: PASS/PARTIAL evidence records a run of every bound test of
    the gate, each ``passed``. FAIL evidence may record anything; a test the contract does
    not bind cannot have run (GATE-UNBOUND-TEST says so)."""
    if ev["verdict"] not in ("PASS", "PARTIAL"):
        return
    tests = ev.get("tests") or []
    problems = [
        f"{t['id']} ({t['node']}) {t['outcome']}" for t in tests if t["outcome"] != "passed"
    ]
    recorded = {t["id"] for t in tests}
    bound = [ref for ref in gate.falsification_tests if (t := c.test(ref)) and t.bound]
    unrecorded = [ref for ref in bound if ref not in recorded]
    if not tests:
        problems.append("no test run is recorded")
    elif unrecorded:
        problems.append(f"no run of {', '.join(unrecorded)} is recorded")
    if problems:
        yield Issue(
            "EVIDENCE-TESTS-NOT-PASSED",
            where,
            f"{gate.evidence}: verdict {ev['verdict']} but " + "; ".join(problems),
            at_key=False,
        )


def evidence_dirty_overridden(gate: Gate, ev: dict, where: tuple) -> Iterator[Issue]:
    """EVIDENCE-DIRTY: a measurement over uncommitted changes says why it was allowed."""
    git = ev["git"]
    reason = (git.get("dirty_override") or {}).get("reason", "")
    if git["dirty"] and not reason.strip():
        yield Issue(
            "EVIDENCE-DIRTY",
            where,
            f"{gate.evidence}: measured over uncommitted changes (git.dirty) with no "
            "git.dirty_override.reason",
            at_key=False,
        )


def evidence_commit_known(
    gate: Gate, ev: dict, where: tuple, commits: CommitIndex
) -> Iterator[Issue]:
    """EVIDENCE-COMMIT-UNKNOWN: the recorded commit is in the project's git history. Not
    checked (no finding) without git, outside a work tree, or in a shallow clone."""
    sha = ev["git"]["commit"]
    if commits.exists(sha) is False:
        yield Issue(
            "EVIDENCE-COMMIT-UNKNOWN",
            where,
            f"{gate.evidence}: git.commit {sha} is not a commit of this repository",
            at_key=False,
        )


def evidence_sources_at_commit(
    gate: Gate, ev: dict, where: tuple, commits: CommitIndex
) -> Iterator[Issue]:
    """EVIDENCE-NOT-AT-COMMIT: PASS/PARTIAL evidence measured over a clean tree (``dirty:
    false``) at ``git.commit`` read exactly the files that commit holds, so every recorded
    source (and every artifact's build source) hashes as that file does in that commit
    (gates.provenance.git_history, one batched git call for all evidence). It catches evidence
    pointed at another real commit and ``dirty: false`` recorded over changes. Evidence taken over a
    dirty tree says so (EVIDENCE-DIRTY wants its reason) and is not compared. Not checked
    where git cannot tell (no git, no work tree, a shallow clone, an unknown commit)."""
    if ev["verdict"] not in ("PASS", "PARTIAL") or ev["git"].get("dirty") is not False:
        return
    sha = ev["git"]["commit"]
    listed = [(s["path"], s["sha256"]) for s, _ in freshness.recorded_sources(ev)]
    differ = []
    for path, recorded in dict.fromkeys(listed):
        at_commit = commits.file_sha256(sha, path)
        if at_commit is None:
            continue  # cannot tell
        if at_commit != recorded:
            differ.append(f"{path} ({'not in that commit' if at_commit == '' else 'differs'})")
    if differ:
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        yield Issue(
            "EVIDENCE-NOT-AT-COMMIT",
            where,
            f"{gate.evidence}: measured at commit {sha[:12]} over a clean tree, yet "
            f"{', '.join(differ[:3])}{more}: it was not measured at that commit",
            at_key=False,
        )


def evidence_artifacts_exist(gate: Gate, ev: dict, where: tuple, root: Path) -> Iterator[Issue]:
    """EVIDENCE-ARTIFACT-MISSING: an artifact named by path exists under the project root,
    unless its entry records a recipe that rebuilds it."""
    base = root.resolve()
    for i, artifact in enumerate(ev.get("artifacts", [])):
        path = artifact.get("path")
        if not path or "recipe" in artifact:
            continue
        full = root / path
        inside = Path(os.path.realpath(full)).is_relative_to(base)
        if not (inside and os.path.exists(full)):
            yield Issue(
                "EVIDENCE-ARTIFACT-MISSING",
                where,
                f"{gate.evidence}: {json_path(('artifacts', i, 'path'))} {path} "
                + ("does not exist" if inside else "is not under the project root")
                + " and records no recipe",
                at_key=False,
            )


def evidence_machine_paths(gate: Gate, ev: dict, where: tuple) -> Iterator[Issue]:
    """EVIDENCE-ABSOLUTE-PATH: no string (or key) of the evidence is an absolute path. The
    first few are named one by one, the rest counted, so a file full of them is one screen."""
    found = list(machine_paths.absolute_paths(ev))
    for i, (at, token) in enumerate(found[:_PATHS_NAMED]):
        more = len(found) - _PATHS_NAMED
        yield Issue(
            "EVIDENCE-ABSOLUTE-PATH",
            where,
            f"{gate.evidence}: {json_path(at)} records the absolute path {token}"
            + (f" (and {more} more)" if more > 0 and i == _PATHS_NAMED - 1 else ""),
            at_key=False,
        )


def evidence_measured(
    gate: Gate, ev: dict, where: tuple, measured_in: dict[str, str]
) -> Iterator[Issue]:
    """EVIDENCE-NOTHING-MEASURED: a PASS/PARTIAL records the files its run read
    (gates.provenance.trace), and its measurement's own module is always among them
    (gates.check adds it), so sources without it say nothing was measured: written by
    hand, or copied from another gate's. Checked where pv finds the measurement without
    importing (``measured_in``: a function decorated ``@measures("GATE-…")``); empty sources
    are EVIDENCE-STALE's."""
    module = measured_in.get(gate.id)
    if module is None or ev["verdict"] not in ("PASS", "PARTIAL") or not ev.get("sources"):
        return
    if module not in {s.get("path") for s in ev["sources"] if isinstance(s, dict)}:
        yield Issue(
            "EVIDENCE-NOTHING-MEASURED",
            where,
            f"{gate.evidence}: its sources do not include {module}, where {gate.id} is "
            "measured: nothing says this measurement ran",
            at_key=False,
        )


#: How many absolute paths of one evidence file EVIDENCE-ABSOLUTE-PATH names one by one.
_PATHS_NAMED = 3


def evidence_fresh(c: Contract, root: Path) -> Iterator[Issue]:
    """EVIDENCE-STALE: a PASS/PARTIAL gate's evidence still hashes the same source files
    (gates.provenance.freshness); the finding sits at the gate's status. Unreadable or invalid
    evidence is left to the EVIDENCE-* rules above."""
    for gate in c.gates:
        why = freshness.gate_staleness(root, gate)
        if why is not None:
            yield Issue(
                "EVIDENCE-STALE",
                (*gate.where, "status"),
                f"{gate.id} is {gate.status} on stale evidence {gate.evidence}: {why}",
                at_key=False,
            )


def all_issues(
    c: Contract, root: Path, nodes: NodeIndex, commits: CommitIndex | None = None
) -> Iterator[Issue]:
    yield from bound_tests_exist(c, nodes)
    yield from ship_blocking_marked(c, nodes)
    yield from ship_blocking_mutants(c, root)
    yield from evidence_agrees(c, root, commits)
    yield from evidence_fresh(c, root)
    yield from audit_rules.audit_agrees(c, root)
