"""Which commits a project's git history holds: does the commit evidence records exist?

One :class:`CommitIndex` per project root and `pv validate` run. It asks git nothing until
the first question; then it reads every ``"commit"`` recorded under ``<root>/evidence`` and
asks git about all of them in one ``git cat-file --batch-check``, so validating a hundred
gates costs two git processes, not a hundred. A commit asked about later that the scan did
not see costs one more batch.

The check is skipped (every answer is None, "cannot tell") where a missing commit would
prove nothing: git is not installed, the root is not inside a git work tree (an unpacked
tarball, a copy in a temporary directory), or the repository is shallow (a CI clone with
``--depth``: older commits are absent from it without being absent from the history).

    CommitIndex(root).exists("0123…")  # False: not in history; None: cannot tell

Tests: .venv/bin/pytest tests/unit/gates/test_git_history.py
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path

from gates.io import files, jsonfile
from gates.provenance import freshness

_COMMIT = re.compile(r'"commit"\s*:\s*"([0-9a-f]{40})"')
#: Evidence files are kilobytes; a larger one is not scanned here (pv reports it).
_SCAN_LIMIT = 1024 * 1024
_TIMEOUT_S = 60


class CommitIndex:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._usable: bool | None = None  # None: not asked yet
        #: why git cannot tell, once asked and found unusable
        self.unusable_reason: str | None = None
        self._known: dict[str, bool] = {}
        #: (commit, path) -> sha256 of the file there, "" when there is none
        self._blobs: dict[tuple[str, str], str] = {}
        self._scanned_sources: set[tuple[str, str]] | None = None

    def exists(self, sha: str) -> bool | None:
        """Whether ``sha`` names a commit of the history; None when that cannot be told."""
        if self._usable is None:
            self._usable = self._git_usable()
            if self._usable:
                self._lookup({*self._scan_evidence(), sha})
        if not self._usable:
            return None
        if sha not in self._known:
            self._lookup({sha})
        return self._known.get(sha)

    def _git(self, *args: str, stdin: str | None = None) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(self.root), *args],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):  # git absent, or hung
            return None
        return done.stdout if done.returncode == 0 else None

    def _git_usable(self) -> bool:
        out = self._git("rev-parse", "--is-inside-work-tree", "--is-shallow-repository")
        answer = (out or "").split()
        if answer == ["true", "false"]:
            return True
        self.unusable_reason = {
            ("true", "true"): "a shallow clone (fetch the history: git fetch --unshallow)",
        }.get(tuple(answer), "no git work tree here (git absent, or not a repository)")
        return False

    def _scan_evidence(self) -> set[str]:
        found: set[str] = set()
        for top, _, names in os.walk(self.root / "evidence"):  # symlinked folders not followed
            for name in sorted(n for n in names if n.endswith(".json")):
                try:
                    raw = files.read_regular(Path(top) / name, _SCAN_LIMIT)
                except OSError:  # not a regular file, too large: pv reports it elsewhere
                    continue
                found.update(_COMMIT.findall(raw.decode("utf-8", "replace")))
        return found

    def _lookup(self, shas: set[str]) -> None:
        ordered = sorted(s for s in shas if re.fullmatch(r"[0-9a-f]{40}", s))
        if not ordered:
            return
        out = self._git(
            "cat-file",
            "--batch-check=%(objectname) %(objecttype)",
            stdin="".join(f"{s}^{{commit}}\n" for s in ordered),
        )
        if out is None:
            self._usable = False
            self.unusable_reason = "git cat-file failed"
            return
        # One line per query, in order: "<sha> commit", or "<query> missing".
        lines = out.splitlines()
        for sha, line in zip(ordered, lines, strict=False):
            self._known[sha] = line.split()[-1:] == ["commit"]

    # --- file contents at a commit ------------------------------------------------------

    def file_sha256(self, sha: str, path: str) -> str | None:
        """sha256 of the file at repository-relative ``path`` (from the project root) in
        commit ``sha``; "" when that commit holds no such file; None when it cannot be told
        (no usable git, the commit unknown, a path no query can name)."""
        if self.exists(sha) is not True or "\n" in path or not path:
            return None
        key = (sha, path)
        if key not in self._blobs:
            wanted = {key} | ({k for k in self._scan_sources() if k not in self._blobs})
            self._fetch_blobs(wanted)
        return self._blobs.get(key)

    def _scan_sources(self) -> set[tuple[str, str]]:
        """Every (commit, source path) the evidence under ``<root>/evidence`` records: asked
        of git at once, so pv costs one more git process, not one per gate."""
        if self._scanned_sources is not None:
            return self._scanned_sources
        found: set[tuple[str, str]] = set()
        for top, _, names in os.walk(self.root / "evidence"):
            for name in sorted(n for n in names if n.endswith(".json")):
                try:
                    record = jsonfile.read_json(Path(top) / name, _SCAN_LIMIT)
                    sha = record["git"]["commit"]
                    listed = [src for src, _ in freshness.recorded_sources(record)]
                    found |= {(sha, s["path"]) for s in listed if isinstance(s.get("path"), str)}
                except (OSError, jsonfile.JsonFileError, KeyError, TypeError, AttributeError):
                    continue  # not evidence of ours: pv reports it elsewhere
        self._scanned_sources = {(s, p) for s, p in found if isinstance(s, str) and p}
        return self._scanned_sources

    def _fetch_blobs(self, wanted: set[tuple[str, str]]) -> None:
        """One ``git cat-file --batch`` for every (commit, path) of ``wanted``."""
        ordered = sorted(
            (s, p) for s, p in wanted if re.fullmatch(r"[0-9a-f]{40}", s) and "\n" not in p
        )
        if not ordered:
            return
        query = "".join(f"{s}:./{p}\n" for s, p in ordered).encode()
        try:
            done = subprocess.run(
                ["git", "-C", str(self.root), "cat-file", "--batch"],
                input=query,
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return
        if done.returncode != 0:
            return
        out, at = done.stdout, 0
        for key in ordered:
            end = out.index(b"\n", at)
            header = out[at:end].split()
            at = end + 1
            if len(header) == 3 and header[1] == b"blob":  # "<oid> blob <size>", the bytes, \n
                size = int(header[2])
                self._blobs[key] = hashlib.sha256(out[at : at + size]).hexdigest()
                at += size + 1
            elif len(header) == 3:  # a tree or another object: no file there
                self._blobs[key] = ""
                at += int(header[2]) + 1
            else:  # "<query> missing" (the path is not in that commit)
                self._blobs[key] = ""
