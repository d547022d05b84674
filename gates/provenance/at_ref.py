"""The project as a git commit holds it: its contracts at REF (`pv diff REF`), and which gates
changed since REF (`gates check --changed-since REF`), by one git process per question.

A gate changed since REF when its contract entry or one of its bound tests' entries differs
there, its evidence file differs, or a file its evidence rests on (``sources`` and each
artifact's ``build_sources``: gates.provenance.freshness.recorded_sources) differs or is new. The
comparison is of the working tree against REF, untracked files included.
"""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

from gates.io import jsonfile
from gates.model import source
from gates.model.contract import Contract, Gate
from gates.provenance import freshness
from gates.provenance.evidence import MAX_EVIDENCE_BYTES


class RefError(Exception):
    """git could not answer (REF unknown, not a repository)."""


def git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RefError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def by_id(texts: dict[str, str], unreadable: list[str] | None = None) -> dict[str, dict]:
    """Contract id -> data of every text that parses as a contract. The others are skipped
    (at REF: what pv thought of them then is history), or listed in ``unreadable``."""
    out = {}
    for name, text in sorted(texts.items()):
        try:
            data = source.parse_yaml(text, Path(name)).data
        except source.SourceError as exc:
            if unreadable is not None:
                unreadable.append(f"{name}: {exc}")
            continue
        cid = data.get("metadata", {}).get("id") if isinstance(data, dict) else None
        if isinstance(cid, str):
            out[cid] = data
        elif unreadable is not None:
            unreadable.append(f"{name}: no metadata.id")
    return out


def contracts_at(root: Path, ref: str, folders: set[str]) -> dict[str, dict]:
    """The contracts in ``folders`` (relative to ``root``) as commit ``ref`` holds them."""
    git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    names = git(root, "ls-tree", "-r", "--name-only", ref, "--", *sorted(folders)).splitlines()
    texts = {}
    for name in names:
        if (
            PurePosixPath(name).suffix == ".yaml"
            and PurePosixPath(name).parent.as_posix() in folders
        ):
            texts[name] = git(root, "show", f"{ref}:./{name}")
    return by_id(texts)


def changed_files(root: Path, ref: str) -> set[str]:
    """Paths (relative to ``root``) that differ between ``ref`` and the working tree, and
    untracked files not ignored."""
    git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    tracked = git(root, "diff", "--name-only", "--relative", ref, "--").splitlines()
    untracked = git(root, "ls-files", "--others", "--exclude-standard").splitlines()
    return {p for p in (*tracked, *untracked) if p}


def _entries(data: dict | None, key: str) -> dict[str, dict]:
    items = (data or {}).get(key) or []
    return {e["id"]: e for e in items if isinstance(e, dict) and isinstance(e.get("id"), str)}


def changed_gates(root: Path, contracts: list[Contract], ref: str) -> dict[str, list[str]]:
    """Gate id -> why it changed since ``ref`` (module docstring), for every gate of
    ``contracts`` that did; raises RefError when git cannot tell."""
    changed = changed_files(root, ref)
    folders = {c.path.resolve().parent.relative_to(root.resolve()).as_posix() for c in contracts}
    before = contracts_at(root, ref, folders)
    now = by_id({str(c.path): c.path.read_text(encoding="utf-8") for c in contracts})
    out = {}
    for c in contracts:
        for gate in c.gates:
            why = _why_changed(root, gate, before.get(c.id), now.get(c.id), changed)
            if why:
                out[gate.id] = why
    return out


def _why_changed(
    root: Path, gate: Gate, before: dict | None, now: dict | None, changed: set[str]
) -> list[str]:
    why = []
    old, new = _entries(before, "gates"), _entries(now, "gates")
    if old.get(gate.id) != new.get(gate.id):
        why.append("its contract entry" if gate.id in old else "a new gate")
    old, new = _entries(before, "falsification_tests"), _entries(now, "falsification_tests")
    why += [f"{t}'s entry" for t in gate.falsification_tests if old.get(t) != new.get(t)]
    if gate.evidence is None:
        return why
    if gate.evidence in changed:
        why.append(f"its evidence {gate.evidence}")
    try:
        record = jsonfile.read_json(root / gate.evidence, MAX_EVIDENCE_BYTES)
        recorded = [src["path"] for src, _ in freshness.recorded_sources(record)]
    except (OSError, jsonfile.JsonFileError, KeyError, TypeError, AttributeError):
        return why  # unreadable evidence: pv validate says so; the entry above decides
    touched = sorted({p for p in recorded if p in changed})
    if touched:
        more = f" and {len(touched) - 3} more" if len(touched) > 3 else ""
        why.append("sources " + ", ".join(touched[:3]) + more)
    return why
