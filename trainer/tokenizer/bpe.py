"""Byte-level BPE training, merge-for-merge equal to Hugging Face `tokenizers` BpeTrainer.

Recipe (train_fast):
  1. special tokens take the first ids;
  2. the alphabet — every character seen plus the 256 byte symbols — sorted by code point
     of the mapped character ("for determinism", as HF does), takes the next ids;
  3. each distinct pre-token becomes a word of symbol ids, weighted by its count;
  4. pair counts are over windows (an "aaa" word holds two (a, a) pairs);
  5. merges: pop the best heap entry — highest count, then the smaller (id_a, id_b).
     A stale entry is refreshed with its current count and pushed back *before* it is
     compared with min_frequency; training stops at the first valid top below it, or when
     the vocabulary reaches vocab_size. A merge visits only the words its entry lists.

Faithful to HF on purpose (the oracle decides parity): a heap entry carries the words it
was pushed for, so one pair may have several entries; the merged pair's own count is not
decremented, so a later entry of the same pair merges its words too and reuses the token's
id; a merge whose string already exists (a special token's included) adds no vocab slot.
HF saves each pair once, at its last rank: `BpeModel.merges` does the same.

The merge loop (steps 4 and 5) runs compiled by default (_merge_loop.c, built by `pip
install -e trainer`, 8x faster than Python) or in Python (engine="python"): the same steps,
the same merges and TrainStats (tests run both; the mutants reach the Python one).
train_reference recounts every pair before every merge: slow, kept as the parity oracle.
"""

from __future__ import annotations

import array
import functools
import gc
import hashlib
import heapq
import importlib
import itertools
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from trainer.tokenizer.pretokenize import ALPHABET

Pair = tuple[int, int]
#: progress(merges_done, elapsed_seconds, top_count, heap_entries), every PROGRESS_EVERY merges.
Progress = Callable[[int, float, int, int], None]
PROGRESS_EVERY = 1000
#: Rebuild the heap once it holds more than REBUILD_FACTOR entries per live pair (and more
#: than REBUILD_MIN in all): the source system's heap reached 1.81e9 mostly-stale entries.
REBUILD_FACTOR = 2
REBUILD_MIN = 4096
DEFAULT_SPECIAL_TOKENS = ("<|endoftext|>",)
#: train_fast's merge loops: "compiled" (_merge_loop.c, the default) and "python"
#: (_merge_loop_python), the same steps; tests run both, mutants reach the Python one.
ENGINES = ("compiled", "python")


@dataclass
class TrainStats:
    """Work counters of one train_fast run (FALSIFY-BPE-TRAIN-PERF-003 and -005 read them)."""

    merges: int = 0
    #: Words a merge visited, summed over merges: proportional to the words holding each
    #: merged pair, never to the corpus (a full recount would make it merges x words).
    words_visited: int = 0
    heap_peak_entries: int = 0
    peak_live_pairs: int = 0
    rebuilds: int = 0
    #: Why the merges stopped: "vocab_size" (the vocabulary is full), "min_frequency" (the
    #: best pair occurs fewer times) or "no_pairs" (every word is one token).
    stopped: str = ""


class BpeConfigError(ValueError):
    """vocab_size too small for the specials and alphabet, or another bad setting."""


class CompiledLoopError(RuntimeError):
    """The compiled merge loop is not built, or was built from other source."""


@functools.cache
def compiled_merge_loop() -> ModuleType:
    """The compiled merge loop (_merge_loop.c, built by `pip install -e trainer`), checked
    to be built from the source beside this file: an edit since the build would otherwise
    go unseen, and reading the source makes it a traced source of every gate it serves."""
    source = Path(__file__).with_name("_merge_loop.c")
    rebuild = "`make venv` or `pip install -e trainer` builds it (a C compiler is needed)"
    try:
        module = importlib.import_module("trainer.tokenizer._merge_loop")
    except ImportError as exc:
        raise CompiledLoopError(
            f"the compiled BPE merge loop is not built ({exc}); {rebuild}"
        ) from None
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    if digest != module.SOURCE_SHA256:
        raise CompiledLoopError(
            f"{module.__file__} was built from other source than {source} (sha256 "
            f"{module.SOURCE_SHA256[:12]}…, the file now {digest[:12]}…); {rebuild}"
        )
    return module


