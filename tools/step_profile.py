"""Where one CPU training step's time goes, and the share of the matmul peak its shapes allow.

tools/bench_roofline.py reports these for the quickstart; the parts are here so that tests can
run them on the tiny preset.

- ``peak_table``: torch.mm of square float32 matrices by size and thread count (the peak a
  fraction is quoted against depends on both: say which).
- ``gemm_shapes``: every matrix product of one training step of the model's linear layers
  (forward y = x W^T; backward dX = dY W and dW = dY^T x), which together are the 6 N T of
  the model-FLOP count (trainer/plan/flops.py), timed one by one in isolation at their own
  shapes and layouts by ``gemm_rate``: the rate the step's GEMMs can reach on this CPU.
- ``phase_seconds``: forward (with the loss), backward, clip and AdamW, timed apart (a CPU
  runs them synchronously, so the clock between them is exact).
- ``op_seconds``: torch.profiler's self time per step by kind of kernel: matmul, attention
  (SDPA), loss (log-softmax/NLL) and everything else (norms, RoPE, SwiGLU, AdamW, copies).
- ``limit``: the share of the peak a step could reach if everything but its FLOP-counted
  kernels (matmuls, attention) took no time, with the matmuls at their isolated rates.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

#: Square sizes the peak table times (the trainer's own peak uses trainer/plan/roofline.py's).
TABLE_SIZES = (512, 1024, 2048, 4096)
MATMUL_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"})
KINDS = ("matmul", "attention", "loss", "other")


@dataclass(frozen=True)
class Gemm:
    """out[m, n] = a[m, k] @ b[k, n]; ``a_t``/``b_t``: the operand is a transposed view (the
    layout the linear layer's kernel really gets)."""

    m: int
    k: int
    n: int
    a_t: bool = False
    b_t: bool = False

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n


def _median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()  # warm-up: threads spun up, pages touched
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def peak_table(
    sizes: tuple[int, ...] = TABLE_SIZES, threads: tuple[int, ...] = (1, 2), repeats: int = 5
) -> list[dict]:
    """GFLOP/s of torch.mm on n x n float32 matrices, median of ``repeats``, per size and
    thread count; the torch thread count is restored afterwards."""
    before = torch.get_num_threads()
    rows = []
    try:
        for count in threads:
            torch.set_num_threads(count)
            for n in sizes:
                a, b, out = torch.rand(n, n), torch.rand(n, n), torch.empty(n, n)
                seconds = _median_seconds(
                    lambda a=a, b=b, out=out: torch.mm(a, b, out=out), repeats
                )
                rows.append({"size": n, "threads": count, "gflops": 2 * n**3 / seconds / 1e9})
    finally:
        torch.set_num_threads(before)
    return rows


def gemm_shapes(model: nn.Module, tokens: int) -> Counter[Gemm]:
    """The matrix products of one training step of ``model``'s linear layers at ``tokens``
    tokens (batch x sequence), counted: three per weight (forward, dX, dW). A tied lm_head
    (the embedding table through F.linear) counts as the linear it is."""
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    config = getattr(model, "config", None)
    if config is not None and config.tie_word_embeddings:
        weights.append(model.model.embed_tokens.weight)  # the head: F.linear(h, table)
    shapes: Counter[Gemm] = Counter()
    for weight in weights:
        out_features, in_features = weight.shape
        shapes[Gemm(tokens, in_features, out_features, b_t=True)] += 1  # y = x W^T
        shapes[Gemm(tokens, out_features, in_features)] += 1  # dX = dY W
        shapes[Gemm(out_features, tokens, in_features, a_t=True)] += 1  # dW = dY^T x
    return shapes


def gemm_seconds(gemm: Gemm, repeats: int = 7) -> float:
    """Median seconds of one ``gemm`` by torch.mm, operands laid out as the step has them."""
    a = torch.rand(gemm.k, gemm.m).t() if gemm.a_t else torch.rand(gemm.m, gemm.k)
    b = torch.rand(gemm.n, gemm.k).t() if gemm.b_t else torch.rand(gemm.k, gemm.n)
    out = torch.empty(gemm.m, gemm.n)
    return _median_seconds(lambda: torch.mm(a, b, out=out), repeats)


def gemm_rate(shapes: Counter[Gemm], repeats: int = 7) -> dict:
    """The step's GEMMs timed in isolation: their FLOPs, seconds and FLOP/s, and per shape."""
    rows, flops, seconds = [], 0, 0.0
    for gemm, count in sorted(shapes.items(), key=lambda item: -item[0].flops * item[1]):
        each = gemm_seconds(gemm, repeats)
        flops += gemm.flops * count
        seconds += each * count
        rows.append({
            "m": gemm.m, "k": gemm.k, "n": gemm.n, "a_transposed": gemm.a_t,
            "b_transposed": gemm.b_t, "count": count, "gflops": gemm.flops / each / 1e9,
        })  # fmt: skip
    return {"flops": flops, "seconds": seconds, "flops_per_s": flops / seconds, "shapes": rows}


def kind_of(op_name: str) -> str:
    """Which of KINDS a profiler op name is."""
    if op_name in MATMUL_OPS:
        return "matmul"
    if "scaled_dot_product" in op_name or "flash_attention" in op_name:
        return "attention"
    if "log_softmax" in op_name or "nll_loss" in op_name:
        return "loss"
    return "other"


def op_seconds(step: Callable[[], object], steps: int) -> dict[str, float]:
    """Profiler self time per step of each kind of kernel (KINDS), in seconds."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    totals = dict.fromkeys(KINDS, 0.0)
    for event in prof.key_averages():
        totals[kind_of(event.key)] += event.self_cpu_time_total / 1e6
    return {kind: seconds / steps for kind, seconds in totals.items()}


def phase_seconds(
    phases: dict[str, Callable[[], object]], steps: int, warmup: int = 2
) -> dict[str, float]:
    """Median seconds of each phase of a step, the phases run in order ``steps`` times
    after ``warmup`` untimed steps."""
    times: dict[str, list[float]] = {name: [] for name in phases}
    for index in range(warmup + steps):
        for name, phase in phases.items():
            started = time.perf_counter()
            phase()
            if index >= warmup:
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(each) for name, each in times.items()}


def limit(
    *,
    model_flops: float,
    gemm_flops: float,
    gemm_flops_per_s: float,
    attention_seconds: float,
    peak: float,
) -> float:
    """The share of ``peak`` one step's ``model_flops`` reach when its GEMMs run at their
    isolated rate, attention takes what it took, and nothing else takes any time."""
    return model_flops / (gemm_flops / gemm_flops_per_s + attention_seconds) / peak
