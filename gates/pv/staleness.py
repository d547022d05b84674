"""Which PASS/PARTIAL gates stand on stale evidence, and why: the rule `pv status`, `gates
report` and the pipeline's gate table all count by.

    stale = staleness(contracts)          # gate id -> "tests/x.py changed since commit ..."

A gate is stale on its evidence (gates.provenance.freshness: a source it records changed
since) and on the mutation audit of the tests it rests on (an AUDIT-* finding about their
rows: stale, missing or not ok).
"""

from __future__ import annotations

from pathlib import Path

from gates.model.contract import Contract
from gates.provenance import freshness
from gates.pv.checks import audit_rules
from gates.pv.validate import find_root

#: gate id → why its evidence is stale (gates.provenance.freshness.describe)
Staleness = dict[str, str]


def staleness(contracts: list[Contract], root: Path | None = None) -> Staleness:
    """Why each stale PASS/PARTIAL gate is stale; fresh gates are absent. A gate is stale on
    its evidence (gates.provenance.freshness) and on the mutation audit of the tests it rests on: an
    audit row that is stale, missing or not ok (AUDIT-*) no longer proves those tests can
    fail, so the gate is not ship-ready on it."""
    out: Staleness = {}
    for c in contracts:
        project = root or find_root(c.path)
        audit_said = audit_findings_by_test(c, project)
        for g in c.gates:
            why = freshness.gate_staleness(project, g)
            if why is None and g.status in ("PASS", "PARTIAL"):
                said = [audit_said[t] for t in g.falsification_tests if t in audit_said]
                why = f"mutation audit: {said[0]}" if said else None
            if why is not None:
                out[g.id] = why
    return out


def audit_findings_by_test(c: Contract, root: Path) -> dict[str, str]:
    """Falsification test id -> the first AUDIT-* finding about it (its row, its mutants'),
    or about the whole audit file (then every bound test)."""
    out: dict[str, str] = {}
    bound = [t for t in c.falsification_tests if t.bound and t.test]
    for issue in audit_rules.audit_agrees(c, root):
        about = [t for t in bound if tuple(issue.where[: len(t.where)]) == tuple(t.where)]
        for t in about or bound:
            out.setdefault(t.id, f"{issue.rule}: {issue.message}")
    return out
