"""The C-TRAINCFG-001 preflight algebra (contracts/training-config-kernel-v1.yaml): does a
training config run the steps it asks for? Integer arithmetic, no torch, no data read.

Symbols as in the contract: N training sequences, b micro_batch, g grad_accum, L seq_len,
E epochs, M max_steps, w warmup_steps, P parameters, world data-parallel ranks.

    spe        = floor(N / (b * g * world))      >= 1                 INV-CFG-001
    E * spe    >= M,  min_epochs = ceil(M / spe)                      INV-CFG-002
    w          <  reachable = min(M, E * spe)                         INV-CFG-003
    10 * w     <= M                                                   INV-CFG-004
    D = reachable * b * g * world * L;  D/P < 10 refuse (unless forced), < 20 warn  INV-CFG-005
    min_lr     == 0.1 * peak; with w >= 1 the peak is reached          INV-CFG-006

Every broken rule is reported, each with its numbers and a fix:

    report = evaluate(AlgebraInputs(sequences=22_079, micro_batch=4, grad_accum=128,
                                    seq_len=1024, epochs=1, max_steps=5000, warmup_steps=2000,
                                    params=373_509_120, peak_lr=3e-4, min_lr=3e-5))
    report.violations[0].message   # "epochs: 1 gives 43 steps < max_steps 5000; set epochs >= 117"

``trainer validate`` has no sequence count; :func:`evaluate_data_free` checks the rules
that need none (and the token rule against its upper bound, every step reachable).

The small functions below (``steps_per_epoch``, ``min_epochs``, ``token_count``, ...) are
the seams tests/mutants/config.py breaks one at a time; keep each rule in its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from trainer.config import schedule

#: Tokens per parameter below which a run is refused, and below which it is warned about
#: (Hoffmann et al. 2022: about 20 tokens per parameter is compute-optimal).
REFUSE_TOKENS_PER_PARAM = 10
WARN_TOKENS_PER_PARAM = 20
#: min_lr as a fraction of the peak, as a ratio of integers so the rule states it exactly.
MIN_LR_NUM, MIN_LR_DEN = 1, 10
#: The relative tolerance when comparing a configured min_lr with 0.1 * peak: `3.0e-5`
#: written in YAML and 0.1 * 3.0e-4 differ in the last bit.
MIN_LR_REL_TOL = 1e-9

TokenVerdict = Literal["refuse", "warn", "ok"]

F_SHARDS = "data.shards"
F_MICRO_BATCH = "data.micro_batch"
F_GRAD_ACCUM = "training.gradient_accumulation"
F_EPOCHS = "training.epochs"
F_MAX_STEPS = "training.max_steps"
F_WARMUP = "training.warmup_steps"
F_FORCE = "training.force_token_budget"
F_LR = "optimizer.lr"
F_MIN_LR = "optimizer.min_lr"
F_MODEL = "model"


@dataclass(frozen=True)
class AlgebraInputs:
    """The numbers the algebra reads from a config (and, for N, from the shard manifest)."""

    sequences: int | None  # N; None where not counted (trainer validate)
    micro_batch: int  # b
    grad_accum: int  # g
    seq_len: int  # L
    epochs: int  # E
    max_steps: int  # M
    warmup_steps: int  # w
    params: int  # P
    peak_lr: float
    min_lr: float
    world_size: int = 1
    force_token_budget: bool = False

    def __post_init__(self) -> None:
        for name, low in (
            ("micro_batch", 1),
            ("grad_accum", 1),
            ("seq_len", 1),
            ("epochs", 1),
            ("max_steps", 1),
            ("warmup_steps", 0),
            ("params", 1),
            ("world_size", 1),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.sequences is not None and (
            isinstance(self.sequences, bool) or not isinstance(self.sequences, int)
        ):
            raise ValueError(f"sequences must be an integer or None, got {self.sequences!r}")
        if self.sequences is not None and self.sequences < 0:
            raise ValueError(f"sequences must be >= 0, got {self.sequences}")
        if not (self.peak_lr > 0 and self.min_lr >= 0):
            raise ValueError(f"need peak_lr > 0 and min_lr >= 0, got {self.peak_lr}, {self.min_lr}")

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step."""
        return self.micro_batch * self.grad_accum * self.world_size


