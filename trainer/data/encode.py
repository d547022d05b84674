"""Encode a corpus into train/val token shards plus manifest.json (issue #4).

Each input file is one document. A split's shards hold one token stream: every document's
tokens followed by the <|endoftext|> id, in file order, cut every ``shard_tokens`` tokens
(a document may continue into the next shard). Documents are encoded as plain text: a
literal "<|endoftext|>" inside a file stays text, so the separator id only ever marks a
real document boundary (tiktoken's ``encode_ordinary``).

Validation split, by content: a document goes to val when the first 8 bytes of the
sha256 of its UTF-8 bytes, read as a fraction of 2**64, fall below ``val_fraction``.
Why content and not position or path: a document's split never depends on the other
files, their order or where the corpus lives, and byte-identical copies (common in code)
always land in the same split, so val never holds a verbatim copy of a train document.
A split left empty by chance (small corpora) takes the one distinct document nearest
the threshold; fewer than 2 distinct non-empty documents is an error.

Everything is written into a sibling ``<out>.tmp-<pid>`` directory, manifest.json last,
then renamed onto ``out``: a crash leaves either no data directory or the old one. A write
that fails (a full disk: ENOSPC; a file-size limit: EFBIG; a permission) is a
CorpusEncodeError naming the file, the temp directory removed, ``out`` as it was.

    files, skipped = corpus_files([Path("src/")], site_packages=False)  # [] = embedded corpus
    manifest = encode_corpus(files, Path("tok"), Path("data"), val_fraction=0.01)
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import multiprocessing as mp
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gates.io.files import fsync_dir, sha256_file
from trainer.data.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    MANIFEST_VERSION,
    SPLITS,
)
from trainer.data.shards import ShardError, dtype_for_vocab, write_shard
from trainer.tokenizer.corpus import embedded_corpus, walk
from trainer.tokenizer.counting import CorpusReadError, read_text
from trainer.tokenizer.model import ByteLevelBPE, TokenizerFileError
from trainer.userfiles import display

EOT_TOKEN = "<|endoftext|>"
DEFAULT_SHARD_TOKENS = 1 << 23  # 16 MiB of uint16 ids per shard
DEFAULT_VAL_FRACTION = 0.02  # 157k val tokens on the stdlib: past the 131,072 a loss needs
#: Below this many input bytes a second process costs more than it saves.
PARALLEL_MIN_BYTES = 4 * 1024 * 1024
VAL_RULE = "sha256(document bytes)[:8] / 2**64 < val_fraction"


class CorpusEncodeError(ValueError):
    """The corpus, the arguments or the destination do not allow an encode (says why)."""


#: Everything corpus_files and encode_corpus raise for an encode that cannot be done (each
#: names the file, the argument or the destination); nothing is written then.
ENCODE_ERRORS = (ShardError, TokenizerFileError, CorpusReadError, CorpusEncodeError)


def corpus_files(
    inputs: list[Path], site_packages: bool, progress: Callable[[str], None] | None = None
) -> tuple[list[Path], int]:
    """(files in a deterministic order, files skipped): what `trainer data encode --input
    PATH...` encodes. Inputs as given, directories walked sorted; without inputs, the
    embedded corpus minus its undecodable files, described in a ``[data]`` line to
    ``progress`` (the command's stderr)."""
    if not inputs:
        corpus = embedded_corpus(site_packages=site_packages)
        source = "standard library" + (" + site-packages" if site_packages else "")
        if progress is not None:
            progress(f"[data] embedded corpus: {source}, {corpus.description}")
        return list(corpus.files), len(corpus.skipped)
    files = walk(inputs)
    if not files:
        raise CorpusEncodeError(f"empty corpus: no files under {', '.join(map(str, inputs))}")
    return files, 0


@dataclass(frozen=True)
class EncodedDocument:
    digest: bytes  # sha256 of the document's UTF-8 bytes
    tokens: np.ndarray  # ids, without the end-of-text separator


# ---------------------------------------------------------------- encoding (workers)
_worker_tokenizer: ByteLevelBPE | None = None  # set in each worker by _init_worker


def _init_worker(tokenizer: ByteLevelBPE) -> None:
    global _worker_tokenizer  # noqa: PLW0603 - per-process state of a Pool worker
    _worker_tokenizer = tokenizer


def _encode_paths(tokenizer: ByteLevelBPE, paths: list[str]) -> list[EncodedDocument]:
    dtype = dtype_for_vocab(tokenizer.vocab_size)
    out = []
    for path in paths:
        text = read_text(Path(path))
        digest = hashlib.sha256(text.encode("utf-8")).digest()
        out.append(EncodedDocument(digest, np.asarray(tokenizer.encode(text), dtype=dtype)))
    return out


def _encode_paths_in_worker(paths: list[str]) -> list[EncodedDocument]:
    assert _worker_tokenizer is not None, "pool started without _init_worker"
    return _encode_paths(_worker_tokenizer, paths)


def _chunks(paths: Sequence[Path], sizes: Sequence[int], parts: int) -> list[list[str]]:
    """Contiguous runs of files of roughly equal bytes, in file order."""
    target = max(sum(sizes), 1) / parts
    out: list[list[str]] = [[]]
    acc = 0
    for path, size in zip(paths, sizes, strict=True):
        if out[-1] and acc >= target * len(out) and len(out) < parts:
            out.append([])
        out[-1].append(str(path))
        acc += size
    return [c for c in out if c]


def encode_documents(
    files: Sequence[Path],
    tokenizer: ByteLevelBPE,
    workers: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[EncodedDocument]:
    """Every file encoded as plain text, in file order, on up to ``workers`` processes.
    The result does not depend on ``workers``: each document is encoded on its own and
    the chunks are contiguous runs of files, reassembled in order."""
    sizes = []
    for path in files:
        try:
            sizes.append(Path(path).stat().st_size)
        except OSError as exc:
            raise CorpusReadError(f"{path}: {exc.strerror or exc}") from None
    total_bytes = sum(sizes)
    workers = max(1, workers or os.cpu_count() or 1)
    parallel = workers > 1 and len(files) > 1 and total_bytes >= PARALLEL_MIN_BYTES
    # More chunks than workers: better balance, and progress lines while it runs.
    chunks = _chunks(files, sizes, parts=16 * workers)
    start = time.perf_counter()
    bytes_through = list(itertools.accumulate(sizes))  # bytes of files [0..i]
    documents: list[EncodedDocument] = []
    tokens = 0
    last_report = start

    def report(batch: list[EncodedDocument]) -> None:
        nonlocal tokens, last_report
        documents.extend(batch)
        tokens += sum(len(d.tokens) for d in batch)
        now = time.perf_counter()
        # At most one line a second, and always the last one.
        if progress is not None and (now - last_report >= 1 or len(documents) == len(files)):
            last_report = now
            progress(
                f"[data] encoded {len(documents)}/{len(files)} files, "
                f"{bytes_through[len(documents) - 1] / 1e6:.1f}/{total_bytes / 1e6:.1f} MB, "
                f"{tokens} tokens, {now - start:.1f} s"
            )

    if parallel:
        ctx = mp.get_context("fork")  # the tokenizer reaches workers by inheritance
        with ctx.Pool(workers, initializer=_init_worker, initargs=(tokenizer,)) as pool:
            for batch in pool.imap(_encode_paths_in_worker, chunks):  # imap keeps order
                report(batch)
    else:
        for chunk in chunks:
            report(_encode_paths(tokenizer, chunk))
    return documents


# ---------------------------------------------------------------- validation split
def val_key(digest: bytes) -> float:
    """Where a document falls in [0, 1): the first 8 bytes of its sha256 over 2**64."""
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_val(digests: Sequence[bytes], val_fraction: float) -> list[bool]:
    """For each document, whether it goes to val (see the module docstring for the rule).
    Identical documents always share a split; both splits end up non-empty."""
    distinct = sorted(set(digests), key=val_key)
    if len(distinct) < 2:
        raise CorpusEncodeError(
            f"need at least 2 distinct non-empty documents for a train/val split, got "
            f"{len(digests)} document(s), {len(distinct)} distinct"
        )
    val = {d for d in distinct if val_key(d) < val_fraction}
    if not val:
        val = {distinct[0]}
    elif len(val) == len(distinct):
        val.discard(distinct[-1])
    return [d in val for d in digests]


# ---------------------------------------------------------------- writing
def _load_tokenizer(tokenizer_dir: Path) -> ByteLevelBPE:
    tokenizer = ByteLevelBPE.load(tokenizer_dir)
    if EOT_TOKEN not in tokenizer.special_tokens or tokenizer.token_to_id(EOT_TOKEN) is None:
        raise TokenizerFileError(
            f"{tokenizer_dir / 'tokenizer.json'}: no {EOT_TOKEN} special token; the shards "
            f"need it to separate documents (train with --special-token '{EOT_TOKEN}')"
        )
    return tokenizer


def _check_destination(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and not out_dir.is_dir():
        raise CorpusEncodeError(f"{out_dir}: exists and is not a directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
        raise CorpusEncodeError(
            f"{out_dir}: exists and is not empty; pass force=True (--force) to replace it"
        )


@contextlib.contextmanager
def _writing(out_dir: Path, name: str) -> Iterator[None]:
    """An OSError while file ``name`` is written into ``out_dir``'s temp directory (a full
    disk, a file-size limit: the error names no file) as a CorpusEncodeError naming it as
    it would have been published."""
    try:
        yield
    except OSError as exc:
        raise CorpusEncodeError(
            f"{display(out_dir / name)}: cannot be written: {exc.strerror or exc}; nothing "
            f"written ({display(out_dir)} is as it was)"
        ) from None


def _write_split(
    directory: Path,
    split: str,
    stream: np.ndarray,
    *,
    shard_tokens: int,
    vocab_size: int,
    eot: int,
    out_dir: Path,
) -> dict:
    shards = []
    for index, begin in enumerate(range(0, len(stream), shard_tokens)):
        tokens = stream[begin : begin + shard_tokens]
        name = f"{split}-{index:05d}.bin"
        with _writing(out_dir, name):
            write_shard(directory / name, tokens, vocab_size)
        shards.append(
            {
                "file": name,
                "sha256": sha256_file(directory / name),
                "tokens": len(tokens),
                "documents": int(np.count_nonzero(tokens == eot)),
            }
        )
    return {
        "documents": sum(s["documents"] for s in shards),
        "tokens": len(stream),
        "shards": shards,
    }


def _stream(documents: list[EncodedDocument], eot_arr: np.ndarray) -> np.ndarray:
    pieces = [piece for doc in documents for piece in (doc.tokens, eot_arr)]
    return np.concatenate(pieces) if pieces else eot_arr[:0]


def _move_into_place(tmp_dir: Path, out_dir: Path) -> None:
    """Rename the finished ``tmp_dir`` onto ``out_dir``. An empty ``out_dir`` is replaced
    by one rename; a full one (force) is first renamed aside, so for a moment no
    ``out_dir`` exists but a half-written one never does."""
    if out_dir.is_dir() and any(out_dir.iterdir()):
        old = out_dir.with_name(f"{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        try:
            os.replace(tmp_dir, out_dir)
        except BaseException:
            os.replace(old, out_dir)
            raise
        shutil.rmtree(old)
    else:
        os.replace(tmp_dir, out_dir)  # rename(2) replaces an empty directory
    fsync_dir(out_dir.parent)


def encode_corpus(
    files: Sequence[Path],
    tokenizer_dir: Path,
    out_dir: Path,
    *,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    workers: int | None = None,
    force: bool = False,
    skipped_files: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Encode ``files`` (one document each) with the tokenizer in ``tokenizer_dir`` into
    ``out_dir``; return the manifest written there. ``skipped_files`` is recorded only
    (files the caller left out, e.g. undecodable ones). Raises CorpusEncodeError,
    CorpusReadError or TokenizerFileError; on any error ``out_dir`` is untouched."""
    # 1. Arguments and destination, before any work.
    out_dir, tokenizer_dir = Path(out_dir), Path(tokenizer_dir)
    if shard_tokens < 1:
        raise CorpusEncodeError(f"shard_tokens must be >= 1, got {shard_tokens}")
    if not 0 < val_fraction < 1:
        raise CorpusEncodeError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if not files:
        raise CorpusEncodeError("empty corpus: no input files")
    _check_destination(out_dir, force)
    # 2. Tokenizer: its end-of-text id separates documents; encode without specials.
    tokenizer = _load_tokenizer(tokenizer_dir)
    eot = tokenizer.token_to_id(EOT_TOKEN)
    plain = ByteLevelBPE(tokenizer.vocab, tokenizer.merges, special_tokens=())
    vocab_size, dtype = tokenizer.vocab_size, dtype_for_vocab(tokenizer.vocab_size)
    # 3. Encode, then drop empty documents: they carry no text, only a separator.
    encoded = encode_documents(files, plain, workers, progress)
    documents = [d for d in encoded if len(d.tokens)]
    if not documents:
        raise CorpusEncodeError(f"empty corpus: all {len(files)} input files are empty")
    # 4. Split whole documents.
    is_val = assign_val([d.digest for d in documents], val_fraction)
    by_split = {
        "train": [d for d, v in zip(documents, is_val, strict=True) if not v],
        "val": [d for d, v in zip(documents, is_val, strict=True) if v],
    }
    # 5. Shards, then the manifest, in a temp directory; then one rename.
    tmp_dir = out_dir.with_name(f"{out_dir.name}.tmp-{os.getpid()}")
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp_dir, ignore_errors=True)  # a leftover of a killed run with our pid
        tmp_dir.mkdir()
    except OSError as exc:
        raise CorpusEncodeError(
            f"{display(tmp_dir)}: cannot be made: {exc.strerror or exc}; nothing written"
        ) from None
    try:
        eot_arr = np.array([eot], dtype=dtype)
        splits = {
            split: _write_split(
                tmp_dir,
                split,
                _stream(by_split[split], eot_arr),
                shard_tokens=shard_tokens,
                vocab_size=vocab_size,
                eot=eot,
                out_dir=out_dir,
            )
            for split in SPLITS
        }
        manifest = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "tokenizer": {
                "sha256": sha256_file(tokenizer_dir / "tokenizer.json"),
                "vocab_size": vocab_size,
                "eot_token": EOT_TOKEN,
                "eot_id": eot,
            },
            "dtype": dtype.name,
            "shard_tokens": shard_tokens,
            "val_split": {"rule": VAL_RULE, "val_fraction": val_fraction},
            "sources": {
                "files": len(files),
                "skipped": skipped_files,
                "empty_documents": len(encoded) - len(documents),
            },
            "splits": splits,
            "totals": {
                "documents": sum(s["documents"] for s in splits.values()),
                "tokens": sum(s["tokens"] for s in splits.values()),
            },
        }
        with _writing(out_dir, MANIFEST_NAME):
            _write_json(tmp_dir / MANIFEST_NAME, manifest)
            fsync_dir(tmp_dir)
        _check_destination(out_dir, force)  # it may have appeared while we encoded
        try:
            _move_into_place(tmp_dir, out_dir)
        except OSError as exc:
            raise CorpusEncodeError(
                f"{display(out_dir)}: cannot be put in place: {exc.strerror or exc}; "
                "nothing written"
            ) from None
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        raise
    return manifest


def _write_json(path: Path, data: dict) -> None:
    with path.open("w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
