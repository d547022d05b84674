"""The BPE trainer equals Hugging Face `tokenizers` merge for merge, and its naive reference.

Oracles: HF BpeTrainer (ByteLevel, add_prefix_space=False, ByteLevel initial alphabet) and
train_reference (recount everything every merge). Corpora are random and adversarial:
runs of one character (overlapping pairs), ties, "\\r", apostrophes, digits, non-ASCII,
letters new in Unicode 17 (which HF treats as "other"), specials that collide with merges.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from trainer.tokenizer import bpe
from trainer.tokenizer.pretokenize import ALPHABET, count_words, pretokenize
from trainer.tokenizer.unicode_classes import LETTER_RANGES, NUMBER_RANGES, WHITESPACE_RANGES

ROOT = Path(__file__).resolve().parents[3]


def _first_unicode17_only_letter() -> str:
    hf = {cp for a, b in LETTER_RANGES for cp in range(a, b + 1)}
    return next(
        chr(cp)
        for cp in range(0x80, 0x110000)
        if not 0xD800 <= cp <= 0xDFFF and cp not in hf and regex.match(r"\p{L}", chr(cp))
    )


NEW_LETTER = _first_unicode17_only_letter()
CHARS = [
    "a",
    "b",
    "c",
    "a",
    "b",
    " ",
    " ",
    "\n",
    "\r",
    "'",
    "s",
    "1",
    "2",
    "é",
    "ß",
    "日",
    "\u3000",
    "\t",
    "-",
    ".",
    NEW_LETTER,
]


@functools.lru_cache(maxsize=1024)  # each engine's case asks for the same oracle result
def hf_train(
    text: str, vocab_size: int, min_frequency: int, specials: tuple[str, ...]
) -> tuple[list[str], list[tuple[str, str]]]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.txt"
        path.write_bytes(text.encode("utf-8"))
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(specials),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train([str(path)], trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = [t for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1])]
    return vocab, [tuple(m) for m in model["merges"]]


#: Every trainer test runs each merge loop: the compiled one (the default) and the Python
#: one, which the mutants of tests/mutants/bpe.py reach.
engines = pytest.mark.parametrize("engine", bpe.ENGINES)
corpora = st.lists(st.sampled_from(CHARS), min_size=1, max_size=300).map("".join)
specials = st.sampled_from([("<|endoftext|>",), (), ("<|endoftext|>", "ab"), ("ab", "<pad>")])


@given(text=corpora, extra=st.integers(0, 80), min_frequency=st.integers(0, 3), sp=specials)
@settings(max_examples=150)
@engines
def test_train_fast_equals_hf_merge_for_merge(text, extra, min_frequency, sp, engine):
    vocab_size = len(sp) + len(set(ALPHABET) | set("".join(count_words([text])))) + extra
    hf_vocab, hf_merges = hf_train(text, vocab_size, min_frequency, sp)
    ours = bpe.train_fast(
        count_words([text]),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=sp,
        engine=engine,
    )
    assert list(ours.merges) == hf_merges
    assert list(ours.vocab) == hf_vocab


@given(text=corpora, extra=st.integers(0, 80), min_frequency=st.integers(0, 3), sp=specials)
@settings(max_examples=150)
@engines
def test_train_fast_equals_the_naive_reference(text, extra, min_frequency, sp, engine):
    counts = count_words([text])
    vocab_size = len(sp) + len(set(ALPHABET) | set("".join(counts))) + extra
    fast = bpe.train_fast(
        counts, vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=sp, engine=engine
    )
    naive = bpe.train_reference(
        counts, vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=sp
    )
    assert fast == naive


@given(st.lists(st.sampled_from([c for c in CHARS if c != "\n"]), max_size=80).map("".join))
def test_pretokenize_equals_hf_byte_level(text):
    hf = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
    assert pretokenize(text) == [piece for piece, _ in hf]


# Both sides of every edge of the spelled-out classes: where a wrong table would show.
CLASS_EDGES = sorted(
    {
        chr(cp)
        for a, b in (*LETTER_RANGES, *NUMBER_RANGES, *WHITESPACE_RANGES)
        for cp in (a - 1, a, b, b + 1)
        if 0 <= cp < 0x110000 and not 0xD800 <= cp <= 0xDFFF
    }
)
edge_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"), st.sampled_from(CLASS_EDGES), st.sampled_from("a1 ")
    ),
    max_size=60,
)


@given(edge_text)
@settings(max_examples=400)
def test_pretokenize_equals_hf_on_any_unicode_text(text):
    # Every code point class (letters, numbers, whitespace: spelled out for `re`) as HF's.
    hf = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
    assert pretokenize(text) == [piece for piece, _ in hf]


def test_every_class_edge_splits_as_hf():
    # Exhaustive over CLASS_EDGES, in contexts that tell letter, number, whitespace and
    # other apart ("cc!" splits in three only for whitespace; "ac", "1c" stay whole only
    # for letters and numbers).
    hf = pre_tokenizers.ByteLevel(add_prefix_space=False)
    for c in CLASS_EDGES:
        text = f"{c}{c}! a{c} 1{c}{c}x"
        assert pretokenize(text) == [piece for piece, _ in hf.pre_tokenize_str(text)], hex(ord(c))


def hf_file_lines(text: str) -> list[str]:
    """How HF's trainer reads a file: split after each "\\n", which stays on its line."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def test_hf_file_lines_split_on_newline_only():
    assert hf_file_lines("a\r\nb\x0bc\u2028d\n\ne") == ["a\r\n", "b\x0bc\u2028d\n", "\n", "e"]


