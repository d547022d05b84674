"""A measured time estimate: a few short forward/backward passes on this device,
extrapolated to one optimizer step and to the whole run.

Why not time the configured model directly: a 370M model at micro_batch 4 x 1024 tokens
takes minutes per pass on a laptop CPU, and plan must answer in seconds. So the model is
built at the config's width with 2 layers, and three cells are timed (median of a few
passes each, after a warm-up):

    A: 1 layer at a small shape     B: 2 layers at the small shape
    C: 1 layer at a 4x larger shape (more tokens, same kernels)

and fitted to  t = c0 + d * c1 + F(d, shape) / R,  where d is the layer count, F the
analytic matmul+attention FLOPs of one forward/backward (3 x forward), R the achieved
FLOP rate, c0 the fixed cost (embedding/lm_head gradients are written whatever the
token count, which dominates small shapes for large vocabularies) and c1 the per-layer
fixed cost. A-B separates the layer from the embedding/lm_head, A-C the rate from the
fixed costs. The configured step is then c0 + L c1 + F(L, B x T) / R per micro-batch,
times gradient_accumulation, plus one AdamW update, timed on the 2-layer model's layer
parameters and scaled to P. Evaluation, checkpoints and data loading are not included.

The measured shape is chosen by a FLOP budget, and the passes per cell (3, down to 1)
by how long the warm-up pass took, so that the measurement stays within a few seconds
on 2 CPU cores, the 370M width included; the output says which shapes were measured,
how many passes, and how they were scaled.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainer.model.config import LlamaConfig
from trainer.model.params import param_count
from trainer.plan import memory

if TYPE_CHECKING:  # torch is imported only when a measurement runs
    from trainer.model.llama import Llama

#: FLOPs of the largest timed pass (cell C); about 0.1-0.3 s on 2 CPU cores.
PASS_FLOP_BUDGET = 8e9
#: Timed passes per cell, at most; fewer (down to 1) when the warm-up pass shows that
#: three per cell would take longer than MEASURE_SECONDS (a slow or busy machine).
TIMED_PASSES = 3
MEASURE_SECONDS = 4.0
#: Every weight of the timed model; small enough that nothing overflows in 2 layers.
FILL_VALUE = 0.01
#: The large cell has this many times the small cell's tokens.
SHAPE_RATIO = 4
#: Fewer tokens than this leave a large-vocabulary pass memory-bound (the V x H lm_head
#: is read and its gradient written whatever the token count), where the FLOP rate
#: cannot be measured; the budget gives way to this floor (0.5 s at the 370M width).
MIN_LARGE_TOKENS = 128


@dataclass(frozen=True)
class Shape:
    batch: int
    seq_len: int

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    def __str__(self) -> str:
        return f"{self.batch} x {self.seq_len}"


def layer_flops(cfg: LlamaConfig, shape: Shape) -> float:
    """Forward+backward FLOPs of one decoder layer: 2 per multiply-add of every projection
    per token, plus causal attention (q.k and p.v over half the T x T square), x 3 for
    forward + backward."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    q = cfg.num_attention_heads * cfg.resolved_head_dim
    kv = cfg.num_key_value_heads * cfg.resolved_head_dim
    projections = 2 * shape.tokens * (h * q + 2 * h * kv + q * h + 3 * h * i)
    attention = 2 * shape.batch * shape.seq_len * shape.seq_len * q  # 2 matmuls x 2 / 2
    return 3.0 * (projections + attention)


def head_flops(cfg: LlamaConfig, shape: Shape) -> float:
    """Forward+backward FLOPs outside the layers: the lm_head matmul."""
    return 3.0 * 2 * shape.tokens * cfg.hidden_size * cfg.vocab_size


def model_flops(cfg: LlamaConfig, layers: int, shape: Shape) -> float:
    return head_flops(cfg, shape) + layers * layer_flops(cfg, shape)


