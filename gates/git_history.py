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

import os
import re
import subprocess
from pathlib import Path

from gates import files

_COMMIT = re.compile(r'"commit"\s*:\s*"([0-9a-f]{40})"')
#: Evidence files are kilobytes; a larger one is not scanned here (pv reports it).
_SCAN_LIMIT = 1024 * 1024
_TIMEOUT_S = 60


class CommitIndex:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._usable: bool | None = None  # None: not asked yet
        self._known: dict[str, bool] = {}

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
        return out is not None and out.split() == ["true", "false"]

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
            return
        # One line per query, in order: "<sha> commit", or "<query> missing".
        lines = out.splitlines()
        for sha, line in zip(ordered, lines, strict=False):
            self._known[sha] = line.split()[-1:] == ["commit"]
