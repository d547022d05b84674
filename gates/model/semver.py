"""Semantic versions: parse, order, and what counts as the next release."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?$"
)


@dataclass(frozen=True, order=True, slots=True)
class Version:
    major: int
    minor: int
    patch: int
    # Pre-releases sort before the release (semver §11); build metadata is ignored.
    release_rank: int = 1
    prerelease: tuple = ()

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return core + (f"-{'.'.join(str(p) for p in self.prerelease)}" if self.prerelease else "")

    @property
    def core(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def bump(self, part: str) -> Version:
        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, 0)
        return Version(self.major, self.minor, self.patch + 1)


def parse(text: str) -> Version | None:
    m = _SEMVER.match(text)
    if not m:
        return None
    pre = tuple(int(p) if p.isdigit() else p for p in m.group(4).split(".")) if m.group(4) else ()
    # Mixed int/str identifiers compare numerically-first per semver; encode as (kind, value).
    pre_key = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in pre)
    return Version(int(m.group(1)), int(m.group(2)), int(m.group(3)), 0 if pre else 1, pre_key)


def is_next_release(older: Version, newer: Version) -> bool:
    """True when ``newer`` is the next patch, minor or major release after ``older``.

    Pre-releases of that next release (or further pre-releases of the same core) count too.
    """
    candidates = {older.bump("patch").core, older.bump("minor").core, older.bump("major").core}
    if older.prerelease:
        candidates.add(older.core)  # 1.1.0-rc.1 → 1.1.0 (or → 1.1.0-rc.2)
    return newer.core in candidates and newer > older
