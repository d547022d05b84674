"""`gates audit`: every bound falsification test passes on the real code and fails on each
of its mutants. A surviving mutant is a test that cannot catch the bug it names."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from jsonschema import Draft202012Validator

from gates import evidence, files, project, testrun
from gates.contract import Contract

AUDIT_SCHEMA = evidence.EVIDENCE_SCHEMA.parent / "audit.schema.json"


@dataclass(frozen=True)
class AuditRow:
    contract: str
    test_id: str
    node: str
    mutant: str | None  # None: the real code
    outcome: str  # passed | failed | error
    seconds: float

    @property
    def ok(self) -> bool:
        """Real code must pass; a mutant must make the test fail (not error)."""
        return self.outcome == ("passed" if self.mutant is None else "failed")

    @property
    def verdict(self) -> str:
        if self.mutant is None:
            return "passes" if self.ok else f"REAL CODE {self.outcome.upper()}"
        return "killed" if self.ok else ("SURVIVED" if self.outcome == "passed" else "ERROR")


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


def run_audit(
    root: Path,
    contracts: list[Contract],
    *,
    contract_id: str | None = None,
    gate_id: str | None = None,
    progress=None,
) -> list[AuditRow]:
    rows: list[AuditRow] = []
    for c, t in select_tests(contracts, contract_id, gate_id):
        assert t.test is not None
        for mutant in [None, *(m.id for m in t.mutants)]:
            out = testrun.run_node(root, t.test, mutant)
            row = AuditRow(c.id, t.id, t.test, mutant, out.outcome, out.seconds)
            rows.append(row)
            if progress:
                progress(row)
    return rows


def render_table(rows: list[AuditRow]) -> str:
    head = f"{'test':<24} {'mutant':<34} {'verdict':<18} {'seconds':>8}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.test_id:<24} {(r.mutant or '(real code)'):<34} {r.verdict:<18} {r.seconds:>8.2f}"
        )
    killed = sum(r.ok for r in rows if r.mutant)
    mutants = sum(1 for r in rows if r.mutant)
    real_ok = all(r.ok for r in rows if r.mutant is None)
    lines.append(
        f"mutants killed: {killed} of {mutants}; real code "
        + ("passes every test" if real_ok else "FAILS a test")
    )
    return "\n".join(lines)


def write_audit_evidence(root: Path, rows: list[AuditRow], command: list[str], out: Path) -> None:
    record = {
        "kind": "mutation-audit",
        "captured_at": evidence.utc_now(),
        "host": evidence.host_info(project.load_config(root).packages),
        "git": evidence.git_info(root),
        "command": command,
        "rows": [
            {
                "contract": r.contract,
                "test": r.test_id,
                "node": r.node,
                "mutant": r.mutant,
                "outcome": r.outcome,
                "verdict": r.verdict,
                "seconds": r.seconds,
            }
            for r in rows
        ],
        "mutants": sum(1 for r in rows if r.mutant),
        "killed": sum(r.ok for r in rows if r.mutant),
        "ok": all(r.ok for r in rows),
    }
    schema = json.loads(AUDIT_SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator(schema).validate(record)  # a bug here must not write bad evidence
    files.atomic_write_bytes(out, (json.dumps(record, indent=2) + "\n").encode())
