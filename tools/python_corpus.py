"""Materialize a pinned Python-source corpus directory of a given size (GATE-BPE-TRAIN-PERF-003).

    python tools/python_corpus.py --megabytes 127 --out /tmp/py127

Takes the embedded corpus with site-packages (standard library first, then installed
packages, each sorted by path; undecodable files skipped), keeps whole files until the
size is reached, and copies them under OUT with their relative paths flattened into
names, so a benchmark reads a fixed set of files whatever is installed later. Prints the
directory's file count, bytes and a content digest (sha256 over names and contents).
GATE-BPE-TRAIN-PERF-003's recipe (PYTHON_CORPUS_127MB in tests/measurements/bpe_training_perf.py)
runs it with --megabytes 127; the files depend on this Python and its installed packages,
so the digest is the same only where those are.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.tokenizer.corpus import embedded_corpus  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=127)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"python_corpus: error: {args.out} exists; choose a new directory", file=sys.stderr)
        return 1
    budget = int(args.megabytes * 1_000_000)
    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    digest, total, count = hashlib.sha256(), 0, 0
    for index, src in enumerate(embedded_corpus(site_packages=True).files):
        data = src.read_bytes()
        if total + len(data) > budget:
            break
        name = f"{index:06d}-{src.name}"
        (tmp / name).write_bytes(data)
        digest.update(name.encode() + b"\0" + data)
        total += len(data)
        count += 1
    tmp.rename(args.out)
    print(f"{args.out}: {count} files, {total} bytes, sha256 {digest.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
