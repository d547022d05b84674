"""The quickstart's training step against this CPU's float32 matmul peak, before and after
issue 21, side by side in one run; write the numbers as JSON.

    python tools/bench_roofline.py --out evidence/benchmarks/cpu-roofline-quickstart.json

"before" is the quickstart shipped until issue 21 (the tiny preset at V = 8192: 2 layers,
hidden 64, untied); "after" is configs/quickstart-cpu.yaml as shipped now. Each side is one
training step as a bare loop takes it (forward, cross-entropy, backward, the loop's clip, AdamW
with the loop's groups and the config's hyperparameters; the loop adds about 1 %,
tools/bench_loop.py) at the config's micro-batch and sequence length, on
random tokens, with the deterministic-algorithms setting the loop uses on a CPU. Rounds
alternate before, after, before, ... so drift on a noisy machine hits both; each round
times ``--steps`` steps after ``--warmup`` untimed ones, and medians are reported.

Model FLOPs are trainer/plan/flops.py's 6N + 12LHT per token; the peak is
trainer/plan/roofline.py's measured dense float32 matmul rate, measured afresh here
(not read from the cache) right before the rounds and again after them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 - the universal alias

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from trainer.config.load import RunConfig, load_config, with_values  # noqa: E402
from trainer.model.config import preset  # noqa: E402
from trainer.model.llama import build_model  # noqa: E402
from trainer.plan import roofline  # noqa: E402
from trainer.plan.flops import flops_per_token  # noqa: E402
from trainer.train import loss, optim  # noqa: E402

QUICKSTART = ROOT / "configs" / "quickstart-cpu.yaml"


def configs() -> dict[str, RunConfig]:
    after = load_config(QUICKSTART)
    before = with_values(
        after,
        {
            "model": dataclasses.replace(preset("tiny"), vocab_size=8192),
            "optimizer.lr": 1.0e-3,
            "training.max_steps": 600,
            "training.warmup_steps": 60,
        },
    )
    return {"before": before, "after": after}


def time_steps(cfg: RunConfig, *, steps: int, warmup: int) -> float:
    """Median seconds of one training step of ``cfg``'s model and batch shape."""
    torch.manual_seed(0)
    model = build_model(cfg.model, seed=0)
    o = cfg.optimizer
    adamw = optim.build_adamw(
        model, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay
    )
    batch = torch.randint(0, cfg.model.vocab_size, (cfg.data.micro_batch, cfg.data.seq_len + 1))
    inputs, targets = loss.next_token_pairs(batch)
    times = []
    for i in range(warmup + steps):
        started = time.perf_counter()
        adamw.zero_grad(set_to_none=True)
        logits = model(inputs)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).backward()
        optim.clip_gradients(model.parameters(), o.grad_clip)
        adamw.step()
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    runs = configs()
    load_before = os.getloadavg()
    peak_before, size_before = roofline.measure_peak()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, cfg in runs.items():
            seconds[name].append(time_steps(cfg, steps=args.steps, warmup=args.warmup))
    peak_after, size_after = roofline.measure_peak()
    peak = max(peak_before, peak_after)
    sides = {}
    for name, cfg in runs.items():
        tokens = cfg.data.micro_batch * cfg.data.seq_len
        step_s = statistics.median(seconds[name])
        per_token = flops_per_token(cfg.model, cfg.data.seq_len)
        model_flops = tokens / step_s * per_token
        sides[name] = {
            "model": dataclasses.asdict(cfg.model),
            "micro_batch": cfg.data.micro_batch,
            "seq_len": cfg.data.seq_len,
            "flops_per_token": per_token,
            "step_s_by_round": seconds[name],
            "step_s_median": step_s,
            "tokens_per_s": tokens / step_s,
            "model_flops_per_s": model_flops,
            "peak_fraction": model_flops / peak,
        }
    result = {
        "workload": "one training step (forward, loss, backward, clip, AdamW) at each "
        "config's batch shape on random tokens; rounds alternate before/after",
        "before": "the quickstart shipped until issue 21 (tiny preset, V = 8192)",
        "after": "configs/quickstart-cpu.yaml",
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "warmup_steps": args.warmup,
        "matmul_peak": {
            "flops_per_s_before_rounds": peak_before,
            "size_before_rounds": size_before,
            "flops_per_s_after_rounds": peak_after,
            "size_after_rounds": size_after,
            "used": "the larger of the two",
            "method": "trainer/plan/roofline.py measure_peak: torch.mm of square float32 "
            "matrices, median per size, best size",
        },
        "sides": sides,
        "fraction_ratio_after_to_before": sides["after"]["peak_fraction"]
        / sides["before"]["peak_fraction"],
        "target": "the quickstart step at >= 50 % of the measured matmul peak (issue 21)",
        "target_met": sides["after"]["peak_fraction"] >= 0.5,
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cpu": roofline.cpu_model(),
            "torch": torch.__version__,
            "platform": platform.platform(),
            "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        },
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for name, side in sides.items():
        print(
            f"{name}: {side['tokens_per_s']:,.0f} tokens/s, "
            f"{side['model_flops_per_s'] / 1e9:.1f} GFLOP/s, "
            f"{side['peak_fraction']:.0%} of {peak / 1e9:.0f} GFLOP/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
