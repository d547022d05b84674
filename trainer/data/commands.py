"""`trainer data` — encode a corpus into token shards, and inspect an encoded directory.

    trainer data encode --tokenizer tok/ --out data/ [--input src/ ...] [--val-fraction 0.02]
    trainer data inspect data/ [--json]

Without --input, encode reads the embedded corpus: the standard library's .py files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trainer import exit_codes
from trainer.data.encode import (
    DEFAULT_SHARD_TOKENS,
    DEFAULT_VAL_FRACTION,
    ENCODE_ERRORS,
    CorpusEncodeError,
    corpus_files,
    encode_corpus,
)
from trainer.data.manifest import MANIFEST_NAME, SPLITS, Manifest, load_manifest
from trainer.data.shards import ShardError


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cmd_encode(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    try:
        if args.input and args.site_packages:
            raise CorpusEncodeError("--site-packages applies to the embedded corpus only")
        files, skipped = corpus_files(args.input, args.site_packages, _stderr)
        _stderr(f"[data] {len(files)} files")
        manifest = encode_corpus(
            files,
            args.tokenizer,
            args.out,
            shard_tokens=args.shard_tokens,
            val_fraction=args.val_fraction,
            workers=args.workers,
            force=args.force,
            skipped_files=skipped,
            progress=_stderr,
        )
    except ENCODE_ERRORS as exc:
        _stderr(f"trainer data encode: error: {exc}")
        return exit_codes.FINDINGS
    seconds = time.perf_counter() - start
    for split in SPLITS:
        info = manifest["splits"][split]
        _stderr(
            f"[data] {split}: {info['documents']} documents, {info['tokens']} tokens, "
            f"{len(info['shards'])} shards"
        )
    _stderr(f"[data] DONE {manifest['totals']['tokens']} tokens, {seconds:.1f} s")
    print(args.out / MANIFEST_NAME)
    return exit_codes.OK


def format_manifest(manifest: Manifest) -> list[str]:
    data = manifest.data
    tok = data["tokenizer"]
    lines = [
        f"{manifest.directory}: verified (manifest sha256 {manifest.sha256[:16]})",
        f"tokenizer sha256 {tok['sha256'][:16]}, vocab {tok['vocab_size']}, "
        f"dtype {data['dtype']}, {tok['eot_token']} = {tok['eot_id']}",
        f"sources: {data['sources']['files']} files ({data['sources']['skipped']} skipped, "
        f"{data['sources']['empty_documents']} empty)",
    ]
    for split in SPLITS:
        info = data["splits"][split]
        lines.append(
            f"{split}: {len(info['shards'])} shards, {info['tokens']} tokens, "
            f"{info['documents']} documents"
        )
        lines.extend(
            f"  {s['file']}  {s['tokens']} tokens  {s['documents']} documents  {s['sha256'][:16]}"
            for s in info["shards"]
        )
    totals = data["totals"]
    lines.append(f"total: {totals['tokens']} tokens, {totals['documents']} documents")
    return lines


def cmd_inspect(args: argparse.Namespace) -> int:
    try:
        manifest = load_manifest(args.dir, verify=True)
    except ShardError as exc:
        _stderr(f"trainer data inspect: error: {exc}")
        return exit_codes.FINDINGS
    if args.json:
        print(json.dumps({"verified": True, "manifest_sha256": manifest.sha256, **manifest.data}))
    else:
        print("\n".join(format_manifest(manifest)))
    return exit_codes.OK


def add_data_parser(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="encode corpora into token shards and inspect them")
    dsub = data.add_subparsers(dest="data_command", required=True, metavar="COMMAND")
    p = dsub.add_parser("encode", help="encode a corpus into train/val shards + manifest.json")
    p.add_argument("--tokenizer", type=Path, required=True, metavar="DIR")
    p.add_argument(
        "--input",
        nargs="*",
        type=Path,
        default=[],
        metavar="PATH",
        help="files or directories, one document per file (default: the standard library)",
    )
    p.add_argument(
        "--site-packages",
        action="store_true",
        help="embedded corpus only: add the installed packages' .py files",
    )
    p.add_argument("--out", type=Path, required=True, metavar="DIR")
    p.add_argument("--val-fraction", type=float, default=DEFAULT_VAL_FRACTION)
    p.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS)
    p.add_argument("--workers", type=int, default=None, help="encoding processes (default: cores)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out directory")
    p.set_defaults(run=cmd_encode)
    p = dsub.add_parser("inspect", help="verify an encoded directory and print its contents")
    p.add_argument("dir", type=Path, metavar="DIR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_inspect)
