"""Count pre-tokens of many files on several cores, with the same result as one core.

Workers each count a contiguous run of files; their counters are merged in file order, so
the merged counter's key order (first occurrence over the whole input) and counts equal
a single-process count exactly. That order is what makes training independent of the
worker count (C-BPE-TRAIN-PERF determinism).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import Counter
from pathlib import Path

from trainer.tokenizer.pretokenize import count_words

#: Below this many bytes a second process costs more than it saves.
PARALLEL_MIN_BYTES = 8 * 1024 * 1024


class CorpusReadError(ValueError):
    """An input file cannot be read as UTF-8 text (names the file)."""


def read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusReadError(f"{path}: not UTF-8 (byte offset {exc.start})") from None
    except OSError as exc:
        raise CorpusReadError(f"{path}: {exc.strerror or exc}") from None


def _count_files(paths: list[str]) -> Counter[str]:
    return count_words(read_text(Path(p)) for p in paths)


def _chunks(paths: list[Path], parts: int) -> list[list[str]]:
    """Contiguous runs of files of roughly equal bytes."""
    sizes = [p.stat().st_size for p in paths]
    target = sum(sizes) / parts
    out: list[list[str]] = [[]]
    acc = 0
    for path, size in zip(paths, sizes, strict=True):
        if acc >= target * len(out) and len(out) < parts:
            out.append([])
        out[-1].append(str(path))
        acc += size
    return [c for c in out if c]


def count_files(paths: list[Path], workers: int | None = None) -> Counter[str]:
    """Pre-token counts of ``paths`` (in that order), on up to ``workers`` processes."""
    workers = workers or os.cpu_count() or 1
    total = sum(p.stat().st_size for p in paths)
    if workers <= 1 or total < PARALLEL_MIN_BYTES or len(paths) < 2:
        return _count_files([str(p) for p in paths])
    chunks = _chunks(paths, workers * 4)  # more chunks than workers: better balance
    with mp.get_context("fork").Pool(workers) as pool:
        results = pool.map(_count_files, chunks)  # map keeps chunk order
    merged: Counter[str] = Counter()
    for counter in results:
        for word, n in counter.items():
            merged[word] += n
    return merged
