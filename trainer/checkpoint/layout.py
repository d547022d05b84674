"""The names of a checkpoint: its directory, its files, the ``latest`` pointer.

    run_dir/step-00000015/{model,optimizer,rng}.safetensors, rng.json, state.json, manifest.json
    run_dir/latest                  # one line: "step-00000015"

Only these files may be in a checkpoint directory; anything else (a planted ``.pt``) makes
it invalid, because a loader that ignores strangers is one that could be tricked into
reading them.
"""

from __future__ import annotations

import re
from pathlib import Path

# Where `trainer apply` keeps a run's checkpoints: a name of the run directory's, not of a
# checkpoint's (trainer/runfiles/names.py); importable from here too, where the loop looks.
from trainer.runfiles.names import CHECKPOINTS_DIR  # noqa: F401 - re-exported

FORMAT = "shipgate-checkpoint"
#: 3 (issue 35): a file's manifest entry holds the sha256 of every RANGE_BYTES range of it
#: and no whole-file sha256 (trainer/checkpoint/manifest.py), so the save hashes each byte
#: once, on every core, and so does the load. 2: the ranges and the whole file's sha256.
#: 1: the whole file's sha256 alone. All three are read and verified.
FORMAT_VERSION = 3
READABLE_FORMAT_VERSIONS = (1, 2, 3)

MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
RNG_TENSOR_FILE = "rng.safetensors"
RNG_JSON_FILE = "rng.json"
CHECKPOINT_STATE_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
LATEST_POINTER = "latest"

# Written in this order; the manifest comes after all of them (INV-TRAIN-LOOP-013).
DATA_FILES = (MODEL_FILE, OPTIMIZER_FILE, RNG_TENSOR_FILE, RNG_JSON_FILE, CHECKPOINT_STATE_FILE)

_STEP_DIR = re.compile(r"^step-(\d{8})$")
STAGING_SUFFIX = ".tmp"


class CheckpointError(ValueError):
    """A checkpoint cannot be written, read or trusted; the message names the file."""


def step_dir_name(step: int) -> str:
    if step < 0 or step >= 10**8:
        raise CheckpointError(f"step {step} does not fit step-NNNNNNNN")
    return f"step-{step:08d}"


def step_of(path: Path) -> int | None:
    """The step a directory name claims, or None when it is not a checkpoint name."""
    match = _STEP_DIR.match(path.name)
    return int(match.group(1)) if match else None


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Directories named step-NNNNNNNN (not staging ones), newest step first."""
    if not run_dir.is_dir():
        return []
    found = [p for p in run_dir.iterdir() if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=lambda p: step_of(p) or 0, reverse=True)
