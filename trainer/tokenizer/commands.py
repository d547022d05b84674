"""`trainer tokenizer train` — train a byte-level BPE and write tokenizer.json, vocab.json
and merges.txt.

    trainer tokenizer train --input src/ --vocab-size 32768 --min-frequency 2 --out tok/

Without --input it trains on the embedded corpus: the interpreter's standard library.
The work is trainer/tokenizer/training.py's train_tokenizer (`trainer pipeline` calls it too).

Exit 1, nothing written, with one line on stderr: an input missing or not UTF-8; a
--vocab-size the specials and the alphabet do not fit, or more than the corpus allows
(the line names how many it does: train again with that --vocab-size); an --out that
already holds a tokenizer (pass --force to replace it) or is not a directory; a write that
fails (disk full, a file size limit, permission), leaving --out as it was.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer import exit_codes
from trainer.tokenizer.bpe import BpeConfigError
from trainer.tokenizer.counting import CorpusReadError
from trainer.tokenizer.training import (
    OutExistsError,
    TokenizerWriteError,
    VocabShortError,
    train_tokenizer,
)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_train(args: argparse.Namespace) -> int:
    try:
        written = train_tokenizer(
            args.input,
            args.out,
            vocab_size=args.vocab_size,
            min_frequency=args.min_frequency,
            special_tokens=tuple(args.special_token),
            workers=args.workers,
            progress=_stderr,
            overwrite=args.force,
        )
    except (CorpusReadError, OutExistsError, VocabShortError) as exc:
        print(f"trainer tokenizer train: error: {exc}", file=sys.stderr)
        return exit_codes.FINDINGS
    except TokenizerWriteError as exc:
        print(f"trainer tokenizer train: error: {exc.strerror}", file=sys.stderr)
        return exit_codes.FINDINGS
    except BpeConfigError as exc:
        print(f"trainer tokenizer train: error: --vocab-size: {exc}", file=sys.stderr)
        return exit_codes.FINDINGS
    for path in written:
        print(path)
    return exit_codes.OK


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
    p.add_argument("--force", action="store_true", help="replace a tokenizer already in --out")
    p.set_defaults(run=cmd_train, special_token=None)