@dataclass(frozen=True)
class BpeModel:
    #: id → token (byte-mapped text); specials first, then the alphabet, then merges.
    vocab: tuple[str, ...]
    #: (left, right) token pairs in rank order, each pair once (as HF saves them).
    merges: tuple[tuple[str, str], ...]
    special_tokens: tuple[str, ...]

    def token_to_id(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.vocab)}


def _initial_vocab(
    word_counts: Mapping[str, int], vocab_size: int, special_tokens: tuple[str, ...]
) -> tuple[list[str], dict[str, int]]:
    id_to_word: list[str] = []
    word_to_id: dict[str, int] = {}
    for tok in special_tokens:
        if tok not in word_to_id:
            word_to_id[tok] = len(id_to_word)
            id_to_word.append(tok)
    alphabet = set(ALPHABET)
    for word in word_counts:
        alphabet.update(word)
    for ch in sorted(alphabet):  # by code point of the mapped character
        if ch not in word_to_id:
            word_to_id[ch] = len(id_to_word)
            id_to_word.append(ch)
    if vocab_size < len(id_to_word):
        raise BpeConfigError(
            f"vocab_size {vocab_size} is smaller than the {len(special_tokens)} special tokens "
            f"plus the {len(id_to_word) - len(special_tokens)}-symbol alphabet"
        )
    return id_to_word, word_to_id


# Pairs and heap entries are plain ints: hashing and comparing an int runs in C, a tuple
# of ints calls back per element. A pair is (a << PAIR_BITS) | b. A heap entry packs
# (COUNT_CAP - count, pair, seq) so the smallest int is the highest count, then the smaller
# (a, b), then the earlier push; its words live in a dict keyed by seq.
PAIR_BITS = 21
PAIR_MASK = (1 << (2 * PAIR_BITS)) - 1
SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
COUNT_CAP = 1 << 62


def _entry(count: int, pair: int, seq: int) -> int:
    return ((COUNT_CAP - count) << (2 * PAIR_BITS) | pair) << SEQ_BITS | seq


def _entry_parts(entry: int) -> tuple[int, int, int, int]:
    """(count, a, b, seq) of a heap entry."""
    pair = (entry >> SEQ_BITS) & PAIR_MASK
    count = COUNT_CAP - (entry >> (SEQ_BITS + 2 * PAIR_BITS))
    return count, pair >> PAIR_BITS, pair & ((1 << PAIR_BITS) - 1), entry & SEQ_MASK


MergeWord = Callable[[str], tuple[str, list[int], list[int]]]
#: A word longer than this many symbols (one pre-token of a minified file, a base64 blob,
#: a 20 MB line of one letter) has its merges' pair changes tallied (pair -> occurrences)
#: instead of listed one per occurrence: a list held 8 bytes and an int per occurrence,
#: 2.5 GB at the first merge of a 20-million-letter word. Same counts, same order, same
#: merges (tests/unit/trainer/test_bpe_long_words.py); shorter words keep the lists,
#: which are faster.
LONG_WORD = 1 << 12


def _word_merger(a: int, b: int, new: int) -> MergeWord:
    """The merge of (a, b) into ``new``, applied to one word at a time. A word is a string
    whose characters are token ids (chr(id)), so finding and replacing the pair runs in C.
    The merge returns the new word, the neighbour pairs that lost an occurrence and those
    that gained one, one entry per occurrence, as HF records them: the merged pair itself
    is in neither list, and a pair formed and undone within the word (the (new, a) of
    "abab") is in both."""
    pair, new_char = chr(a) + chr(b), chr(new)
    b_key, new_key = b << PAIR_BITS, new << PAIR_BITS

    def merge_long(word: str) -> tuple[str, dict[int, int], dict[int, int]]:
        # The same walk as merge's, tallied: pair -> occurrences, in first-occurrence
        # order (the order merge's lists meet them), so memory is the distinct pairs.
        lost: dict[int, int] = {}
        gained: dict[int, int] = {}
        site = word.find(pair)
        after_previous = -1
        while site >= 0:
            if site > 0:
                left = (new if site == after_previous else ord(word[site - 1])) << PAIR_BITS
                lost[left | a] = lost.get(left | a, 0) + 1
                gained[left | new] = gained.get(left | new, 0) + 1
            if site + 2 < len(word):
                right = ord(word[site + 2])
                lost[b_key | right] = lost.get(b_key | right, 0) + 1
                gained[new_key | right] = gained.get(new_key | right, 0) + 1
            after_previous = site + 2
            site = word.find(pair, after_previous)
        return word.replace(pair, new_char), lost, gained

    def merge(word: str) -> tuple[str, list[int], list[int]]:
        if len(word) > LONG_WORD:
            return merge_long(word)  # type: ignore[return-value] - tallies: _apply_tallies
        lost: list[int] = []
        gained: list[int] = []
        site = word.find(pair)
        after_previous = -1  # index just past the previous site: its symbol is now `new`
        while site >= 0:
            if site > 0:
                left = (new if site == after_previous else ord(word[site - 1])) << PAIR_BITS
                lost.append(left | a)
                gained.append(left | new)
            if site + 2 < len(word):
                right = ord(word[site + 2])
                lost.append(b_key | right)
                gained.append(new_key | right)
            after_previous = site + 2
            site = word.find(pair, after_previous)
        return word.replace(pair, new_char), lost, gained

    return merge


