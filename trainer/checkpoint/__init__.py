"""Checkpoints: every state machine of a run, written atomically, verified before use.

    path = save_checkpoint(run_dir, step=15, model=m, optimizer=opt, state=TrainingState(...))
    ckpt, skipped = latest_valid(run_dir)        # newest checkpoint whose manifest verifies
    state = load_checkpoint(ckpt, model, optimizer)   # weights, AdamW, RNG; returns state.json
    export_checkpoint(ckpt, out_dir)            # HF model.safetensors + config.json

One module per job: layout.py (names), durable.py (fsynced JSON in a staging directory;
fsync, atomic rename and sha256 come from gates/io/files.py), manifest.py
(what a checkpoint claims), verify.py (whether the bytes agree), optimizer_state.py,
rng.py, state.py, save.py, load.py, retention.py, export.py, commands.py (CLI).
Safetensors and JSON only; nothing here pickles (C-TRAINING-LOOP INV-TRAIN-LOOP-012..016).
"""
