"""What a change does to the contracts, checked like an API (`pv diff REF`).

Contracts are compared by id, as plain data (the file at REF need not pass today's pv):
each gate, invariant, falsification test and mutant by its id. A change is one of

- **weakening** — a threshold loosened (``<=``/``<`` raised, ``>=``/``>`` lowered, ``==``
  moved, or its metric, unit or comparator changed), a gate, invariant, falsification test,
  mutant or whole contract removed, ``ship_blocking`` dropped, a gate's falsification test
  unbound from it, a mutant newly exempted from a gate's measurement (``measurement_exempt``:
  the audit stops asking the measurement to catch it): each needs the contract's version
  raised **and** a changelog entry of a newer version that names the id (the seed
  project's own practice: bpe-training-perf v1.1.0 -> v1.2.0 amended GATE-003's bound
  with a bump and an entry saying why);
- **other** — a threshold tightened, something added, a status changed, evidence replaced:
  listed, never an error.

    changes = compare(before, after)      # dicts as YAML gives them, or None (absent)
    problems = unexplained(changes, before, after)
"""

from __future__ import annotations

from dataclasses import dataclass

from gates.model import semver

LOWER_IS_STRICTER = ("<=", "<")
HIGHER_IS_STRICTER = (">=", ">")


@dataclass(frozen=True)
class Change:
    contract: str
    #: The gate, test, invariant or mutant id the change is about (the contract id for a
    #: contract added or removed).
    item: str
    what: str
    weakening: bool

    def __str__(self) -> str:
        mark = "weakens" if self.weakening else "changes"
        return f"{self.contract} {self.item}: {self.what} ({mark})"


def _by_id(items: object) -> dict[str, dict]:
    if not isinstance(items, list):
        return {}
    return {i["id"]: i for i in items if isinstance(i, dict) and isinstance(i.get("id"), str)}


def _thresholds(gate: dict) -> list[dict]:
    """A gate's thresholds: ``threshold`` is one mapping or a list of them."""
    found = gate.get("threshold")
    found = found if isinstance(found, list) else [found]
    return [t for t in found if isinstance(t, dict)]


def _shown(t: dict) -> str:
    return f"{t.get('metric')} {t.get('comparator')} {t.get('value')} {t.get('unit')}"


def threshold_change(old: dict, new: dict) -> tuple[str, bool] | None:
    """(what changed, whether it loosens), or None when nothing did."""
    if old == new:
        return None
    same_kind = all(old.get(k) == new.get(k) for k in ("metric", "unit", "comparator"))
    a, b = old.get("value"), new.get("value")
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    if not same_kind or not numbers:
        return f"threshold {_shown(old)} -> {_shown(new)}", True
    comparator = old.get("comparator")
    if comparator in LOWER_IS_STRICTER:
        loosened = b > a
    elif comparator in HIGHER_IS_STRICTER:
        loosened = b < a
    else:  # == or anything else: any move is a different promise
        loosened = True
    word = "loosened" if loosened else "tightened"
    return f"threshold {word}: {_shown(old)} -> {_shown(new)}", loosened


def _gate_changes(cid: str, gid: str, old: dict, new: dict) -> list[Change]:
    out = []
    before, after = _thresholds(old), _thresholds(new)
    for t_old, t_new in zip(before, after, strict=False):
        moved = threshold_change(t_old, t_new)
        if moved:
            out.append(Change(cid, gid, *moved))
    if len(after) < len(before):
        out.append(Change(cid, gid, f"{len(before) - len(after)} threshold(s) removed", True))
    if old.get("ship_blocking") and not new.get("ship_blocking"):
        out.append(Change(cid, gid, "ship_blocking dropped", True))
    rested_on = set(old.get("falsification_tests") or [])
    dropped = sorted(rested_on - set(new.get("falsification_tests") or []))
    if dropped:
        out.append(Change(cid, gid, f"no longer rests on {', '.join(dropped)}", True))
    exempted = sorted(_exempt_mutants(new) - _exempt_mutants(old))
    if exempted:
        out.append(Change(cid, gid, f"measurement exempt from {', '.join(exempted)}", True))
    if old.get("status") != new.get("status"):
        out.append(Change(cid, gid, f"status {old.get('status')} -> {new.get('status')}", False))
    if old.get("evidence") != new.get("evidence"):
        out.append(Change(cid, gid, "evidence file replaced", False))
    return out


def _exempt_mutants(gate: dict) -> set[str]:
    """The mutants a gate's ``measurement_exempt`` entries name."""
    entries = gate.get("measurement_exempt")
    return {
        str(m)
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, dict) and isinstance(e.get("mutants"), list)
        for m in e["mutants"]
    }


def compare(before: dict | None, after: dict | None) -> list[Change]:
    """The changes from contract ``before`` to ``after`` (None: absent on that side)."""
    cid = str((after or before or {}).get("metadata", {}).get("id", "?"))
    if before is None:
        return [Change(cid, cid, "contract added", False)] if after is not None else []
    if after is None:
        return [Change(cid, cid, "contract removed", True)]
    out: list[Change] = []
    for section, kind in (("gates", "gate"), ("invariants", "invariant"),
                          ("falsification_tests", "falsification test")):  # fmt: skip
        old, new = _by_id(before.get(section)), _by_id(after.get(section))
        out += [Change(cid, i, f"{kind} removed", True) for i in old if i not in new]
        out += [Change(cid, i, f"{kind} added", False) for i in new if i not in old]
    old_gates, new_gates = _by_id(before.get("gates")), _by_id(after.get("gates"))
    for gid in old_gates.keys() & new_gates.keys():
        out += _gate_changes(cid, gid, old_gates[gid], new_gates[gid])
    old_tests = _by_id(before.get("falsification_tests"))
    new_tests = _by_id(after.get("falsification_tests"))
    for tid in old_tests.keys() & new_tests.keys():
        old_m, new_m = _by_id(old_tests[tid].get("mutants")), _by_id(new_tests[tid].get("mutants"))
        out += [Change(cid, m, f"mutant of {tid} removed", True) for m in old_m if m not in new_m]
    return sorted(out, key=lambda c: (c.contract, c.item, c.what))


def _version(contract: dict) -> semver.Version | None:
    return semver.parse(str(contract.get("metadata", {}).get("version", "")))


def unexplained(changes: list[Change], before: dict | None, after: dict | None) -> list[str]:
    """Why each weakening of ``changes`` is not accepted: the version was not raised, or no
    changelog entry newer than ``before``'s version names the item. Empty: all explained."""
    weakenings = [c for c in changes if c.weakening]
    if not weakenings:
        return []
    if after is None:
        return [f"{c}: a contract is retired by a release that says so, not deleted"
                for c in weakenings]  # fmt: skip
    old_v, new_v = _version(before or {}), _version(after)
    if old_v is None or new_v is None or not new_v > old_v:
        return [f"{c}: without raising the contract's version (still "
                f"{after.get('metadata', {}).get('version')})" for c in weakenings]  # fmt: skip
    newer = [
        str(e.get("text", ""))
        for e in after.get("changelog") or []
        if isinstance(e, dict) and (v := semver.parse(str(e.get("version", "")))) and v > old_v
    ]
    return [
        f"{c}: no changelog entry of a version after {old_v} names {c.item}"
        for c in weakenings
        if not any(c.item in text for text in newer)
    ]
