"""`trainer monitor RUN_DIR`: a read-only live view of a training run.

- sparkline.py: a series as unicode block characters (rich has no sparkline widget).
- snapshot.py: what a run looks like now, from training_state.json, the tail of
  metrics.jsonl and the checkpoints directory; never writes, locks or creates anything.
- view.py: a snapshot as a rich renderable.
- commands.py: the command (--json, --once, or a live view every --interval seconds).
"""
