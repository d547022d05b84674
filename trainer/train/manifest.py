"""The run manifest: what a run was, written before its first step (run_manifest.json).

Seed, the resolved config (plus its ``apply`` block: this process's RunOptions), versions
(Python, torch, CUDA, this package, numpy), the git commit and whether the tree was
dirty, the sha256 of the data set's manifest.json, the host, the device, the data-parallel
world size and backend (None: a single process), and the force_token_budget override when
it was used - enough to tell two runs apart and to rerun one. ``run_id`` and
``run_started``: the run's id and first start (trainer/store/identity.py), the same across
resumes.
"""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gates.io.files import sha256_file
from trainer import __version__
from trainer.config.sections import RunConfig
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import RunDir
from trainer.store.identity import launch_identity
from trainer.train.options import RunOptions


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state(cwd: Path | None = None) -> dict[str, Any]:
    """{"commit": sha or None, "dirty": bool or None}; None when not in a git checkout."""
    where = Path(cwd) if cwd else Path(__file__).resolve().parent
    commit = _git(["rev-parse", "HEAD"], where)
    status = _git(["status", "--porcelain", "--untracked-files=no"], where)
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def versions() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "numpy": np.__version__,
        "trainer": __version__,
    }


def resolved_config(config: RunConfig, options: RunOptions) -> dict[str, Any]:
    """run_manifest.json's ``config``: the run config as resolved (every default filled),
    plus the ``apply`` block of how this process ran it (RunOptions.record)."""
    return config.to_json() | {"apply": options.record(config)}


def run_manifest(
    config: RunConfig,
    options: RunOptions,
    *,
    seed: int,
    device: torch.device,
    world: Any = None,
) -> dict[str, Any]:
    data_manifest = config.data.manifest
    manifest: dict[str, Any] = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "seed": seed,
        "config": resolved_config(config, options),
        "versions": versions(),
        "git": git_state(),
        "data_manifest": None if data_manifest is None else str(data_manifest),
        "data_manifest_sha256": None if data_manifest is None else sha256_file(data_manifest),
        "host": {"name": socket.gethostname(), "platform": platform.platform()},
        "device": str(device),
        "world_size": 1 if world is None else world.world_size,
        "backend": None if world is None else world.backend,
        "argv": sys.argv,
    }
    if config.training.force_token_budget:
        manifest["force_token_budget"] = True  # the C-TRAINCFG-001 token budget was overridden
    return manifest


def write_run_manifest(
    config: RunConfig,
    options: RunOptions,
    out_dir: Path,
    *,
    seed: int,
    device: torch.device,
    world: Any = None,
) -> Path:
    """``world``: a trainer.train.distributed.World (None: one process)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = RunDir(out_dir).manifest
    manifest = run_manifest(config, options, seed=seed, device=device, world=world)
    # The run id and first start: minted by a new run, carried over by a resume.
    previous = path if options.resume_from is not None else None
    manifest |= launch_identity(previous, created=manifest["created"])
    atomic_write_json(path, manifest)
    return path
