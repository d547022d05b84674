"""A training run's files, torch-free: their names and formats, below everything that
writes them (trainer/train) and everything that reads them (the store, monitor, plot and
pipeline).

- metrics_file.py: metrics.jsonl and training_state.json (read, parse, write atomically),
  and the name of run_manifest.json beside them.
"""
