"""FALSIFY-TRAIN-LOOP-017: the loop learns what the math says it should.

A tiny Llama trained by trainer.train.loop.train on the verb-grammar corpus must reach a
validation perplexity at most 0.7 x that of an interpolated Kneser-Ney trigram trained on
the same split and tokens, both scored by trainer/oracle/scorer.py (prefix-only, its own
shift), for seeds 0, 1 and 2 with one fixed budget (trainer/oracle/run.py).
"""

import pytest

from trainer.oracle.run import RATIO_LIMIT, SEEDS, run_seeds


@pytest.mark.slow
@pytest.mark.ship_blocking
def test_tiny_llama_beats_kn_trigram_on_held_out_verbs():
    results = run_seeds(SEEDS)
    table = "; ".join(
        f"seed {r.seed}: model ppl {r.model_ppl:.2f}, KN ppl {r.kn_ppl:.2f}, ratio {r.ratio:.3f}"
        for r in results
    )
    assert all(r.ratio <= RATIO_LIMIT for r in results), (
        f"ppl(model) / ppl(KN) must be <= {RATIO_LIMIT} for every seed: {table}"
    )
