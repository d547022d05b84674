"""Train a byte-level BPE on corpus files and write it: the work of `trainer tokenizer
train` (trainer/tokenizer/commands.py) and of `trainer pipeline`'s tokenizer stage.

    written = train_tokenizer([Path("src/")], Path("tok"), vocab_size=32768)

Writes tokenizer.json, vocab.json and merges.txt into ``out`` and returns their paths.
Progress goes to the caller's ``progress`` (the command's stderr; None: nowhere):
``[bpe-setup]`` lines while the corpus is read and counted, a ``[bpe]`` line
(format_progress) as bpe.train_fast reports, and a DONE line. Raises
CorpusReadError (an input missing or not UTF-8) or bpe.BpeConfigError (a vocab_size the
specials and the alphabet do not fit) before anything is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainer.tokenizer import bpe
from trainer.tokenizer.corpus import input_files
from trainer.tokenizer.counting import count_files
from trainer.tokenizer.model import ByteLevelBPE


def format_progress(merges: int, seconds: float, top_count: int, heap: int) -> str:
    return f"[bpe] merges={merges} elapsed={seconds:.1f}s top_count={top_count} heap={heap}"


def train_tokenizer(
    inputs: list[Path],
    out: Path,
    *,
    vocab_size: int,
    min_frequency: int = 2,
    special_tokens: tuple[str, ...] = bpe.DEFAULT_SPECIAL_TOKENS,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[Path]:
    """Train on the files of ``inputs`` (corpus.input_files: none = the embedded corpus),
    counting on ``workers`` processes (None: one per core), and write the tokenizer to
    ``out``; returns the files written. Progress lines go to ``progress``."""
    say = progress if progress is not None else _quiet
    start = time.perf_counter()
    files = input_files(inputs, progress)
    say(f"[bpe-setup] {len(files)} files")
    counts = count_files(files, workers)
    say(
        f"[bpe-setup] {len(counts)} distinct pre-tokens, "
        f"{sum(counts.values())} in all, {time.perf_counter() - start:.1f} s"
    )

    def merges_done(merges: int, seconds: float, top: int, heap: int) -> None:
        say(format_progress(merges, seconds, top, heap))  # by name: tests/mutants/bpe.py

    model = bpe.train_fast(
        counts,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=tuple(special_tokens),
        progress=merges_done,
    )
    written = ByteLevelBPE.from_model(model).save(out)
    say(
        f"[bpe] DONE vocab={len(model.vocab)} merges={len(model.merges)} "
        f"elapsed={time.perf_counter() - start:.1f}s"
    )
    return written


def _quiet(line: str) -> None:
    """No progress wanted."""
