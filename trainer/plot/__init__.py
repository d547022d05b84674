"""`trainer plot`: loss, validation loss, learning rate and gradient norm of runs, drawn.

- runs.py: a run directory read back into the series a plot draws (RunDirError otherwise).
- figure.py: the figure (matplotlib, Agg canvas, never pyplot) and its deterministic bytes.
- write.py: the checks, then the files (loss.png, loss.svg): `trainer plot`, the pipeline.
- commands.py: `trainer plot RUN_DIR... [--out DIR] [--format png,svg]`.
"""