ascii_text = st.text(alphabet=st.characters(max_codepoint=127), max_size=200)


@given(st.one_of(corpora, ascii_text))
@settings(max_examples=300)
def test_counting_a_file_equals_the_pattern_run_line_by_line(text):
    # count_words reads a whole file in one regex pass; HF runs the encoder's pattern on
    # each line. Whitespace before a "\n" must end with it, never run into the next line.
    expected = Counter(piece for line in hf_file_lines(text) for piece in pretokenize(line))
    assert count_words([text]) == expected


@engines
def test_golden_merges_derived_by_hand(engine):
    # low x5, lower x2, newest x6, widest x3; min_frequency 2. By hand: (e,s)=9 ties (s,t)=9 and
    # e<s wins; then es+t; (l,o)=7 ties (o,w)=7, l<o; lo+w; (e,w)=6 beats (n,e), (w,est);
    # n+ew; new+est; at 3: d<i<w so d+est, i+dest, w+idest; at 2: e<low so e+r; low+er.
    counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
    model = bpe.train_fast(
        counts, vocab_size=1000, min_frequency=2, special_tokens=(), engine=engine
    )
    assert ["".join(m) for m in model.merges] == [
        "es",
        "est",
        "lo",
        "low",
        "ew",
        "new",
        "newest",
        "dest",
        "idest",
        "widest",
        "er",
        "lower",
    ]
    assert model.vocab[:2] == ("!", '"')  # sorted by code point of the mapped character
    assert model.vocab[-1] == "lower"


@engines
def test_specials_take_the_first_ids_and_a_colliding_merge_adds_no_slot(engine):
    model = bpe.train_fast(
        {"ab": 3}, vocab_size=400, special_tokens=("ab", "<|endoftext|>"), engine=engine
    )
    assert model.vocab[:2] == ("ab", "<|endoftext|>")
    assert model.merges == (("a", "b"),)
    assert len(model.vocab) == 2 + 256  # "ab" reused id 0


def test_vocab_too_small_for_the_alphabet_is_an_error():
    with pytest.raises(bpe.BpeConfigError, match="smaller than"):
        bpe.train_fast({"ab": 1}, vocab_size=100)


@engines
def test_progress_is_reported_every_thousand_merges(engine):
    text = "".join(f"w{i} x{i * 7} y{i % 13}\n" for i in range(4000))
    calls = []
    bpe.train_fast(
        count_words([text]),
        vocab_size=2600,
        progress=lambda merges, seconds, top, heap: calls.append((merges, top)),
        engine=engine,
    )
    assert [m for m, _ in calls] == [1000, 2000]
    assert all(top >= 1 for _, top in calls)


DETERMINISM = """
import glob, hashlib, os, sys, sysconfig
from trainer.tokenizer import bpe
from trainer.tokenizer.pretokenize import count_words
files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:25]
texts = [open(f, encoding="utf-8", errors="replace").read() for f in files]
m = bpe.train_fast(count_words(texts), vocab_size=1500, min_frequency=2)
print(hashlib.sha256(repr((m.vocab, m.merges)).encode()).hexdigest())
"""