@dataclass(frozen=True)
class RuleResult:
    """One broken (or warned-about) rule: which, about which config fields, and the fix."""

    rule: str  # contract invariant id, e.g. "INV-CFG-002"
    fields: tuple[str, ...]  # dotted config fields, the first is where to cite it
    message: str  # the numbers that break it, then the fix
    fix: str = ""  # the fix alone

    def to_json(self) -> dict:
        return {
            "rule": self.rule,
            "fields": list(self.fields),
            "message": self.message,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class AlgebraReport:
    steps_per_epoch: int
    reachable_steps: int
    min_epochs: int | None  # None when an epoch has no step (no epoch count helps)
    tokens: int
    tokens_per_param: float
    lr_max_reached: float
    violations: list[RuleResult] = field(default_factory=list)
    warnings: list[RuleResult] = field(default_factory=list)
    #: The token-budget refusal was overridden by training.force_token_budget; the run
    #: manifest must record this (INV-CFG-005).
    forced: bool = False

    @property
    def accepted(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        return {
            "accepted": self.accepted,
            "steps_per_epoch": self.steps_per_epoch,
            "reachable_steps": self.reachable_steps,
            "min_epochs": self.min_epochs,
            "tokens": self.tokens,
            "tokens_per_param": self.tokens_per_param,
            "lr_max_reached": self.lr_max_reached,
            "forced": self.forced,
            "violations": [v.to_json() for v in self.violations],
            "warnings": [w.to_json() for w in self.warnings],
        }


@dataclass(frozen=True)
class DataFreeReport:
    """What can be said without counting N: an upper bound on tokens (all M steps reached)."""

    tokens_upper_bound: int
    tokens_per_param_upper_bound: float
    violations: list[RuleResult] = field(default_factory=list)
    warnings: list[RuleResult] = field(default_factory=list)
    forced: bool = False

    @property
    def accepted(self) -> bool:
        return not self.violations

    def to_json(self) -> dict:
        return {
            "accepted": self.accepted,
            "tokens_upper_bound": self.tokens_upper_bound,
            "tokens_per_param_upper_bound": self.tokens_per_param_upper_bound,
            "forced": self.forced,
            "violations": [v.to_json() for v in self.violations],
            "warnings": [w.to_json() for w in self.warnings],
        }


# ---------------------------------------------------------------- seams: one rule each
def steps_per_epoch(sequences: int, micro_batch: int, grad_accum: int, world_size: int = 1) -> int:
    """Whole global batches in one epoch: the step driver (trainer/train/steps.py) drops
    the partial last one (floor)."""
    return sequences // (micro_batch * grad_accum * world_size)


def epoch_has_a_step(spe: int) -> bool:
    """INV-CFG-001: at least one whole global batch per epoch."""
    return spe >= 1


def min_epochs(max_steps: int, spe: int) -> int:
    """The fewest epochs that allow ``max_steps`` steps: ceil(M / spe), in integers.
    Callers guard spe >= 1 with :func:`epoch_has_a_step`."""
    return -(-max_steps // spe)


def reachable_steps(epochs: int, spe: int, max_steps: int) -> int:
    """Steps the run can take: max_steps, unless the epochs run out first."""
    return min(max_steps, epochs * spe)


def warmup_horizon(reachable: int, max_steps: int) -> int:
    """The steps warmup must finish within: the reachable ones. Not max_steps: when the
    epochs cap cuts the run short (ALB-060), warmup must end before the cut."""
    return reachable


def warmup_completes(warmup: int, horizon: int) -> bool:
    """INV-CFG-003: warmup ends strictly before the last step, so the decay runs."""
    return warmup < horizon


def warmup_fraction_ok(warmup: int, max_steps: int) -> bool:
    """INV-CFG-004: warmup <= 10 % of max_steps, in integers so 0.1 cannot round."""
    return 10 * warmup <= max_steps


def token_count(x: AlgebraInputs, steps: int) -> int:
    """Training tokens of ``steps`` optimizer steps: every sequence of every global batch."""
    return steps * x.micro_batch * x.grad_accum * x.world_size * x.seq_len


def token_verdict(tokens: int, params: int) -> TokenVerdict:
    """INV-CFG-005 in integers: D < 10 P refuse; 10 P <= D < 20 P warn; else ok."""
    if tokens < REFUSE_TOKENS_PER_PARAM * params:
        return "refuse"
    if tokens < WARN_TOKENS_PER_PARAM * params:
        return "warn"
    return "ok"


def default_min_lr(peak_lr: float) -> float:
    """The min_lr a config gets when it gives none: 0.1 * peak."""
    return peak_lr * MIN_LR_NUM / MIN_LR_DEN


def min_lr_ok(peak_lr: float, min_lr: float) -> bool:
    """INV-CFG-006: min_lr == 0.1 * peak (to the last bits of a decimal literal)."""
    return math.isclose(min_lr, default_min_lr(peak_lr), rel_tol=MIN_LR_REL_TOL)


def lr_max_reached(x: AlgebraInputs, reachable: int) -> float:
    """The largest learning rate over steps 1..reachable of the configured schedule."""
    if reachable < 1:
        return 0.0
    # Warmup rises and the cosine falls, so the maximum is at min(w, reachable), or at
    # s = 1 when there is no warmup.
    step = max(1, min(x.warmup_steps, reachable))
    return schedule.lr_at(
        step, peak=x.peak_lr, warmup=x.warmup_steps, max_steps=x.max_steps, min_lr=x.min_lr
    )


def collect_all(broken: Iterable[RuleResult]) -> list[RuleResult]:
    """Every broken rule, not only the first (the contract's 'reports every rule')."""
    return list(broken)


# ---------------------------------------------------------------- messages
def _fmt_lr(value: float) -> str:
    return f"{value:.3g}"


def _tokens_phrase(tokens: int, params: int) -> str:
    return f"{tokens:,} tokens for {params:,} parameters = {tokens / params:.2f} tokens/param"


def _token_rules(
    x: AlgebraInputs, tokens: int, what: str
) -> tuple[list[RuleResult], list[RuleResult], bool]:
    """(violations, warnings, forced) of INV-CFG-005 for ``tokens`` (``what`` says which)."""
    verdict = token_verdict(tokens, x.params)
    need = REFUSE_TOKENS_PER_PARAM * x.params
    fields = (F_MAX_STEPS, F_MODEL, F_FORCE)
    if verdict == "refuse":
        steps_needed = -(-need // token_count(x, 1))
        fix = (
            f"train at least {steps_needed} reachable steps ({need:,} tokens), use a smaller "
            "model, or set training.force_token_budget: true to run anyway (recorded)"
        )
        text = f"{what}: {_tokens_phrase(tokens, x.params)} < {REFUSE_TOKENS_PER_PARAM}"
        if x.force_token_budget:
            forced = RuleResult(
                "INV-CFG-005",
                (F_FORCE, F_MAX_STEPS),
                f"{text}; refused, but training.force_token_budget is true: the run goes "
                "ahead and its manifest must record the override",
                "",
            )
            return [], [forced], True
        return [RuleResult("INV-CFG-005", fields, f"{text}; {fix}", fix)], [], False
    if verdict == "warn":
        fix = f"{WARN_TOKENS_PER_PARAM * x.params:,} tokens would be compute-optimal"
        warning = RuleResult(
            "INV-CFG-005",
            (F_MAX_STEPS, F_MODEL),
            f"{what}: {_tokens_phrase(tokens, x.params)}, under the Chinchilla "
            f"{WARN_TOKENS_PER_PARAM}; {fix}",
            fix,
        )
        return [], [warning], False
    return [], [], False


def _data_free_rules(x: AlgebraInputs) -> Iterator[RuleResult]:
    """Rules that need no sequence count: INV-CFG-004, INV-CFG-006's min_lr, and the part
    of INV-CFG-003 that max_steps alone decides (reachable <= M)."""
    if not warmup_fraction_ok(x.warmup_steps, x.max_steps):
        fix = f"set warmup_steps <= {x.max_steps // 10}"
        yield RuleResult(
            "INV-CFG-004",
            (F_WARMUP, F_MAX_STEPS),
            f"warmup_steps: {x.warmup_steps} is {100 * x.warmup_steps / x.max_steps:.3g} % of "
            f"max_steps {x.max_steps}, more than 10 %; {fix}",
            fix,
        )
    if not min_lr_ok(x.peak_lr, x.min_lr):
        target = default_min_lr(x.peak_lr)
        fix = f"set min_lr: {_fmt_lr(target)} or leave it out (it defaults to 0.1 x lr)"
        yield RuleResult(
            "INV-CFG-006",
            (F_MIN_LR, F_LR),
            f"min_lr: {x.min_lr:g} is not 0.1 x lr {x.peak_lr:g} = {_fmt_lr(target)}; the "
            f"schedule must end at 0.1 x peak; {fix}",
            fix,
        )


def evaluate(x: AlgebraInputs) -> AlgebraReport:
    """Every C-TRAINCFG-001 rule for a config whose training sequences were counted."""
    if x.sequences is None:
        raise ValueError("evaluate needs the sequence count N; use evaluate_data_free without it")
    n, gb = x.sequences, x.global_batch
    spe = steps_per_epoch(n, x.micro_batch, x.grad_accum, x.world_size)
    has_step = epoch_has_a_step(spe)
    epochs_needed = min_epochs(x.max_steps, spe) if has_step else None
    reachable = reachable_steps(x.epochs, spe, x.max_steps)
    tokens = token_count(x, reachable)
    lr_max = lr_max_reached(x, reachable)
    batch_text = f"micro_batch {x.micro_batch} x gradient_accumulation {x.grad_accum}" + (
        f" x world_size {x.world_size}" if x.world_size > 1 else ""
    )

    def broken() -> Iterator[RuleResult]:
        if not has_step:
            fix = (
                f"add training data, or lower the global batch to at most {n} sequences"
                if n
                else "encode more training data or lower data.seq_len: the train split "
                "holds no sequence of seq_len + 1 tokens"
            )
            yield RuleResult(
                "INV-CFG-001",
                (F_SHARDS, F_MICRO_BATCH, F_GRAD_ACCUM),
                f"N = {n} sequences < one global batch of {gb} ({batch_text}): 0 steps per "
                f"epoch, no step can run; {fix}",
                fix,
            )
        elif x.epochs * spe < x.max_steps:
            fix = f"set epochs >= {epochs_needed}"
            yield RuleResult(
                "INV-CFG-002",
                (F_EPOCHS, F_MAX_STEPS),
                f"epochs: {x.epochs} gives {x.epochs * spe} steps < max_steps {x.max_steps} "
                f"({spe} steps per epoch from N = {n} sequences / {gb}); {fix}",
                fix,
            )
        if has_step and not warmup_completes(
            x.warmup_steps, warmup_horizon(reachable, x.max_steps)
        ):
            # More epochs help only while warmup would still end before max_steps.
            more_epochs = reachable < x.max_steps and x.warmup_steps < x.max_steps
            fix = f"set warmup_steps <= {reachable - 1}" + (
                f" or epochs >= {epochs_needed}" if more_epochs else ""
            )
            yield RuleResult(
                "INV-CFG-003",
                (F_WARMUP, F_EPOCHS),
                f"warmup_steps: {x.warmup_steps} >= {reachable} reachable steps: warmup never "
                f"completes; {fix}",
                fix,
            )
        if x.warmup_steps >= 1 and reachable >= 1 and lr_max < x.peak_lr:
            fix = f"make warmup_steps < reachable steps ({reachable})"
            yield RuleResult(
                "INV-CFG-006",
                (F_WARMUP, F_LR),
                f"the learning rate peaks at {_fmt_lr(lr_max)}, "
                f"{100 * lr_max / x.peak_lr:.3g} % of lr {x.peak_lr:g}, at step {reachable} "
                f"of warmup {x.warmup_steps}; {fix}",
                fix,
            )
        yield from _data_free_rules(x)

    violations = collect_all(broken())
    token_violations, warnings, forced = (
        _token_rules(x, tokens, f"{reachable} reachable steps x {gb * x.seq_len} tokens")
        if has_step
        else ([], [], False)
    )
    return AlgebraReport(
        steps_per_epoch=spe,
        reachable_steps=reachable,
        min_epochs=epochs_needed,
        tokens=tokens,
        tokens_per_param=tokens / x.params,
        lr_max_reached=lr_max,
        violations=violations + token_violations,
        warnings=warnings,
        forced=forced,
    )


def data_free_warmup_violations(x: AlgebraInputs) -> list[RuleResult]:
    """INV-CFG-003 without N: reachable <= max_steps, so a warmup of max_steps or more never
    completes whatever the data holds."""
    if warmup_completes(x.warmup_steps, x.max_steps):
        return []
    fix = f"set warmup_steps <= {x.max_steps - 1}"
    message = (
        f"warmup_steps: {x.warmup_steps} >= max_steps {x.max_steps}: warmup never completes; {fix}"
    )
    return [RuleResult("INV-CFG-003", (F_WARMUP, F_MAX_STEPS), message, fix)]


def evaluate_data_free(x: AlgebraInputs) -> DataFreeReport:
    """The rules ``trainer validate`` can check without N. Tokens are bounded by max_steps
    global batches, so a run refused at that bound is refused whatever N is."""
    bound = token_count(x, x.max_steps)
    violations = collect_all(_data_free_rules(x))
    violations += data_free_warmup_violations(x)
    token_violations, warnings, forced = _token_rules(
        x, bound, f"at most {x.max_steps} steps x {x.global_batch * x.seq_len} tokens"
    )
    return DataFreeReport(
        tokens_upper_bound=bound,
        tokens_per_param_upper_bound=bound / x.params,
        violations=violations + token_violations,
        warnings=warnings,
        forced=forced,
    )
