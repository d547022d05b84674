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

The measured shape is chosen by a FLOP budget, and the passes per cell (3, down to 2)
by how long the warm-up pass took, so that the measurement stays within a few seconds
on 2 CPU cores, the 370M width included; the output says which shapes were measured,
how many passes, and how they were scaled.

Noise. Other processes on the machine only ever slow a pass down, and one slow pass
must not become the estimate (a single 1.5 s pass where a quiet machine takes 42 ms once
made a 2-minute run "68.9 min"). So every cell (A, B, C and the AdamW update) reports the
fastest, median and slowest of its passes; while its passes disagree (the slowest more
than SPREAD_TARGET above the fastest) another pass is timed, up to MAX_PASSES or
CELL_SECONDS per cell; the cell's time is the median pass, which a minority of slow
passes does not move. When even the median stays more than NOISY_SPREAD above the
fastest pass in some cell, or the cells come out in an order the work contradicts (B, two
layers, or C, four times the tokens, faster than A: each cell slowed by a different
amount), the machine is too noisy for a number: the estimate says so
(``TimingEstimate.too_noisy``) and `trainer plan` prints that, the passes' range
included, instead of a run time. Passes that other processes slow down alike agree
with each other and cannot be told from slow ones: `trainer plan` gives no number either
when the 1-minute load average exceeds the logical CPU count as timing starts
(busy_verdict).
"""

from __future__ import annotations

import dataclasses
import os
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
#: Timed passes per cell to start with; fewer (down to MIN_PASSES) when the warm-up pass
#: shows that three per cell would take longer than MEASURE_SECONDS (a slow or busy
#: machine). More follow while they disagree (time_passes).
TIMED_PASSES = 3
MIN_PASSES = 2
MEASURE_SECONDS = 4.0
#: Passes disagree when the slowest is more than this fraction above the fastest: then
#: another is timed, up to MAX_PASSES, and no more once the cell took CELL_SECONDS.
SPREAD_TARGET = 0.2
MAX_PASSES = 9
CELL_SECONDS = 3.0
#: A cell whose median pass is still more than this fraction above its fastest one,
#: after the extra passes, makes the machine too noisy for an estimate; unless that is
#: less than NOISE_FLOOR_SECONDS in absolute terms (a sub-millisecond AdamW update's
#: scheduler jitter says nothing about the run).
NOISY_SPREAD = 0.5
NOISE_FLOOR_SECONDS = 0.002
#: A 1-minute load average above this many runnable processes per logical CPU, when the
#: measurement starts, means other processes compete for the CPUs: passes slowed alike
#: agree with each other, so `trainer plan` gives no number (busy_verdict).
BUSY_LOAD_PER_CPU = 1.0
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


def machine_load() -> tuple[float, int] | None:
    """(the 1-minute load average, logical CPUs), or None where the OS keeps none."""
    try:
        return os.getloadavg()[0], os.cpu_count() or 1
    except (OSError, AttributeError):
        return None


def busy_verdict(load: tuple[float, int] | None) -> str | None:
    """Why the machine is too busy for an estimate, or None (see BUSY_LOAD_PER_CPU)."""
    if load is None or load[0] <= BUSY_LOAD_PER_CPU * load[1]:
        return None
    return (
        f"the machine is too busy for an estimate: the 1-minute load average was "
        f"{load[0]:.1f} on {load[1]} logical CPUs when timing started (other processes "
        "compete for them, and passes they slow alike agree with each other)"
    )


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms" if seconds < 0.1 else f"{seconds * 1e3:.0f} ms"
    return f"{seconds:.1f} s"


@dataclass(frozen=True)
class Passes:
    """The timed passes of one cell, in seconds, in the order they ran."""

    seconds: tuple[float, ...]

    @property
    def fastest(self) -> float:
        return min(self.seconds)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def slowest(self) -> float:
        return max(self.seconds)

    @property
    def spread(self) -> float:
        """How far the slowest pass is above the fastest, relative: (max - min) / min."""
        return self.slowest / self.fastest - 1 if self.fastest > 0 else float("inf")

    @property
    def median_spread(self) -> float:
        """How far the median pass is above the fastest, relative: a few slow passes do
        not move it; a machine whose every other pass is slowed does."""
        return self.median / self.fastest - 1 if self.fastest > 0 else float("inf")

    @property
    def disagree(self) -> bool:
        return self.spread > SPREAD_TARGET

    @property
    def noisy(self) -> bool:
        return (
            self.median_spread > NOISY_SPREAD and self.median - self.fastest > NOISE_FLOOR_SECONDS
        )

    def __str__(self) -> str:
        if len(self.seconds) == 1:
            return f"{_duration(self.fastest)} (1 pass)"
        return (
            f"{_duration(self.fastest)} / {_duration(self.median)} / "
            f"{_duration(self.slowest)} min/median/max of {len(self.seconds)}"
        )

    def as_dict(self) -> dict:
        return {
            "seconds": list(self.seconds),
            "min": self.fastest,
            "median": self.median,
            "max": self.slowest,
            "spread": self.spread,
        }


def time_passes(
    run: Callable[[], None],
    passes: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
    max_passes: int = MAX_PASSES,
    seconds_limit: float = CELL_SECONDS,
) -> Passes:
    """Time ``passes`` calls of ``run``, then more while they disagree (Passes.disagree),
    until ``max_passes`` or until the cell's passes took ``seconds_limit`` in all."""
    times: list[float] = []

    def once() -> None:
        start = clock()
        run()
        times.append(clock() - start)

    for _ in range(max(1, passes)):
        once()
    while len(times) < max_passes and Passes(tuple(times)).disagree and sum(times) < seconds_limit:
        once()
    return Passes(tuple(times))