@pytest.mark.slow
def test_training_is_identical_for_any_hash_seed():
    digests = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", DETERMINISM],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        digests.add(out.stdout.strip())
    assert len(digests) == 1


@engines
def test_stdlib_slice_equals_hf(engine):
    import glob  # noqa: PLC0415
    import sysconfig  # noqa: PLC0415

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:30]
    text = "".join(Path(f).read_text(encoding="utf-8", errors="replace") for f in files)
    hf_vocab, hf_merges = hf_train(text, 2048, 2, ("<|endoftext|>",))
    ours = bpe.train_fast(count_words([text]), vocab_size=2048, min_frequency=2, engine=engine)
    assert list(ours.merges) == hf_merges and list(ours.vocab) == hf_vocab
    assert hashlib.sha256(repr(ours.merges).encode()).hexdigest()  # non-empty result
    assert len(ours.merges) == 2048 - 257


@given(st.text(alphabet=st.characters(max_codepoint=127, exclude_characters="\n"), max_size=80))
def test_ascii_fast_path_equals_hf(text):
    hf = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
    assert pretokenize(text) == [piece for piece, _ in hf]


def _stdlib_slice(n: int) -> list[str]:
    import glob  # noqa: PLC0415
    import sysconfig  # noqa: PLC0415

    files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:n]
    return [Path(f).read_text(encoding="utf-8", errors="replace") for f in files]


@engines
def test_training_does_not_depend_on_word_order(engine):
    # FALSIFY-BPE-TRAIN-PERF-002, in-process half: the order words reach the trainer (file
    # order, worker completion order) must not matter; hash seeds are the slow test above.
    import random  # noqa: PLC0415

    counts = count_words(_stdlib_slice(40))
    expected = bpe.train_fast(counts, vocab_size=2500, min_frequency=2, engine=engine)
    for seed in (7, 8):
        items = list(counts.items())
        random.Random(seed).shuffle(items)
        assert (
            bpe.train_fast(dict(items), vocab_size=2500, min_frequency=2, engine=engine) == expected
        )
    assert (
        bpe.train_fast(
            dict(reversed(list(counts.items()))), vocab_size=2500, min_frequency=2, engine=engine
        )
        == expected
    )


@functools.cache  # the naive trainer takes ~6 s here: once for both engines' cases
def _naive_on_stdlib_slice(modules: int, *, vocab_size: int, min_frequency: int) -> bpe.BpeModel:
    counts = count_words(_stdlib_slice(modules))
    return bpe.train_reference(counts, vocab_size=vocab_size, min_frequency=min_frequency)


@pytest.mark.ship_blocking
@engines
def test_a_merge_visits_only_the_words_holding_its_pair(engine):
    # FALSIFY-BPE-TRAIN-PERF-005's structural half (speed itself is measured by the gate):
    # the fast trainer agrees with the naive one while visiting a small fraction of words.
    counts = count_words(_stdlib_slice(12))
    stats = bpe.TrainStats()
    fast = bpe.train_fast(counts, vocab_size=1200, min_frequency=2, stats=stats, engine=engine)
    assert fast == _naive_on_stdlib_slice(12, vocab_size=1200, min_frequency=2)
    full_recount = stats.merges * len(counts)
    assert stats.words_visited < 0.05 * full_recount, (stats.words_visited, full_recount)


@pytest.mark.ship_blocking
@engines
def test_the_heap_stays_bounded_by_live_pairs(monkeypatch, engine):
    # FALSIFY-BPE-TRAIN-PERF-003's bounded-heap half (wall-clock is the gate's measurement).
    counts = count_words(_stdlib_slice(40))
    unbounded = bpe.TrainStats()  # positive control: no rebuild, the heap keeps stale entries
    monkeypatch.setattr(bpe, "REBUILD_MIN", 10**12)
    bpe.train_fast(counts, vocab_size=3000, min_frequency=2, stats=unbounded, engine=engine)
    monkeypatch.setattr(bpe, "REBUILD_MIN", 256)
    monkeypatch.setattr(bpe, "REBUILD_FACTOR", 1)  # this corpus stays under 2x on its own
    stats = bpe.TrainStats()
    bpe.train_fast(counts, vocab_size=3000, min_frequency=2, stats=stats, engine=engine)
    assert stats.rebuilds > 0
    assert stats.heap_peak_entries <= 2 * stats.peak_live_pairs, stats
    # A rebuild that is counted but drops nothing leaves the peak where no rebuild does
    # (17,124 entries here, against 13,943 with them).
    assert unbounded.rebuilds == 0
    assert stats.heap_peak_entries < unbounded.heap_peak_entries, (stats, unbounded)


