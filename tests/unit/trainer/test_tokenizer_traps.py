"""`trainer tokenizer train` never gives less than asked, never replaces a tokenizer
unasked, and leaves --out as it was when the disk refuses a write (issue 20, defect 5
and the disk-full section)."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.tokenizer import bpe, model, training
from trainer.tokenizer.pretokenize import count_words

REPO = Path(__file__).resolve().parents[3]
FILES = ("tokenizer.json", "vocab.json", "merges.txt")


def _train(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", "tokenizer", "train", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )


def _contents(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.txt"
    path.write_text("hello world\n", encoding="utf-8")
    return path


def test_a_vocab_the_corpus_cannot_fill_is_refused_naming_what_it_allows(tiny, tmp_path):
    out = tmp_path / "tok"
    proc = _train("--input", str(tiny), "--vocab-size", "300", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "allows 257 tokens, not the 300 asked" in proc.stderr
    assert "--vocab-size 257" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()
    # Two-sided: what the corpus allows is trained, exactly that size.
    proc = _train("--input", str(tiny), "--vocab-size", "257", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    vocab = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert len(vocab) == 257


def test_an_existing_tokenizer_is_replaced_only_with_force(tiny, tmp_path):
    out = tmp_path / "tok"
    assert _train("--input", str(tiny), "--vocab-size", "257", "--out", str(out)).returncode == 0
    (out / "vocab.json").write_text("{}", encoding="utf-8")  # tell the old files apart
    before = _contents(out)
    proc = _train("--input", str(tiny), "--vocab-size", "257", "--out", str(out))
    assert proc.returncode == 1 and "already holds a tokenizer" in proc.stderr, proc.stderr
    assert "--force" in proc.stderr and "Traceback" not in proc.stderr
    assert _contents(out) == before
    proc = _train("--input", str(tiny), "--vocab-size", "257", "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "vocab.json").read_text(encoding="utf-8")) != {}
    # An empty directory, or one without a tokenizer, is not "existing": no --force needed.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _train("--input", str(tiny), "--vocab-size", "257", "--out", str(empty)).returncode == 0


def _size_limited(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails with EFBIG

    return apply


def test_a_write_past_a_file_size_limit_fails_cleanly_and_loses_nothing(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"word{i} other{i * 3} x{i % 7}\n" for i in range(3000)))
    argv = ["--input", str(corpus), "--vocab-size", "1000", "--out"]
    cmd = [sys.executable, "-m", "trainer", "tokenizer", "train", *argv]

    def limited(out: Path, *extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*cmd, str(out), *extra],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
            preexec_fn=_size_limited(20_000),  # tokenizer.json is ~50 KB
        )

    fresh = tmp_path / "fresh" / "tok"
    proc = limited(fresh)
    assert proc.returncode == 1, proc.stderr
    assert "cannot write the tokenizer" in proc.stderr and "File too large" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not fresh.exists() and not fresh.parent.exists()  # no half-written --out

    kept = tmp_path / "kept"
    assert _train(*argv, str(kept), "--vocab-size", "400").returncode == 0
    before = _contents(kept)
    proc = limited(kept, "--force")
    assert proc.returncode == 1 and "File too large" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _contents(kept) == before  # the existing tokenizer untouched, no temp file


def test_a_failure_after_some_files_are_staged_publishes_none(tmp_path, monkeypatch):
    target = _trained(tmp_path / "old")
    before = _contents(target)
    real, calls = getattr(model, "write_temp", None), []  # None: before the fix

    def fail_on_the_third(path: Path, data: bytes) -> Path:
        calls.append(path.name)
        if len(calls) == 3:
            raise OSError(27, "File too large", str(path))
        return real(path, data)

    monkeypatch.setattr(model, "write_temp", fail_on_the_third, raising=False)
    other = bpe.train_fast(count_words(["ab ab cd cd\n"]), vocab_size=259, min_frequency=1)
    with pytest.raises(OSError, match="File too large"):
        model.ByteLevelBPE.from_model(other).save(target)
    assert calls == list(FILES)
    assert _contents(target) == before


def _trained(out: Path) -> Path:
    corpus = out.parent / "c.txt"
    corpus.write_text("hello hello world world\n", encoding="utf-8")
    training.train_tokenizer([corpus], out, vocab_size=258, min_frequency=1)
    return out
