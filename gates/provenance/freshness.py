"""Is a gate's evidence still about the code as it is? The one freshness computation that
`pv validate` (EVIDENCE-STALE), `pv status` (STALE) and `gates promote --stale` share.

Evidence records the sha256 of every repository file its measurement and bound tests read
(``sources``, collected by gates.provenance.trace), and of every file the build of each artifact
built from a recipe read (``artifacts[].build_sources``: an artifact is a function of the code
that built it). It is stale when one of those files now hashes differently or is gone, and
when it records no sources, missing or empty (nothing then says it is fresh).
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path, PurePosixPath

from gates.io.files import sha256_file
from gates.model.contract import Gate
from gates.provenance import evidence as evidence_mod

NO_SOURCES = "records no sources (none or an empty list); re-measure: gates promote --stale"

#: file_version → sha256: many gates share source files.
_digests: dict[tuple[int, int, int, int, int], str] = {}


def file_version(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What tells one version of a file from another without reading it, for a cache of what
    was read from it: the device and inode name the file a path resolves to (``os.stat``
    follows links, so no realpath per call: 25,000 calls in a `pv validate` of five
    contracts), then its size, mtime and ctime (any write moves the ctime, even one that
    keeps the size and sets the mtime back)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _digest(path: Path) -> str | None:
    """sha256 of the regular file at ``path``; None when there is none (gone, a directory,
    a FIFO…): never opens anything but a regular file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    key = file_version(st)
    if key not in _digests:
        try:
            _digests[key] = sha256_file(path)
        except OSError:
            return None
    return _digests[key]


def recorded_sources(evidence: dict) -> list[tuple[dict, str]]:
    """Every ``{"path", "sha256"}`` the evidence rests on, with who read it: its ``sources``
    ("") and each recipe-built artifact's ``build_sources`` (" (read by the build of …)")."""
    own = [(src, "") for src in evidence.get("sources") or []]
    return own + [
        (src, f" (read by the build of artifact {artifact.get('name') or artifact.get('path')})")
        for artifact in evidence.get("artifacts") or []
        for src in artifact.get("build_sources") or []
    ]


@functools.cache
def _in_project(root: Path, recorded: str) -> Path | None:
    """The file a recorded posix ``path`` names under ``root``; None for one that would leave
    it (absolute, "..", empty). Cached: every contract's evidence names the same few hundred."""
    parts = PurePosixPath(recorded).parts
    if not parts or PurePosixPath(recorded).is_absolute() or ".." in parts:
        return None
    return root.joinpath(*parts)


def changed_file(root: Path, src: dict) -> str | None:
    """Why the recorded ``{"path", "sha256"}`` no longer holds under ``root`` ("changed",
    "gone", "not a path in the project"), or None when it does."""
    path = _in_project(root, src["path"])
    if path is None:
        return "not a path in the project"
    now = _digest(path)
    if now is None:
        return "gone"
    return "changed" if now != src["sha256"] else None


def stale_sources(root: Path, evidence: dict) -> list[tuple[str, str]]:
    """What makes ``evidence`` stale under ``root``: ``(path, why)`` pairs, ``why`` one of
    "changed", "gone", "not a path in the project"; ``[("", NO_SOURCES)]`` when it records
    no sources. Empty: fresh."""
    if not evidence.get("sources"):
        return [("", NO_SOURCES)]
    out = []
    for src, by in recorded_sources(evidence):
        why = changed_file(root, src)
        if why is not None:
            out.append((src["path"], why + by))
    return list(dict.fromkeys(out))


def describe(evidence: dict, stale: list[tuple[str, str]], limit: int = 3) -> str:
    """One line: which files, "changed since commit <12 hex>"."""
    if stale == [("", NO_SOURCES)]:
        return NO_SOURCES
    commit = evidence.get("git", {}).get("commit", "?")[:12]
    (path, why), rest = stale[0], stale[1:]
    line = f"{path} {why} since commit {commit}"
    if rest:
        also = ", ".join(f"{p} {w}" for p, w in rest[:limit])
        more = f" and {len(rest) - limit} more" if len(rest) > limit else ""
        line += f" (also {also}{more})"
    return line


def gate_staleness(root: Path, gate: Gate) -> str | None:
    """Why a PASS/PARTIAL gate's evidence is stale, or None (fresh; or not PASS/PARTIAL; or
    its evidence is unreadable or invalid, which other rules report)."""
    if gate.status not in ("PASS", "PARTIAL") or not gate.evidence:
        return None
    try:
        ev = evidence_mod.load(root / gate.evidence)
    except evidence_mod.EvidenceError:
        return None
    stale = stale_sources(root, ev)
    return describe(ev, stale) if stale else None
