"""Byte-level BPE tokenizer: the corpus it reads (corpus.py: the embedded default, input
files), pre-tokenization, training (C-BPE-TRAIN-PERF; training.py trains from files and
writes the tokenizer), encoding. commands.py is `trainer tokenizer train`."""
