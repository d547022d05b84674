"""Known bugs of the BPE trainer (C-BPE-TRAIN-PERF's mutants), injected by `gates audit`."""

import heapq as _heapq

from gates.mutants import mutant
from trainer.tokenizer import bpe, commands


class _ReorderedHeap:
    """heapq with a wrong tie-break: entries are (-count, a, b, seq, words); `key` decides
    the order among equal counts instead of the smaller (a, b)."""

    def __init__(self, key):
        self.key = key

    def _wrap(self, e):
        return (e[0], self.key(e), e[3], e)

    def heapify(self, heap):
        heap[:] = [self._wrap(e) for e in heap]
        _heapq.heapify(heap)

    def heappush(self, heap, e):
        _heapq.heappush(heap, self._wrap(e))

    def heappop(self, heap):
        return _heapq.heappop(heap)[3]


@mutant("ties-broken-by-hash-order")
def _ties_by_hash(patch):
    patch.setattr(bpe, "heapq", _ReorderedHeap(lambda e: hash((e[1], e[2])) % 9973))


@mutant("tie-broken-by-insertion-order")
def _ties_by_insertion(patch):
    patch.setattr(bpe, "heapq", _ReorderedHeap(lambda e: 0))  # then push order (seq)


@mutant("stale-heap-entry-accepted")
def _stale_accepted(patch):
    patch.setattr(bpe, "_is_stale", lambda stored, current: False)


@mutant("pair-counts-not-decremented")
def _not_decremented(patch):
    real = bpe._merge_word
    patch.setattr(bpe, "_merge_word", lambda word, a, b, new: ([], real(word, a, b, new)[1]))


@mutant("special-tokens-not-reserved")
def _specials_not_reserved(patch):
    real = bpe._initial_vocab

    def specials_last(word_counts, vocab_size, special_tokens):
        id_to_word, _ = real(word_counts, vocab_size, ())
        id_to_word = id_to_word + [s for s in special_tokens if s not in id_to_word]
        return id_to_word, {t: i for i, t in enumerate(id_to_word)}

    patch.setattr(bpe, "_initial_vocab", specials_last)


@mutant("full-recount-per-merge")
def _full_recount(patch):
    patch.setattr(bpe, "_words_to_visit", lambda pos, n_words: range(n_words))


@mutant("heap-never-rebuilt")
def _never_rebuilt(patch):
    patch.setattr(bpe, "_rebuild_needed", lambda entries, live: False)


@mutant("progress-never-printed")
def _no_progress(patch):
    patch.setattr(bpe, "PROGRESS_EVERY", 10**12)


@mutant("progress-missing-top-count")
def _no_top_count(patch):
    patch.setattr(
        commands,
        "format_progress",
        lambda merges, seconds, top, heap: f"[bpe] merges={merges} heap={heap}",
    )
