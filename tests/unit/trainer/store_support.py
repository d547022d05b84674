"""Shared set-up for the run store tests: run directories written by hand (the files
`trainer apply` writes, no torch) or by a real tiny training run, and a store's tables
read back for comparison."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.unit.trainer.loop_support import TensorSequences, loop_config, random_rows
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import METRICS_FILE, TRAINING_STATE_FILE
from trainer.train import loop
from trainer.train.options import RunOptions

RUN_ID = "0123456789abcdef0123456789abcdef"


def manifest(run_id: str | None = RUN_ID, *, lr: float = 3e-3, max_steps: int = 10) -> dict:
    """A run_manifest.json as trainer/train/manifest.py writes it (the keys the store reads)."""
    data = {
        "created": "2025-03-01T12:00:00+00:00",
        "seed": 42,
        "config": {
            "name": "hand-made",
            "optimizer": {"name": "adamw", "lr": lr, "betas": [0.9, 0.95]},
            "training": {"max_steps": max_steps, "seed": 42, "compile": False},
            "apply": {"stop_after": None, "out": "somewhere"},
        },
        "versions": {"trainer": "0.1.0"},
        "git": {"commit": "abc123", "dirty": False},
        "data_manifest_sha256": "d" * 64,
        "host": {"name": "testhost", "platform": "Linux"},
        "device": "cpu",
        "world_size": 1,
        "backend": None,
    }
    if run_id is not None:
        data |= {"run_id": run_id, "run_started": "2025-03-01T11:00:00+00:00"}
    return data


def record(step: int, *, val: bool = False) -> dict:
    line = {
        "step": step,
        "epoch": 0,
        "loss": 4.0 / step,
        "lr": 1e-3,
        "grad_norm": 0.5 + step / 100,
        "tokens": 128,
        "tokens_per_s": 1000.0 + step,
        "step_s": 0.128,
    }
    if val:
        line["val_loss"] = 5.0 / step
    return line


def write_run(
    run_dir: Path,
    steps: int,
    *,
    run_id: str | None = RUN_ID,
    max_steps: int = 10,
    lr: float = 3e-3,
    tail: str = "",
) -> Path:
    """A run directory of ``steps`` steps (validation every 5th) of a ``max_steps`` run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run_manifest.json").write_text(
        json.dumps(manifest(run_id, lr=lr, max_steps=max_steps), indent=2) + "\n"
    )
    lines = [record(s, val=s % 5 == 0) for s in range(1, steps + 1)]
    (run_dir / METRICS_FILE).write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    if lines:
        atomic_write_json(
            run_dir / TRAINING_STATE_FILE, {"last_step": max_steps, "last": lines[-1]}
        )
    return run_dir


def tables(db_path: Path) -> dict[str, list[tuple]]:
    """Every row of every table of a store, in primary-key order (read-only)."""
    order = {"runs": "run_id", "params": "run_id, key", "metrics": "run_id, step"}
    order["artifacts"] = "run_id, path"
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {
            name: conn.execute(f"SELECT * FROM {name} ORDER BY {key}").fetchall()
            for name, key in order.items()
        }
    finally:
        conn.close()


def column(db_path: Path, sql: str) -> list:
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return [row[0] for row in conn.execute(sql)]
    finally:
        conn.close()


def metrics_lines(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / METRICS_FILE).read_text().splitlines()]


def tiny_train(
    out: Path,
    stop_after: int,
    *,
    hooks: object = None,
    keep_checkpoints: int = 2,
    resume_from: str | Path | None = None,
):
    """A real training run of the loop (tiny model, CPU, ~0.1 s a step) into ``out``: an
    8-step schedule stopped after ``stop_after``, checkpoints every 2 steps, validation
    every 3."""
    run = loop_config(
        {
            "training.seed": 7,
            "training.epochs": 2,
            "training.max_steps": 8,
            "training.save_interval": 2,
            "training.eval_interval": 3,
            "training.keep_checkpoints": keep_checkpoints,
        }
    )
    options = RunOptions(
        out_dir=out, checkpoint=True, stop_after=stop_after, resume_from=resume_from
    )
    val = TensorSequences(random_rows(8, 8, seed=4))
    train_data = TensorSequences(random_rows(32, 8, seed=3))
    return loop.train(run, train_data, val, options=options, hooks=hooks)
