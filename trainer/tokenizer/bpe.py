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

train_reference recounts every pair before every merge: slow, kept as the parity oracle.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

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


class BpeConfigError(ValueError):
    """vocab_size too small for the specials and alphabet, or another bad setting."""


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


def _merge_word(word: list[int], a: int, b: int, new: int) -> list[tuple[Pair, int]]:
    """Replace each (a, b), left to right, by ``new`` in place; return pair-count changes
    for the neighbours (the merged pair itself is not among them)."""
    changes: list[tuple[Pair, int]] = []
    i = 0
    while i < len(word) - 1:
        if word[i] == a and word[i + 1] == b:
            if i > 0:
                changes.append(((word[i - 1], a), -1))
                changes.append(((word[i - 1], new), 1))
            word[i : i + 2] = [new]
            if i < len(word) - 1:
                changes.append(((b, word[i + 1]), -1))
                changes.append(((new, word[i + 1]), 1))
        i += 1
    return changes


def _is_stale(stored_count: int, current_count: int) -> bool:
    return stored_count != current_count


def _words_to_visit(pos: set[int], n_words: int) -> Iterable[int]:
    """The words a merge visits: those its heap entry lists (the inverted index)."""
    return pos


def _rebuild_needed(entries: int, live_pairs: int) -> bool:
    return entries > REBUILD_MIN and entries > REBUILD_FACTOR * live_pairs


def _saved_merges(raw: list[tuple[Pair, int]], id_to_word: list[str]) -> tuple:
    last_rank = {pair: rank for rank, (pair, _) in enumerate(raw)}
    ordered = sorted(last_rank.items(), key=lambda kv: kv[1])
    return tuple((id_to_word[a], id_to_word[b]) for (a, b), _ in ordered)


def train_fast(  # noqa: PLR0915 - one numbered recipe, as HF writes do_train
    word_counts: Mapping[str, int],
    *,
    vocab_size: int,
    min_frequency: int = 0,
    special_tokens: tuple[str, ...] = DEFAULT_SPECIAL_TOKENS,
    progress: Progress | None = None,
    stats: TrainStats | None = None,
) -> BpeModel:
    """Train on pre-token counts (see pretokenize.count_words)."""
    stats = stats if stats is not None else TrainStats()
    id_to_word, word_to_id = _initial_vocab(word_counts, vocab_size, special_tokens)
    words = [[word_to_id[ch] for ch in w] for w in word_counts]
    counts = list(word_counts.values())

    pair_counts: dict[Pair, int] = {}
    where_to_update: dict[Pair, set[int]] = {}
    for i, word in enumerate(words):
        n = counts[i]
        for pair in itertools.pairwise(word):
            pair_counts[pair] = pair_counts.get(pair, 0) + n
            where_to_update.setdefault(pair, set()).add(i)

    # Heap entries: (-count, a, b, seq, words). seq only keeps equal keys in push order.
    heap: list[tuple[int, int, int, int, set[int]]] = []
    seq = 0

    def push_updates() -> None:
        nonlocal seq
        for pair, pos in where_to_update.items():
            count = pair_counts[pair]
            if count > 0:
                heap.append((-count, pair[0], pair[1], seq, pos))
                seq += 1
        where_to_update.clear()

    push_updates()
    heapq.heapify(heap)
    live_pairs = sum(1 for c in pair_counts.values() if c > 0)
    stats.heap_peak_entries = len(heap)
    stats.peak_live_pairs = live_pairs

    raw_merges: list[tuple[Pair, int]] = []
    start = time.perf_counter()
    while len(word_to_id) < vocab_size and heap:
        neg, a, b, _, pos = heapq.heappop(heap)
        current = pair_counts[(a, b)]
        if _is_stale(-neg, current):  # refresh, and compare only once it is current
            heapq.heappush(heap, (-current, a, b, seq, pos))
            seq += 1
            continue
        if current < 1 or current < min_frequency:
            break
        new_token = id_to_word[a] + id_to_word[b]
        new_id = word_to_id.get(new_token)
        if new_id is None:
            new_id = len(id_to_word)
            id_to_word.append(new_token)
            word_to_id[new_token] = new_id
        raw_merges.append(((a, b), new_id))

        visited = 0
        for i in _words_to_visit(pos, len(words)):
            visited += 1
            n = counts[i]
            for pair, change in _merge_word(words[i], a, b, new_id):
                before = pair_counts.get(pair, 0)
                after = pair_counts[pair] = before + change * n
                if (before > 0) != (after > 0):
                    live_pairs += 1 if after > 0 else -1
                if change > 0:
                    where_to_update.setdefault(pair, set()).add(i)
        stats.words_visited += visited
        for pair, wpos in where_to_update.items():
            count = pair_counts[pair]
            if count > 0:
                heapq.heappush(heap, (-count, pair[0], pair[1], seq, wpos))
                seq += 1
        where_to_update.clear()
        stats.peak_live_pairs = max(stats.peak_live_pairs, live_pairs)
        stats.heap_peak_entries = max(stats.heap_peak_entries, len(heap))
        if _rebuild_needed(len(heap), live_pairs):
            # An entry whose pair count is <= 0 can never merge again: if the pair forms
            # anew, its new positions arrive in a fresh entry. Dropping it changes nothing.
            heap = [e for e in heap if pair_counts[(e[1], e[2])] > 0]
            heapq.heapify(heap)
            stats.rebuilds += 1
        if progress and len(raw_merges) % PROGRESS_EVERY == 0:
            progress(len(raw_merges), time.perf_counter() - start, current, len(heap))
    stats.merges = len(raw_merges)

    return BpeModel(
        tuple(id_to_word),
        _saved_merges(raw_merges, id_to_word),
        tuple(dict.fromkeys(special_tokens)),
    )


def train_reference(
    word_counts: Mapping[str, int],
    *,
    vocab_size: int,
    min_frequency: int = 0,
    special_tokens: tuple[str, ...] = DEFAULT_SPECIAL_TOKENS,
) -> BpeModel:
    """The naive algorithm: recount every pair before every merge. Parity oracle only."""
    id_to_word, word_to_id = _initial_vocab(word_counts, vocab_size, special_tokens)
    words = [[word_to_id[ch] for ch in w] for w in word_counts]
    counts = list(word_counts.values())
    raw_merges: list[tuple[Pair, int]] = []
    while len(word_to_id) < vocab_size:
        pair_counts: dict[Pair, int] = {}
        for word, n in zip(words, counts, strict=True):
            for pair in itertools.pairwise(word):
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
        raw_merges.append(((a, b), new_id))
        for word in words:
            _merge_word(word, a, b, new_id)
    return BpeModel(
        tuple(id_to_word),
        _saved_merges(raw_merges, id_to_word),
        tuple(dict.fromkeys(special_tokens)),
    )
