"""The embedded default corpus: Python source that every machine running us already has.

The running interpreter's standard library (~30 MB of real code), optionally with its
site-packages (~130 MB once torch is installed). Files come sorted by path so every run
sees the same documents in the same order; files that are not UTF-8 are skipped and
reported, never silently decoded with replacement characters.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

_PACKAGE_DIRS = {"site-packages", "dist-packages"}


@dataclass(frozen=True)
class EmbeddedCorpus:
    files: tuple[Path, ...]  # UTF-8 files, sorted by path
    skipped: tuple[Path, ...]  # undecodable or unreadable files, sorted by path

    @property
    def description(self) -> str:
        return f"{len(self.files)} files ({len(self.skipped)} undecodable skipped)"


def _python_files(root: Path, *, packages: bool) -> list[Path]:
    def wanted(p: Path) -> bool:
        in_packages = not _PACKAGE_DIRS.isdisjoint(p.relative_to(root).parts)
        return in_packages == packages and p.is_file()

    return sorted(p for p in root.rglob("*.py") if wanted(p))


def embedded_corpus(*, site_packages: bool = False) -> EmbeddedCorpus:
    """The standard library's .py files (and, with ``site_packages``, the installed
    packages' too, after them), split into decodable and skipped."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = _python_files(stdlib, packages=False)
    if site_packages:
        purelib = Path(sysconfig.get_paths()["purelib"])
        files += _python_files(purelib, packages=False) if purelib.is_dir() else []
    good: list[Path] = []
    bad: list[Path] = []
    for f in files:
        try:
            f.read_bytes().decode("utf-8")
            good.append(f)
        except (UnicodeDecodeError, OSError):
            bad.append(f)
    return EmbeddedCorpus(tuple(good), tuple(bad))
