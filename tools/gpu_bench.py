"""Training throughput of the 370M model on a GPU, ours and transformers' LlamaForCausalLM
side by side in one run; write tokens/s, MFU and peak memory as JSON.

    python tools/gpu_bench.py --out evidence/benchmarks/gpu-bench-h100.json   # 3-5 min, H100
    python tools/gpu_bench.py --device cpu --preset tiny --backend aot_eager   # the tests' way

Both sides take the same steps: the same weights (ours, copied into HF's model by name),
the same random-token batches, the loop's own step (trainer/train/loss.py
accumulate_gradients under bf16 autocast, the loop's gradient clip, AdamW with the loop's
two groups and configs/llama-370m.yaml's hyperparameters), each model through
``torch.compile`` and SDPA attention. Only the model differs. The first step's losses must
agree (same weights, same tokens: the same function to bf16 rounding), or the comparison is
of two different models and the run exits 1.

Each side is built, warmed up for ``--warmup`` steps (compilation happens there and is
timed apart), then ``--steps`` steps are timed one by one (CUDA synchronised) and the median
is reported; the sides run one after the other so each one's peak memory is its own. MFU is
model FLOPs (trainer/plan/flops.py, 6N + 12LHT per token) over the device's dense bf16 peak
(the datasheet table there, or ``--peak-flops``); no MFU without a known peak.

The micro-batch defaults to 32 x 1024 tokens: a 370M model on one 80 GB card or more (45 GB
at peak on an H200); the 24 GB config's micro-batch of 4 leaves an H100 mostly idle, and on
an H200 16 x 1024 reached 37.5 % MFU where 32 x 1024 reached 41.0 %.

As the loop does, the per-token loss is compiled beside the model
(``torch.compile(loss.token_losses)``) and AdamW is PyTorch's fused one
(optim.build_adamw); the HF side gets the same loss and the same AdamW. ``--sides ours``
times our model alone; ``--profile FILE`` runs torch.profiler over three more steps of ours
and puts the device time grouped into matrix products, attention, optimizer, compiled
fusions and the rest in the evidence (the op table in FILE).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gates.io.machine_paths import portable_command  # noqa: E402
from gates.provenance.evidence import git_info, host_info, utc_now  # noqa: E402
from trainer.config.load import load_config  # noqa: E402
from trainer.model.config import LlamaConfig, preset  # noqa: E402
from trainer.model.hf import hf_config_dict  # noqa: E402
from trainer.model.llama import build_model  # noqa: E402
from trainer.plan.flops import flops_per_token, peak_flops  # noqa: E402
from trainer.train import loss, optim  # noqa: E402

HYPERPARAMETERS = ROOT / "configs" / "llama-370m.yaml"
#: First-step losses of the two sides agree to this relative difference: bf16 autocast
#: rounds each side's matmuls in its own order; float32 leaves only summation order.
LOSS_AGREEMENT = {"bf16": 2e-2, "fp32": 1e-4}
SIDES = ("ours", "hf")


@dataclasses.dataclass(frozen=True)
class Shape:
    micro_batch: int
    seq_len: int
    grad_accum: int

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch * self.seq_len * self.grad_accum


class HfLogits(nn.Module):
    """transformers' LlamaForCausalLM as our model is called: input_ids -> logits."""

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.hf(input_ids=input_ids, use_cache=False).logits


def hf_twin(ours: nn.Module, cfg: LlamaConfig, device: torch.device) -> nn.Module:
    """transformers' LlamaForCausalLM of ``cfg`` with SDPA attention, holding ``ours``'s
    weights (copied by name: the names are HF's), as an input_ids -> logits module."""
    import transformers  # noqa: PLC0415 - only this side needs it

    config = transformers.LlamaConfig(**hf_config_dict(cfg))
    config._attn_implementation = "sdpa"  # transformers' documented switch
    with torch.device(device):
        theirs = transformers.LlamaForCausalLM(config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    tied_head = ["lm_head.weight"] if cfg.tie_word_embeddings else []
    if unexpected or sorted(missing) != tied_head:
        raise ValueError(f"HF's model is not ours: missing {missing}, unexpected {unexpected}")
    return HfLogits(theirs)


def adamw_like_ours(
    model: nn.Module, ours: nn.Module, hyper: Any, *, fused: bool | None = None
) -> torch.optim.AdamW:
    """AdamW over ``model`` with the groups trainer/train/optim.py gives ``ours``, by name
    (HF's RMSNorm is not ours, so its rule cannot be asked of HF's modules directly), and
    ``fused`` as build_adamw chose it for ``ours``."""
    decay_names = {name for name, _ in optim.param_groups(ours)[optim.DECAY]}
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if name.removeprefix("hf.") in decay_names else no_decay).append(param)
    return torch.optim.AdamW(
        [
            {"name": optim.DECAY, "params": decay, "weight_decay": hyper.weight_decay},
            {"name": optim.NO_DECAY, "params": no_decay, "weight_decay": 0.0},
        ],
        lr=hyper.lr,
        betas=(hyper.beta1, hyper.beta2),
        eps=hyper.eps,
        fused=fused,
    )


