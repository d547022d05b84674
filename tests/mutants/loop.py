"""Known bugs of the training loop itself (C-TRAINING-LOOP mutants), injected by `gates audit`.

Each patches one named seam of trainer/train/{loop,sequences,optim,guards,loss}.py,
trainer/data/encode.py or trainer/exit_codes.py, so everything else is the real code. Killed by
tests/unit/trainer/test_loop_run.py (FALSIFY-TRAIN-LOOP-001, 003, 006, 007, 008),
test_loop_data.py (002) and test_loop_determinism.py (011); gradients-never-zeroed and
lr-schedule-not-applied are also the grammar oracle's (017). The mutants of the loop's
parts (loss, optimizer, guards, attention) live in tests/mutants/loop_parts.py.
"""

import sys
import time

import numpy as np
import torch

from gates.mutants import mutant
from trainer import exit_codes
from trainer.config.in_code import with_values
from trainer.data import encode
from trainer.train import guards, loop, optim, sequences
from trainer.train.options import RunOptions


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-001
@mutant("placeholder-loss-on-exhaustion")
def _placeholder_loss(patch):
    # Past the end of the data the step "trains" on nothing and reports loss 1.0, norm 1.0.
    planned, train_step = loop._planned_steps, loop._train_step
    past_end = {"now": False}

    def steps(config, num_sequences, last_step):
        wrapping = with_values(config, {"training.wrap_around": True})
        for plan in planned(wrapping, num_sequences, last_step):
            past_end["now"] = plan.epoch >= 1 and not config.training.wrap_around
            yield plan

    def step(model, optimizer, micro_batches, **kw):
        if past_end["now"]:
            return 1.0, 1.0, 0
        return train_step(model, optimizer, micro_batches, **kw)

    patch.setattr(loop, "_planned_steps", steps)
    patch.setattr(loop, "_train_step", step)


@mutant("wrap-without-epoch-increment")
def _wrap_without_epoch_increment(patch):
    planned = loop._planned_steps

    def steps(config, num_sequences, last_step):
        wrapping = with_values(config, {"training.wrap_around": True})
        for plan in planned(wrapping, num_sequences, last_step):
            yield plan._replace(epoch=0)

    patch.setattr(loop, "_planned_steps", steps)


@mutant("silent-stop-on-exhaustion")
def _silent_stop(patch):
    planned = loop._planned_steps

    def steps(config, num_sequences, last_step):
        try:
            yield from planned(config, num_sequences, last_step)
        except sequences.DataExhaustedError:
            return  # the run "finishes" with fewer steps than max_steps

    patch.setattr(loop, "_planned_steps", steps)


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-002
@mutant("validation-trained-on-after-wrap")
def _validation_trained_on(patch):
    # The training stream is the raw corpus: train shards, then val shards.
    split_stream = sequences._split_stream

    def stream(manifest, split):
        if split == "train":
            return np.concatenate([split_stream(manifest, "train"), split_stream(manifest, "val")])
        return split_stream(manifest, split)

    patch.setattr(sequences, "_split_stream", stream)


@mutant("validation-from-train-stream-head")
def _validation_from_train_head(patch):
    # The fixed validation set is built from the head of the training source.
    start = loop._start
    patch.setattr(
        loop,
        "_start",
        lambda config, options, train_data, val_data, *args, **kw: start(
            config, options, train_data, train_data, *args, **kw
        ),
    )


@mutant("document-split-across-splits")
def _document_split_across_splits(patch):
    # The split is a cut at a token offset: the last train document's second half opens val.
    write_split = encode._write_split
    carried = {}

    def write(directory, split, stream, *, eot, **kw):
        if split == "train":
            ends = np.flatnonzero(stream == eot)
            start = ends[-2] + 1 if len(ends) > 1 else 0
            cut = start + (len(stream) - start) // 2
            carried["tail"] = stream[cut:]
            stream = stream[:cut]
        elif "tail" in carried:
            stream = np.concatenate([carried.pop("tail"), stream])
        return write_split(directory, split, stream, eot=eot, **kw)

    patch.setattr(encode, "_write_split", write)


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-003
@mutant("validation-set-too-small-accepted")
def _validation_too_small(patch):
    patch.setattr(guards, "MIN_EARLY_STOP_VAL_TOKENS", 0)