@given(
    text=st.lists(st.sampled_from(CHARS), min_size=1, max_size=600).map("".join),
    extra=st.integers(0, 200),
    min_frequency=st.integers(0, 3),
    sp=specials,
    rebuild=st.tuples(st.integers(0, 64), st.integers(1, 3)),
    every=st.integers(1, 40),
)
@settings(max_examples=150, deadline=None)
def test_the_engines_agree_on_merges_stats_and_progress(  # noqa: PLR0917 - drawn by @given
    text, extra, min_frequency, sp, rebuild, every
):
    """The compiled loop is the Python loop's steps: the same model, the same TrainStats
    (words visited, heap and live-pair peaks, rebuilds, why it stopped) and the same
    progress calls, with rebuilds forced often (REBUILD_MIN, REBUILD_FACTOR) and progress
    reported every few merges."""
    counts = count_words([text])
    vocab_size = len(sp) + len(set(ALPHABET) | set("".join(counts))) + extra
    runs = []
    with (
        mock.patch.object(bpe, "REBUILD_MIN", rebuild[0]),
        mock.patch.object(bpe, "REBUILD_FACTOR", rebuild[1]),
        mock.patch.object(bpe, "PROGRESS_EVERY", every),
    ):
        for engine in bpe.ENGINES:
            stats, calls = bpe.TrainStats(), []

            def report(merges, seconds, top, heap, calls=calls):
                calls.append((merges, top, heap))

            model = bpe.train_fast(
                counts,
                vocab_size=vocab_size,
                min_frequency=min_frequency,
                special_tokens=sp,
                progress=report,
                stats=stats,
                engine=engine,
            )
            runs.append((model, stats, calls))
    (compiled, compiled_stats, compiled_calls), (python, python_stats, python_calls) = runs
    assert compiled == python
    assert compiled_stats == python_stats
    assert compiled_calls == python_calls
    assert len(compiled_calls) == compiled_stats.merges // every


def test_a_compiled_loop_built_from_other_source_is_refused(monkeypatch):
    """No silent fallback and no stale build: a module whose recorded source digest is not
    the digest of _merge_loop.c now is refused, naming the rebuild; the current build loads."""
    module = bpe.compiled_merge_loop()  # two-sided: the build from this source is accepted
    assert len(module.SOURCE_SHA256) == 64
    bpe.compiled_merge_loop.cache_clear()
    monkeypatch.setattr(module, "SOURCE_SHA256", "0" * 64)
    with pytest.raises(bpe.CompiledLoopError, match=r"built from other source.*make venv"):
        bpe.train_fast({"ab": 3}, vocab_size=300)
    monkeypatch.undo()
    bpe.compiled_merge_loop.cache_clear()
    assert bpe.train_fast({"ab": 3}, vocab_size=300).merges == (("a", "b"),)


def test_a_compiled_loop_not_built_is_refused_naming_the_fix(monkeypatch):
    def not_built(name):
        raise ImportError(f"No module named {name!r}")

    bpe.compiled_merge_loop.cache_clear()
    monkeypatch.setattr(bpe.importlib, "import_module", not_built)
    try:
        with pytest.raises(bpe.CompiledLoopError, match=r"not built.*pip install -e trainer"):
            bpe.train_fast({"ab": 3}, vocab_size=300)
        assert bpe.train_fast({"ab": 3}, vocab_size=300, engine="python").merges == (("a", "b"),)
    finally:
        bpe.compiled_merge_loop.cache_clear()


def test_an_unknown_engine_is_refused():
    with pytest.raises(bpe.BpeConfigError, match="engine 'rust' is not one of compiled, python"):
        bpe.train_fast({"ab": 3}, vocab_size=300, engine="rust")
