"""The vocabulary preflight: a run whose model, tokenizer, shards or checkpoint disagree on
the vocabulary is refused before anything is built, trained or written.

    preflight.check_run(config, options, train_data, val_data)   # PreflightError, or sizes

Contract C-LLAMA-370M-SOVEREIGN, INV-ARCH-370M-006 (FALSIFY-ARCH-370M-011): the model's
vocab_size must equal every vocabulary the run touches -

- the tokenizer the run names (``data.tokenizer``: its tokenizer.json entries,
  trainer/model/vocab.py tokenizer_vocab_size), which is also the one the checkpoints
  name for export;
- the vocabulary each token-shard data source was encoded with (its manifest.json), and
  the tokenizer itself must be the one those shards were encoded with (sha256 of
  tokenizer.json, as the manifest records it);
- on resume from a named checkpoint, the architecture its manifest.json records (the
  checkpoint loader verifies the architecture of every candidate again before reading it).

Why before the model is built: a 370M model takes seconds and gigabytes to build, and a
mismatch found at the first evaluation has already burnt compute, written a run manifest
and maybe checkpoints. A resume is checked exactly like a fresh start - the tokenizer or
data may have changed since the checkpoint was written. Sizes are compared with
trainer/model/vocab.py check_vocab_agreement, the one definition of "agree"; nothing is
ever padded or truncated. Sources without a manifest (in-memory tensors) carry no
vocabulary to compare, and a config built in code over them names no tokenizer
(trainer/config/sections.py IN_CODE_ONLY); a loaded config always names one, and it is checked.

loop.train calls ``preflight.check_run`` through this module (looked up at call time), so
tests/mutants/preflight.py can move or skip it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gates.io.files import read_regular, sha256_file
from trainer.checkpoint.layout import MANIFEST_FILE
from trainer.config.sections import RunConfig
from trainer.data.manifest import Manifest
from trainer.model.vocab import VocabMismatchError, check_vocab_agreement, tokenizer_vocab_size
from trainer.tokenizer.model import TokenizerFileError
from trainer.train.options import RunOptions

#: A checkpoint manifest is a few KB; past this it is not one.
MANIFEST_LIMIT = 1024 * 1024


class PreflightError(ValueError):
    """The run is refused before it starts; the message names every file and size involved."""


@dataclass(frozen=True)
class Vocabulary:
    """One vocabulary the run touches: its size and where that size was read."""

    size: int
    source: str  # e.g. "tokenizer runs/demo/tokenizer/tokenizer.json (its entries)"


def _tokenizer_file(path: Path) -> Path:
    return path / "tokenizer.json" if path.is_dir() else path


def _tokenizer(config: RunConfig) -> Vocabulary | None:
    if config.data.tokenizer is None:
        return None
    file = _tokenizer_file(Path(config.data.tokenizer))
    try:
        size = tokenizer_vocab_size(file)
    except TokenizerFileError as exc:  # a named tokenizer that cannot be read is no pass
        raise PreflightError(
            f"the run's tokenizer cannot be read, so its vocabulary cannot be checked: {exc}; "
            "nothing trained or written"
        ) from None
    return Vocabulary(size, f"tokenizer {file} (its entries)")


def _manifests(sources: Iterable[Any]) -> list[Manifest]:
    """The distinct shard manifests behind ``sources`` (train and val share one)."""
    found: dict[Path, Manifest] = {}
    for source in sources:
        manifest = getattr(source, "manifest", None)
        if isinstance(manifest, Manifest):
            found.setdefault(manifest.path.resolve(), manifest)
    return list(found.values())


def _checkpoint(options: RunOptions) -> Vocabulary | None:
    """The vocab_size the manifest of a resume's named checkpoint records. ``latest`` and
    unreadable manifests are the checkpoint loader's: it verifies the architecture of
    every candidate before reading a byte of it and refuses or skips, saying why."""
    spec = options.resume_from
    if spec is None or str(spec) == "latest":
        return None
    path = Path(spec) / MANIFEST_FILE
    try:
        # The one read rule: a FIFO in its place is the loader's to refuse, never waited on.
        size = json.loads(read_regular(path, MANIFEST_LIMIT))["architecture"]["vocab_size"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if isinstance(size, bool) or not isinstance(size, int):
        return None
    return Vocabulary(size, f"checkpoint {path} (its architecture)")


def vocabularies(
    config: RunConfig, options: RunOptions, sources: Iterable[Any]
) -> list[Vocabulary]:
    """Every vocabulary the run touches, besides the model's own."""
    tokenizer, checkpoint = _tokenizer(config), _checkpoint(options)
    found = [] if tokenizer is None else [tokenizer]
    found += [
        Vocabulary(m.vocab_size, f"shards {m.path} (the vocabulary they were encoded with)")
        for m in _manifests(sources)
    ]
    return found + ([] if checkpoint is None else [checkpoint])


def _consequence(model: int, other: int) -> str:
    if model > other:
        rows = model - other
        return f"{rows} embedding row{'s' * (rows != 1)} no token can reach"
    return f"ids {model}..{other - 1} would index past the embedding"


def _check_sizes(model_vocab: int, found: list[Vocabulary]) -> None:
    problems = []
    for vocab in found:
        try:  # the one definition of "agree" (INV-ARCH-370M-006); its message is ours below
            check_vocab_agreement(model_vocab, vocab.size)
        except VocabMismatchError:
            problems.append(
                f"model vocab_size {model_vocab} != {vocab.size} of {vocab.source}: "
                f"{_consequence(model_vocab, vocab.size)}"
            )
    if not problems:
        return
    others = sorted({v.size for v in found} - {model_vocab})
    fix = (
        f"set the model's vocab_size to {others[0]} or use a tokenizer and shards of "
        f"{model_vocab} entries"
        if len(others) == 1
        else f"they disagree among themselves too ({', '.join(map(str, others))}): encode the "
        "shards with the run's tokenizer and set the model's vocab_size to its size"
    )
    raise PreflightError(
        f"vocabulary preflight: {'; '.join(problems)}. {fix[0].upper()}{fix[1:]} "
        "(vocabularies are never padded or truncated); nothing trained or written"
    )


def _check_tokenizer_encoded_the_shards(config: RunConfig, manifests: list[Manifest]) -> None:
    """The run's tokenizer must be the one its shards were encoded with, byte for byte:
    two tokenizers of one size still give the same ids different meanings."""
    if config.data.tokenizer is None:
        return
    file = _tokenizer_file(Path(config.data.tokenizer))
    actual = sha256_file(file)
    for manifest in manifests:
        encoded_with = manifest.data["tokenizer"]["sha256"]
        if actual != encoded_with:
            raise PreflightError(
                f"tokenizer {file} (sha256 {actual[:16]}...) is not the tokenizer the shards "
                f"{manifest.path} were encoded with (sha256 {encoded_with[:16]}...): the same "
                "ids would mean other tokens; re-encode the shards or name their tokenizer; "
                "nothing trained or written"
            )


def check_run(config: RunConfig, options: RunOptions, *sources: Any) -> list[Vocabulary]:
    """Refuse (PreflightError) a run whose vocabularies disagree; returns those checked.

    ``sources``: the run's data sources (None allowed); reads only small JSON files and
    hashes tokenizer.json, so it costs milliseconds whatever the model's size."""
    given = [s for s in sources if s is not None]
    found = vocabularies(config, options, given)
    _check_sizes(config.model.vocab_size, found)
    _check_tokenizer_encoded_the_shards(config, _manifests(given))
    return found