def _tally(changes: list[int] | dict[int, int]) -> Iterable[tuple[int, int]]:
    return changes.items() if isinstance(changes, dict) else ((p, 1) for p in changes)


def _apply_tallies(
    pair_counts: dict[int, int],
    where_to_update: dict[int, list[int]],
    word: tuple[int, int],
    lost: list[int] | dict[int, int],
    gained: list[int] | dict[int, int],
) -> None:
    """The merge loop's update for word ``i`` (weight ``n``) from tallied changes: what
    applying each occurrence in turn does, gains first, one addition per pair.
    ``word``: (its index, its count)."""
    i, n = word
    for changed, times in _tally(gained):
        pair_counts[changed] = pair_counts.get(changed, 0) + n * times
        listed = where_to_update.get(changed)
        if listed is None:
            where_to_update[changed] = [i]
        elif listed[-1] != i:
            listed.append(i)
    for changed, times in _tally(lost):
        after = pair_counts[changed] - n * times
        if after:
            pair_counts[changed] = after
        else:
            del pair_counts[changed]


def _as_id_string(word: str, word_to_id: Mapping[str, int]) -> str:
    return "".join(chr(word_to_id[ch]) for ch in word)


def _is_stale(stored_count: int, current_count: int) -> bool:
    return stored_count != current_count


def _words_to_visit(pos: list[int], n_words: int) -> Iterable[int]:
    """The words a merge visits: those its heap entry lists (the inverted index)."""
    return pos


def _rebuild_needed(entries: int, live_pairs: int) -> bool:
    return entries > REBUILD_MIN and entries > REBUILD_FACTOR * live_pairs


def _saved_merges(raw: list[tuple[int, int]], id_to_word: list[str]) -> tuple:
    last_rank = {pair: rank for rank, (pair, _) in enumerate(raw)}
    ordered = sorted(last_rank.items(), key=lambda kv: kv[1])
    low = (1 << PAIR_BITS) - 1
    return tuple((id_to_word[p >> PAIR_BITS], id_to_word[p & low]) for p, _ in ordered)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Training allocates millions of small containers that never form cycles; the cyclic
    collector would rescan them all, again and again (a third of the wall-clock)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def train_fast(
    word_counts: Mapping[str, int],
    *,
    vocab_size: int,
    min_frequency: int = 0,
    special_tokens: tuple[str, ...] = DEFAULT_SPECIAL_TOKENS,
    progress: Progress | None = None,
    stats: TrainStats | None = None,
    engine: str = "compiled",
) -> BpeModel:
    """Train on pre-token counts (see pretokenize.count_words), with the merge loop of
    ``engine`` (ENGINES)."""
    if vocab_size >= 1 << PAIR_BITS:
        raise BpeConfigError(f"vocab_size {vocab_size} exceeds {(1 << PAIR_BITS) - 1}")
    if engine not in ENGINES:
        raise BpeConfigError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    with _gc_paused():
        return _train_fast(
            word_counts,
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=special_tokens,
            progress=progress,
            stats=stats if stats is not None else TrainStats(),
            engine=engine,
        )


