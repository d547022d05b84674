"""The memory a training step needs, item by item, each with the formula that gives it.

No torch: the numbers come from the architecture (trainer/model/params.py) and the batch
shape. Symbols: P parameters, B micro_batch, T seq_len, H hidden_size, I
intermediate_size, nh query heads of dh dims (Q = nh * dh), V vocab_size, L layers.

State (float32, whatever the precision: autocast keeps master weights in float32):
weights 4P, gradients 4P, AdamW exp_avg and exp_avg_sq 8P.

Activations are the tensors autograd saves for backward, counted tensor by tensor for
OUR implementation (trainer/model/llama.py, full logits then F.cross_entropy) and
checked against a measurement with torch.autograd.graph.saved_tensors_hooks
(tests/unit/trainer/test_plan_memory.py: exact in float32 and in CPU bf16 autocast).
Per layer, float32:

    residual stream in, and after attention     2 BTH
    two RMSNorms: 1/rms, normalized x, output   2 (BT + 2 BTH)
    attention: q, k and v (KV heads repeated
      to nh), output; logsumexp                 4 BTQ + B nh T
    SwiGLU: gate, up, silu(gate), product        4 BTI

plus, once: the input ids (8 bytes each), the final RMSNorm (3 BTH + BT), the RoPE
cos/sin tables (2 T dh) and the log-softmax output of the cross-entropy (B T V, float32).
Under bf16/fp16 autocast (CUDA) the residual stream and the RMSNorm internals stay float32;
every projection saves its own half-precision copy of its input (q, k, v: 3 BTH; gate, up:
2 BTH; lm_head: BTH), attention and MLP tensors are half precision, the logsumexp and the
cross-entropy's log-softmax stay float32, RoPE casts cos/sin per use (4 T dh per layer),
and autocast caches a half-precision copy of every projection weight (2 bytes each).
Attention is assumed to run a fused SDPA kernel (flash / memory-efficient), which stores
no T x T matrix; the math fallback would add B nh T^2 per layer.

Not saved but alive at the peak: the logits the loop holds (B T V in the compute dtype),
and during backward the gradients of the log-softmax and of the logits (2 x 4 B T V).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from pathlib import Path

from trainer.model.config import LlamaConfig
from trainer.model.params import param_count, parameter_shapes

FP32 = 4
HALF = 2
INT64 = 8
PRECISIONS = ("fp32", "bf16", "fp16")
#: Above this share of the device's memory the plan warns: allocator fragmentation,
#: the CUDA context and kernels' workspaces are not in the estimate.
WARN_FRACTION = 0.9

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


@dataclass(frozen=True)
class MemoryItem:
    name: str
    bytes: int
    formula: str  # symbols, then the numbers: "4 P = 4 x 373,509,120"

    def as_dict(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "formula": self.formula}


@dataclass(frozen=True)
class MemoryEstimate:
    precision: str
    items: tuple[MemoryItem, ...]

    @property
    def total(self) -> int:
        return sum(item.bytes for item in self.items)

    def item(self, name: str) -> MemoryItem:
        return next(item for item in self.items if item.name == name)


@dataclass(frozen=True)
class DeviceMemory:
    bytes: int
    source: str  # where the number comes from, e.g. "/proc/meminfo MemAvailable"


def format_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


#: The most memory a size may name: 1 PiB, thousands of times any accelerator's or host's.
#: Past it (1e309GiB is an infinity) the number is a typo, and a plan against it would
#: call any run a fit.
MAX_SIZE = 1 << 50


def parse_size(text: str) -> int:
    """'24GiB', '24 GiB', '80GB', '512M', '1000000' -> bytes (GB = 10^9, GiB = 2^30);
    ValueError for anything else: no number, an unknown unit, not a positive size, a
    non-finite one (nan, inf, 1e309GiB) or one past MAX_SIZE."""
    raw = text.strip().replace(" ", "").replace("_", "")
    digits = raw.rstrip("BbKkMmGgTtIi")
    unit = raw[len(digits) :].lower()
    try:
        value = float(digits)
    except ValueError:
        raise ValueError(f"{text!r} is not a size; write e.g. 24GiB, 80GB or 512MiB") from None
    if unit not in _UNITS:
        raise ValueError(f"{text!r}: unknown unit {unit!r}; use B, KiB, MiB, GiB, TiB, KB, MB, GB")
    size = value * _UNITS[unit]
    if not math.isfinite(size):
        raise ValueError(f"{text!r} is not a finite size")
    if size > MAX_SIZE:
        raise ValueError(f"{text!r} is more than 1 PiB ({MAX_SIZE} bytes): no device has that")
    if int(size) <= 0:
        raise ValueError(f"{text!r} is not a positive size")
    return int(size)


# ---------------------------------------------------------------- activations
def _shape(cfg: LlamaConfig) -> tuple[int, int, int, int, int, int]:
    heads, head_dim = cfg.num_attention_heads, cfg.resolved_head_dim
    return cfg.hidden_size, cfg.intermediate_size, heads, head_dim, heads * head_dim, cfg.vocab_size


def layer_activation_bytes(cfg: LlamaConfig, b: int, t: int, precision: str) -> int:
    """Bytes autograd saves for one decoder layer (see the module docstring)."""
    h, i, nh, dh, q, _ = _shape(cfg)
    bt = b * t
    lse = FP32 * b * nh * t  # attention logsumexp, float32 in every precision
    if precision == "fp32":
        return FP32 * (2 * bt * h + 2 * (bt + 2 * bt * h) + 4 * bt * q + 4 * bt * i) + lse
    residual_and_norms = FP32 * (2 * bt * h + 2 * (bt + bt * h))
    input_copies = HALF * 5 * bt * h  # q/k/v and gate/up each cast their input
    attention = HALF * 4 * bt * q
    mlp = HALF * 4 * bt * i
    rope = HALF * 4 * t * dh  # cos and sin cast for q and for k
    return residual_and_norms + input_copies + attention + mlp + rope + lse


def fixed_activation_bytes(cfg: LlamaConfig, b: int, t: int, precision: str) -> int:
    """Bytes saved outside the layers, without the cross-entropy's log-softmax."""
    h, _, _, dh, _, _ = _shape(cfg)
    bt = b * t
    ids = INT64 * bt
    if precision == "fp32":
        return ids + FP32 * (3 * bt * h + bt) + FP32 * 2 * t * dh
    return ids + FP32 * (2 * bt * h + bt) + HALF * bt * h


