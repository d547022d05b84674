"""Property tests for `pv validate` (FALSIFY targets: the validator itself).

1. Every contract the strategy generates validates with no finding at all.
2. Any single mutation of one (drop a required key, misspell a key, break a reference,
   skip a changelog entry, duplicate an id, and a few more) is reported with the right
   rule id at the right line.

Expected lines come from `emit`, a small YAML writer that records where it put each key
and list item; it shares no code with pv's own locator.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gates.pv.validate import validate

TODAY = dt.date(2026, 11, 22)
Path_ = tuple


# --------------------------------------------------------------------------- emitter
def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(v)  # a JSON string is a valid YAML double-quoted scalar


def emit(data: dict) -> tuple[str, dict[Path_, int]]:
    """Block-style YAML plus the 1-based line of every key path and list-item path."""
    lines: list[str] = []
    where: dict[Path_, int] = {(): 1}

    def mapping(m: dict, indent: int, path: Path_, first_prefix: str | None = None) -> None:
        for n, (k, v) in enumerate(m.items()):
            prefix = first_prefix if (n == 0 and first_prefix is not None) else " " * indent
            where[(*path, k)] = len(lines) + 1
            if isinstance(v, dict):
                lines.append(f"{prefix}{k}:")
                mapping(v, indent + 2, (*path, k))
            elif isinstance(v, list) and v:
                lines.append(f"{prefix}{k}:")
                sequence(v, indent + 2, (*path, k))
            elif isinstance(v, list):
                lines.append(f"{prefix}{k}: []")
            else:
                lines.append(f"{prefix}{k}: {_scalar(v)}")

    def sequence(s: list, indent: int, path: Path_) -> None:
        for i, item in enumerate(s):
            where[(*path, i)] = len(lines) + 1
            if isinstance(item, dict):
                mapping(item, indent + 2, (*path, i), first_prefix=" " * indent + "- ")
            else:
                lines.append(f"{' ' * indent}- {_scalar(item)}")

    mapping(data, 0, ())
    return "\n".join(lines) + "\n", where


# --------------------------------------------------------------------------- strategy
STEMS = ["ALPHA", "BPE", "CFG", "LOOP", "ARCH-370M", "KV2"]
BUMPS = ["patch", "minor", "major"]


def bump(v: tuple[int, int, int], part: str) -> tuple[int, int, int]:
    if part == "major":
        return (v[0] + 1, 0, 0)
    if part == "minor":
        return (v[0], v[1] + 1, 0)
    return (v[0], v[1], v[2] + 1)


def vstr(v: tuple[int, int, int]) -> str:
    return ".".join(map(str, v))


@dataclass
class Generated:
    data: dict
    filename: str
    #: gate id → evidence JSON for gates generated at PASS
    evidence: dict[str, dict]
    contract_id: str


THRESHOLD = {"metric": "mismatches", "comparator": "==", "value": 0, "unit": "merges"}


@st.composite
def contracts(draw: st.DrawFn) -> Generated:
    stem = draw(st.sampled_from(STEMS))
    n_tests = draw(st.integers(1, 4))
    test_ids = [f"FALSIFY-{stem}-{k + 1:03d}" for k in range(n_tests)]
    bound = [draw(st.booleans()) for _ in test_ids]
    tests = []
    for k, tid in enumerate(test_ids):
        t: dict[str, Any] = {
            "id": tid,
            "rule": f"rule {k}",
            "prediction": f"prediction {k}",
            "status": "bound" if bound[k] else "planned",
        }
        if bound[k]:
            t["test"] = f"tests/test_generated.py::test_case_{k}"
        t["if_fails"] = "the invariant is false"
        if bound[k] or draw(st.booleans()):
            n_mut = draw(st.integers(1, 2))
            t["mutants"] = [
                {"id": f"bug-{k}-{m}", "description": f"known bug {m}"} for m in range(n_mut)
            ]
        tests.append(t)

    n_inv = draw(st.integers(1, 3))
    invariants = []
    for k in range(n_inv):
        refs = draw(st.lists(st.sampled_from(test_ids), min_size=1, unique=True))
        inv: dict[str, Any] = {"id": f"INV-{stem}-{k + 1:03d}", "statement": f"claim {k}"}
        if draw(st.booleans()):
            inv["formula"] = f"f{k}(x) == x"
        inv["falsified_by"] = refs
        invariants.append(inv)

    # Gate 1 rests on every test, so no test is orphaned and every invariant is gated.
    gate_tests = [test_ids] + [
        draw(st.lists(st.sampled_from(test_ids), min_size=1, unique=True))
        for _ in range(draw(st.integers(0, 2)))
    ]
    n_changes = draw(st.integers(1, 4))
    start = draw(st.sampled_from([(0, 1, 0), (1, 0, 0)]))
    versions = [start]
    for _ in range(n_changes - 1):
        versions.append(bump(versions[-1], draw(st.sampled_from(BUMPS))))
    day0 = dt.date(2024, 1, 1) + dt.timedelta(days=draw(st.integers(0, 600)))
    dates = [day0]
    for _ in range(n_changes - 1):
        dates.append(dates[-1] + dt.timedelta(days=draw(st.integers(0, 30))))
    current = vstr(versions[-1])
    contract_id = f"C-{stem}"

    gates, evidence = [], {}
    for k, refs in enumerate(gate_tests):
        gid = f"GATE-{stem}-{k + 1:03d}"
        gate: dict[str, Any] = {
            "id": gid,
            "rule": f"gate rule {k}",
            "falsification_tests": refs,
            "threshold": dict(THRESHOLD),
            "ship_blocking": draw(st.booleans()),
        }
        can_pass = all(bound[test_ids.index(r)] for r in refs)
        if can_pass and draw(st.booleans()):
            gate["status"] = "PASS"
            gate["evidence"] = f"evidence/{contract_id}/{gid}.json"
            evidence[gid] = evidence_for(contract_id, current, gid, refs)
        else:
            gate["status"] = "PENDING"
        gates.append(gate)

    metadata: dict[str, Any] = {
        "id": contract_id,
        "version": current,
        "status": draw(st.sampled_from(["PROPOSED", "ACTIVE", "DEPRECATED"])),
        "kind": draw(st.sampled_from(["kernel", "tokenizer", "training-loop"])),
        "created": dates[0].isoformat(),
        "updated": dates[-1].isoformat(),
        "description": "a generated contract",
    }
    if draw(st.booleans()):
        metadata["references"] = ["a reference"]
    changelog = [
        {"version": vstr(v), "date": d.isoformat(), "text": f"release {vstr(v)}"}
        for v, d in zip(reversed(versions), reversed(dates), strict=True)
    ]
    data = {
        "metadata": metadata,
        "invariants": invariants,
        "falsification_tests": tests,
        "gates": gates,
        "changelog": changelog,
    }
    return Generated(data, f"{stem.lower()}-v{versions[-1][0]}.yaml", evidence, contract_id)


def evidence_for(contract_id: str, version: str, gate_id: str, refs: list[str]) -> dict:
    return {
        "schema_version": 1,
        "contract": {"id": contract_id, "version": version},
        "gate": gate_id,
        "falsification_tests": refs,
        "captured_at": "2026-01-01T00:00:00Z",
        "host": {
            "cpu": "generated",
            "cores": 2,
            "ram_bytes": 1,
            "gpu": None,
            "python": "3.11",
            "torch": None,
            "packages": {},
        },
        "git": {"commit": "0" * 40, "dirty": False},
        "command": ["gates", "promote", gate_id],
        "workload": {"description": "generated", "inputs": []},
        "measurements": {"mismatches": {"value": 0, "unit": "merges"}},
        "threshold": dict(THRESHOLD),
        "verdict": "PASS",
        "tests": [{"id": r, "node": _node(r), "outcome": "passed"} for r in refs],
        "artifacts": [],
        # the bound tests' file as written below: fresh (an empty list would be stale)
        "sources": [{"path": "tests/test_generated.py", "sha256": _sha256(TEST_FILE)}],
    }


def _node(ref: str) -> str:
    """The node FALSIFY-<STEM>-<k+1> is bound to (as generated above)."""
    return f"tests/test_generated.py::test_case_{int(ref.rsplit('-', 1)[1]) - 1}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


TEST_FILE = "import pytest\n\n" + "".join(
    f"\n@pytest.mark.ship_blocking\ndef test_case_{k}():\n    assert True\n" for k in range(4)
)


MUTANTS_FILE = "from gates.mutants import mutant\n" + "".join(
    f"\n@mutant('bug-{k}-{m}')\ndef _bug_{k}_{m}(patch):\n    pass\n"
    for k in range(4)
    for m in range(2)
)


def run_pv(gen: Generated) -> tuple[list, dict[Path_, int]]:
    text, where = emit(gen.data)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "pyproject.toml").write_text("# project root marker\n")
        (root / "tests").mkdir()
        (root / "tests" / "test_generated.py").write_text(TEST_FILE)
        (root / "tests" / "mutants").mkdir()
        (root / "tests" / "mutants" / "generated.py").write_text(MUTANTS_FILE)
        for gid, ev in gen.evidence.items():
            path = root / "evidence" / gen.contract_id / f"{gid}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(ev))
        (root / "contracts").mkdir()
        contract = root / "contracts" / gen.filename
        contract.write_text(text)
        result = validate([contract], today=TODAY)
    return result.report.findings, where


@given(contracts())
def test_every_generated_contract_validates_clean(gen: Generated):
    findings, _ = run_pv(gen)
    assert findings == []


# --------------------------------------------------------------------------- mutations
REQUIRED = {
    (): ["metadata", "invariants", "falsification_tests", "gates", "changelog"],
    ("metadata",): ["id", "version", "status", "kind", "created", "updated", "description"],
    ("invariants",): ["id", "statement", "falsified_by"],
    ("falsification_tests",): ["id", "rule", "prediction", "status", "if_fails"],
    ("gates",): ["id", "rule", "falsification_tests", "threshold", "ship_blocking", "status"],
    ("gates", "threshold"): ["metric", "comparator", "value", "unit"],
    ("changelog",): ["version", "date", "text"],
}


def _objects(data: dict) -> list[tuple[Path_, dict, tuple]]:
    """(path, object, schema-kind) for every mapping in the contract."""
    out: list[tuple[Path_, dict, tuple]] = [
        ((), data, ()),
        (("metadata",), data["metadata"], ("metadata",)),
    ]
    for kind in ("invariants", "falsification_tests", "gates", "changelog"):
        for i, obj in enumerate(data[kind]):
            out.append(((kind, i), obj, (kind,)))
            if kind == "gates":
                out.append(((kind, i, "threshold"), obj["threshold"], ("gates", "threshold")))
    return out


def _get(data: Any, path: Path_) -> Any:
    for step in path:
        data = data[step]
    return data


def drop_required(data: dict, draw: st.DrawFn) -> tuple[str, Path_]:
    path, obj, kind = draw(st.sampled_from(_objects(data)))
    key = draw(st.sampled_from(REQUIRED[kind]))
    del obj[key]
    return "SCHEMA-REQUIRED", path  # reported where the key must be added


def _typos(key: str) -> list[str]:
    out = {key[:i] + key[i + 1 :] for i in range(len(key))}
    out |= {key[:i] + key[i + 1] + key[i] + key[i + 2 :] for i in range(len(key) - 1)}
    out |= {key[:i] + key[i] + key[i:] for i in range(len(key))}
    return sorted(t for t in out if t and t != key and t[0].isalpha())


def misspell_key(data: dict, draw: st.DrawFn) -> tuple[str, Path_]:
    path, obj, _ = draw(st.sampled_from(_objects(data)))
    key = draw(st.sampled_from(sorted(obj)))
    typo = draw(st.sampled_from([t for t in _typos(key) if t not in obj]))
    items = list(obj.items())
    obj.clear()
    obj.update({(typo if k == key else k): v for k, v in items})  # keep the key's position
    return "SCHEMA-UNKNOWN-KEY", (*path, typo)


def break_reference(data: dict, draw: st.DrawFn) -> tuple[str, Path_]:
    holders = [(("invariants", i), "falsified_by") for i in range(len(data["invariants"]))]
    holders += [(("gates", i), "falsification_tests") for i in range(len(data["gates"]))]
    path, key = draw(st.sampled_from(holders))
    refs = _get(data, path)[key]
    k = draw(st.integers(0, len(refs) - 1))
    refs[k] = refs[k][:-3] + "999"
    return "REF-DANGLING", (*path, key, k)


def skip_changelog_entry(data: dict, draw: st.DrawFn) -> tuple[str, Path_] | None:
    log = data["changelog"]
    if len(log) < 2:
        return None

    # Never the oldest entry (the contract's birth). Deleting a middle entry is detectable
    # unless the result is itself a valid history: 1.0.0 → 1.0.1 → 1.1.0 without 1.0.1 is
    # the legitimate 1.0.0 → 1.1.0. Those deletions are skipped, as no defect remains.
    def detectable(i: int) -> bool:
        if i == 0:
            return True
        newer = tuple(map(int, log[i - 1]["version"].split(".")))
        older = tuple(map(int, log[i + 1]["version"].split(".")))
        return newer not in {bump(older, b) for b in BUMPS}

    choices = [i for i in range(len(log) - 1) if detectable(i)]
    if not choices:
        return None
    i = draw(st.sampled_from(choices))
    del log[i]
    if i == 0:
        return "CHANGELOG-VERSION", ("changelog", 0, "version")
    return "CHANGELOG-GAP", ("changelog", i - 1, "version")


def duplicate_id(data: dict, draw: st.DrawFn) -> tuple[str, Path_] | None:
    kinds = [k for k in ("invariants", "falsification_tests", "gates") if len(data[k]) >= 2]
    if not kinds:
        return None
    kind = draw(st.sampled_from(kinds))
    j = draw(st.integers(1, len(data[kind]) - 1))
    i = draw(st.integers(0, j - 1))
    data[kind][j]["id"] = data[kind][i]["id"]
    return "ID-DUPLICATE", (kind, j, "id")


def break_semver(data: dict, draw: st.DrawFn) -> tuple[str, Path_]:
    data["metadata"]["version"] = draw(st.sampled_from(["1.0", "v1.0.0", "1.0.0.0", "01.0.0"]))
    return "VERSION-SEMVER", ("metadata", "version")


def future_date(data: dict, draw: st.DrawFn) -> tuple[str, Path_]:
    field = draw(st.sampled_from(["created", "updated"]))
    data["metadata"][field] = (TODAY + dt.timedelta(days=draw(st.integers(1, 900)))).isoformat()
    return "DATE-FUTURE", ("metadata", field)


def unbind_test_node(data: dict, draw: st.DrawFn) -> tuple[str, Path_] | None:
    bound = [i for i, t in enumerate(data["falsification_tests"]) if "test" in t]
    if not bound:
        return None
    i = draw(st.sampled_from(bound))
    data["falsification_tests"][i]["test"] = "tests/test_generated.py::test_case_99"
    return "TEST-NOT-FOUND", ("falsification_tests", i, "test")


MUTATIONS = [
    drop_required,
    misspell_key,
    break_reference,
    skip_changelog_entry,
    duplicate_id,
    break_semver,
    future_date,
    unbind_test_node,
]


@st.composite
def mutated(draw: st.DrawFn, mutation) -> tuple[Generated, str, Path_]:
    gen = draw(contracts())
    gen = Generated(copy.deepcopy(gen.data), gen.filename, gen.evidence, gen.contract_id)
    outcome = mutation(gen.data, draw)
    assume(outcome is not None)  # this mutation does not apply to this contract
    rule, path = outcome
    return gen, rule, path


# One property per mutation kind, so each gets the profile's full example budget
# (mixed into one property, the rarer kinds went untested in 100 examples).
@pytest.mark.ship_blocking
@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.__name__ for m in MUTATIONS])
@given(data=st.data())
def test_any_single_mutation_is_reported_with_its_rule_at_its_line(mutation, data):
    gen, rule, path = data.draw(mutated(mutation))
    findings, where = run_pv(gen)
    expected_line = where[path]
    reported = {(f.rule, f.line) for f in findings}
    assert (rule, expected_line) in reported, (path, sorted(reported))


def test_emitter_positions_are_what_a_reader_counts():
    text, where = emit({"a": {"b": 1}, "c": [{"d": 2, "e": [3, 4]}]})
    lines = text.splitlines()
    assert lines[where[("a", "b")] - 1].strip() == "b: 1"
    assert lines[where[("c", 0, "e", 1)] - 1].strip() == "- 4"
    assert lines[where[("c", 0)] - 1].startswith("  - d: 2")