@mutant("padding-counted-as-validation-tokens")
def _padding_counted(patch):
    patch.setattr(loop.loss, "count_targets", lambda targets: int(targets.numel()))


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-006
@mutant("optimizer-step-before-finite-check")
def _step_before_check(patch):
    # The update in the wrong order: the weights move, then the (real, rank-agreed) check.
    def step_then_check(optimizer, model, *, step, step_loss, grad_norm, world, hooks):
        hooks.before_optimizer_step(step, optimizer, model)
        optimizer.step()
        loop._check_finite_on_every_rank(step, step_loss, grad_norm, world)

    patch.setattr(loop, "_update", step_then_check)


@mutant("nan-loss-logged-and-continued")
def _nan_logged(patch):
    def check(step, loss, grad_norm):
        bad = guards._non_finite_values(loss, grad_norm)
        if bad:
            print(f"warning: step {step}: {', '.join(bad)}", file=sys.stderr)

    patch.setattr(guards, "check_finite", check)


@mutant("grad-norm-not-checked")
def _grad_norm_not_checked(patch):
    values = guards._non_finite_values
    patch.setattr(guards, "_non_finite_values", lambda loss, grad_norm: values(loss, 0.0))


@mutant("exit-zero-on-abort")
def _exit_zero(patch):
    patch.setattr(exit_codes, "ABORTED", 0)  # `trainer apply` returns it when a run aborts


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-007
@mutant("lr-schedule-not-applied")
def _lr_not_applied(patch):
    patch.setattr(optim, "apply_lr", lambda optimizer, lr: None)


@mutant("lr-schedule-off-by-one-step")
def _lr_off_by_one(patch):
    lr_at = loop.lr_at
    patch.setattr(
        loop,
        "lr_at",
        lambda step, *, max_steps, **kw: lr_at(min(step + 1, max_steps), max_steps=max_steps, **kw),
    )


@mutant("lr-applied-to-first-group-only")
def _lr_first_group_only(patch):
    def apply(optimizer, lr):
        optimizer.param_groups[0]["lr"] = lr

    patch.setattr(optim, "apply_lr", apply)


@mutant("lr-schedule-compressed-to-stop-after")
def _lr_compressed_to_stop_after(patch):
    # The schedule runs over the early stop (stop_after, `--stop-after`) instead of the
    # config's training.max_steps: a stopped run decays to min_lr by its last step.
    last_step, lr_at = RunOptions.last_step, loop.lr_at
    stop = {}

    def recorded(self, config):
        stop["step"] = last_step(self, config)
        return stop["step"]

    patch.setattr(RunOptions, "last_step", recorded)
    patch.setattr(
        loop,
        "lr_at",
        lambda step, *, max_steps, **kw: lr_at(step, max_steps=stop.get("step", max_steps), **kw),
    )


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-011
@mutant("unseeded-data-shuffle")
def _unseeded_shuffle(patch):
    def shuffled(num_sequences, seed, epoch):
        generator = torch.Generator()
        generator.seed()  # from the OS: a different order in every process
        return torch.randperm(num_sequences, generator=generator)

    patch.setattr(sequences, "_shuffled", shuffled)


@mutant("rng-seeded-from-time")
def _seeded_from_time(patch):
    patch.setattr(loop, "_run_seed", lambda config: time.time_ns() % 2**31)


@mutant("shuffle-over-set-order")
def _shuffle_over_set(patch):
    shuffled = sequences._shuffled

    def over_set(num_sequences, seed, epoch):
        names = {f"seq{int(i)}" for i in shuffled(num_sequences, seed, epoch)}
        return torch.tensor([int(name[3:]) for name in names])  # set order: PYTHONHASHSEED

    patch.setattr(sequences, "_shuffled", over_set)


# ---------------------------------------------------------------- FALSIFY-TRAIN-LOOP-017
@mutant("gradients-never-zeroed")
def _gradients_never_zeroed(patch):
    patch.setattr(loop, "_zero_grad", lambda optimizer: None)
