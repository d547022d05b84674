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
(not read from the cache) right before the rounds and again after them. A table of
torch.mm rates by square size (512 to 4096) and thread count (1 and the torch threads)
says how much the choice of peak matters on this machine.

"after, compiled" is the "after" step with its forward through torch.compile, as
``training.compile: true`` trains (``--no-compiled`` leaves it out: it needs a C++
compiler). "where_the_time_goes" profiles the "after" step (tools/step_profile.py): its
phases, its kernels by kind, its GEMMs timed alone at their own shapes, and the share of the
peak it could reach if nothing but its FLOP-counted kernels took time; "limit" says it in
words.

    python tools/bench_roofline.py --out evidence/benchmarks/cpu-roofline-quickstart-xeon.json
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

from tools import step_profile  # noqa: E402
from trainer.config.in_code import with_values  # noqa: E402
from trainer.config.load import load_config  # noqa: E402
from trainer.config.sections import RunConfig  # noqa: E402
from trainer.model.config import preset  # noqa: E402
from trainer.model.llama import build_model  # noqa: E402
from trainer.plan import roofline  # noqa: E402
from trainer.plan.flops import flops_per_token  # noqa: E402
from trainer.train import loss, optim  # noqa: E402

QUICKSTART = ROOT / "configs" / "quickstart-cpu.yaml"
COMPILED = "after, compiled"  # the "after" step with training.compile: true


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


class Step:
    """One training step of ``cfg``'s model and batch shape as a bare loop takes it, in
    phases: forward with the loss, backward, the loop's clip, AdamW. ``compiled``: the
    forward through torch.compile, as ``training.compile`` trains."""

    def __init__(self, cfg: RunConfig, *, compiled: bool = False) -> None:
        torch.manual_seed(0)
        self.cfg = cfg
        self.model = build_model(cfg.model, seed=0)
        self.forward = torch.compile(self.model) if compiled else self.model
        o = cfg.optimizer
        self.adamw = optim.build_adamw(
            self.model, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay
        )
        batch = torch.randint(0, cfg.model.vocab_size, (cfg.data.micro_batch, cfg.data.seq_len + 1))
        self.inputs, self.targets = loss.next_token_pairs(batch)
        self._loss: torch.Tensor | None = None

    def forward_and_loss(self) -> None:
        self.adamw.zero_grad(set_to_none=True)
        logits = self.forward(self.inputs)
        self._loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.targets.reshape(-1))

    def backward(self) -> None:
        self._loss.backward()

    def clip(self) -> None:
        optim.clip_gradients(self.model.parameters(), self.cfg.optimizer.grad_clip)

    def adamw_step(self) -> None:
        self.adamw.step()

    @property
    def phases(self) -> dict:
        return {
            "forward_and_loss": self.forward_and_loss,
            "backward": self.backward,
            "clip": self.clip,
            "adamw": self.adamw_step,
        }

    def __call__(self) -> None:
        for phase in self.phases.values():
            phase()

    @property
    def tokens(self) -> int:
        return self.cfg.data.micro_batch * self.cfg.data.seq_len


