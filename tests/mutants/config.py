"""Known bugs of the training-config preflight, schedule and step driver
(C-TRAINCFG-001's mutants), injected by `gates audit`. Each patches one named seam of
trainer/config/algebra.py, trainer/config/schedule.py or trainer/train/steps.py."""

import math
from itertools import islice

from gates.mutants import mutant
from trainer.config import algebra, schedule
from trainer.train import steps


@mutant("floor-replaced-by-ceil")
def _ceil_steps_per_epoch(patch):
    # Counts the partial global batch the loader drops: 44 steps per epoch for the seed.
    patch.setattr(
        algebra,
        "steps_per_epoch",
        lambda sequences, micro_batch, grad_accum, world_size=1: (
            -(-sequences // (micro_batch * grad_accum * world_size))
        ),
    )


@mutant("grad-accum-ignored")
def _no_grad_accum(patch):
    # Counts micro-batches as optimizer steps: 5519 per epoch for the seed.
    def micro_batches_per_epoch(sequences, micro_batch, grad_accum, world_size=1):
        return sequences // (micro_batch * world_size)

    patch.setattr(algebra, "steps_per_epoch", micro_batches_per_epoch)


@mutant("first-violation-only")
def _first_only(patch):
    patch.setattr(algebra, "collect_all", lambda broken: list(islice(broken, 1)))


@mutant("warmup-checked-against-max-steps-only")
def _warmup_vs_max_steps(patch):
    patch.setattr(algebra, "warmup_horizon", lambda reachable, max_steps: max_steps)


@mutant("warmup-strict-bound-inclusive")
def _warmup_inclusive(patch):
    patch.setattr(algebra, "warmup_completes", lambda warmup, horizon: warmup <= horizon)


@mutant("data-free-warmup-rule-removed")
def _no_data_free_warmup(patch):
    # `trainer validate` (no data counted) accepts a warmup that never completes.
    patch.setattr(algebra, "data_free_warmup_violations", lambda x: [])


@mutant("min-epochs-floor-division")
def _min_epochs_floor(patch):
    patch.setattr(algebra, "min_epochs", lambda max_steps, spe: max_steps // spe)


@mutant("token-count-omits-grad-accum")
def _tokens_without_accum(patch):
    patch.setattr(
        algebra,
        "token_count",
        lambda x, steps: steps * x.micro_batch * x.world_size * x.seq_len,
    )


@mutant("token-count-uses-max-steps")
def _tokens_of_max_steps(patch):
    real = algebra.token_count
    patch.setattr(algebra, "token_count", lambda x, steps: real(x, x.max_steps))


@mutant("chinchilla-warning-is-error")
def _warning_refuses(patch):
    real = algebra.token_verdict

    def verdict(tokens, params):
        return "refuse" if real(tokens, params) == "warn" else real(tokens, params)

    patch.setattr(algebra, "token_verdict", verdict)


@mutant("ratio-boundary-exclusive")
def _ten_refused(patch):
    real = algebra.token_verdict

    def verdict(tokens, params):
        return "refuse" if tokens <= 10 * params else real(tokens, params)

    patch.setattr(algebra, "token_verdict", verdict)


@mutant("epochs-cap-ignored")
def _no_epochs_cap(patch):
    patch.setattr(algebra, "reachable_steps", lambda epochs, spe, max_steps: max_steps)


@mutant("last-epoch-not-clamped")
def _last_epoch_runs_out(patch):
    # The last step is checked only between epochs, so the last epoch runs to its end.
    def whole_epoch(num_sequences, global_batch, steps_done, last_step):
        yield from range(0, num_sequences - global_batch + 1, global_batch)

    patch.setattr(steps, "epoch_steps", whole_epoch)


@mutant("warmup-bound-off-by-one")
def _warmup_fraction_strict(patch):
    patch.setattr(algebra, "warmup_fraction_ok", lambda warmup, max_steps: 10 * warmup < max_steps)


@mutant("warmup-bound-float")
def _warmup_fraction_float(patch):
    patch.setattr(
        algebra, "warmup_fraction_ok", lambda warmup, max_steps: warmup <= 0.1 * max_steps
    )


@mutant("min-lr-zero")
def _decay_to_zero(patch):
    real = schedule.cosine_lr
    patch.setattr(
        schedule,
        "cosine_lr",
        lambda step, peak, warmup, max_steps, min_lr: real(step, peak, warmup, max_steps, 0.0),
    )


@mutant("warmup-peak-one-step-late")
def _peak_late(patch):
    patch.setattr(schedule, "warmup_lr", lambda step, peak, warmup: peak * (step - 1) / warmup)


@mutant("cosine-phase-includes-warmup")
def _phase_from_zero(patch):
    def cosine(step, peak, warmup, max_steps, min_lr):
        return min_lr + 0.5 * (peak - min_lr) * (1.0 + math.cos(math.pi * step / max_steps))

    patch.setattr(schedule, "cosine_lr", cosine)


@mutant("spe-zero-accepted")
def _empty_epoch_accepted(patch):
    # The >= 1 guard is gone, so min_epochs divides by zero.
    patch.setattr(algebra, "epoch_has_a_step", lambda spe: True)
