"""Known bugs of the BPE trainer (C-BPE-TRAIN-PERF's mutants), injected by `gates audit`."""

import importlib.machinery
import importlib.util
import shlex
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

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


# The compiled merge loop (trainer/tokenizer/_merge_loop.c): a Python patch cannot reach C,
# so each of these builds the loop from its source with one edit and serves that module to
# train_fast through bpe.compiled_merge_loop, the seam that loads the real one. The bound
# tests run both loops (their `engine` parameter); the [compiled] case must kill these.
def _compiled_with(patch, old: str, new: str) -> None:
    source = Path(bpe.__file__).with_name("_merge_loop.c").read_text(encoding="utf-8")
    if source.count(old) != 1:  # the source moved under the mutant: seam-broken, not survived
        raise ValueError(f"_merge_loop.c holds {source.count(old)} copies of {old!r}, not 1")
    module = _build_merge_loop(source.replace(old, new))
    patch.setattr(bpe, "compiled_merge_loop", lambda: module)


def _build_merge_loop(source: str) -> ModuleType:
    """Compile ``source`` as the _merge_loop extension in a temporary directory and load it
    (a loaded shared object outlives its file)."""
    name = "trainer.tokenizer._merge_loop"
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    with tempfile.TemporaryDirectory(prefix="shipgate-mutant-") as tmp:
        c_file = Path(tmp) / "_merge_loop.c"
        c_file.write_text(source, encoding="utf-8")
        built = Path(tmp) / ("_merge_loop" + sysconfig.get_config_var("EXT_SUFFIX"))
        include = sysconfig.get_paths()["include"]
        flags = ["-shared", "-fPIC", "-O2", f"-I{include}", '-DSOURCE_SHA256="mutant"']
        subprocess.run(
            [*compiler, *flags, str(c_file), "-o", str(built)], check=True, capture_output=True
        )
        loader = importlib.machinery.ExtensionFileLoader(name, str(built))
        spec = importlib.util.spec_from_file_location(name, built, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    return module


@mutant("compiled-stale-heap-entry-accepted")
def _compiled_stale_accepted(patch):
    _compiled_with(patch, "if (e.count != current) {", "if (0) {")


@mutant("compiled-ties-broken-by-larger-pair")
def _compiled_larger_pair_first(patch):
    _compiled_with(patch, "return x->pair < y->pair;", "return x->pair > y->pair;")


@mutant("compiled-pair-counts-not-decremented")
def _compiled_not_decremented(patch):
    _compiled_with(patch, "counts_add(&st->pc, s, -n);", "(void)n;")


@mutant("compiled-left-neighbour-read-from-input")
def _compiled_left_from_input(patch):
    _compiled_with(
        patch, "(uint64_t)sym[w - 1] << PAIR_BITS;", "(uint64_t)sym[r - 1] << PAIR_BITS;"
    )


@mutant("compiled-tie-broken-by-push-order")
def _compiled_ties_by_push_order(patch):
    _compiled_with(
        patch,
        "    if (x->pair != y->pair) return x->pair < y->pair;\n    return x->seq < y->seq;",
        "    if (x->seq != y->seq) return x->seq < y->seq;\n    return x->pair < y->pair;",
    )


@mutant("compiled-heap-never-rebuilt")
def _compiled_never_rebuilt(patch):
    _compiled_with(patch, "            rebuild(&st);\n", "            ;\n")


@mutant("compiled-progress-never-reported")
def _compiled_progress_never_reported(patch):
    _compiled_with(patch, "if (progress != Py_None && progress_every > 0", "if (0")


@mutant("compiled-every-word-visited")
def _compiled_every_word_visited(patch):
    _compiled_with(
        patch,
        "k < e.words->len; k++) {\n            int32_t i = e.words->data[k];",
        "k < n_words; k++) {\n            int32_t i = (int32_t)k;",
    )
