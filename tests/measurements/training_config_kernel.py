"""Measurements of C-TRAINCFG-001's gates (contracts/training-config-kernel-v1.yaml).

Each re-runs its cases against the real preflight (trainer/config/algebra.py), schedule
(trainer/config/schedule.py) and step driver (trainer/train/steps.py) and counts the
cases whose outcome differs from the contract's prediction. A case is a name and a
function returning None when it holds, or what went wrong.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections.abc import Callable
from pathlib import Path

from gates.measure import GateContext, Measurement, measures

#: Seeded sweep over FALSIFY-CFG-005's ranges (plus its edges) for GATE-CFG-001.
SWEEP_CONFIGS = 3000
SWEEP_SEED = 20261122
P_370M = 373_509_120
STEP_RULES = {"INV-CFG-001", "INV-CFG-002", "INV-CFG-003"}

Case = tuple[str, Callable[[], str | None]]


def _inputs(**changes):
    from trainer.config.algebra import AlgebraInputs, default_min_lr  # noqa: PLC0415

    seed = AlgebraInputs(
        sequences=22_079,
        micro_batch=4,
        grad_accum=128,
        seq_len=1024,
        epochs=1,
        max_steps=5000,
        warmup_steps=2000,
        params=P_370M,
        peak_lr=3e-4,
        min_lr=default_min_lr(3e-4),
    )
    return dataclasses.replace(seed, **changes)


def _counted_steps(n: int, b: int, g: int, epochs: int, max_steps: int) -> int:
    """Steps a loop following the driver takes, each global batch checked whole."""
    from trainer.train.steps import iterate_steps  # noqa: PLC0415

    global_batch, steps = b * g, 0
    for plan in iterate_steps(n, micro_batch=b, grad_accum=g, epochs=epochs, last_step=max_steps):
        # plan.sequences.stop, without building a range per step: 16 M steps in the sweep,
        # and the range was half of the measurement's time
        if plan.first_sequence + global_batch > n:
            return -1  # a partial global batch: never agrees with the algebra
        steps += 1
    return steps


def _rules(results) -> set[str]:
    return {r.rule for r in results}


def _run(cases: list[Case]) -> tuple[int, list[str]]:
    failed = []
    for name, check in cases:
        try:
            problem = check()
        except Exception as exc:  # a crash misjudges the case; the gate must say so
            problem = f"raised {exc!r}"
        if problem:
            failed.append(f"{name}: {problem}")
    return len(failed), failed


def _expect(**facts) -> str | None:
    wrong = [
        f"{k} is {got!r}, expected {want!r}" for k, (got, want) in facts.items() if got != want
    ]
    return "; ".join(wrong) or None


def _sources(ctx: GateContext) -> list[Path]:
    return [
        ctx.root / "trainer" / "config" / "algebra.py",
        ctx.root / "trainer" / "config" / "schedule.py",
        ctx.root / "trainer" / "train" / "steps.py",
    ]


# ---------------------------------------------------------------- GATE-CFG-001
def _sweep() -> list[tuple[int, int, int, int, int, int]]:
    rng = random.Random(SWEEP_SEED)
    configs = [
        (22_079, 4, 128, 1, 5000, 2000),  # the seed
        (22_079, 4, 128, 117, 5000, 500),
        (22_079, 4, 128, 116, 5000, 500),
        (511, 4, 128, 500, 20_000, 0),
        (0, 1, 1, 1, 1, 0),
        (200_000, 1, 1, 500, 20_000, 20_000),
        (16_384, 64, 256, 1, 1, 0),  # exactly one global batch
        (16_383, 64, 256, 500, 1, 0),
    ]
    while len(configs) < SWEEP_CONFIGS:
        max_steps = rng.randint(1, 20_000)
        configs.append(
            (
                rng.randint(0, 200_000),
                rng.randint(1, 64),
                rng.randint(1, 256),
                rng.randint(1, 500),
                max_steps,
                rng.randint(0, max_steps),
            )
        )
    return configs


@measures("GATE-CFG-001")
def algebra_agrees_with_counted_steps(ctx: GateContext) -> Measurement:
    from trainer.config.algebra import evaluate  # noqa: PLC0415

    disagreements, examples, accepted = 0, [], 0
    for n, b, g, epochs, max_steps, warmup in _sweep():
        counted = _counted_steps(n, b, g, epochs, max_steps)
        try:
            report = evaluate(
                _inputs(
                    sequences=n,
                    micro_batch=b,
                    grad_accum=g,
                    seq_len=1,
                    epochs=epochs,
                    max_steps=max_steps,
                    warmup_steps=warmup,
                    params=1,
                )
            )
        except Exception as exc:  # a preflight that crashes disagrees with the loop
            disagreements += 1
            if len(examples) < 5:
                examples.append(f"N={n} b={b} g={g} E={epochs} M={max_steps}: raised {exc!r}")
            continue
        loop_accepts = counted == max_steps and warmup < counted
        algebra_accepts = not (_rules(report.violations) & STEP_RULES)
        accepted += algebra_accepts
        if (
            counted != report.reachable_steps
            or counted > max_steps
            or loop_accepts != algebra_accepts
        ):
            disagreements += 1
            if len(examples) < 5:
                examples.append(
                    f"N={n} b={b} g={g} E={epochs} M={max_steps} w={warmup}: loop {counted}, "
                    f"algebra {report.reachable_steps}"
                )
    return Measurement(
        values={
            "disagreements": (disagreements, "configs"),
            "configs": (SWEEP_CONFIGS, "configs"),
            "accepted_configs": (accepted, "configs"),
        },
        workload=f"{SWEEP_CONFIGS} configs (8 fixed edges, the rest drawn with seed "
        f"{SWEEP_SEED} over N in [0, 200000], b in [1, 64], g in [1, 256], E in [1, 500], "
        "M in [1, 20000], w in [0, M]); each run through trainer/train/steps.py "
        "iterate_steps with a stub step and compared with algebra.evaluate: reachable "
        "steps, never past M, and accepted exactly when the loop reaches M with warmup done",
        inputs=_sources(ctx),
        parameters={"seed": SWEEP_SEED},
        notes="; ".join(examples),
    )


# ---------------------------------------------------------------- GATE-CFG-002
def _seed_cases() -> list[Case]:
    from trainer.config.algebra import evaluate  # noqa: PLC0415

    def seed_e1():
        r = evaluate(_inputs())
        return _expect(
            steps_per_epoch=(r.steps_per_epoch, 43),
            reachable=(r.reachable_steps, 43),
            min_epochs=(r.min_epochs, 117),
            accepted=(r.accepted, False),
            epochs_and_warmup_rules=(
                {"INV-CFG-002", "INV-CFG-003"} <= _rules(r.violations),
                True,
            ),
            lr_peak=(round(r.lr_max_reached, 12), 6.45e-6),
            tokens=(r.tokens, 22_544_384),
        )

    def seed_e116():
        r = evaluate(_inputs(epochs=116, warmup_steps=500, params=50_000_000))
        return _expect(
            refused_for_epochs_only=(_rules(r.violations), {"INV-CFG-002"}),
            min_epochs=(r.min_epochs, 117),
            reachable=(r.reachable_steps, 4988),
        )

    def seed_e117():
        x = _inputs(epochs=117, warmup_steps=500, params=50_000_000)
        r = evaluate(x)
        return _expect(
            accepted=(r.accepted, True),
            reachable=(r.reachable_steps, 5000),
            loop_steps=(_counted_steps(22_079, 4, 128, 117, 5000), 5000),
        )

    def empty(n: int):
        def check():
            r = evaluate(_inputs(sequences=n, warmup_steps=500))
            message = next((v.message for v in r.violations if v.rule == "INV-CFG-001"), "")
            return _expect(
                steps_per_epoch=(r.steps_per_epoch, 0),
                refused_by_inv_cfg_001=(bool(message), True),
                names_n_and_global_batch=(
                    f"N = {n} sequences < one global batch of 512" in message,
                    True,
                ),
                min_epochs=(r.min_epochs, None),
                loop_steps=(_counted_steps(n, 4, 128, 1, 5000), 0),
            )

        return check

    return [
        ("seed E=1 refused (43 steps, min_epochs 117, lr peak 6.45e-6)", seed_e1),
        ("seed E=116 refused by the epochs rule alone", seed_e116),
        ("seed E=117 accepted, loop runs 5000 steps", seed_e117),
        ("N=511 refused, no crash", empty(511)),
        ("N=0 refused, no crash", empty(0)),
    ]


@measures("GATE-CFG-002")
def seed_diagnosis_reproduced(ctx: GateContext) -> Measurement:
    cases = _seed_cases()
    misjudged, failures = _run(cases)
    return Measurement(
        values={"misjudged_cases": (misjudged, "cases"), "cases": (len(cases), "cases")},
        workload="the seed ALB-060 config (N 22079, b 4, g 128, L 1024, M 5000) at E = 1, "
        "116 (w 500) and 117 (w 500, loop steps counted), and N = 511 and 0: "
        + "; ".join(name for name, _ in cases),
        inputs=_sources(ctx),
        notes="; ".join(failures),
    )


# ---------------------------------------------------------------- GATE-CFG-003
def _warmup_and_schedule_cases() -> list[Case]:
    from trainer.config.algebra import evaluate, evaluate_data_free  # noqa: PLC0415
    from trainer.config.schedule import lr_at  # noqa: PLC0415

    def warmup_rule(refused: bool, **changes):
        def check():
            r = evaluate(_inputs(**changes))
            return _expect(warmup_refused=("INV-CFG-003" in _rules(r.violations), refused))

        return check

    def no_data(max_steps: int, warmup: int, refused: bool):
        def check():  # `trainer validate`: no data counted, reachable <= M
            x = _inputs(sequences=None, max_steps=max_steps, warmup_steps=warmup, params=1)
            got = "INV-CFG-003" in _rules(evaluate_data_free(x).violations)
            return _expect(warmup_refused_without_data=(got, refused))

        return check

    def fraction(max_steps: int, warmup: int, refused: bool):
        def check():
            x = _inputs(sequences=None, max_steps=max_steps, warmup_steps=warmup, params=1)
            got = "INV-CFG-004" in _rules(evaluate_data_free(x).violations)
            return _expect(fraction_refused=(got, refused))

        return check

    def schedule():
        min_lr = 3e-5
        lr = [
            lr_at(s, peak=3e-4, warmup=500, max_steps=5000, min_lr=min_lr) for s in range(1, 5001)
        ]
        lr0 = [lr_at(s, peak=3e-4, warmup=0, max_steps=5000, min_lr=min_lr) for s in (1, 2)]
        return _expect(
            peak_at_warmup=(lr[499], 3e-4),
            ends_at_min_lr=(abs(lr[4999] - 3e-5) <= 1e-15, True),
            midpoint=(abs(lr[2749] - 1.65e-4) <= 1e-15, True),
            warmup_rises=(all(a <= b for a, b in itertools.pairwise(lr[:500])), True),
            decay_falls=(all(a >= b for a, b in itertools.pairwise(lr[499:])), True),
            max_is_peak=(max(lr), 3e-4),
            no_warmup_starts_below_peak=(lr0[1] < lr0[0] < 3e-4, True),
        )

    def seed_peak():
        r = evaluate(_inputs())
        return _expect(
            lr_peak=(math.isclose(r.lr_max_reached, 6.45e-6, rel_tol=1e-12), True),
            flagged=("INV-CFG-006" in _rules(r.violations), True),
        )

    return [
        ("seed w=2000 of 43 reachable refused", warmup_rule(True)),
        ("w = M with enough epochs refused", warmup_rule(True, epochs=117, warmup_steps=5000)),
        ("w = reachable - 1 accepted", warmup_rule(False, epochs=117, warmup_steps=4999)),
        ("w = 0 accepted", warmup_rule(False, epochs=117, warmup_steps=0)),
        ("w = 43 at 43 reachable refused", warmup_rule(True, warmup_steps=43)),
        ("w = 42 at 43 reachable accepted", warmup_rule(False, warmup_steps=42)),
        *(
            (f"no data: M={m} w={w} {'refused' if r else 'accepted'}", no_data(m, w, r))
            for m, w, r in ((5000, 5000, True), (5000, 6000, True), (5000, 4999, False))
        ),
        *(
            (f"M={m} w={w} {'refused' if r else 'accepted'}", fraction(m, w, r))
            for m, w, r in (
                (5000, 0, False),
                (5000, 499, False),
                (5000, 500, False),
                (5000, 501, True),
                (5000, 2000, True),
                (7, 0, False),
                (7, 1, True),
                (10**17 + 9, 10**16 + 1, True),  # where w <= 0.1 * M in floats says yes
            )
        ),
        ("schedule peak 3e-4, w 500, M 5000 over every step; w = 0", schedule),
        ("seed lr peaks at 6.45e-6 and is flagged", seed_peak),
    ]


@measures("GATE-CFG-003")
def warmup_and_schedule_hold(ctx: GateContext) -> Measurement:
    cases = _warmup_and_schedule_cases()
    violations, failures = _run(cases)
    return Measurement(
        values={"rule_violations": (violations, "cases"), "cases": (len(cases), "cases")},
        workload="warmup reachability (FALSIFY-CFG-002), the 10 % bound (FALSIFY-CFG-006) "
        "and the warmup + cosine schedule (FALSIFY-CFG-007): "
        + "; ".join(name for name, _ in cases),
        inputs=_sources(ctx),
        notes="; ".join(failures),
    )


# ---------------------------------------------------------------- GATE-CFG-004
def _token_cases() -> list[Case]:
    from trainer.config.algebra import evaluate  # noqa: PLC0415

    def case(max_steps: int, params: int, verdict: str, force: bool = False):
        def check():
            r = evaluate(
                _inputs(
                    epochs=400,
                    max_steps=max_steps,
                    warmup_steps=max_steps // 10,
                    params=params,
                    force_token_budget=force,
                )
            )
            warned = any(w.rule == "INV-CFG-005" for w in r.warnings)
            got = (
                "refuse"
                if "INV-CFG-005" in _rules(r.violations)
                else "forced"
                if r.forced
                else "warn"
                if warned
                else "ok"
            )
            return _expect(verdict=(got, verdict), tokens=(r.tokens, max_steps * 524_288))

        return check

    def seed_reachable():
        r = evaluate(_inputs())
        return _expect(tokens=(r.tokens, 22_544_384))

    return [
        ("M=5000, 7.02 tokens/param refused", case(5000, P_370M, "refuse")),
        ("M=5000 forced: accepted and recorded", case(5000, P_370M, "forced", force=True)),
        ("M=10000, 14.04 warned", case(10_000, P_370M, "warn")),
        ("M=15000, 21.06 silent", case(15_000, P_370M, "ok")),
        ("exactly 10 tokens/param warned", case(5000, 262_144_000, "warn")),
        ("exactly 20 tokens/param silent", case(5000, 131_072_000, "ok")),
        ("seed E=1 counts 43 reachable steps of tokens", seed_reachable),
    ]


@measures("GATE-CFG-004")
def token_budget_classified(ctx: GateContext) -> Measurement:
    cases = _token_cases()
    misclassified, failures = _run(cases)
    return Measurement(
        values={
            "misclassified_configs": (misclassified, "configs"),
            "configs": (len(cases), "configs"),
        },
        workload="token sufficiency at 524,288 tokens per step (b 4, g 128, L 1024) for "
        "P = 373,509,120 and boundary P: " + "; ".join(name for name, _ in cases),
        inputs=_sources(ctx),
        notes="; ".join(failures),
    )