def measured_shapes(cfg: LlamaConfig, batch: int, seq_len: int) -> tuple[Shape, Shape]:
    """(small, large): the configured shape when the 2-layer pass fits the budget, else
    fewer sequences, then shorter ones; large has SHAPE_RATIO x the small one's tokens."""
    per_token = model_flops(cfg, 1, Shape(1, seq_len)) / seq_len
    large_tokens = max(MIN_LARGE_TOKENS, int(PASS_FLOP_BUDGET // per_token))
    large_tokens = min(large_tokens, batch * seq_len)
    small_tokens = max(1, large_tokens // SHAPE_RATIO)

    def shape_of(tokens: int) -> Shape:
        if tokens >= seq_len:
            return Shape(min(batch, tokens // seq_len), seq_len)
        return Shape(1, tokens)

    return shape_of(small_tokens), shape_of(large_tokens)


def measurement_bytes(cfg: LlamaConfig, batch: int, seq_len: int) -> int:
    """Memory the measurement itself takes: the 2-layer model's weights, gradients and
    AdamW moments, and one fp32 pass at the large shape (the plan refuses to measure
    what would not fit)."""
    two = dataclasses.replace(cfg, num_hidden_layers=2)
    _, large = measured_shapes(cfg, batch, seq_len)
    state = 16 * param_count(two)
    est = memory.estimate_memory(two, large.batch, large.seq_len, "fp32")
    return (
        state
        + est.total
        - sum(est.item(n).bytes for n in ("weights", "gradients", "adamw_moments"))
    )


@dataclass(frozen=True)
class TimingEstimate:
    device: str
    precision: str
    threads: int
    passes: int  # timed passes per cell
    small: Shape
    large: Shape
    seconds: dict[str, float]  # median seconds of cells A, B, C
    fixed_seconds: float  # c0
    layer_fixed_seconds: float  # c1
    flops_per_second: float  # R
    micro_batch_seconds: float
    optimizer_seconds: float
    step_seconds: float
    run_seconds: float | None  # None without a step count
    notes: tuple[str, ...]

    def basis(self) -> list[str]:
        a, b, c = (self.seconds[k] for k in "ABC")
        lines = [
            f"measured on {self.device} ({self.threads} threads, {self.precision}): "
            "forward+backward of the config's "
            f"width with 1 and 2 layers, median of {self.passes} passes each after one warm-up "
            "pass",
            f"  A 1 layer  @ {self.small}: {a * 1e3:.1f} ms   B 2 layers @ {self.small}: "
            f"{b * 1e3:.1f} ms   C 1 layer @ {self.large}: {c * 1e3:.1f} ms",
            f"  fit t = c0 + layers x c1 + FLOPs / R: c0 = {self.fixed_seconds * 1e3:.1f} ms, "
            f"c1 = {self.layer_fixed_seconds * 1e3:.2f} ms, R = {self.flops_per_second / 1e9:.1f} "
            "GFLOP/s",
        ]
        lines.extend(f"  {note}" for note in self.notes)
        return lines


def _median_seconds(run: Callable[[], None], passes: int) -> float:
    times = []
    for _ in range(passes):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def fit(
    cfg: LlamaConfig, small: Shape, large: Shape, seconds: dict[str, float]
) -> tuple[float, float, float, list[str]]:
    """(c0, c1, R, notes) from the three cells; clamps what noise made negative and says so."""
    notes = []
    a, b, c = seconds["A"], seconds["B"], seconds["C"]
    extra_flops = model_flops(cfg, 1, large) - model_flops(cfg, 1, small)
    if extra_flops > 0 and c > a:
        rate = extra_flops / (c - a)
    else:
        # Same shape (a tiny config measured whole) or noise: no rate from the difference.
        rate = model_flops(cfg, 1, large) / c
        notes.append("R taken from cell C alone (no usable A-C difference); c0, c1 absorb the rest")
    c1 = (b - a) - layer_flops(cfg, small) / rate
    c0 = a - c1 - model_flops(cfg, 1, small) / rate
    if c1 < 0:
        notes.append(f"c1 fitted {c1 * 1e3:.2f} ms (timing noise) -> 0")
        c1 = 0.0
    if c0 < 0:
        notes.append(f"c0 fitted {c0 * 1e3:.2f} ms (timing noise) -> 0")
        c0 = 0.0
    return c0, c1, rate, notes


def _timing_model(cfg: LlamaConfig, device: str) -> Llama:
    """The config's width with 2 layers, built on meta and filled with a constant: dense
    kernels take the same time whatever the values, and filling is ~4x faster than
    random initialization at the 370M width."""
    import torch  # noqa: PLC0415 - torch only when a measurement is asked for

    from trainer.model.llama import build_model  # noqa: PLC0415

    model = build_model(dataclasses.replace(cfg, num_hidden_layers=2), device="meta")
    model = model.to_empty(device=device)
    with torch.no_grad():
        for param in model.parameters():
            param.fill_(FILL_VALUE)
    return model


def _time_cells(
    model: Llama, small: Shape, large: Shape, device: str, precision: str
) -> tuple[dict[str, float], int]:
    """({A, B, C: median seconds}, passes per cell) of forward + cross-entropy + backward."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: N812, PLC0415

    vocab = model.config.vocab_size
    half = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    generator = torch.Generator(device="cpu").manual_seed(0)

    def pass_at(shape: Shape) -> Callable[[], None]:
        ids = torch.randint(0, vocab, (shape.batch, shape.seq_len), generator=generator)
        ids = ids.to(device)

        def run() -> None:
            with torch.autocast(device, dtype=half, enabled=half is not None):
                logits = model(ids)
                loss = F.cross_entropy(logits.view(-1, vocab), ids.view(-1))
            loss.backward()  # accumulates into .grad, as gradient accumulation does
            if device == "cuda":
                torch.cuda.synchronize()

        return run

    stack = model.model
    all_layers = stack.layers
    try:
        # One untimed pass allocates every gradient and touches every page first.
        start = time.perf_counter()
        pass_at(large)()
        warmup = time.perf_counter() - start
        passes = max(1, min(TIMED_PASSES, int(MEASURE_SECONDS / (3 * warmup))))
        stack.layers = all_layers[:1]  # the same model, one layer deep
        seconds = {"A": _median_seconds(pass_at(small), passes)}
        seconds["C"] = _median_seconds(pass_at(large), passes)
        stack.layers = all_layers
        seconds["B"] = _median_seconds(pass_at(small), passes)
    finally:
        stack.layers = all_layers
    return seconds, passes


def _time_adamw(model: Llama, optimizer: dict, passes: int, device: str) -> tuple[float, int]:
    """(median seconds per parameter of one AdamW step, parameters timed), on the layers'
    parameters (the embedding tables would make the measurement as slow as the model)."""
    import torch  # noqa: PLC0415

    params = [p for p in model.model.layers.parameters() if p.grad is not None]
    adamw = torch.optim.AdamW(params, **optimizer)
    adamw.step()  # the first step allocates the moments; time the next ones

    def update() -> None:
        adamw.step()
        if device == "cuda":
            torch.cuda.synchronize()

    count = sum(p.numel() for p in params)
    return _median_seconds(update, passes) / count, count


def measure(
    cfg: LlamaConfig,
    *,
    micro_batch: int,
    seq_len: int,
    grad_accum: int,
    steps: int | None,
    optimizer: dict,
    device: str = "cpu",
    precision: str = "fp32",
) -> TimingEstimate:
    """Time the cells, fit, and extrapolate to ``steps`` optimizer steps of ``grad_accum``
    micro-batches of ``micro_batch`` x ``seq_len`` tokens. ``optimizer``: AdamW kwargs;
    ``precision`` bf16/fp16 times the passes under autocast, as the run would be."""
    import torch  # noqa: PLC0415

    small, large = measured_shapes(cfg, micro_batch, seq_len)
    model = _timing_model(cfg, device)
    seconds, passes = _time_cells(model, small, large, device, precision)
    per_param, timed_params = _time_adamw(model, optimizer, passes, device)
    optimizer_seconds = per_param * param_count(cfg)

    c0, c1, rate, notes = fit(cfg, small, large, seconds)
    full = Shape(micro_batch, seq_len)
    micro = c0 + cfg.num_hidden_layers * c1 + model_flops(cfg, cfg.num_hidden_layers, full) / rate
    if large != full:
        gflop = model_flops(cfg, cfg.num_hidden_layers, full) / 1e9
        notes.append(
            f"configured micro-batch {full} is {gflop:,.0f} GFLOP per pass with "
            f"{cfg.num_hidden_layers} layers: too costly to time here, scaled by FLOPs from "
            "the measured shapes"
        )
    notes.append(
        f"AdamW update timed on {timed_params:,} parameters, scaled to {param_count(cfg):,}"
    )
    step = grad_accum * micro + optimizer_seconds
    return TimingEstimate(
        device=device,
        precision=precision,
        threads=torch.get_num_threads(),
        passes=passes,
        small=small,
        large=large,
        seconds=seconds,
        fixed_seconds=c0,
        layer_fixed_seconds=c1,
        flops_per_second=rate,
        micro_batch_seconds=micro,
        optimizer_seconds=optimizer_seconds,
        step_seconds=step,
        run_seconds=None if steps is None else step * steps,
        notes=tuple(notes),
    )
