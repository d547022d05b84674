"""The training loop and its parts.

- steps.py: the step driver (which sequences make each optimizer step; C-TRAINCFG-001).
- sequences.py: data sources as numbered sequences; the seeded per-epoch order.
- loss.py: next-token cross-entropy, the token mean of the global batch.
- optim.py: AdamW with decay/no-decay groups, LR application, gradient clipping.
- guards.py: non-finite values, divergence, early stopping, validation size.
- alerts.py: the config's alert rules (monitoring.alerts) against each step's record.
- loop.py: the loop itself (train, TrainResult): a RunConfig (trainer/config/sections.py)
  run as options.py's RunOptions say (device, run directory, checkpoints, resume).
- components.py: the run's resumable state as named parts (state_dict/load_state_dict).
- checkpointing.py: when to save; saving and resuming walk those parts.
- hooks.py: what a caller may watch in a run (Hooks).
- distributed.py, fsdp.py: data parallelism under torchrun (ddp, fsdp).
- metrics.py: MetricsWriter, a step's record fanned out to the sinks of sinks.py (the
  files, the progress line) and to the run store (trainer/store/recorder.py).
- flops.py: FLOPs per token and the device's peak (MFU), re-exported from
  trainer/plan/flops.py; a CPU's measured matmul peak is trainer/plan/roofline.py's.
- manifest.py: the run manifest, run_manifest.json. Every file's name and format is
  trainer/runfiles/'s, torch-free.
- apply.py: a config's checks, then its run (apply_config: `trainer apply`, the pipeline).
- commands.py: `trainer apply CONFIG`.
"""
