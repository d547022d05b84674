"""A very long pre-token (one 20 MB line of one letter) trains in bounded memory, with the
same merges as Hugging Face `tokenizers` (issue 20, defect 5).

Before: a merge listed every changed pair once per occurrence, two Python ints per site,
so the first merge of a 20-million-letter word held ~40 million list entries (2.5 GB
peak). Words longer than bpe.LONG_WORD symbols now tally the changes per pair.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.trainer.test_bpe import corpora, hf_train, specials
from trainer.tokenizer import bpe
from trainer.tokenizer.pretokenize import ALPHABET, count_words

REPO = Path(__file__).resolve().parents[3]


def _vocab_size(text: str, sp: tuple[str, ...], extra: int) -> int:
    return len(sp) + len(set(ALPHABET) | set("".join(count_words([text])))) + extra


@given(text=corpora, extra=st.integers(0, 80), min_frequency=st.integers(0, 3), sp=specials)
@settings(max_examples=100, deadline=None)
def test_tallied_merges_equal_hf_merge_for_merge(text, extra, min_frequency, sp):
    """Every word of 3 symbols or more takes the tallied path: still HF's merges."""
    vocab_size = _vocab_size(text, sp, extra)
    hf_vocab, hf_merges = hf_train(text, vocab_size, min_frequency, sp)
    with mock.patch.object(bpe, "LONG_WORD", 2):
        ours = bpe.train_fast(
            count_words([text]), vocab_size=vocab_size, min_frequency=min_frequency,
            special_tokens=sp, engine="python",  # LONG_WORD is the Python loop's
        )  # fmt: skip
    assert list(ours.merges) == hf_merges
    assert list(ours.vocab) == hf_vocab


def _long_corpus() -> str:
    rng = random.Random(5)
    letters = "abcdefgh"
    return "".join(
        [
            "a" * 9000 + "\n",
            "ab" * 5000 + "\n",
            "".join(rng.choice(letters) for _ in range(6000)) + "\n",
            " the cat sat on the mat; the dog ran under the log\n" * 20,
            "".join(rng.choice(letters) for _ in range(5000)) + " x = 1\n",
        ]
    )


def test_long_words_train_as_hf_and_as_the_listed_path():
    text = _long_corpus()
    counts = count_words([text])
    assert max(map(len, counts)) > bpe.LONG_WORD  # the Python loop's tallied path runs
    vocab_size = _vocab_size(text, ("<|endoftext|>",), 300)
    tallied = bpe.train_fast(counts, vocab_size=vocab_size, min_frequency=2, engine="python")
    with mock.patch.object(bpe, "LONG_WORD", 10**12):  # every word listed, as before
        listed = bpe.train_fast(counts, vocab_size=vocab_size, min_frequency=2, engine="python")
    assert tallied == listed
    assert bpe.train_fast(counts, vocab_size=vocab_size, min_frequency=2) == tallied  # compiled
    hf_vocab, hf_merges = hf_train(text, vocab_size, 2, ("<|endoftext|>",))
    assert list(tallied.merges) == hf_merges and list(tallied.vocab) == hf_vocab


_PEAK = """
import resource, sys
from trainer.tokenizer import bpe
from trainer.tokenizer.pretokenize import count_words
counts = count_words(["a" * 3_000_000 + "\\n"])  # one pre-token, three million letters
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model = bpe.train_fast(counts, vocab_size=300, min_frequency=2, engine=sys.argv[1])
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(len(model.vocab), grown // 1024)
"""


@pytest.mark.parametrize("engine", bpe.ENGINES)
def test_a_three_million_letter_pre_token_trains_in_bounded_memory(engine):
    """Peak RSS growth while training (Linux ru_maxrss, KiB), in a fresh process: listed
    changes grew it 200-350 MB for this word (2.3 GB for 20 MB of letters); tallies ~0."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, engine], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert proc.returncode == 0, proc.stderr
    vocab, grown_mb = map(int, proc.stdout.split())
    assert vocab > 257  # it merged: "a" runs of 2, 4, 8, ... letters
    assert grown_mb < 60, f"training grew the peak RSS by {grown_mb} MB"
