"""`gates promote` / `demote`: a gate's status is a measurement, never a hand edit.

promote — check (gates.check), then write the evidence and edit the contract (one atomic
          commit, under the project's lock).
demote  — the reverse, with the reason in the changelog.

Refusals raise :class:`RefusedError` (exit 1) and leave every file untouched.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from gates.check import CheckResult, check
from gates.io import atomic, files
from gates.io.machine_paths import portable_command
from gates.model.contract import Contract, Gate
from gates.model.source import MAX_SOURCE_BYTES
from gates.provenance import evidence
from gates.pv import contract_edit
from gates.pv.checks.project_rules import evidence_mismatches
from gates.refusal import RefusedError
from gates.service import (
    ContractsUnusableError,
    UnknownGateError,
    evidence_bytes,
    find_gate,
    usable_contracts,
)


def load_gate(root: Path, contract_path: Path, gate_id: str) -> tuple[Contract, Gate]:
    """The contract at ``contract_path`` and its gate, refused unless the contract validates;
    findings about recorded evidence do not stop a re-measurement: it is how they are fixed."""
    try:
        contract = usable_contracts([contract_path], root=root, remeasuring=True).contracts[0]
    except ContractsUnusableError as exc:
        if exc.unreadable:
            raise RefusedError(str(exc)) from None
        raise RefusedError(f"{exc} (the contract must pass `pv validate` first)") from None
    try:
        return find_gate([contract], gate_id)
    except UnknownGateError:
        raise RefusedError(f"{contract_path} has no gate {gate_id}") from None


def promote(
    root: Path,
    contract_path: Path,
    gate_id: str,
    artifacts: list[Path],
    *,
    to: str = "PASS",
    allow_dirty: str | None = None,
    command: list[str] | None = None,
    today: dt.date | None = None,
) -> CheckResult:
    command = command or portable_command(sys.argv[0], sys.argv[1:], root)
    if allow_dirty is not None and not allow_dirty.strip():
        raise RefusedError("--allow-dirty must say why (a reason recorded in the evidence)")
    with atomic.locked(root / atomic.LOCK_NAME):
        _recover(root)
        # Read the contract only once the lock is held: a concurrent promotion's edit is kept.
        contract, gate = load_gate(root, contract_path, gate_id)
        ev_rel = evidence.evidence_path(contract.id, gate.id)
        _require_inside(root, contract_path, root / ev_rel)  # before minutes of measuring
        git = evidence.git_info(root)
        if git["dirty"] and not allow_dirty:
            raise RefusedError(
                f"the project under {root} has uncommitted changes (git status); commit "
                "them, or pass --allow-dirty REASON (recorded in the evidence)"
            )
        new_version = contract_edit.next_version(contract.metadata.version)
        result = check(
            root,
            contract,
            gate,
            artifacts,
            command=command,
            contract_version=new_version,
            want=to,
            allow_dirty=allow_dirty,
            require_build_record=True,
        )
        if result.verdict != to:
            raise RefusedError(
                f"{gate_id} is {result.verdict}, not {to}:\n  - " + "\n  - ".join(result.reasons)
            )
        text = _read_contract(contract_path)
        measured = result.evidence["measurements"][gate.threshold.metric]
        new_text, _ = contract_edit.apply(
            text,
            contract_path,
            contract_edit.GateEdit(
                gate_id=gate.id,
                status=to,
                evidence=ev_rel,
                today=today or _utc_today(),
                changelog_text=f"{gate.id} promoted to {to}: {gate.threshold.metric} = "
                f"{measured['value']:g} {measured['unit']} ({gate.thresholds_text()}); "
                f"evidence {ev_rel}.",
            ),
        )
        _verify_pair(root, contract_path, new_text, gate.id, result.evidence)
        _commit(
            root,
            {
                root / ev_rel: evidence_bytes(result.evidence),
                contract_path: new_text.encode(),
            },
        )
        return result


def demote(
    root: Path, contract_path: Path, gate_id: str, reason: str, *, today: dt.date | None = None
) -> str:
    if not reason.strip():
        raise RefusedError("--reason must say why the gate is demoted")
    with atomic.locked(root / atomic.LOCK_NAME):
        _recover(root)
        _, gate = load_gate(root, contract_path, gate_id)
        if gate.status == "PENDING":
            raise RefusedError(f"{gate_id} is already PENDING")
        text = _read_contract(contract_path)
        new_text, new_version = contract_edit.apply(
            text,
            contract_path,
            contract_edit.GateEdit(
                gate_id=gate.id,
                status="PENDING",
                evidence=None,
                today=today or _utc_today(),
                changelog_text=f"{gate.id} demoted from {gate.status} to PENDING: {reason.strip()}",
            ),
        )
        writes: dict[Path, bytes | None] = {contract_path: new_text.encode()}
        if gate.evidence:
            writes[root / gate.evidence] = None  # history stays in git
        _commit(root, writes)
        return new_version


def recover_before_reading(root: Path) -> atomic.Recovery:
    """Finish or undo a promotion or demotion a crash interrupted under ``root``, before
    anything reads a contract: a half-done commit can leave new evidence beside the old
    contract, which fails validation, so a command that validated first would refuse for
    ever. Takes the lock only when there is something to recover."""
    if not atomic.pending(root):
        return atomic.Recovery()
    with atomic.locked(root / atomic.LOCK_NAME):
        return _recover(root)


def _recover(root: Path) -> atomic.Recovery:
    try:
        return atomic.recover(root)
    except atomic.JournalError as exc:
        raise RefusedError(str(exc)) from None


def _require_inside(root: Path, *paths: Path) -> None:
    """Refuse to write anything outside the project (gates.io.atomic.OutsideProjectError)."""
    try:
        atomic.require_inside(root, *paths)
    except atomic.OutsideProjectError as exc:
        raise RefusedError(str(exc)) from None


def _commit(root: Path, writes: dict[Path, bytes | None]) -> None:
    """gates.io.atomic.commit; a path outside the project is a refusal (nothing was written)."""
    _require_inside(root, *writes)
    atomic.commit(root, writes)


def _read_contract(path: Path) -> str:
    """The contract's text (load_gate has just validated it: a regular UTF-8 file)."""
    return files.read_regular(path, MAX_SOURCE_BYTES).decode("utf-8")


def _verify_pair(root: Path, path: Path, text: str, gate_id: str, record: dict) -> None:
    """The new contract and the new evidence must agree before either is written."""
    from gates.model.source import parse_yaml  # noqa: PLC0415 - small, local use

    new = Contract.from_data(path, parse_yaml(text, path).data)
    gate = new.gate(gate_id)
    assert gate is not None
    problems = list(evidence_mismatches(new, gate, record, ("gates",)))
    if problems:
        raise RefusedError(f"internal check failed, nothing written: {problems[0].message}")


def _utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()
