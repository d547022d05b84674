"""The training loop and its parts.

- steps.py: the step driver (which sequences make each optimizer step; C-TRAINCFG-001).
- sequences.py: data sources as numbered sequences; the seeded per-epoch order.
- loss.py: next-token cross-entropy, the token mean of the global batch.
- optim.py: AdamW with decay/no-decay groups, LR application, gradient clipping.
- guards.py: non-finite values, divergence, early stopping, validation size.
- alerts.py: the config's alert rules (monitoring.alerts) against each step's record.
- loop.py: the loop itself (LoopSettings, train, TrainResult).
- distributed.py, fsdp.py: data parallelism under torchrun (ddp, fsdp).
- metrics.py, manifest.py: per-step metrics, training_state.json, the run manifest (the
  files' names and formats are trainer/runfiles/metrics_file.py's, torch-free).
- apply.py: a config's checks, then its run (apply_config: `trainer apply`, the pipeline).
- commands.py: `trainer apply CONFIG`.
"""
