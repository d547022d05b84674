"""Corpus, token shards and the batch iterator the training loop reads."""
