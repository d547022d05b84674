"""Checks of a contract against the project's committed mutation audit
(``evidence/audit/audit.json``, written by ``gates audit --out``; ``make audit`` here).

The audit is evidence like a gate's: what it says must still be about the code as it is. A
project without an audit file gets no finding here (it has not adopted the audit yet).

- AUDIT-INVALID: the file is unreadable or not a valid audit.
- AUDIT-NOT-OK: a recorded run is not what the audit requires: the real code failing its
  test, or a mutant that survived, timed out or was not viable (a runtime error).
- AUDIT-MISSING: the audit lists a contract as audited (``contracts``) but holds no row of
  it: its rows were removed.
- AUDIT-STALE (warning): a file a test's runs read changed since the audit, or a bound test
  or mutant of the contract has no row (added since). `pv status --require-ship-ready`
  counts a ship-blocking gate resting on such a test as stale.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from pathlib import Path

from gates.model.contract import Contract
from gates.model.findings import Issue
from gates.provenance import audit_record as audit
from gates.provenance import freshness


def _load(root: Path) -> dict | None:
    """The audit record under ``root`` (None: there is none); raises AuditFileError. Parsed
    once per file version: pv checks every contract against the same file."""
    path = root / audit.AUDIT_EVIDENCE
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError:  # a symlink loop: load_record says so
        return audit.load_record(path)
    return _parse(path, freshness.file_version(st))


@cache
def _parse(path: Path, version: tuple[int, ...]) -> dict:
    return audit.load_record(path)


def audit_agrees(c: Contract, root: Path) -> Iterator[Issue]:
    bound = [t for t in c.falsification_tests if t.bound and t.test]
    if not bound:
        return
    try:
        record = _load(root.resolve())
    except audit.AuditFileError as exc:
        yield Issue("AUDIT-INVALID", (*bound[0].where, "id"), str(exc), at_key=False)
        return
    if record is None:
        return
    shown = audit.AUDIT_EVIDENCE.as_posix()
    sources = record.get("sources", [])
    rows = {(r["test"], r["mutant"]): r for r in record["rows"] if r["contract"] == c.id}
    if not rows:
        if c.id in (record.get("contracts") or []):
            # The audit says it ran this contract, yet holds no row of it: they were removed.
            yield Issue(
                "AUDIT-MISSING",
                (*bound[0].where, "test"),
                f"{shown} lists {c.id} as audited but holds no run of its {len(bound)} bound "
                "test(s)",
                at_key=False,
            )
        return  # an audit of other contracts (`gates audit --contract`) says nothing here
    commit = record["git"]["commit"][:12]
    for t in bound:
        runs = [(None, (*t.where, "test"))] + [(m.id, (*m.where, "id")) for m in t.mutants]
        stale_files: dict[str, str] = {}
        for mutant, where in runs:
            row = rows.get((t.id, mutant))
            what = f"mutant `{mutant}` of {t.id}" if mutant else f"{t.id} on the real code"
            if row is None:
                yield Issue("AUDIT-STALE", where, f"{what} is not in {shown}", at_key=False)
                continue
            if row["node"] != t.test and mutant is None:
                yield Issue(
                    "AUDIT-STALE",
                    where,
                    f"{shown} audited {t.id} as {row['node']}, the contract binds {t.test}",
                    at_key=False,
                )
            ok = row["outcome"] == ("passed" if mutant is None else "failed")
            if not ok:
                yield Issue(
                    "AUDIT-NOT-OK",
                    where,
                    f"{shown} records {what} as {row.get('status') or row['verdict']} "
                    f"({row['outcome']})",
                    at_key=False,
                )
            if "sources" not in row:
                stale_files.setdefault("", "records no sources")
                continue
            recorded = {"sources": [sources[i] for i in row["sources"] if i < len(sources)]}
            for path, why in freshness.stale_sources(root, recorded):
                stale_files.setdefault(path, why)
        if stale_files:
            named = ", ".join(
                f"{p} {why}" if p else why for p, why in sorted(stale_files.items())[:3]
            )
            more = f" (+{len(stale_files) - 3} more)" if len(stale_files) > 3 else ""
            yield Issue(
                "AUDIT-STALE",
                (*t.where, "test"),
                f"{shown} is stale for {t.id}: {named}{more} since commit {commit}",
                at_key=False,
            )
