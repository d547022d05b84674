"""Byte-level BPE tokenizer: pre-tokenization, training (C-BPE-TRAIN-PERF), encoding."""
