"""A synthetic run directory for the monitor tests: metrics.jsonl, training_state.json
(written by the trainer's own atomic writer), run_manifest.json and checkpoints, with
mtimes set relative to a fixed clock so ages and staleness are exact."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import METRICS_FILE, TRAINING_STATE_FILE

NOW = 1_700_000_000.0  # the clock every synthetic run is read at
STEP_TIMES = (0.4, 0.5, 0.6)  # median 0.5 s
TOKENS = 1000  # tokens per step


def record(step: int, **override) -> dict:
    step_s = STEP_TIMES[step % 3]
    base = {
        "step": step,
        "epoch": 0,
        "loss": 10.0 - step * 0.1,
        "lr": 1e-3 * min(1.0, step / 5),
        "grad_norm": 1.0 + 0.01 * (step % 4),
        "tokens": TOKENS,
        "tokens_per_s": TOKENS / step_s,
        "step_s": step_s,
    }
    return base | override


def make_run(
    root: Path,
    *,
    steps: int = 30,
    last_step: int = 50,
    overrides: dict[int, dict] | None = None,
    checkpoints: tuple[int, ...] = (10, 20),
    updated_ago: float = 1.0,
    end: tuple[str, str] | None = None,
) -> Path:
    """A run that has taken ``steps`` of ``last_step``; its files were last written
    ``updated_ago`` seconds before NOW, each checkpoint 0.5 s per step after its start.
    ``end``: (status, reason) of the loop's end record (MetricsWriter.finish's keys)."""
    root.mkdir(parents=True, exist_ok=True)
    overrides = overrides or {}
    lines = [record(s, **overrides.get(s, {})) for s in range(1, steps + 1)]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (root / METRICS_FILE).write_text(text, encoding="utf-8")
    state = {"last_step": last_step, "last": lines[-1]}
    if end is not None:
        state |= {"status": end[0], "reason": end[1], "ended_at": "2023-11-14T22:13:19+00:00"}
    atomic_write_json(root / TRAINING_STATE_FILE, state)
    (root / "run_manifest.json").write_text("{}\n", encoding="utf-8")
    end = NOW - updated_ago
    start = end - 0.5 * steps
    os.utime(root / "run_manifest.json", (start, start))
    for name in (METRICS_FILE, TRAINING_STATE_FILE):
        os.utime(root / name, (end, end))
    for step in checkpoints:
        ckpt = root / "checkpoints" / f"step-{step:08d}"
        ckpt.mkdir(parents=True)
        (ckpt / "manifest.json").write_text("{}\n", encoding="utf-8")
        os.utime(ckpt / "manifest.json", (start + 0.5 * step, start + 0.5 * step))
    if checkpoints:
        (root / "checkpoints" / "latest").write_text(f"step-{max(checkpoints):08d}\n")
    return root


def tree_fingerprint(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, sha256 (files) and mtime_ns: equal before
    and after means nothing was created, removed, written or touched."""
    found = {}
    for path in sorted(root.rglob("*")):
        stat = path.stat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        found[str(path.relative_to(root))] = (digest, stat.st_mtime_ns, stat.st_size)
    found["."] = ("dir", root.stat().st_mtime_ns, 0)
    return found
