"""Known training-loop bugs, injected into transformers.Trainer (C-HF-TRAINER-LOOP mutants).

Each function patches one seam of Trainer (or of the torch / accelerate object Trainer calls
there) through pytest.MonkeyPatch; everything else is the installed Trainer. `gates audit`
runs each bound test with SHIPGATE_MUTANT=<id>; the test must fail by assertion:
tests/test_accumulation.py (FALSIFY-HF-TRAINER-001), test_learning_rate.py (002),
test_grad_norm.py (003), test_resume.py (004).
"""

import math
import warnings

import torch
import transformers.trainer as trainer_module
from transformers import Trainer

from gates.mutants import mutant


# ---------------------------------------------------------------- FALSIFY-HF-TRAINER-001
@mutant("loss-mean-per-micro-batch")
def _loss_mean_per_micro_batch(patch):
    # The gradient-accumulation bug of transformers < 4.46: num_items_in_batch never reaches
    # the loss, so each micro-batch is averaged over its own targets and the means are
    # divided by the number of micro-batches.
    training_step = Trainer.training_step

    def step(self, model, inputs, num_items_in_batch=None):
        return training_step(self, model, inputs, None)

    patch.setattr(Trainer, "training_step", step)


@mutant("padding-counted-in-token-count")
def _padding_counted(patch):
    # The global denominator counts every shifted label position, padding included.
    def count(self, batch_samples, device):
        return torch.tensor(sum(b["labels"][..., 1:].numel() for b in batch_samples), device=device)

    patch.setattr(Trainer, "_get_num_items_in_batch", count)


@mutant("token-count-not-shifted")
def _token_count_not_shifted(patch):
    # Counts labels != -100 before the causal shift: one target too many per sequence
    # (the first position is never a target).
    def count(self, batch_samples, device):
        return torch.stack([b["labels"].ne(-100).sum() for b in batch_samples]).sum().to(device)

    patch.setattr(Trainer, "_get_num_items_in_batch", count)


# ---------------------------------------------------------------- FALSIFY-HF-TRAINER-002
def _patch_scheduler_step(patch, after_step):
    """Trainer's scheduler, with ``after_step(scheduler, lrs_before)`` run after each step."""
    create = Trainer.create_scheduler

    def create_scheduler(self, num_training_steps, optimizer=None):
        scheduler = create(self, num_training_steps, optimizer)
        if getattr(scheduler, "_mutated", False):
            return scheduler
        real_step = scheduler.step

        def step(*args, **kwargs):
            before = [g["lr"] for g in scheduler.optimizer.param_groups]
            real_step(*args, **kwargs)
            after_step(scheduler, before)

        scheduler.step = step
        scheduler._mutated = True
        return scheduler

    patch.setattr(Trainer, "create_scheduler", create_scheduler)


@mutant("lr-applied-to-first-group-only")
def _lr_first_group_only(patch):
    def keep_others(scheduler, before):
        for group, lr in list(zip(scheduler.optimizer.param_groups, before, strict=True))[1:]:
            group["lr"] = lr

    _patch_scheduler_step(patch, keep_others)


@mutant("lr-schedule-not-applied")
def _lr_not_applied(patch):
    # The scheduler advances (and get_last_lr, hence the logged learning_rate, follows the
    # schedule) but the optimizer keeps the lr it started with.
    def keep_all(scheduler, before):
        for group, lr in zip(scheduler.optimizer.param_groups, before, strict=True):
            group["lr"] = lr

    _patch_scheduler_step(patch, keep_all)


@mutant("lr-schedule-off-by-one-step")
def _lr_off_by_one(patch):
    # The scheduler is stepped once before the first optimizer step: step s runs at lr(s + 1).
    create = Trainer.create_scheduler

    def create_scheduler(self, num_training_steps, optimizer=None):
        fresh = self.lr_scheduler is None
        scheduler = create(self, num_training_steps, optimizer)
        if fresh:
            with warnings.catch_warnings():
                # torch's "lr_scheduler.step() before optimizer.step()" warning: the bug
                # itself, which the test must catch by its assertion, not by the warning
                warnings.simplefilter("ignore", UserWarning)
                scheduler.step()
        return scheduler

    patch.setattr(Trainer, "create_scheduler", create_scheduler)


# ---------------------------------------------------------------- FALSIFY-HF-TRAINER-003
def _norm(model) -> torch.Tensor:
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])


@mutant("grad-norm-reported-after-clip")
def _norm_after_clip(patch):
    clip = Trainer._clip_grad_norm

    def clip_and_report_after(self, model):
        clip(self, model)
        return _norm(model)  # never exceeds max_grad_norm: explosions disappear from the logs

    patch.setattr(Trainer, "_clip_grad_norm", clip_and_report_after)


@mutant("clipping-not-applied")
def _clipping_not_applied(patch):
    def measure_only(self, model):
        return self.accelerator.clip_grad_norm_(model.parameters(), math.inf)

    patch.setattr(Trainer, "_clip_grad_norm", measure_only)


@mutant("grad-norm-hardcoded")
def _norm_hardcoded(patch):
    # The source system's CPU path: clipping happens, the report is the constant 1.0.
    clip = Trainer._clip_grad_norm

    def clip_and_report_one(self, model):
        clip(self, model)
        return torch.tensor(1.0)

    patch.setattr(Trainer, "_clip_grad_norm", clip_and_report_one)


# ---------------------------------------------------------------- FALSIFY-HF-TRAINER-004
@mutant("rng-state-not-restored")
def _rng_not_restored(patch):
    patch.setattr(Trainer, "_load_rng_state", lambda self, checkpoint: None)


@mutant("optimizer-state-not-restored")
def _optimizer_not_restored(patch):
    # AdamW's moments and step count start from zero after resume.
    patch.setattr(torch.optim.AdamW, "load_state_dict", lambda self, state_dict: None)


@mutant("scheduler-state-not-restored")
def _scheduler_not_restored(patch):
    # The resumed run's schedule restarts at step 0 (warmup again).
    patch.setattr(
        torch.optim.lr_scheduler.LambdaLR, "load_state_dict", lambda self, state_dict: None
    )


@mutant("data-position-not-skipped")
def _data_not_skipped(patch):
    # A resume mid-epoch replays the epoch's first batches instead of skipping them.
    patch.setattr(
        trainer_module, "skip_first_batches", lambda dataloader, num_batches=0: dataloader
    )
