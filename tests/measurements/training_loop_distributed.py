"""Measurement of C-TRAINING-LOOP's data-parallel gate (GATE-TRAIN-LOOP-018,
contracts/training-loop-v1.yaml): two torchrun ranks (gloo, CPU) train what one process
trains with twice the micro-batch.

The scenario is written here from the contract's rule, independently of the bound test:
a tiny Llama, 6 steps over padded rows (so the two ranks of a step hold different
non-padding target counts and a per-rank mean is not the global one), 2 ranks x micro-batch
2 x accumulation 2 against 1 process x micro-batch 4 x accumulation 2, same seed.

max_relative_difference is the largest of |a - b| / (|b| + s) over every step's loss and
gradient norm (s = 0) and every final weight (s = 0.1, i.e. torch.testing's atol 1e-6 at
rtol 1e-5): at most 1e-5 exactly when the contract's tolerances hold.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gates.measure import GateContext, Measurement, measures

from .training_loop_run import VOCAB, _config, _random_rows, _Rows

PAD = 0
STEPS = 6
ROWS, SEQ_LEN, DATA_SEED = 64, 8, 5
WEIGHT_SCALE = 0.1  # atol / rtol of the contract's weight tolerance (1e-6 / 1e-5)
CHILD = "tests.measurements.training_loop_distributed"


def _padded_rows():
    """Random ids 1..VOCAB-1, each row padded after a seeded length of 2..SEQ_LEN+1."""
    import torch  # noqa: PLC0415

    rows = _random_rows(ROWS, SEQ_LEN, seed=DATA_SEED, vocab=VOCAB - 1) + 1
    lengths = torch.randint(
        2, SEQ_LEN + 2, (ROWS,), generator=torch.Generator().manual_seed(DATA_SEED + 1)
    )
    for i, length in enumerate(lengths.tolist()):
        rows[i, length:] = PAD
    return rows


def _train(micro_batch: int, out: Path) -> None:
    """One run on one intra-op thread (under torchrun: one rank of it, two ranks on two
    cores); rank 0 writes OUT/result.json and weights."""
    import torch  # noqa: PLC0415
    from safetensors.torch import save_file  # noqa: PLC0415

    from trainer.train.loop import train  # noqa: PLC0415

    torch.set_num_threads(1)
    config = _config(
        {
            "data.micro_batch": micro_batch,
            "training.gradient_accumulation": 2,
            "training.max_steps": STEPS,
            "training.epochs": 100,
        }
    )
    result = train(config, _Rows(_padded_rows(), pad_id=PAD), None)
    if os.environ.get("RANK", "0") != "0":
        return
    weights = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    save_file(weights, str(out / "weights.safetensors"))
    record = {
        "losses": [float(x).hex() for x in result.losses],
        "grad_norms": [float(x).hex() for x in result.grad_norms],
    }
    (out / "result.json").write_text(json.dumps(record), encoding="utf-8")


def _launch(root: Path, out: Path, *, nproc: int, micro_batch: int) -> dict:
    """``nproc`` torchrun ranks, or (nproc 1) the run in this process, under the mutant
    this process holds (no second interpreter's start-up: ~3 s, paid per audited mutant);
    the thread count is restored after."""
    import torch  # noqa: PLC0415
    from safetensors.torch import load_file  # noqa: PLC0415

    out.mkdir(parents=True)
    if nproc > 1:
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "SHIPGATE_DIST_TIMEOUT_S": "60"}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        args = [*launcher, "-m", CHILD, str(micro_batch), str(out)]
        subprocess.run([sys.executable, *args], cwd=root, env=env, check=True, timeout=600)
    else:
        threads = torch.get_num_threads()
        try:
            _train(micro_batch, out)
        finally:
            torch.set_num_threads(threads)
    record = json.loads((out / "result.json").read_text(encoding="utf-8"))
    record["weights"] = load_file(str(out / "weights.safetensors"))
    return record


def _worst(mine: list[str], reference: list[str]) -> float:
    a, b = [float.fromhex(x) for x in mine], [float.fromhex(x) for x in reference]
    if len(a) != len(b):
        return float("inf")
    return max(
        (abs(x - y) / abs(y) if y else abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0
    )


@measures("GATE-TRAIN-LOOP-018")
def max_relative_difference(ctx: GateContext) -> Measurement:
    with tempfile.TemporaryDirectory() as tmp:
        two = _launch(ctx.root, Path(tmp) / "two-ranks", nproc=2, micro_batch=2)
        one = _launch(ctx.root, Path(tmp) / "one-process", nproc=1, micro_batch=4)
    losses = _worst(two["losses"], one["losses"])
    norms = _worst(two["grad_norms"], one["grad_norms"])
    if two["weights"].keys() != one["weights"].keys():
        weights = float("inf")
    else:
        weights = max(
            float(((a - b).abs() / (b.abs() + WEIGHT_SCALE)).max())
            for a, b in ((two["weights"][k], one["weights"][k]) for k in one["weights"])
        )
    worst = max(losses, norms, weights)
    return Measurement(
        values={
            "max_relative_difference": (worst, "ratio"),
            "max_loss_relative_difference": (losses, "ratio"),
            "max_grad_norm_relative_difference": (norms, "ratio"),
            "max_weight_difference_scaled": (weights, "ratio"),
            "steps": (len(two["losses"]), "steps"),
        },
        workload=f"torchrun --nproc_per_node 2 (gloo, CPU) vs one process: a tiny Llama, "
        f"{STEPS} steps, {ROWS} padded rows of {SEQ_LEN} tokens, micro-batch 2 x 2 ranks x "
        "accumulation 2 against micro-batch 4 x accumulation 2; losses and gradient norms "
        "per step and every final weight compared",
        inputs=[
            ctx.root / name
            for name in (
                "trainer/train/distributed.py",
                "trainer/train/loop.py",
                "trainer/train/loss.py",
            )
        ],
        notes="not bitwise by design: the ranks' partial sums are added in another order",
        # The runs are on CPU (RunOptions' default device), so the process group is gloo:
        # what CUDA runs use, NCCL, is not exercised here, whatever this machine has.
        # tests/unit/trainer/test_distributed_nccl.py (marked gpu) runs it where 2 GPUs are.
        partial={
            "discharged": [
                "2 ranks (torchrun, gloo, CPU) train what one process trains with twice "
                "the micro-batch: losses, gradient norms and final weights within rtol 1e-5"
            ],
            "not_discharged": [
                "the same on CUDA with NCCL (all-reduce in another order, on the GPU): "
                "not measured by this CPU measurement"
            ],
        },
    )


if __name__ == "__main__":  # a torchrun rank
    from gates import mutants

    mutants.apply_from_env(Path(__file__).resolve().parents[2])  # reaches every rank
    _train(int(sys.argv[1]), Path(sys.argv[2]))
