"""Make the artifact the checkpoint gates of C-TRAINING-LOOP are measured on: a small but
real run of `trainer apply`, with its config, tokenizer and shards beside it.

    gates check GATE-TRAIN-LOOP-012       # rebuilds it into the artifact cache if missing
    python tools/make_loop_run.py --out runs/gates/loop-run               # or by hand:
    gates check GATE-TRAIN-LOOP-012 --artifact runs/gates/loop-run        # and -013 .. -016

This is the recipe (gates.provenance.recipes) LOOP_RUN in
tests/measurements/training_loop_checkpoint.py names. The directory holds everything a
re-measurement needs, so its digest pins the whole experiment. Every stage runs in the run
directory with paths relative to it, so nothing written names the directory; what the clock and the
host write (timings, created/ended_at, run ids, the run store's runs.db) is left out of the digest
by the recipe, so two builds, in any two directories of one machine, digest the same:

    run.yaml       a tiny Llama, 60 steps, a checkpoint every 20 (all kept), evaluation every 20
    tokenizer/     byte-level BPE, V = 512, trained on a few standard-library packages
    data/          train/val shards of those packages, encoded with it
    train/         the run: run_manifest.json, metrics.jsonl, checkpoints/step-NNNNNNNN

Every stage is the project's own CLI (trainer tokenizer train, trainer data encode,
trainer apply), in fresh processes, on CPU. About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import sysconfig
from pathlib import Path

#: Standard-library packages the corpus is made of: enough text for V = 512 and 60 steps.
PACKAGES = ("json", "email", "logging", "http", "urllib", "xml")
VOCAB = 512
MAX_STEPS = 60
SAVE_INTERVAL = 20


def run_config() -> str:
    """The run config. Its paths are relative to the run directory, where `trainer apply`
    runs (and where the gates that re-run it run it), so nothing in the artifact names the
    directory it was built in: two builds in different places are byte-identical where the
    run is deterministic (see RECIPE in tests/measurements/training_loop_checkpoint.py)."""
    return "\n".join(
        [
            "# Written by tools/make_loop_run.py: the checkpoint gates' run.",
            "name: checkpoint-gates",
            "model:",
            "  preset: tiny",
            "  architecture:",
            f"    vocab_size: {VOCAB}",
            "    hidden_size: 32",
            "    intermediate_size: 64",
            "    num_attention_heads: 2",
            "    num_key_value_heads: 1",
            "data:",
            "  shards: data",
            "  tokenizer: tokenizer",
            "  micro_batch: 4",
            "  seq_len: 64",
            "optimizer:",
            "  name: adamw",
            "  lr: 3.0e-3",
            "  weight_decay: 0.1",
            "  grad_clip: 1.0",
            "training:",
            "  epochs: 1",
            f"  max_steps: {MAX_STEPS}",
            "  warmup_steps: 6",
            f"  eval_interval: {SAVE_INTERVAL}",
            f"  save_interval: {SAVE_INTERVAL}",
            "  keep_checkpoints: 3  # all three: every one is a resume point for GATE-012",
            "  output_dir: train",
            "  force_token_budget: true",
            "monitoring:",
            "  log_interval: 10",
        ]
    )


_TRAINER = "import sys; from trainer.cli import main; sys.exit(main(sys.argv[1:]))"


def _cli(cwd: Path, *args: str) -> None:
    cmd = [sys.executable, "-c", _TRAINER, *args]
    shown = args if len(args) < 12 else (*args[:11], f"... ({len(args) - 11} more)")
    print("+ trainer", " ".join(shown), flush=True)
    subprocess.run(cmd, check=True, cwd=cwd)


def make(out: Path) -> Path:
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"{out}: exists and is not empty; choose another --out or remove it")
    out.mkdir(parents=True, exist_ok=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    inputs = [str(f) for name in PACKAGES for f in sorted((stdlib / name).rglob("*.py"))]
    # Every stage runs in the run directory with relative paths: nothing it writes names
    # the directory (manifests, config_hash), so the artifact's digest does not depend on it.
    _cli(out, "tokenizer", "train", "--vocab-size", str(VOCAB), "--workers", "1",
         "--out", "tokenizer", "--input", *inputs)  # fmt: skip
    _cli(out, "data", "encode", "--tokenizer", "tokenizer", "--out", "data",
         "--workers", "1", "--input", *inputs)  # fmt: skip
    (out / "run.yaml").write_text(run_config() + "\n", encoding="utf-8")
    _cli(out, "apply", "run.yaml", "--device", "cpu", "--out", "train")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/gates/loop-run"))
    args = parser.parse_args(argv)
    from gates.provenance.evidence import sha256_of  # noqa: PLC0415

    out = make(args.out)
    digest, size = sha256_of(out)
    print(f"{out}: sha256 {digest} ({size} bytes; every byte, timings included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
