"""Known bugs of the training loop's parts (C-TRAINING-LOOP mutants), injected by `gates audit`.

Each patches one named seam of trainer/train/{loss,optim,guards}.py, the model's _attend or
(009's loop-side token count) loop._accumulate, so everything else is the real code. Killed
by tests/unit/trainer/test_loop_*.py (FALSIFY-TRAIN-LOOP-004, 005, 008's optim half, 009,
010); the loop-level mutants (lr schedule, zeroing, exhaustion, ...) live in
tests/mutants/loop.py.
"""

import math

import torch
import torch.nn.functional as F  # noqa: N812

from gates.mutants import mutant
from trainer.model import llama
from trainer.train import distributed, guards, loop, loss, optim


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-004
@mutant("patience-ignored")
def _patience_ignored(patch):
    patch.setattr(
        guards,
        "_should_stop",
        lambda evals, evals_since_best, patience, min_evals: (
            evals >= min_evals and evals_since_best >= 1
        ),
    )


@mutant("patience-off-by-one")
def _patience_off_by_one(patch):  # stops after 4 non-improving evaluations instead of 5
    patch.setattr(
        guards,
        "_should_stop",
        lambda evals, evals_since_best, patience, min_evals: (
            evals >= min_evals and evals_since_best >= patience - 1
        ),
    )


@mutant("min-evals-ignored")
def _min_evals_ignored(patch):
    patch.setattr(
        guards,
        "_should_stop",
        lambda evals, evals_since_best, patience, min_evals: evals_since_best >= patience,
    )


@mutant("tie-counts-as-improvement")
def _tie_improves(patch):
    patch.setattr(guards, "_improves", lambda value, best: value <= best)


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-005
@mutant("divergence-cap-flat-10")
def _cap_flat_10(patch):
    patch.setattr(guards, "_first_eval_cap", lambda vocab_size: 10.0)


@mutant("divergence-cap-not-doubled")
def _cap_not_doubled(patch):
    patch.setattr(guards, "_first_eval_cap", math.log)  # ln(V), not 2 ln(V)


@mutant("exact-doubling-aborts")
def _exact_doubling_aborts(patch):
    patch.setattr(guards, "_exceeds", lambda value, limit: value >= limit)


@mutant("nan-passes-comparison")
def _nan_passes(patch):  # only `val > cap` is tested: inf still aborts, NaN > cap is False
    patch.setattr(guards, "_is_finite", lambda value: True)


# ------------------------------------------------------ FALSIFY-TRAIN-LOOP-008 (optim half)
@mutant("grad-norm-hardcoded")
def _grad_norm_hardcoded(patch):
    patch.setattr(optim, "_reported_norm", lambda total_norm: 1.0)


@mutant("grad-norm-lm-head-only")
def _grad_norm_lm_head_only(patch):
    # Llama registers lm_head last, so the output layer is the last parameter.
    patch.setattr(optim, "_global_norm", lambda params: params[-1].grad.norm(2))


@mutant("grad-norm-reported-after-clip")
def _grad_norm_after_clip(patch):
    clip = optim.clip_gradients

    def clip_then_measure(parameters, max_norm):
        params = [p for p in parameters if p.grad is not None]
        clip(params, max_norm)
        return float(optim._global_norm(params).item())  # the norm after scaling

    patch.setattr(optim, "clip_gradients", clip_then_measure)


@mutant("clipping-not-applied")
def _clipping_not_applied(patch):
    patch.setattr(optim, "_scale_gradients", lambda params, max_norm, total_norm: None)


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-009
@mutant("loss-reduced-by-sum")
def _loss_sum(patch):
    patch.setattr(
        loss, "_micro_batch_loss", lambda token_losses, targets, batch: token_losses.sum()
    )


@mutant("loss-mean-per-micro-batch")
def _loss_mean_per_micro_batch(patch):
    def own_mean_over_micro_batches(token_losses, targets, batch):
        return token_losses.sum() / loss._is_target(targets).sum() / batch.micro_batches

    patch.setattr(loss, "_micro_batch_loss", own_mean_over_micro_batches)


@mutant("padding-counted-in-loss")
def _padding_counted(patch):  # every position counts in the denominator
    patch.setattr(loss, "_is_target", lambda targets: torch.ones_like(targets, dtype=torch.bool))


@mutant("loss-mean-per-sequence")
def _loss_mean_per_sequence(patch):
    def mean_of_sequence_means(token_losses, targets, batch):
        per_sequence = loss._is_target(targets).sum(dim=1).clamp(min=1)
        return (token_losses.sum(dim=1) / per_sequence).sum() / batch.sequences

    patch.setattr(loss, "_micro_batch_loss", mean_of_sequence_means)


@mutant("padding-counted-in-loop-global-count")
def _padding_counted_in_loop_count(patch):
    # loss.py is right, the loop's own count is not: it takes every target position
    # (targets.numel(), padding included) as the global count, all-reduced and passed as
    # global_count like the real one - so it also applies in a single process, and the
    # step's loss and gradients shrink by the padding fraction.
    def counts_padding(model, micro_batches, autocast, world, losses=None):
        local = sum(targets.numel() for _, targets in micro_batches)
        count = distributed.sum_int(local, world)
        share, _ = loss.accumulate_gradients(
            model,
            micro_batches,
            autocast=autocast,
            global_count=count,
            defer_sync=(lambda: distributed.defer_sync(model)) if world.distributed else None,
            losses=losses,
        )
        return distributed.sum_float(share, world), count

    patch.setattr(loop, "_accumulate", counts_padding)


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-010
@mutant("causal-mask-removed")
def _causal_mask_removed(patch):
    patch.setattr(llama, "_attend", F.scaled_dot_product_attention)  # is_causal=False


@mutant("labels-not-shifted")
def _labels_not_shifted(patch):
    patch.setattr(loss, "_shift", lambda tokens: (tokens[:, :-1], tokens[:, :-1].clone()))


@mutant("causal-mask-off-by-one")
def _causal_mask_off_by_one(patch):
    def sees_next_token(q, k, v):
        t = q.shape[-2]
        allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril(diagonal=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    patch.setattr(llama, "_attend", sees_next_token)