#: Kernel-name fragments by what the kernel does; the first group that matches counts it.
KERNEL_GROUPS = (
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("matrix products", ("gemm", "nvjet", "xmma", "cutlass", "wgmma", "matmul", "::mm", "addmm")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel")),
    ("compiled fusions", ("triton",)),
)


def kernel_group(name: str) -> str:
    lowered = name.lower()
    for group, fragments in KERNEL_GROUPS:
        if any(fragment in lowered for fragment in fragments):
            return group
    return "other"


def profile_steps(
    step: Any, steps: list[list], device: torch.device, table_path: Path
) -> dict[str, Any]:
    """Run ``step`` over ``steps`` under torch.profiler; write the op table to ``table_path``
    and return the device (or, on a CPU, self CPU) time per kernel group, in seconds."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    on_cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        for micro_batches in steps:
            step(micro_batches)
        _sync(device)
    averages = prof.key_averages()
    sort_by = "self_device_time_total" if on_cuda else "self_cpu_time_total"
    table_path.parent.mkdir(parents=True, exist_ok=True)
    table_path.write_text(averages.table(sort_by=sort_by, row_limit=60) + "\n")
    groups: dict[str, float] = {}
    top: list[tuple[float, str]] = []
    for event in averages:
        if getattr(event, "is_user_annotation", False) or event.key.startswith("Optimizer."):
            continue  # a range over kernels (Optimizer.step#AdamW.step), not a kernel
        if on_cuda:
            micros = getattr(event, "self_device_time_total", None)
            if micros is None:
                micros = event.self_cuda_time_total
            if event.device_type != torch.autograd.DeviceType.CUDA:
                continue
        else:
            micros = event.self_cpu_time_total
        if micros <= 0:
            continue
        group = kernel_group(event.key)
        groups[group] = groups.get(group, 0.0) + micros / 1e6
        top.append((micros / 1e6, event.key))
    top.sort(reverse=True)
    return {
        "steps": len(steps),
        "clock": "device (CUDA kernels)" if on_cuda else "self CPU time of ops",
        "seconds_by_group": dict(sorted(groups.items(), key=lambda kv: -kv[1])),
        "seconds_total": sum(groups.values()),
        "top_kernels": [{"name": name[:160], "seconds": s} for s, name in top[:15]],
        "table": table_path.name,
    }


def batches(cfg: LlamaConfig, shape: Shape, steps: int, device: torch.device) -> list[list]:
    """Random-token (inputs, targets) micro-batches for ``steps`` steps, on ``device``."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        tokens = torch.randint(
            0, cfg.vocab_size, (shape.grad_accum, shape.micro_batch, shape.seq_len + 1),
            generator=generator,
        )  # fmt: skip
        out.append([loss.next_token_pairs(t.to(device)) for t in tokens])
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def training_step(
    model: nn.Module,
    adamw: torch.optim.Optimizer,
    *,
    autocast: torch.dtype | None,
    grad_clip: float,
    losses: loss.TokenLosses | None,
) -> Any:
    """One optimizer step over a list of micro-batches, as the loop takes it; its loss."""

    def step(micro_batches: list) -> float:
        adamw.zero_grad(set_to_none=True)
        step_loss, _ = loss.accumulate_gradients(
            model, micro_batches, autocast=autocast, losses=losses
        )
        optim.clip_gradients(model.parameters(), grad_clip)
        adamw.step()
        return step_loss

    return step


