"""Token shards encoded from a corpus (encode.py), their manifest, and the batch iterator
the training loop reads. commands.py is `trainer data encode | inspect`."""
