"""The one way through a project's contracts: validate them, find a gate, check it, write its
evidence.

    usable = usable_contracts(paths, remeasuring=True)  # else ContractsUnusableError
    contract, gate = find_gate(usable.contracts, "GATE-X-001")  # else UnknownGateError
    result = check_gate(contract, gate, artifacts, command=[...], out=Path("x.json"))

`gates` and `pv` commands (gates/cli), a promotion (gates/promotion.py) and the reference
trainer's pipeline (trainer/pipeline/run.py) all go through here, and differ only in how
they report a refusal (a usage error, a refused promotion, a failed pipeline stage).

Light on imports: a `pv` command that only validates loads none of the measuring code
(gates.check is imported by check_gate, when a gate is checked).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gates.io.files import atomic_write_bytes
from gates.model.contract import Contract, Gate
from gates.model.findings import Finding, Report
from gates.model.rules import about_recorded_evidence
from gates.model.schema import did_you_mean
from gates.pv.validate import find_root, validate

if TYPE_CHECKING:
    from gates.check import CheckResult


class ContractsUnusableError(Exception):
    """Contracts that cannot be used: files that cannot be read (``unreadable``), or findings
    that are errors (``errors``, in file and line order; ``report``: every finding)."""

    def __init__(self, unreadable: list[str], errors: list[Finding], report: Report) -> None:
        self.unreadable, self.errors, self.report = unreadable, errors, report
        super().__init__("; ".join(unreadable) if unreadable else self.first_error)

    @property
    def first_error(self) -> str:
        f = self.errors[0]
        return f"{f.file}:{f.line}: {f.rule}: {f.message}"


class UnknownGateError(LookupError):
    """No contract given has the gate; the message suggests the nearest id."""

    def __init__(self, gate_id: str, known: list[str]) -> None:
        self.gate_id = gate_id
        guess = did_you_mean(gate_id, known)
        super().__init__(f"unknown gate {gate_id}" + (f"; did you mean {guess}?" if guess else ""))


@dataclass(frozen=True)
class UsableContracts:
    contracts: list[Contract]
    #: Errors about recorded evidence or the audit that a re-measurement goes on over.
    waived: int


def usable_contracts(
    paths: list[Path],
    *,
    root: Path | None = None,
    debug: bool = False,
    remeasuring: bool = False,
) -> UsableContracts:
    """The contracts at ``paths``, validated together; ContractsUnusableError when a file
    cannot be read or any finding is an error, since a status or a gate read from an invalid
    contract would be a guess. A re-measurement (``remeasuring``) goes on over errors about
    recorded evidence or the audit (rules.about_recorded_evidence): it is how they are
    fixed."""
    result = validate(paths, root=root, debug=debug)
    errors = [f for f in result.report.sorted() if f in result.report.errors]
    blocking = [f for f in errors if not (remeasuring and about_recorded_evidence(f.rule))]
    if result.unreadable or blocking:
        raise ContractsUnusableError(result.unreadable, blocking, result.report)
    return UsableContracts(result.contracts, waived=len(errors) - len(blocking))


def find_gate(contracts: list[Contract], gate_id: str) -> tuple[Contract, Gate]:
    """The contract holding ``gate_id`` and the gate; UnknownGateError when none does."""
    for contract in contracts:
        gate = contract.gate(gate_id)
        if gate is not None:
            return contract, gate
    raise UnknownGateError(gate_id, [g.id for c in contracts for g in c.gates])


def evidence_bytes(evidence: dict) -> bytes:
    """A check's evidence as its file holds it (a promotion commits these bytes)."""
    return (json.dumps(evidence, indent=2) + "\n").encode()


def write_evidence(path: Path, evidence: dict) -> None:
    """A check's evidence as JSON, replacing ``path`` atomically (never half-written)."""
    atomic_write_bytes(path, evidence_bytes(evidence))


def check_gate(
    contract: Contract,
    gate: Gate,
    artifacts: list[Path],
    *,
    command: list[str],
    root: Path | None = None,
    mutant: str | None = None,
    out: Path | None = None,
) -> CheckResult:
    """Re-measure ``gate`` (its bound tests and its measurement: gates.check.check) in
    its project (``root``, else the one holding the contract), writing its evidence to
    ``out`` whatever the verdict. RefusedError when it cannot be measured."""
    from gates.check import check  # noqa: PLC0415 - the measuring code, only when measuring

    result = check(
        root or find_root(contract.path), contract, gate, artifacts, command=command, mutant=mutant
    )
    if out is not None:
        write_evidence(out, result.evidence)
    return result