def _train_fast(
    word_counts: Mapping[str, int],
    *,
    vocab_size: int,
    min_frequency: int,
    special_tokens: tuple[str, ...],
    progress: Progress | None,
    stats: TrainStats,
    engine: str,
) -> BpeModel:
    id_to_word, word_to_id = _initial_vocab(word_counts, vocab_size, special_tokens)
    to_ids = {ord(ch): chr(i) for ch, i in word_to_id.items() if len(ch) == 1}
    words = [w.translate(to_ids) for w in word_counts]  # one symbol per character, in C
    counts = list(word_counts.values())

    def add_token(a: int, b: int) -> int:
        """The id of the merge of tokens a and b: a new id unless its string exists (a
        special token's included), which then adds no vocab slot."""
        new_token = id_to_word[a] + id_to_word[b]
        new_id = word_to_id.get(new_token)
        if new_id is None:
            new_id = len(id_to_word)
            id_to_word.append(new_token)
            word_to_id[new_token] = new_id
        return new_id

    loop = _merge_loop_compiled if engine == "compiled" else _merge_loop_python
    limits = (len(word_to_id), vocab_size, min_frequency)
    raw_merges = loop(words, counts, add_token, limits=limits, progress=progress, stats=stats)
    stats.merges = len(raw_merges)
    return BpeModel(
        tuple(id_to_word),
        _saved_merges(raw_merges, id_to_word),
        tuple(dict.fromkeys(special_tokens)),
    )


#: The vocabulary's size now, the size asked for and min_frequency.
Limits = tuple[int, int, int]


def _merge_loop_compiled(
    words: list[str],
    counts: list[int],
    add_token: Callable[[int, int], int],
    *,
    limits: Limits,
    progress: Progress | None,
    stats: TrainStats,
) -> list[tuple[int, int]]:
    """The merge loop in C (_merge_loop.c): _merge_loop_python's steps, same merges and
    stats. Words go over as one buffer of 32-bit token ids."""
    symbols = bytearray("".join(words).encode(_UTF32_NATIVE, "surrogatepass"))
    start = time.perf_counter()

    def report(merges: int, top_count: int, heap: int) -> None:
        progress(merges, time.perf_counter() - start, top_count, heap)  # type: ignore[misc]

    raw_merges, (visited, heap_peak, live_peak, rebuilds, stopped) = compiled_merge_loop().run(
        symbols,
        array.array("q", map(len, words)).tobytes(),
        array.array("q", counts).tobytes(),
        *limits,
        add_token,
        report if progress else None,
        PROGRESS_EVERY,
        REBUILD_MIN,
        REBUILD_FACTOR,
    )
    stats.words_visited += visited  # as _merge_loop_python fills them
    stats.heap_peak_entries, stats.peak_live_pairs = heap_peak, live_peak
    stats.rebuilds += rebuilds
    stats.stopped = stats.stopped or stopped
    return raw_merges


_UTF32_NATIVE = "utf-32-le" if sys.byteorder == "little" else "utf-32-be"


