"""The C-TRAINCFG-001 preflight algebra (contracts/training-config-kernel-v1.yaml):
the seed ALB-060 diagnosis and its fix, warmup reachability and the 10 % bound, token
sufficiency at 10x and 20x, and the empty-epoch case. FALSIFY-CFG-005 (agreement with the
step driver) lives in test_config_steps.py, FALSIFY-CFG-007 (schedule) in
test_config_schedule.py."""

from __future__ import annotations

import dataclasses

import pytest

from trainer.config import algebra
from trainer.config.algebra import AlgebraInputs, default_min_lr, evaluate, evaluate_data_free
from trainer.train.steps import iterate_steps

P_370M = 373_509_120  # INV-ARCH-370M-001
#: Seed ALB-060 (albor 350M v1): 22,079 sequences, 4 x 128 per step, epochs 1.
SEED = AlgebraInputs(
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


def rules(results: list[algebra.RuleResult]) -> dict[str, algebra.RuleResult]:
    return {r.rule: r for r in results}


def loop_steps(x: AlgebraInputs) -> int:
    assert x.sequences is not None
    return sum(
        1
        for _ in iterate_steps(
            x.sequences,
            micro_batch=x.micro_batch,
            grad_accum=x.grad_accum,
            epochs=x.epochs,
            last_step=x.max_steps,
        )
    )


# ---------------------------------------------------------------- FALSIFY-CFG-001
@pytest.mark.ship_blocking
def test_the_seed_run_is_refused_for_its_epochs_and_its_warmup():
    report = evaluate(SEED)
    assert report.steps_per_epoch == 43  # floor(22079 / 512); a ceil gives 44
    assert report.reachable_steps == 43
    assert report.min_epochs == 117
    assert not report.accepted
    broken = rules(report.violations)
    assert "INV-CFG-002" in broken, "the epochs rule must refuse 43 * 1 < 5000"
    assert broken["INV-CFG-002"].message == (
        "epochs: 1 gives 43 steps < max_steps 5000 (43 steps per epoch from N = 22079 "
        "sequences / 512); set epochs >= 117"
    )
    assert broken["INV-CFG-002"].fields[0] == "training.epochs"
    assert "INV-CFG-003" in broken, "every broken rule is reported, the warmup one too"
    assert "warmup_steps: 2000 >= 43 reachable steps" in broken["INV-CFG-003"].message
    # The learning rate would peak at 3e-4 * 43 / 2000, 2.15 % of the peak.
    assert report.lr_max_reached == pytest.approx(6.45e-6, rel=1e-12)
    assert "peaks at 6.45e-06, 2.15 % of lr 0.0003" in broken["INV-CFG-006"].message
    assert report.tokens == 22_544_384


def test_the_seed_is_also_refused_for_its_warmup_fraction_and_token_budget():
    broken = rules(evaluate(SEED).violations)
    assert set(broken) == {
        "INV-CFG-002",
        "INV-CFG-003",
        "INV-CFG-004",
        "INV-CFG-005",
        "INV-CFG-006",
    }
    assert "2000 is 40 % of max_steps 5000" in broken["INV-CFG-004"].message


# ---------------------------------------------------------------- FALSIFY-CFG-002
@pytest.mark.ship_blocking
def test_warmup_is_refused_exactly_when_it_does_not_end_before_the_reachable_steps():
    # The seed: w = 2000, 43 reachable.
    seed = rules(evaluate(SEED).violations).get("INV-CFG-003")
    assert seed is not None, "w = 2000 with 43 reachable steps never completes"
    assert "2000" in seed.message and "43 reachable" in seed.message
    # Enough epochs (117 * 43 = 5031 >= 5000), but w = M: warmup never ends.
    enough = dataclasses.replace(SEED, epochs=117, warmup_steps=5000)
    never = rules(evaluate(enough).violations).get("INV-CFG-003")
    assert never is not None, "w = M leaves no step after warmup"
    assert "warmup_steps: 5000 >= 5000 reachable steps" in never.message
    # w = reachable - 1: the last step is the first of the decay; this rule accepts.
    last = evaluate(dataclasses.replace(SEED, epochs=117, warmup_steps=4999))
    assert last.reachable_steps == 5000
    assert "INV-CFG-003" not in rules(last.violations)
    # Same at the epochs cap: reachable 43, w = 42 accepted and w = 43 refused.
    capped = dataclasses.replace(SEED, warmup_steps=42)
    assert "INV-CFG-003" not in rules(evaluate(capped).violations)
    at_cap = rules(evaluate(dataclasses.replace(SEED, warmup_steps=43)).violations)
    assert "INV-CFG-003" in at_cap, "w = reachable ends on the last warmup step"
    assert "warmup_steps: 43 >= 43 reachable steps" in at_cap["INV-CFG-003"].message
    # w = 0: no warmup, the cosine starts at step 1.
    none = evaluate(dataclasses.replace(SEED, epochs=117, warmup_steps=0))
    assert "INV-CFG-003" not in rules(none.violations)
    assert none.lr_max_reached < SEED.peak_lr
    # Without the data (`trainer validate`): reachable <= M, so w >= M is refused already.
    unknown = dataclasses.replace(SEED, sequences=None, warmup_steps=5000, max_steps=5000)
    assert "INV-CFG-003" in rules(evaluate_data_free(unknown).violations)
    below = dataclasses.replace(unknown, warmup_steps=4999)
    assert "INV-CFG-003" not in rules(evaluate_data_free(below).violations)


# ---------------------------------------------------------------- FALSIFY-CFG-003
@pytest.mark.ship_blocking
def test_the_seed_fix_passes_at_117_epochs_and_fails_at_116():
    fixed = dataclasses.replace(SEED, epochs=117, warmup_steps=500, params=50_000_000)
    report = evaluate(fixed)
    assert report.violations == [], [v.message for v in report.violations]
    assert 43 * 117 == 5031 and report.reachable_steps == 5000
    assert loop_steps(fixed) == 5000, "the loop runs exactly max_steps"

    short = evaluate(dataclasses.replace(fixed, epochs=116))
    broken = rules(short.violations)
    assert list(broken) == ["INV-CFG-002"], "only the epochs rule is under test"
    assert short.reachable_steps == 4988  # 43 * 116
    assert short.min_epochs == 117
    assert broken["INV-CFG-002"].message.endswith("set epochs >= 117")
    assert loop_steps(dataclasses.replace(fixed, epochs=116)) == 4988


def test_min_epochs_is_the_ceiling_of_max_steps_over_steps_per_epoch():
    assert algebra.min_epochs(5000, 43) == 117
    assert algebra.min_epochs(5031, 43) == 117
    assert algebra.min_epochs(5032, 43) == 118
    assert algebra.min_epochs(1, 43) == 1


# ---------------------------------------------------------------- FALSIFY-CFG-004
def _tokens_case(max_steps: int, params: int = P_370M, force: bool = False):
    x = dataclasses.replace(
        SEED,
        epochs=400,  # 400 * 43 = 17,200 reachable: the epochs never cap these cases
        max_steps=max_steps,
        warmup_steps=max_steps // 10,
        params=params,
        force_token_budget=force,
    )
    return evaluate(x)


def test_token_sufficiency_is_judged_on_reachable_tokens_at_10x_and_20x():
    # 524,288 tokens per step (4 x 128 x 1024).
    refused = _tokens_case(5000)
    assert refused.tokens == 2_621_440_000
    assert round(refused.tokens_per_param, 2) == 7.02
    assert list(rules(refused.violations)) == ["INV-CFG-005"]
    assert "7.02 tokens/param < 10" in refused.violations[0].message
    assert not refused.forced

    forced = _tokens_case(5000, force=True)
    assert forced.accepted, "the force flag accepts a refused token budget"
    assert forced.forced, "and the report records the override for the run manifest"
    assert [w.rule for w in forced.warnings] == ["INV-CFG-005"]
    assert "force_token_budget is true" in forced.warnings[0].message

    warned = _tokens_case(10_000)
    assert round(warned.tokens_per_param, 2) == 14.04
    assert warned.accepted
    assert [w.rule for w in warned.warnings] == ["INV-CFG-005"], "one Chinchilla warning"

    silent = _tokens_case(15_000)
    assert round(silent.tokens_per_param, 2) == 21.06
    assert silent.accepted and silent.warnings == []

    # Exactly 10 and exactly 20 tokens per parameter (D = 2,621,440,000).
    ten = _tokens_case(5000, params=262_144_000)
    assert ten.tokens == 10 * 262_144_000
    assert ten.accepted, "a ratio of exactly 10 passes"
    assert [w.rule for w in ten.warnings] == ["INV-CFG-005"], "and is warned about"
    twenty = _tokens_case(5000, params=131_072_000)
    assert twenty.tokens == 20 * 131_072_000
    assert twenty.accepted and twenty.warnings == [], "exactly 20 passes silently"

    # The seed counts its 43 reachable steps, not max_steps.
    assert evaluate(SEED).tokens == 22_544_384


def test_data_free_tokens_are_an_upper_bound_that_already_refuses():
    bound = evaluate_data_free(dataclasses.replace(SEED, sequences=None, warmup_steps=500))
    assert bound.tokens_upper_bound == 2_621_440_000
    assert [v.rule for v in bound.violations] == ["INV-CFG-005"]


# ---------------------------------------------------------------- FALSIFY-CFG-006
#: At M = 10**17 + 9 and w = 10**16 + 1, 10 * w > M, but float(M) rounds up to
#: 10**17 + 16 so w <= 0.1 * M holds: below 2**53 the float form agrees with the
#: integers, above it it moves the boundary (INV-CFG-004's reason for integers).
FLOAT_BOUNDARY = (10**17 + 9, 10**16 + 1)


@pytest.mark.ship_blocking
@pytest.mark.parametrize(
    ("max_steps", "warmup", "refused"),
    [
        (5000, 0, False),
        (5000, 499, False),
        (5000, 500, False),  # exactly 10 % is allowed
        (5000, 501, True),
        (5000, 2000, True),  # the seed's 40 %
        (7, 0, False),
        (7, 1, True),  # 10 > 7
        (*FLOAT_BOUNDARY, True),
    ],
)
def test_warmup_takes_at_most_ten_percent_of_max_steps(max_steps, warmup, refused):
    x = dataclasses.replace(
        SEED, sequences=None, max_steps=max_steps, warmup_steps=warmup, params=1
    )
    broken = rules(evaluate_data_free(x).violations)
    assert ("INV-CFG-004" in broken) == refused
    if refused:
        assert f"set warmup_steps <= {max_steps // 10}" in broken["INV-CFG-004"].message
    full = dataclasses.replace(x, sequences=512 * max_steps if max_steps < 10**6 else 512)
    assert ("INV-CFG-004" in rules(evaluate(full).violations)) == refused


# ---------------------------------------------------------------- FALSIFY-CFG-008
@pytest.mark.ship_blocking
@pytest.mark.parametrize("sequences", [511, 0])
def test_fewer_sequences_than_one_global_batch_are_refused_without_a_crash(sequences):
    x = dataclasses.replace(SEED, sequences=sequences, warmup_steps=500)
    crash, report = None, None
    try:
        report = evaluate(x)
    except ZeroDivisionError as exc:  # min_epochs = ceil(M / 0)
        crash = exc
    assert crash is None, f"the preflight must refuse N = {sequences}, not crash: {crash!r}"
    assert report is not None
    assert report.steps_per_epoch == 0
    assert report.reachable_steps == 0
    assert report.min_epochs is None, "no epoch count helps"
    assert not report.accepted
    empty = rules(report.violations).get("INV-CFG-001")
    assert empty is not None, "the empty epoch is refused by INV-CFG-001"
    assert f"N = {sequences} sequences < one global batch of 512" in empty.message
    assert loop_steps(x) == 0, "no run starts"


def test_global_batch_counts_every_rank():
    x = dataclasses.replace(SEED, epochs=117, warmup_steps=10, world_size=2)
    report = evaluate(x)
    assert report.steps_per_epoch == 21  # floor(22079 / 1024)
    assert report.min_epochs == 239
    assert report.tokens == report.reachable_steps * 4 * 128 * 2 * 1024


def test_min_lr_other_than_a_tenth_of_the_peak_is_refused():
    broken = rules(evaluate(dataclasses.replace(SEED, min_lr=0.0)).violations)
    assert "min_lr: 0 is not 0.1 x lr 0.0003 = 3e-05" in broken["INV-CFG-006"].message
    written = dataclasses.replace(SEED, epochs=117, warmup_steps=500, params=1, min_lr=3.0e-5)
    assert evaluate(written).violations == [], "3.0e-5 written in YAML is 0.1 x 3.0e-4"


def test_inputs_out_of_range_are_a_value_error_naming_the_field():
    with pytest.raises(ValueError, match="micro_batch must be an integer >= 1"):
        dataclasses.replace(SEED, micro_batch=0)
    with pytest.raises(ValueError, match="sequences must be >= 0"):
        dataclasses.replace(SEED, sequences=-1)
    with pytest.raises(ValueError, match="needs the sequence count"):
        evaluate(dataclasses.replace(SEED, sequences=None))
