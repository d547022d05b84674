"""Write the artifact of GATE-ARCH-370M-002 and -005: a real 370M checkpoint from the loop.

    gates promote GATE-ARCH-370M-002      # rebuilds it (recipe CHECKPOINT_370M) if missing
    python tools/make_370m_checkpoint.py --out runs/gates/arch-370m          # or by hand:
    gates check GATE-ARCH-370M-002 --artifact runs/gates/arch-370m/checkpoints/step-00000002

(A promotion measures only an artifact a build from the tree made: a directory made by hand
is checked as is, and the check says that nothing records its build.)

FALSIFY-ARCH-370M-010 asks for "a real checkpoint written by the training loop after two
optimizer steps of the 370M model (CPU, micro_batch 1, seq_len 128)". This tool runs
exactly that through trainer.train.loop.train - the loop `trainer apply` runs, with its
checkpointer saving the last step - on seeded random token rows in [0, 50257), then prints
the checkpoint directory and its sha256 (gates.provenance.evidence.sha256_of, the hash the evidence
records). --out is the run's directory (run_manifest.json, metrics.jsonl, checkpoints/);
nothing is written outside it but the run's line in the run registry, as for every run
(trainer/store/registry.py). An --out that already holds a run or checkpoints is refused,
so an artifact is never a mix of two runs. The gates' recipe (CHECKPOINT_370M in
tests/measurements/llama_370m_sovereign_checkpoint.py) runs this tool into the artifact cache, with
the run registry in a scratch directory, and selects checkpoints/step-00000002.

Cost on CPU (2 cores): about a minute and 9.4 GB peak memory; the checkpoint is about
4.5 GB (weights, AdamW moments, RNG state). The run's settings are fixed here (not flags)
so the artifact is the one the contract describes; SETTINGS_NOTE says them in words.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gates.provenance.evidence import sha256_of  # noqa: E402 - needs ROOT on sys.path
from trainer.checkpoint.layout import (  # noqa: E402
    LATEST_POINTER,
    STAGING_SUFFIX,
    checkpoint_dirs,
    step_dir_name,
)
from trainer.config.in_code import config_from_values  # noqa: E402
from trainer.model.config import preset  # noqa: E402
from trainer.runfiles.names import RUN_MANIFEST_FILE, RunDir  # noqa: E402
from trainer.train import loss  # noqa: E402
from trainer.train.loop import train  # noqa: E402
from trainer.train.options import RunOptions  # noqa: E402

SEED = 0  # the run seed: model init, data order (state.json records it)
DATA_SEED = 0  # the random token rows
STEPS = 2
SEQ_LEN = 128
SETTINGS_NOTE = (
    f"370m preset, CPU float32, micro_batch 1, grad_accum 1, seq_len {SEQ_LEN}, "
    f"max_steps {STEPS}, seed {SEED}, lr 3e-4 (no warmup), random token rows (seed {DATA_SEED})"
)


class RandomRows:
    """A SequenceSource of ``n`` rows of ``seq_len + 1`` token ids drawn uniformly from
    [0, vocab_size) by a generator seeded with ``seed`` (the same rows on every machine)."""

    def __init__(self, n: int, seq_len: int, vocab_size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.rows = torch.randint(0, vocab_size, (n, seq_len + 1), generator=generator)
        self.num_sequences = n
        self.seq_len = seq_len

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        return loss.next_token_pairs(self.rows[list(indices)], pad_id=None)


def existing_run(out: Path) -> list[Path]:
    """A run manifest, checkpoints, staging directories and the ``latest`` pointer already
    in the run directory ``out``."""
    manifest = [out / RUN_MANIFEST_FILE] if (out / RUN_MANIFEST_FILE).exists() else []
    checkpoints = RunDir(out).checkpoints
    if not checkpoints.is_dir():
        return manifest
    staging = [p for p in checkpoints.iterdir() if p.name.endswith(STAGING_SUFFIX)]
    latest = [checkpoints / LATEST_POINTER] if (checkpoints / LATEST_POINTER).exists() else []
    return manifest + checkpoint_dirs(checkpoints) + staging + latest


def make_checkpoint(out: Path) -> Path:
    """Train the 370M model STEPS steps into the run directory ``out``; the path of the
    last checkpoint."""
    cfg = preset("370m")
    config = config_from_values(
        cfg,
        data={"micro_batch": 1, "seq_len": SEQ_LEN},
        optimizer={"lr": 3e-4, "min_lr": 3e-5},
        training={
            "seed": SEED,
            "gradient_accumulation": 1,
            "epochs": 1,
            "max_steps": STEPS,
            "warmup_steps": 0,
        },
        model_preset="370m",
    )
    # One epoch of exactly STEPS global batches of one sequence each.
    data = RandomRows(STEPS, SEQ_LEN, cfg.vocab_size, DATA_SEED)
    result = train(config, data, None, options=RunOptions(out_dir=out, checkpoint=True))
    # The loop reports a failed save on stderr and trains on; here that is fatal.
    path = RunDir(out).checkpoints / step_dir_name(STEPS)
    if result.checkpoints != [STEPS] or not path.is_dir():
        raise SystemExit(
            f"make_370m_checkpoint: the loop saved steps {result.checkpoints}, not [{STEPS}] "
            f"({path} {'exists' if path.is_dir() else 'is missing'}); see the errors above"
        )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the run's directory")
    args = parser.parse_args(argv)
    found = existing_run(args.out)
    if found:
        print(
            f"make_370m_checkpoint: {args.out} already holds {', '.join(p.name for p in found)}; "
            "pass a fresh --out",
            file=sys.stderr,
        )
        return 1
    started = time.perf_counter()
    path = make_checkpoint(args.out)
    elapsed = time.perf_counter() - started
    digest, size = sha256_of(path)
    print(f"checkpoint {path}")
    print(f"sha256     {digest}")
    print(f"bytes      {size}")
    print(f"seconds    {elapsed:.1f}")
    print(f"settings   {SETTINGS_NOTE}")
    print(f"next       gates check GATE-ARCH-370M-002 --artifact {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