def time_steps(cfg: RunConfig, *, steps: int, warmup: int, compiled: bool = False) -> float:
    """Median seconds of one training step of ``cfg``'s model and batch shape."""
    step = Step(cfg, compiled=compiled)
    times = []
    for i in range(warmup + steps):
        started = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def where_the_time_goes(cfg: RunConfig, *, steps: int, peak: float) -> dict:
    """The step of ``cfg`` profiled (tools/step_profile.py): phases, kernels by kind, its
    GEMMs timed alone at their shapes, and the share of ``peak`` those shapes allow."""
    step = Step(cfg)
    phases = step_profile.phase_seconds(step.phases, steps)
    kinds = step_profile.op_seconds(step, steps)
    gemms = step_profile.gemm_rate(step_profile.gemm_shapes(step.model, step.tokens))
    per_token = flops_per_token(cfg.model, cfg.data.seq_len)
    model_flops = per_token * step.tokens
    attention_flops = model_flops - gemms["flops"]
    profiled = sum(kinds.values())
    return {
        "phases_s": phases,
        "kernels_s": kinds,
        "kernels_share": {kind: seconds / profiled for kind, seconds in kinds.items()},
        "model_flops_per_step": model_flops,
        "gemm": gemms,
        "gemm_in_step_flops_per_s": gemms["flops"] / kinds["matmul"],
        "attention_flops_per_s": attention_flops / kinds["attention"],
        "limit_if_only_counted_kernels_took_time": step_profile.limit(
            model_flops=model_flops,
            gemm_flops=gemms["flops"],
            gemm_flops_per_s=gemms["flops_per_s"],
            attention_seconds=kinds["attention"],
            peak=peak,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument(
        "--no-compiled", dest="compiled", action="store_false",
        help="leave out the 'after' step through torch.compile (needs a C++ compiler)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    torch.use_deterministic_algorithms(True)
    runs = configs()
    if args.compiled:
        runs[COMPILED] = runs["after"]
    load_before = os.getloadavg()
    peak_before, size_before = roofline.measure_peak()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.rounds):
        for name, cfg in runs.items():
            seconds[name].append(
                time_steps(cfg, steps=args.steps, warmup=args.warmup, compiled=name == COMPILED)
            )
    peak_after, size_after = roofline.measure_peak()
    peak = max(peak_before, peak_after)
    profile = where_the_time_goes(runs["after"], steps=args.profile_steps, peak=peak)
    table = step_profile.peak_table(threads=tuple(sorted({1, torch.get_num_threads()})))
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
            "matrices (512, 1024, 2048) on the torch threads in force, median per size, best "
            "size; the peak a training run's peak_fraction is quoted against",
            "by_size_and_threads": table,
        },
        "sides": sides,
        "fraction_ratio_after_to_before": sides["after"]["peak_fraction"]
        / sides["before"]["peak_fraction"],
        "target": "the quickstart step at >= 50 % of the measured matmul peak (issue 21)",
        "target_met": sides["after"]["peak_fraction"] >= 0.5,
        "where_the_time_goes": profile,
        "limit": limit_text(profile, peak),
        "machine": {
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "cpu": roofline.cpu_model(),
            "aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "forced_by_environment": {
                name: os.environ[name]
                for name in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")
                if name in os.environ
            },
            "torch": torch.__version__,
            "platform": platform.platform(),
            "load_average_1min": {"before": load_before[0], "after": os.getloadavg()[0]},
        },
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(result["limit"])
    for name, side in sides.items():
        print(
            f"{name}: {side['tokens_per_s']:,.0f} tokens/s, "
            f"{side['model_flops_per_s'] / 1e9:.1f} GFLOP/s, "
            f"{side['peak_fraction']:.0%} of {peak / 1e9:.0f} GFLOP/s"
        )
    return 0


def limit_text(profile: dict, peak: float) -> str:
    """The profile's verdict in words: what bounds the "after" step's share of the peak."""
    shares = profile["kernels_share"]
    gemm = profile["gemm"]
    widest = max(gemm["shapes"], key=lambda row: row["count"] * row["m"] * row["k"] * row["n"])
    return (
        f"matmuls take {shares['matmul']:.0%} of the step, attention {shares['attention']:.0%}, "
        f"the loss {shares['loss']:.0%} and the rest (norms, RoPE, SwiGLU, AdamW, copies; no "
        f"counted FLOPs) {shares['other']:.0%}. The step's GEMMs, timed alone at their shapes "
        f"(the largest {widest['m']} x {widest['k']} x {widest['n']}), run at "
        f"{gemm['flops_per_s'] / 1e9:.0f} GFLOP/s = {gemm['flops_per_s'] / peak:.0%} of the "
        f"{peak / 1e9:.0f} GFLOP/s peak; attention at "
        f"{profile['attention_flops_per_s'] / 1e9:.0f} GFLOP/s. Were everything else free, the "
        f"step would reach {profile['limit_if_only_counted_kernels_took_time']:.0%} of the peak."
    )


if __name__ == "__main__":
    sys.exit(main())
