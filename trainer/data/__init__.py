"""Token shards encoded from a corpus (encode.py) and their manifest (manifest.py,
shards.py). commands.py is `trainer data encode | inspect`. The loop reads the shards as
numbered sequences: trainer/train/sequences.py."""
