"""The embedded default corpus: Python source that every machine running us already has.

The running interpreter's standard library (~30 MB of real code), optionally with its
site-packages (~130 MB once torch is installed). Files come sorted by path so every run
sees the same documents in the same order; files that are not UTF-8 are skipped and
reported, never silently decoded with replacement characters.

``input_files(inputs)`` is what `trainer tokenizer train --input PATH...` reads: the paths
given, directories walked sorted, or this corpus when none is given (said in a
``[bpe-setup]`` line to the caller's ``progress``).
"""

from __future__ import annotations

import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainer.tokenizer.counting import CorpusReadError

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


def input_files(inputs: list[Path], progress: Callable[[str], None] | None = None) -> list[Path]:
    """Files in a deterministic order: each input as given, directories walked sorted.
    Without inputs: the embedded corpus (undecodable stdlib files skipped and counted, in a
    line to ``progress``)."""
    if not inputs:
        corpus = embedded_corpus()
        if progress is not None:
            progress(f"[bpe-setup] embedded corpus: standard library, {corpus.description}")
        return list(corpus.files)
    files = walk(inputs)
    if not files:
        raise CorpusReadError(f"no input files under {', '.join(map(str, inputs))}")
    return files


def walk(inputs: list[Path]) -> list[Path]:
    """Each input as given, directories walked in sorted order; a missing input is an error."""
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            files.extend(sorted(p for p in item.rglob("*") if p.is_file()))
        elif item.is_file():
            files.append(item)
        else:
            raise CorpusReadError(f"{item}: no such file or directory")
    return files