def time_side(
    model: nn.Module,
    adamw: torch.optim.Optimizer,
    steps: list[list],
    *,
    warmup: int,
    autocast: torch.dtype | None,
    grad_clip: float,
    losses: loss.TokenLosses | None,
    device: torch.device,
) -> dict[str, Any]:
    """Take every step of ``steps``: the first ``warmup`` untimed as a whole, the rest one
    by one. Losses, warm-up seconds and the timed steps' seconds."""
    step_losses, seconds = [], []
    step = training_step(model, adamw, autocast=autocast, grad_clip=grad_clip, losses=losses)
    _sync(device)
    warm_started = time.perf_counter()
    for index, micro_batches in enumerate(steps):
        if index == warmup:
            _sync(device)
            warmup_s = time.perf_counter() - warm_started
        started = time.perf_counter()
        step_loss = step(micro_batches)
        _sync(device)
        if index >= warmup:
            seconds.append(time.perf_counter() - started)
        step_losses.append(step_loss)
    return {"losses": step_losses, "warmup_s": warmup_s, "step_s": seconds}


def mfu(tokens_per_s: float, per_token: float, peak: float | None) -> float | None:
    """Model FLOP/s over the device's peak; None without a peak."""
    return None if not peak else tokens_per_s * per_token / peak


def summarize(
    timed: dict[str, Any], shape: Shape, per_token: float, peak: float | None
) -> dict[str, Any]:
    step_s = statistics.median(timed["step_s"])
    tokens_per_s = shape.tokens_per_step / step_s
    return {
        "warmup_s": round(timed["warmup_s"], 3),
        "step_s_each": timed["step_s"],
        "step_s_median": step_s,
        "tokens_per_s": tokens_per_s,
        "model_flops_per_s": tokens_per_s * per_token,
        "mfu": mfu(tokens_per_s, per_token, peak),
        "first_loss": timed["losses"][0],
        "last_loss": timed["losses"][-1],
    }


def run_side(
    side: str,
    cfg: LlamaConfig,
    shape: Shape,
    data: list[list],
    *,
    args: argparse.Namespace,
    device: torch.device,
) -> dict[str, Any]:
    """Build one side from the seeded weights, compile it (unless told not to), time it."""
    hyper = load_config(HYPERPARAMETERS).optimizer
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    ours = build_model(cfg, device=device, seed=0)
    adamw = optim.build_adamw(
        ours, lr=hyper.lr, betas=(hyper.beta1, hyper.beta2), eps=hyper.eps,
        weight_decay=hyper.weight_decay,
    )  # fmt: skip
    model = ours
    if side != "ours":
        model = hf_twin(ours, cfg, device)
        adamw = adamw_like_ours(model, ours, hyper, fused=adamw.defaults["fused"])
        del ours  # HF holds its own copy; ours would count in HF's peak memory
    # As the loop does: the compiled module holds the model's parameters, and the loss
    # is compiled beside it.
    forward: nn.Module = torch.compile(model, backend=args.backend) if args.compile else model
    losses = torch.compile(loss.token_losses, backend=args.backend) if args.compile else None
    autocast = torch.bfloat16 if args.precision == "bf16" else None
    timed = time_side(
        forward, adamw, data, warmup=args.warmup, autocast=autocast,
        grad_clip=hyper.grad_clip, losses=losses, device=device,
    )  # fmt: skip
    result = summarize(timed, shape, flops_per_token(cfg, shape.seq_len), args.peak)
    result["peak_memory_bytes"] = (
        torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    )
    result["parameters"] = sum(p.numel() for p in model.parameters())
    result["adamw_fused"] = bool(adamw.defaults["fused"])
    if args.profile and side == "ours":
        step = training_step(
            forward, adamw, autocast=autocast, grad_clip=hyper.grad_clip, losses=losses
        )
        try:
            result["profile"] = profile_steps(step, data[:3], device, args.profile)
        except Exception as exc:  # the timings stand; the evidence says what failed
            result["profile"] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"gpu_bench: profiling failed: {exc!r}", file=sys.stderr)
    return result