def _merge_loop_python(  # noqa: PLR0915 - one numbered recipe, as HF writes do_train
    words: list[str],
    counts: list[int],
    add_token: Callable[[int, int], int],
    *,
    limits: Limits,
    progress: Progress | None,
    stats: TrainStats,
) -> list[tuple[int, int]]:
    """Recipe steps 4 and 5 on ``words`` (strings of token ids) weighted by ``counts``;
    returns the (pair, new id) merges in rank order and fills ``stats``."""
    vocab_len, vocab_size, min_frequency = limits
    # pair -> count; a pair whose count reaches 0 is deleted, so len() is the live pairs.
    pair_counts: dict[int, int] = {}
    # pair -> ascending word indices; ascending because words are visited in order.
    where_to_update: dict[int, list[int]] = {}
    for i, word in enumerate(words):
        n = counts[i]
        for x, y in itertools.pairwise(map(ord, word)):
            pair = x << PAIR_BITS | y
            pair_counts[pair] = pair_counts.get(pair, 0) + n
            listed = where_to_update.get(pair)
            if listed is None:
                where_to_update[pair] = [i]
            elif listed[-1] != i:
                listed.append(i)

    heap: list[int] = []
    entry_words: dict[int, list[int]] = {}  # seq -> the words its entry was pushed for
    seq = 0

    def push_updates() -> None:
        nonlocal seq
        for pair, pos in where_to_update.items():
            count = pair_counts.get(pair, 0)
            if count > 0:
                heapq.heappush(heap, _entry(count, pair, seq))
                entry_words[seq] = pos
                seq += 1
        where_to_update.clear()

    push_updates()  # pushes one by one; the first fill is a heapify's job
    stats.heap_peak_entries = len(heap)
    stats.peak_live_pairs = len(pair_counts)

    raw_merges: list[tuple[int, int]] = []
    start = time.perf_counter()
    while vocab_len < vocab_size and heap:
        stored, a, b, entry_seq = _entry_parts(heapq.heappop(heap))
        pos = entry_words.pop(entry_seq)
        pair = a << PAIR_BITS | b
        current = pair_counts.get(pair, 0)
        if _is_stale(stored, current):  # refresh, and compare only once it is current
            heapq.heappush(heap, _entry(current, pair, seq))
            entry_words[seq] = pos
            seq += 1
            continue
        if current < 1 or current < min_frequency:
            stats.stopped = "min_frequency" if current >= 1 else "no_pairs"
            break
        new_id = add_token(a, b)
        vocab_len += new_id == vocab_len
        raw_merges.append((pair, new_id))

        visited = 0
        merge = _word_merger(a, b, new_id)
        for i in _words_to_visit(pos, len(words)):
            visited += 1
            n = counts[i]
            words[i], lost, gained = merge(words[i])
            if isinstance(lost, dict) or isinstance(gained, dict):  # a long word's tallies
                _apply_tallies(pair_counts, where_to_update, (i, n), lost, gained)
                continue
            for changed in gained:  # gains first: a count never dips below its true value
                pair_counts[changed] = pair_counts.get(changed, 0) + n
                listed = where_to_update.get(changed)
                if listed is None:
                    where_to_update[changed] = [i]
                elif listed[-1] != i:
                    listed.append(i)
            for changed in lost:
                after = pair_counts[changed] - n
                if after:
                    pair_counts[changed] = after
                else:
                    del pair_counts[changed]
        stats.words_visited += visited
        push_updates()
        live_pairs = len(pair_counts)
        stats.peak_live_pairs = max(stats.peak_live_pairs, live_pairs)
        stats.heap_peak_entries = max(stats.heap_peak_entries, len(heap))
        if _rebuild_needed(len(heap), live_pairs):
            # An entry whose pair count is <= 0 can never merge again: if the pair forms
            # anew, its new positions arrive in a fresh entry. Dropping it changes nothing.
            kept = []
            for entry in heap:
                _, x, y, entry_seq = _entry_parts(entry)
                if pair_counts.get(x << PAIR_BITS | y, 0) > 0:
                    kept.append(entry)
                else:
                    del entry_words[entry_seq]
            heap = kept
            heapq.heapify(heap)
            stats.rebuilds += 1
        if progress and len(raw_merges) % PROGRESS_EVERY == 0:
            progress(len(raw_merges), time.perf_counter() - start, current, len(heap))
    if not stats.stopped:
        stats.stopped = "vocab_size" if vocab_len >= vocab_size else "no_pairs"
    return raw_merges


def train_reference(
    word_counts: Mapping[str, int],
    *,
    vocab_size: int,
    min_frequency: int = 0,
    special_tokens: tuple[str, ...] = DEFAULT_SPECIAL_TOKENS,
) -> BpeModel:
    """The naive algorithm: recount every pair before every merge. Parity oracle only."""
    id_to_word, word_to_id = _initial_vocab(word_counts, vocab_size, special_tokens)
    words = [_as_id_string(w, word_to_id) for w in word_counts]
    counts = list(word_counts.values())
    raw_merges: list[tuple[int, int]] = []
    while len(word_to_id) < vocab_size:
        pair_counts: dict[Pair, int] = {}
        for word, n in zip(words, counts, strict=True):
            for pair in itertools.pairwise(map(ord, word)):
                pair_counts[pair] = pair_counts.get(pair, 0) + n
        if not pair_counts:
            break
        (a, b), best = min(pair_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if best < 1 or best < min_frequency:
            break
        new_token = id_to_word[a] + id_to_word[b]
        new_id = word_to_id.setdefault(new_token, len(id_to_word))
        if new_id == len(id_to_word):
            id_to_word.append(new_token)
        raw_merges.append((a << PAIR_BITS | b, new_id))
        merge = _word_merger(a, b, new_id)
        words = [merge(word)[0] for word in words]
    return BpeModel(
        tuple(id_to_word),
        _saved_merges(raw_merges, id_to_word),
        tuple(dict.fromkeys(special_tokens)),
    )
