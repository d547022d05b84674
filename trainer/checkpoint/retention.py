"""Retention: keep the latest K checkpoints (K >= 2) and the best by validation loss.

K >= 2 because the newest may be the one a crash or a bad disk just corrupted; the best
by validation loss is what ships if later steps overfit. Invalid checkpoints are left on
disk for inspection and never counted as kept. With no more than K checkpoints nothing can
be pruned, so none is read: verifying one reads every byte of it (4.5 GB for the 370M
model), and a run's first K saves paid that once each for nothing.

A pruned checkpoint is first renamed to step-NNNNNNNN.deleting (one atomic rename, the
parent fsynced), then deleted: a kill in the middle of the deletion leaves a directory no
loader lists, never a step-NNNNNNNN that has lost some of its files. The next prune
finishes what a killed one left, and removes a killed pointer write's temp file.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gates.io.files import TEMP_SUFFIX, fsync_dir, read_regular
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    LATEST_POINTER,
    STAGING_SUFFIX,
    checkpoint_dirs,
)
from trainer.checkpoint.verify import inspect_checkpoint

DELETING_SUFFIX = ".deleting"


#: A checkpoint's state.json is a few KB (verify.py reads it under a larger limit).
_STATE_LIMIT = 64 * 1024 * 1024


def _val_loss(path: Path) -> float | None:
    """state.json's val_loss of a checkpoint that verified (so a number or null)."""
    state = json.loads(read_regular(path / CHECKPOINT_STATE_FILE, _STATE_LIMIT))
    value = state.get("val_loss")
    return None if value is None else float(value)


def prune(run_dir: Path, keep: int) -> list[Path]:
    """Delete valid checkpoints beyond the newest ``keep`` and the best; returns the deleted."""
    if keep < 2:
        raise ValueError(f"keep must be >= 2 (the newest may be the broken one), got {keep}")
    run_dir = Path(run_dir)
    listed = checkpoint_dirs(run_dir)
    valid = [p for p in listed if inspect_checkpoint(p).valid] if len(listed) > keep else []
    kept = set(valid[:keep])
    scored = [(loss, p) for p in valid if (loss := _val_loss(p)) is not None]
    if scored:
        kept.add(min(scored, key=lambda lp: lp[0])[1])
    removed = [p for p in valid if p not in kept]
    for path in removed:
        retired = path.with_name(path.name + DELETING_SUFFIX)
        path.rename(retired)  # out of every loader's sight in one step
        fsync_dir(run_dir)
        shutil.rmtree(retired)
    for suffix in (STAGING_SUFFIX, DELETING_SUFFIX):
        # A crashed save's staging directory, or a prune killed mid-deletion; saves and
        # prunes do not overlap.
        for leftover in run_dir.glob(f"step-*{suffix}"):
            shutil.rmtree(leftover)
            removed.append(leftover)
    # A save killed while replacing the `latest` pointer leaves the temp file of that atomic
    # write (gates/io/files.py names it .latest.XXXX.tmp); no loader reads it.
    for leftover in run_dir.glob(f".{LATEST_POINTER}.*{TEMP_SUFFIX}"):
        leftover.unlink(missing_ok=True)
        removed.append(leftover)
    return removed