def _versions() -> dict[str, str]:
    import transformers  # noqa: PLC0415

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cuda": torch.version.cuda or "none",
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the JSON here")
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (tests)")
    ap.add_argument("--preset", default="370m", help="model preset (370m; tiny for tests)")
    ap.add_argument("--micro-batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per side")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compiling)")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                    help="bf16: the forward under autocast, as the loop on CUDA")  # fmt: skip
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--sides", choices=("both", "ours"), default="both",
                    help="ours: our model alone (no HF comparison)")  # fmt: skip
    ap.add_argument("--profile", type=Path,
                    help="profile three more steps of ours; the op table goes here")  # fmt: skip
    ap.add_argument("--backend", default="inductor",
                    help="torch.compile's (aot_eager needs no C++ compiler)")  # fmt: skip
    ap.add_argument("--peak-flops", type=float, help="the device's dense bf16 peak FLOP/s "
                    "where trainer/plan/flops.py's table does not know it")  # fmt: skip
    ap.add_argument("--commit", help="the commit measured, where this tree's git cannot tell")
    args = ap.parse_args(argv)
    for name in ("micro_batch", "seq_len", "grad_accum", "steps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.warmup < 1:
        ap.error("--warmup must be at least 1 (the first step compiles and allocates)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_bench: CUDA is not available here; nothing run", file=sys.stderr)
        return 2
    cfg = preset(args.preset)
    if args.seq_len > cfg.max_position_embeddings:
        print(f"gpu_bench: --seq-len {args.seq_len} exceeds the {args.preset} model's "
              f"{cfg.max_position_embeddings} positions", file=sys.stderr)  # fmt: skip
        return 2
    args.peak = args.peak_flops or peak_flops(device)
    shape = Shape(args.micro_batch, args.seq_len, args.grad_accum)
    started = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = True  # fp32 matmuls outside autocast (both sides)
    data = batches(cfg, shape, args.warmup + args.steps, device)
    sides = {}
    for side in SIDES if args.sides == "both" else ("ours",):
        sides[side] = run_side(side, cfg, shape, data, args=args, device=device)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    ours, theirs = sides["ours"], sides.get("hf")
    relative = agree = None
    if theirs is not None:
        relative = abs(ours["first_loss"] - theirs["first_loss"]) / abs(theirs["first_loss"])
        agree = relative <= LOSS_AGREEMENT[args.precision]
    result = {
        "workload": "training steps of the model on random tokens (forward under autocast, "
        "cross-entropy, backward, clip, AdamW), ours and transformers' LlamaForCausalLM with "
        "the same weights and batches, one side after the other"
        if theirs is not None
        else "training steps of our model on random tokens (forward under autocast, "
        "cross-entropy, backward, clip, AdamW); no HF side in this run (--sides ours)",
        "model": {"preset": args.preset, **dataclasses.asdict(cfg)},
        "shape": dataclasses.asdict(shape) | {"tokens_per_step": shape.tokens_per_step},
        "precision": args.precision,
        "compile": args.backend if args.compile else None,
        "loss": "compiled beside the model (torch.compile(loss.token_losses))"
        if args.compile
        else "eager",
        "attention": "SDPA (ours: trainer/model/llama.py; HF: attn_implementation sdpa)",
        "steps": {"warmup": args.warmup, "timed": args.steps},
        "flops_per_token": flops_per_token(cfg, args.seq_len),
        "peak_flops": args.peak,
        "peak_source": "--peak-flops" if args.peak_flops else "trainer/plan/flops.py table",
        "sides": sides,
        "first_loss_relative_difference": relative,
        "first_losses_agree": agree,
        "ours_over_hf_tokens_per_s": None
        if theirs is None
        else ours["tokens_per_s"] / theirs["tokens_per_s"],
        "goals": {
            "mfu_at_least_45_percent": None if ours["mfu"] is None else ours["mfu"] >= 0.45,
            "faster_than_hf": None
            if theirs is None
            else ours["tokens_per_s"] > theirs["tokens_per_s"],
        },
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "versions": _versions(),
        "cpu_count": os.cpu_count(),
        "wall_s": round(time.perf_counter() - started, 1),
        "captured_at": utc_now(),
        "command": " ".join(portable_command("python", [__file__, *(argv or sys.argv[1:])], ROOT)),
        "host": host_info(),
    }
    if args.commit:  # a device machine's copy of the tree may carry another git history
        result["git"] = {"commit": args.commit, "dirty": None, "note": "as given by --commit"}
    else:
        result["git"] = git_info(ROOT)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    for side, s in sides.items():
        shown = "" if s["mfu"] is None else f", MFU {s['mfu']:.1%}"
        print(f"{side}: {s['tokens_per_s']:,.0f} tokens/s{shown}, compile+warm-up "
              f"{s['warmup_s']:.1f} s, first loss {s['first_loss']:.4f}")  # fmt: skip
    if agree is False:
        print(f"gpu_bench: first-step losses differ by {relative:.2e} relative (allowed "
              f"{LOSS_AGREEMENT[args.precision]:.0e}): the two sides are not the same model",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
