"""Known bugs of the BPE trainer (C-BPE-TRAIN-PERF's mutants), injected by `gates audit`."""

from gates.mutants import mutant
from trainer.tokenizer import bpe, training


def _wrong_tie_break(patch, tie) -> None:
    """Pack heap entries as (count, tie(pair, seq), pair, seq): among equal counts `tie`
    decides instead of the smaller (a, b). Same packing seam train_fast uses."""
    low40, pair_mask = (1 << 40) - 1, bpe.PAIR_MASK

    def entry(count, pair, seq):
        return (((bpe.COUNT_CAP - count) << 40 | tie(pair, seq)) << 42 | pair) << 40 | seq

    def parts(entry):
        pair = (entry >> 40) & pair_mask
        count = bpe.COUNT_CAP - (entry >> 122)
        return count, pair >> bpe.PAIR_BITS, pair & ((1 << 21) - 1), entry & low40

    patch.setattr(bpe, "_entry", entry)
    patch.setattr(bpe, "_entry_parts", parts)


@mutant("ties-broken-by-hash-order")
def _ties_by_hash(patch):
    _wrong_tie_break(patch, lambda pair, seq: hash(str(pair)) % 9973)


@mutant("tie-broken-by-insertion-order")
def _ties_by_insertion(patch):
    _wrong_tie_break(patch, lambda pair, seq: seq)


@mutant("stale-heap-entry-accepted")
def _stale_accepted(patch):
    patch.setattr(bpe, "_is_stale", lambda stored_count, current_count: False)


@mutant("pair-counts-not-decremented")
def _not_decremented(patch):
    real = bpe._word_merger

    def merger_without_losses(a, b, new):
        merge = real(a, b, new)

        def merge_without_losses(word):
            merged, _, gained = merge(word)
            return merged, [], gained

        return merge_without_losses

    patch.setattr(bpe, "_word_merger", merger_without_losses)


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
    patch.setattr(bpe, "_rebuild_needed", lambda entries, live_pairs: False)


@mutant("progress-never-printed")
def _no_progress(patch):
    patch.setattr(bpe, "PROGRESS_EVERY", 10**12)


@mutant("progress-missing-top-count")
def _no_top_count(patch):
    patch.setattr(
        training,
        "format_progress",
        lambda merges, seconds, top_count, heap: f"[bpe] merges={merges} heap={heap}",
    )
