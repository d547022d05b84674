"""Train a byte-level BPE on corpus files and write it: the work of `trainer tokenizer
train` (trainer/tokenizer/commands.py) and of `trainer pipeline`'s tokenizer stage.

    written = train_tokenizer([Path("src/")], Path("tok"), vocab_size=32768)

Writes tokenizer.json, vocab.json and merges.txt into ``out`` and returns their paths:
all three or none (model.ByteLevelBPE.save). An ``out`` that already holds any of them
is refused before any work (OutExistsError) unless ``overwrite``; a write that fails (a
full disk, a file size limit) raises TokenizerWriteError, with ``out`` as it was.
A corpus too small for ``vocab_size`` is refused (VocabShortError, nothing written): the
message names the vocabulary it does allow, and training again with that --vocab-size
gives exactly that tokenizer. Never a smaller vocabulary than asked, without a word.
Progress goes to the caller's ``progress`` (the command's stderr; None: nowhere):
``[bpe-setup]`` lines while the corpus is read and counted, a ``[bpe]`` line
(format_progress) as bpe.train_fast reports, and a DONE line. Raises
CorpusReadError (an input missing or not UTF-8) or bpe.BpeConfigError (a vocab_size the
specials and the alphabet do not fit; VocabShortError is one) before anything is written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from trainer.tokenizer import bpe
from trainer.tokenizer.corpus import input_files
from trainer.tokenizer.counting import count_files
from trainer.tokenizer.model import ByteLevelBPE

#: The files a tokenizer directory holds (model.ByteLevelBPE.save writes them).
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt")

_WHY_STOPPED = {
    "min_frequency": "no remaining pair occurs at least --min-frequency {f} time(s)",
    "no_pairs": "every pre-token of the corpus is already one token",
}


class VocabShortError(bpe.BpeConfigError):
    """The corpus allows fewer tokens than vocab_size; ``allowed`` is how many."""

    def __init__(self, message: str, allowed: int) -> None:
        super().__init__(message)
        self.allowed = allowed


class OutExistsError(ValueError):
    """``out`` already holds a tokenizer (or is not a directory); nothing was written."""


class TokenizerWriteError(OSError):
    """The tokenizer could not be written (disk full, a file size limit, permission);
    ``out`` is as it was before."""


def check_out(out: Path, *, overwrite: bool = False) -> None:
    """Refuse an ``out`` that is not a directory, or that holds a tokenizer unless
    ``overwrite`` (OutExistsError, naming the files)."""
    if out.exists() and not out.is_dir():
        raise OutExistsError(f"{out}: exists and is not a directory; choose another --out")
    present = [name for name in TOKENIZER_FILES if (out / name).exists()]
    if present and not overwrite:
        raise OutExistsError(
            f"{out} already holds a tokenizer ({', '.join(present)}); pass --force to "
            "replace it, or choose another --out; nothing written"
        )


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
    overwrite: bool = False,
) -> list[Path]:
    """Train on the files of ``inputs`` (corpus.input_files: none = the embedded corpus),
    counting on ``workers`` processes (None: one per core), and write the tokenizer to
    ``out`` (replacing one there only when ``overwrite``); returns the files written.
    Progress lines go to ``progress``."""
    say = progress if progress is not None else _quiet
    check_out(out, overwrite=overwrite)
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

    stats = bpe.TrainStats()
    model = bpe.train_fast(
        counts,
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=tuple(special_tokens),
        progress=merges_done,
        stats=stats,
    )
    if len(model.vocab) < vocab_size:
        allowed = len(model.vocab)
        why = _WHY_STOPPED.get(stats.stopped, "{f}").format(f=min_frequency)
        raise VocabShortError(
            f"the corpus allows {allowed} tokens, not the {vocab_size} asked: after "
            f"{len(model.merges)} merge(s) {why}; ask --vocab-size {allowed}, give more "
            "text, or lower --min-frequency; nothing written",
            allowed,
        )
    check_out(out, overwrite=overwrite)  # again: another process may have written it since
    try:
        written = ByteLevelBPE.from_model(model).save(out)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise TokenizerWriteError(
            exc.errno, f"cannot write the tokenizer to {out}: {why}; {out} is as it was"
        ) from None
    say(
        f"[bpe] DONE vocab={len(model.vocab)} merges={len(model.merges)} "
        f"elapsed={time.perf_counter() - start:.1f}s"
    )
    return written


def _quiet(line: str) -> None:
    """No progress wanted."""
