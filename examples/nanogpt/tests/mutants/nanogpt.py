"""Known bugs of a nanoGPT-style loop (C-NANOGPT-LOOP mutants), injected by `gates audit`.

Each is one edit of nanogpt_train.py or nanogpt_model.py (tests/mutants/source_edit.py), a
bug a nanoGPT fork could plausibly carry. Killed by tests/test_accumulation.py
(FALSIFY-NANOGPT-LOOP-001), test_lr_schedule.py (-002), test_grad_norm.py (-003) and
test_resume.py (-004, whose resumed process applies the mutant too).
"""

import nanogpt_model
import nanogpt_train

from gates.mutants import mutant

from .source_edit import edit


# ------------------------------------------------------------- FALSIFY-NANOGPT-LOOP-001
@mutant("micro-loss-not-divided-by-grad-accum")
def _not_divided(patch):  # the step's gradient is the sum of grad_accum token means
    edit(
        patch,
        nanogpt_train,
        "train",
        "loss = loss / cfg.gradient_accumulation_steps",
        "loss = loss / 1",
    )


@mutant("loss-reduced-by-sum")
def _loss_sum(patch):  # cross-entropy summed over tokens: the gradient scales with B * T
    edit(patch, nanogpt_model.GPT, "forward", "ignore_index=-1", 'ignore_index=-1, reduction="sum"')


@mutant("zero-grad-inside-micro-loop")
def _zero_grad_in_loop(patch):  # only the last micro-batch's gradient survives to the step
    edit(
        patch,
        nanogpt_train,
        "train",
        "            loss.backward()\n",
        "            optimizer.zero_grad(set_to_none=True)\n            loss.backward()\n",
    )


# ------------------------------------------------------------- FALSIFY-NANOGPT-LOOP-002
@mutant("lr-applied-to-first-group-only")
def _lr_first_group(patch):  # the no-decay group (biases, LayerNorms) keeps its initial lr
    edit(
        patch,
        nanogpt_train,
        "train",
        "for param_group in optimizer.param_groups:",
        "for param_group in optimizer.param_groups[:1]:",
    )


@mutant("lr-schedule-not-applied")
def _lr_not_applied(patch):  # computed and logged, never given to the optimizer
    edit(patch, nanogpt_train, "train", 'param_group["lr"] = lr', "pass")


@mutant("lr-schedule-one-iteration-ahead")
def _lr_ahead(patch):  # iteration it trains at lr(it + 1)
    edit(patch, nanogpt_train, "train", "get_lr(iter_num, cfg)", "get_lr(iter_num + 1, cfg)")


# ------------------------------------------------------------- FALSIFY-NANOGPT-LOOP-003
@mutant("grad-norm-reported-after-clip")
def _norm_after_clip(patch):  # the reported norm never exceeds grad_clip
    edit(
        patch,
        nanogpt_train,
        "train",
        "grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)\n"
        "        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf)",
    )


@mutant("clipping-not-applied")
def _no_clipping(patch):  # the norm is measured, the gradients are left as they are
    edit(
        patch,
        nanogpt_train,
        "train",
        "clip_grad_norm_(model.parameters(), cfg.grad_clip or math.inf)",
        "clip_grad_norm_(model.parameters(), math.inf)",
    )


@mutant("grad-norm-over-decay-group-only")
def _norm_decay_group(patch):  # clipping (and its norm) sees only the 2D weights
    edit(
        patch,
        nanogpt_train,
        "train",
        "clip_grad_norm_(model.parameters(),",
        'clip_grad_norm_(optimizer.param_groups[0]["params"],',
    )


# ------------------------------------------------------------- FALSIFY-NANOGPT-LOOP-004
@mutant("optimizer-state-not-restored")
def _optimizer_not_restored(patch):  # AdamW restarts with zero moments and step 0
    edit(
        patch,
        nanogpt_train,
        "load_checkpoint",
        'optimizer.load_state_dict({"state": state, "param_groups": groups})',
        "pass",
    )


@mutant("adam-step-count-not-restored")
def _adam_step_reset(patch):  # moments restored, bias correction restarts from step 1
    edit(
        patch,
        nanogpt_train,
        "load_checkpoint",
        "state.setdefault(int(i), {})[name] = value",
        'state.setdefault(int(i), {})[name] = value.zero_() if name == "step" else value',
    )


@mutant("rng-state-not-restored")
def _rng_not_restored(patch):  # nanoGPT's own resume: the RNG continues from the reseed
    edit(patch, nanogpt_train, "train", "torch.set_rng_state(rng_state)", "None")


@mutant("rng-state-taken-after-evaluation")
def _rng_after_eval(patch):  # the resumed run's evaluation draws its batches a second time
    edit(
        patch,
        nanogpt_train,
        "train",
        "rng_state = torch.get_rng_state()  # before the evaluation draws its batches\n"
        "            losses = estimate_loss(model, data, cfg)\n",
        "losses = estimate_loss(model, data, cfg)\n            rng_state = torch.get_rng_state()\n",
    )


@mutant("iter-num-not-restored")
def _iter_not_restored(patch):  # the resumed run starts again at iteration 0 and warms up
    edit(
        patch,
        nanogpt_train,
        "train",
        'iter_num, best_val_loss = meta["iter_num"], meta["best_val_loss"]',
        'best_val_loss = meta["best_val_loss"]',
    )
