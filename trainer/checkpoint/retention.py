"""Retention: keep the latest K checkpoints (K >= 2) and the best by validation loss.

K >= 2 because the newest may be the one a crash or a bad disk just corrupted; the best
by validation loss is what ships if later steps overfit. Invalid checkpoints are left on
disk for inspection and never counted as kept.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from trainer.checkpoint.layout import STAGING_SUFFIX, STATE_FILE, checkpoint_dirs
from trainer.checkpoint.verify import inspect_checkpoint


def _val_loss(path: Path) -> float | None:
    value = json.loads((path / STATE_FILE).read_text(encoding="utf-8")).get("val_loss")
    return None if value is None else float(value)


def prune(run_dir: Path, keep: int) -> list[Path]:
    """Delete valid checkpoints beyond the newest ``keep`` and the best; returns the deleted."""
    if keep < 2:
        raise ValueError(f"keep must be >= 2 (the newest may be the broken one), got {keep}")
    run_dir = Path(run_dir)
    valid = [p for p in checkpoint_dirs(run_dir) if inspect_checkpoint(p).valid]
    kept = set(valid[:keep])
    scored = [(loss, p) for p in valid if (loss := _val_loss(p)) is not None]
    if scored:
        kept.add(min(scored, key=lambda lp: lp[0])[1])
    removed = [p for p in valid if p not in kept]
    for path in removed:
        shutil.rmtree(path)
    for staging in run_dir.glob(f"step-*{STAGING_SUFFIX}"):
        shutil.rmtree(staging)  # a crashed save's leftovers; saves do not overlap
        removed.append(staging)
    return removed
