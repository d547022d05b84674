"""`trainer tokenizer train` — train a byte-level BPE and write tokenizer.json, vocab.json
and merges.txt.

    trainer tokenizer train --input src/ --vocab-size 32768 --min-frequency 2 --out tok/

Without --input it trains on the embedded corpus: the interpreter's standard library.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from trainer.data.corpus import embedded_corpus
from trainer.tokenizer import bpe
from trainer.tokenizer.counting import CorpusReadError, count_files
from trainer.tokenizer.model import ByteLevelBPE


def format_progress(merges: int, seconds: float, top_count: int, heap: int) -> str:
    return f"[bpe] merges={merges} elapsed={seconds:.1f}s top_count={top_count} heap={heap}"


def input_files(inputs: list[Path]) -> list[Path]:
    """Files in a deterministic order: each input as given, directories walked sorted.
    Without inputs: the embedded corpus (undecodable stdlib files skipped and counted)."""
    if not inputs:
        corpus = embedded_corpus()
        print(
            f"[bpe-setup] embedded corpus: standard library, {corpus.description}", file=sys.stderr
        )
        return list(corpus.files)
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            files.extend(sorted(p for p in item.rglob("*") if p.is_file()))
        elif item.is_file():
            files.append(item)
        else:
            raise CorpusReadError(f"{item}: no such file or directory")
    if not files:
        raise CorpusReadError(f"no input files under {', '.join(map(str, inputs))}")
    return files


def cmd_train(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        files = input_files(args.input)
        print(f"[bpe-setup] {len(files)} files", file=sys.stderr)
        counts = count_files(files, args.workers)
    except CorpusReadError as exc:
        print(f"trainer tokenizer train: error: {exc}", file=sys.stderr)
        return 1
    print(
        f"[bpe-setup] {len(counts)} distinct pre-tokens, "
        f"{sum(counts.values())} in all, {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )

    def progress(merges: int, seconds: float, top: int, heap: int) -> None:
        print(format_progress(merges, seconds, top, heap), file=sys.stderr, flush=True)

    try:
        model = bpe.train_fast(
            counts,
            vocab_size=args.vocab_size,
            min_frequency=args.min_frequency,
            special_tokens=tuple(args.special_token),
            progress=progress,
        )
    except bpe.BpeConfigError as exc:
        print(f"trainer tokenizer train: error: --vocab-size: {exc}", file=sys.stderr)
        return 1
    written = ByteLevelBPE.from_model(model).save(args.out)
    print(
        f"[bpe] DONE vocab={len(model.vocab)} merges={len(model.merges)} "
        f"elapsed={time.perf_counter() - start:.1f}s",
        file=sys.stderr,
    )
    for path in written:
        print(path)
    return 0


def add_tokenizer_parser(sub: argparse._SubParsersAction) -> None:
    tok = sub.add_parser("tokenizer", help="train byte-level BPE tokenizers")
    tsub = tok.add_subparsers(dest="tokenizer_command", required=True, metavar="COMMAND")
    p = tsub.add_parser("train", help="train a tokenizer (merge-identical to HF tokenizers)")
    p.add_argument(
        "--input",
        nargs="*",
        type=Path,
        default=[],
        metavar="PATH",
        help="files or directories (default: the standard library's .py files)",
    )
    p.add_argument("--vocab-size", type=int, required=True)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument(
        "--special-token",
        action="append",
        default=None,
        metavar="TOKEN",
        help="repeatable; default <|endoftext|>",
    )
    p.add_argument("--workers", type=int, default=None, help="counting processes (default: cores)")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(run=cmd_train, special_token=None)