def noise_verdict(cells: dict[str, Passes]) -> str | None:
    """None when every cell's passes agree well enough for an estimate; else why not,
    naming the noisiest cell and the range of its passes."""
    noisy = {name: p for name, p in cells.items() if p.noisy}
    if not noisy:
        return None
    name, worst = max(noisy.items(), key=lambda item: item[1].median_spread)
    return (
        f"the machine is too noisy for an estimate: passes ranged "
        f"{_duration(worst.fastest)}..{_duration(worst.slowest)} (cell {name}: median "
        f"{_duration(worst.median)}, {worst.median_spread * 100:.0f} % above the fastest, "
        f"after {len(worst.seconds)} passes)"
    )


#: Cells that must take longer than another: (slower, faster, why).
CELL_ORDER = (("B", "A", "2 layers instead of 1"), ("C", "A", f"{SHAPE_RATIO}x the tokens"))


def order_verdict(seconds: dict[str, float]) -> str | None:
    """None when the cells' medians are in the order the work says (B and C each take
    longer than A, within SPREAD_TARGET); else why the machine is too noisy for a number:
    passes that agree within a cell but are slowed by different amounts from cell to
    cell (a loaded machine's thread contention) make a fit that means nothing."""
    for slower, faster, why in CELL_ORDER:
        if {slower, faster} <= seconds.keys() and (
            seconds[slower] * (1 + SPREAD_TARGET) < seconds[faster]
        ):
            return (
                f"the machine is too noisy for an estimate: cell {slower} ({why}) took "
                f"{_duration(seconds[slower])}, less than cell {faster}'s "
                f"{_duration(seconds[faster])}"
            )
    return None


@dataclass(frozen=True)
class TimingEstimate:
    device: str
    precision: str
    threads: int
    passes: int  # timed passes per cell to start with (more where they disagreed)
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
    #: Every cell's passes: A, B, C and AdamW (the update).
    cell_passes: dict[str, Passes] = dataclasses.field(default_factory=dict)

    @property
    def too_noisy(self) -> str | None:
        """Why the numbers above are not an estimate (noise_verdict, order_verdict), or
        None."""
        return noise_verdict(self.cell_passes) or order_verdict(self.seconds)

    def basis(self) -> list[str]:
        a, b, c = (self.seconds[k] for k in "ABC")
        lines = [
            f"measured on {self.device} ({self.threads} threads, {self.precision}): "
            "forward+backward of the config's "
            f"width with 1 and 2 layers, median of {self.passes} or more passes each (more "
            "while they disagree) after one warm-up pass",
            f"  A 1 layer  @ {self.small}: {a * 1e3:.1f} ms   B 2 layers @ {self.small}: "
            f"{b * 1e3:.1f} ms   C 1 layer @ {self.large}: {c * 1e3:.1f} ms",
            f"  fit t = c0 + layers x c1 + FLOPs / R: c0 = {self.fixed_seconds * 1e3:.1f} ms, "
            f"c1 = {self.layer_fixed_seconds * 1e3:.2f} ms, R = {self.flops_per_second / 1e9:.1f} "
            "GFLOP/s",
        ]
        if self.cell_passes:
            lines.append("  passes: " + "; ".join(f"{k} {p}" for k, p in self.cell_passes.items()))
        lines.extend(f"  {note}" for note in self.notes)
        return lines


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
) -> tuple[dict[str, Passes], int]:
    """({A, B, C: their passes}, passes per cell to start with) of forward + cross-entropy
    + backward."""
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
        passes = max(MIN_PASSES, min(TIMED_PASSES, int(MEASURE_SECONDS / (3 * warmup))))
        stack.layers = all_layers[:1]  # the same model, one layer deep
        cells = {"A": time_passes(pass_at(small), passes)}
        cells["C"] = time_passes(pass_at(large), passes)
        stack.layers = all_layers
        cells["B"] = time_passes(pass_at(small), passes)
    finally:
        stack.layers = all_layers
    return {k: cells[k] for k in "ABC"}, passes


def _time_adamw(model: Llama, optimizer: dict, passes: int, device: str) -> tuple[Passes, int]:
    """(the passes of one AdamW step, parameters timed), on the layers' parameters (the
    embedding tables would make the measurement as slow as the model)."""
    import torch  # noqa: PLC0415

    params = [p for p in model.model.layers.parameters() if p.grad is not None]
    adamw = torch.optim.AdamW(params, **optimizer, fused=True)  # as optim.build_adamw
    adamw.step()  # the first step allocates the moments; time the next ones

    def update() -> None:
        adamw.step()
        if device == "cuda":
            torch.cuda.synchronize()

    count = sum(p.numel() for p in params)
    return time_passes(update, passes), count


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
    cells, passes = _time_cells(model, small, large, device, precision)
    seconds = {k: p.median for k, p in cells.items()}
    update, timed_params = _time_adamw(model, optimizer, passes, device)
    cells["AdamW"] = update
    optimizer_seconds = update.median / timed_params * param_count(cfg)

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
        cell_passes=cells,
    )