def projection_weight_count(cfg: LlamaConfig) -> int:
    """Weights that go through a matmul (autocast copies these): every *_proj and lm_head
    (or the tied embedding, used as lm_head)."""
    projections = sum(
        prod(shape) for name, shape in parameter_shapes(cfg).items() if name.endswith("proj.weight")
    )
    return projections + cfg.vocab_size * cfg.hidden_size


def saved_activation_bytes(cfg: LlamaConfig, b: int, t: int, precision: str) -> int:
    """Everything autograd saves for one micro-batch's backward, the cross-entropy included
    (what tests compare with saved_tensors_hooks)."""
    total = (
        cfg.num_hidden_layers * layer_activation_bytes(cfg, b, t, precision)
        + fixed_activation_bytes(cfg, b, t, precision)
        + FP32 * b * t * cfg.vocab_size
    )
    if precision != "fp32":
        total += HALF * projection_weight_count(cfg)
    return total


# ---------------------------------------------------------------- the estimate
def estimate_memory(cfg: LlamaConfig, b: int, t: int, precision: str) -> MemoryEstimate:
    """Weights, gradients, AdamW moments, activations and logits buffers of one training
    step with micro-batch ``b`` x ``t`` tokens at ``precision`` (fp32 | bf16 | fp16)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    p = param_count(cfg)
    n_layers, v = cfg.num_hidden_layers, cfg.vocab_size
    bytes_per = FP32 if precision == "fp32" else HALF
    layer = layer_activation_bytes(cfg, b, t, precision)
    fixed = fixed_activation_bytes(cfg, b, t, precision)
    btv = b * t * v
    sym = f"B={b}, T={t}, V={v:,}"
    items = [
        MemoryItem("weights", FP32 * p, f"4 P = 4 x {p:,}"),
        MemoryItem("gradients", FP32 * p, f"4 P (float32, like the weights) = 4 x {p:,}"),
        MemoryItem("adamw_moments", 2 * FP32 * p, f"2 x 4 P (exp_avg, exp_avg_sq) = 8 x {p:,}"),
        MemoryItem(
            "activations",
            n_layers * layer + fixed,
            f"L x {layer:,} per layer + {fixed:,} (ids, final norm, "
            f"{'RoPE tables' if precision == 'fp32' else 'lm_head input copy'}) at B={b}, T={t}, "
            f"{precision}; per layer "
            + (
                "4 (6 BTH + 2 BT + 4 BTQ + 4 BTI) + 4 B nh T"
                if precision == "fp32"
                else "4 (4 BTH + 2 BT) + 2 (5 BTH + 4 BTQ + 4 BTI + 4 T dh) + 4 B nh T"
            ),
        ),
        MemoryItem(
            "logits",
            bytes_per * btv,
            f"{bytes_per} B T V ({'float32' if bytes_per == FP32 else 'half'}) at {sym}",
        ),
        MemoryItem("cross_entropy_saved", FP32 * btv, f"4 B T V (log-softmax, float32) at {sym}"),
        MemoryItem(
            "cross_entropy_backward",
            2 * FP32 * btv,
            f"2 x 4 B T V (grads of log-softmax and logits) at {sym}",
        ),
    ]
    if precision != "fp32":
        w = projection_weight_count(cfg)
        items.append(
            MemoryItem(
                "autocast_weight_copies",
                HALF * w,
                f"2 x {w:,} (half copies of projection and lm_head weights)",
            )
        )
    return MemoryEstimate(precision, tuple(items))


def checkpoint_bytes(cfg: LlamaConfig) -> dict[str, int]:
    """Weights (safetensors, float32) and optimizer state (AdamW's two moments, float32);
    file headers (a few KiB of JSON) are not counted."""
    p = param_count(cfg)
    return {"weights": FP32 * p, "optimizer": 2 * FP32 * p, "total": 3 * FP32 * p}


# ---------------------------------------------------------------- the device
def host_available_memory(meminfo: Path = Path("/proc/meminfo")) -> DeviceMemory:
    """MemAvailable from /proc/meminfo; where that does not exist, free pages x page size."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return DeviceMemory(int(line.split()[1]) * 1024, f"{meminfo} MemAvailable")
    except OSError:
        pass
    pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return DeviceMemory(pages, "os.sysconf(SC_AVPHYS_PAGES) x SC_PAGE_SIZE")


def device_memory(
    device: str,
    override: int | None = None,
    cuda_total: Callable[[], tuple[int, str]] | None = None,
) -> DeviceMemory:
    """The memory a run on ``device`` (cpu | cuda) may use: ``override`` (--device-memory)
    when given, else CUDA device 0's total memory, else the host's available RAM."""
    if override is not None:
        return DeviceMemory(override, "--device-memory")
    if device == "cuda":
        if cuda_total is None:
            raise ValueError("no CUDA device to measure; pass --device-memory")
        total, name = cuda_total()
        return DeviceMemory(total, f"torch.cuda total memory of {name}")
    return host_available_memory()
