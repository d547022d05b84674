"""A training run's files, torch-free: their names, paths and formats, and how each is
written, below everything that writes them (trainer/train, the pipeline) and everything
that reads them (the store, monitor, plot and pipeline). No other module names a run
directory's file; each imports the name from here.

- names.py: every file name of a training run's directory (RunDir) and of a pipeline's
  (PipelineDir), and their paths.
- json_file.py: atomic_write_json, how every JSON file of a run is written (atomically,
  fsynced).
- metrics_file.py: metrics.jsonl (append, flushed; read, parse, rewind).
- training_state.py: training_state.json (the latest record, how the run ended).
- lock.py: writer_lock, the one-writer lock of a run directory (readers never take it).
"""
