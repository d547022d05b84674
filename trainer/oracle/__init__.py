"""The verb-grammar correctness oracle (C-TRAINING-LOOP, INV/FALSIFY-TRAIN-LOOP-017).

A tiny Llama trained by the loop must beat an interpolated Kneser-Ney trigram on held-out
verbs by at least 30 % in validation perplexity, both scored by one independent scorer:

    verbs.py     the corpus: 20 verbs x 5 tenses x 3 persons, English = Spanish, 4 verbs held out
    ngram.py     interpolated Kneser-Ney trigram (discount 0.75)
    scorer.py    prefix-only perplexity of any next-token model on token sequences
    examples.py  one form per sequence, padded: the loop's SequenceSource
    run.py       corpus -> tokenizer -> baseline -> loop -> scores -> ratio
"""
