"""The main job end to end (`trainer pipeline`): tokenizer, shards, training, export,
baseline, plots, gates and a summary, each stage reused when its inputs are unchanged."""
