"""Measurements of C-TRAINING-LOOP's rule gates (contracts/training-loop-v1.yaml) that the
loop's parts discharge on their own: early stopping (GATE-TRAIN-LOOP-004), the divergence
guard (-005), the loss reduction under gradient accumulation (-009) and the causal
objective (-010).

Each re-runs the contract's cases against the real code (trainer/train/guards.py,
loss.py, trainer/model/llama.py) and counts what disagrees with the contract's prediction.
The cases are written here from the contract, independently of the bound tests.
"""

from __future__ import annotations

import math
from pathlib import Path

from gates.measure import GateContext, Measurement, measures


def _sources(ctx: GateContext, *names: str) -> list[Path]:
    return [ctx.root / name for name in names]


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-004
#: (name, validation losses, EarlyStopping kwargs, expected 1-based stop evaluation or None)
EARLY_STOP_CASES: list[tuple[str, list[float], dict, int | None]] = [
    ("a: the source system's run", [9.909, 9.791, 9.733, 9.830, 9.845, 9.818], {}, None),
    ("b: five non-improving after the best", [9.9, 9.8, 9.7] + [9.75] * 5, {}, 8),
    ("b': only four non-improving", [9.9, 9.8, 9.7] + [9.75] * 4, {}, None),
    ("c: flat", [9.9] * 6, {}, 6),
    ("d: a tie is no improvement", [9.9, 9.8, 9.7, 9.7, 9.7, 9.7, 9.7, 9.7], {}, 8),
    ("e: third-evaluation floor, patience 1", [9.9, 9.9, 9.9], {"patience": 1}, 3),
    ("improvement resets patience", [9.9, 9.95, 9.95, 9.95, 9.95, 9.8] + [9.9] * 5, {}, 11),
]


@measures("GATE-TRAIN-LOOP-004")
def early_stopping_decisions(ctx: GateContext) -> Measurement:
    from trainer.train.guards import EarlyStopping  # noqa: PLC0415

    wrong = []
    for name, losses, kwargs, expected in EARLY_STOP_CASES:
        early = EarlyStopping(**kwargs)
        stop = next((k for k, v in enumerate(losses, start=1) if early.update(v)), None)
        if stop != expected:
            wrong.append(f"{name}: stopped at {stop}, expected {expected}")
    return Measurement(
        values={
            "wrong_stop_decisions": (len(wrong), "sequences"),
            "sequences": (len(EARLY_STOP_CASES), "sequences"),
        },
        workload=f"{len(EARLY_STOP_CASES)} scripted validation-loss sequences (FALSIFY-TRAIN-"
        "LOOP-004 a-e plus a reset case) fed to trainer.train.guards.EarlyStopping "
        "(patience 5, at least 3 evaluations unless stated)",
        inputs=_sources(ctx, "trainer/train/guards.py"),
        notes="; ".join(wrong),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-005
#: (vocab, previous evaluation or None for the first, value, expected verdict)
DIVERGENCE_CASES: list[tuple[int, float | None, float, str]] = [
    (50257, None, 10.82, "pass"),
    (50257, None, 18.0, "pass"),
    (50257, None, 21.6, "pass"),
    (50257, None, 21.7, "abort"),
    (50257, None, math.nan, "abort"),
    (50257, None, math.inf, "abort"),
    (50257, 9.8, 19.6, "pass"),
    (50257, 9.8, 19.61, "abort"),
    (50257, 9.8, math.nan, "abort"),
    (512, None, 12.4, "pass"),
    (512, None, 12.5, "abort"),
]


@measures("GATE-TRAIN-LOOP-005")
def divergence_verdicts(ctx: GateContext) -> Measurement:
    from trainer.train.guards import DivergenceError, DivergenceGuard  # noqa: PLC0415

    wrong = []
    for vocab, previous, value, expected in DIVERGENCE_CASES:
        guard = DivergenceGuard(vocab)
        if previous is not None:
            guard.check(previous)
        try:
            guard.check(value)
            verdict = "pass"
        except DivergenceError:
            verdict = "abort"
        if verdict != expected:
            where = "first evaluation" if previous is None else f"after {previous}"
            wrong.append(f"V={vocab} {where} {value}: {verdict}, expected {expected}")
    return Measurement(
        values={
            "wrong_divergence_verdicts": (len(wrong), "cases"),
            "cases": (len(DIVERGENCE_CASES), "cases"),
        },
        workload=f"{len(DIVERGENCE_CASES)} FALSIFY-TRAIN-LOOP-005 cases (V = 50257: cap "
        "2 ln V = 21.65; V = 512: 12.48; later evaluations > 2x the previous) through "
        "trainer.train.guards.DivergenceGuard",
        inputs=_sources(ctx, "trainer/train/guards.py"),
        notes="; ".join(wrong),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-009
def _padded_global_batch(vocab: int, seq: int, pad_id: int):
    """8 sequences of seq + 1 tokens, padding 0 % .. 90 % of each (rightmost positions)."""
    import torch  # noqa: PLC0415

    g = torch.Generator().manual_seed(9)
    tokens = torch.randint(1, vocab, (8, seq + 1), generator=g)
    for row, fraction in enumerate([0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9]):
        keep = max(2, round((seq + 1) * (1 - fraction)))
        tokens[row, keep:] = pad_id
    return tokens


def _reference(model, tokens, pad_id: int):
    """The reference, written out here: one float64 token mean of the cross-entropy over
    every non-padding target of ``tokens`` [B, T+1], on a float64 copy of ``model``'s
    weights; (loss, gradient of each parameter)."""
    import copy  # noqa: PLC0415

    import torch.nn.functional as F  # noqa: PLC0415, N812

    model = copy.deepcopy(model).double()
    model.zero_grad(set_to_none=True)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    real = targets != pad_id
    logits = model(inputs).double()
    per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
    objective = (per_token * real.flatten()).sum() / real.sum()
    objective.backward()
    return objective.item(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _loss_grad_errors(step_loss: float, grads: dict, ref_loss: float, ref_grads: dict) -> list:
    """Relative error of the loss and of every parameter gradient (L2 per tensor), each norm
    floored at 1e-6 of the largest reference norm: a gradient that is zero in exact
    arithmetic holds only rounding noise (tests/unit/trainer/test_loop_loss.py)."""
    floor = 1e-6 * max(r.norm().item() for r in ref_grads.values())
    errors = [abs(step_loss - ref_loss) / abs(ref_loss)]
    for name, ref in ref_grads.items():
        diff = (grads[name].double() - ref).norm().item()
        errors.append(diff / max(ref.norm().item(), floor))
    return errors


class _FirstStep:
    """train()'s hooks for a one-step run: at on_start the model is cast to ``dtype`` (in
    place: AdamW holds the same parameters) and the float64 reference is taken from its
    initial weights; before_optimizer_step keeps the gradients the step is about to apply."""

    def __init__(self, dtype, tokens, pad_id: int) -> None:
        self.dtype, self.tokens, self.pad_id = dtype, tokens, pad_id
        self.ref_loss, self.ref_grads, self.grads = None, {}, {}

    def on_start(self, model, optimizer) -> None:
        model.to(self.dtype)
        self.ref_loss, self.ref_grads = _reference(model, self.tokens, self.pad_id)

    def before_optimizer_step(self, step, optimizer, model) -> None:
        self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def _loop_errors(pad_id: int, seq: int) -> tuple[float, float, int, list[str]]:
    """trainer.train.loop.train on one padded global batch of 8 sequences (the whole
    training split, so every shuffle gives step 1 all of it), one optimizer step for each
    grad_accum, gradient clipping off: (worst error with the loop run in float64, worst as
    it runs on CPU in float32, runs whose reported token count is wrong, notes)."""
    import torch  # noqa: PLC0415

    from trainer.train.loop import train  # noqa: PLC0415

    from .training_loop_run import VOCAB, _config, _Rows  # noqa: PLC0415

    tokens = _padded_global_batch(VOCAB, seq, pad_id)
    real = int((tokens[:, 1:] != pad_id).sum())
    worst = {torch.float64: 0.0, torch.float32: 0.0}
    miscounted, rows = 0, []
    for dtype in (torch.float64, torch.float32):
        for grad_accum in (1, 2, 4, 8):
            config = _config(
                {
                    "data.micro_batch": 8 // grad_accum,
                    "data.seq_len": seq,
                    "training.gradient_accumulation": grad_accum,
                    "training.max_steps": 1,
                    "training.warmup_steps": 0,
                    "optimizer.grad_clip": None,  # the raw accumulated gradients reach the hook
                }
            )
            hooks = _FirstStep(dtype, tokens, pad_id)
            record = train(config, _Rows(tokens, pad_id), None, hooks=hooks).records[0]
            errors = _loss_grad_errors(record["loss"], hooks.grads, hooks.ref_loss, hooks.ref_grads)
            miscounted += record["tokens"] != real
            worst[dtype] = max(worst[dtype], *errors, 0.0 if record["tokens"] == real else math.inf)
            name, tokens_seen = str(dtype).removeprefix("torch."), record["tokens"]
            rows.append(
                f"loop {name} g={grad_accum}: {max(errors):.2e} (tokens {tokens_seen} of {real})"
            )
    return worst[torch.float64], worst[torch.float32], miscounted, rows


@measures("GATE-TRAIN-LOOP-009")
def loss_reduction_is_exact(ctx: GateContext) -> Measurement:
    from trainer.model import preset  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415
    from trainer.train.loss import accumulate_gradients, next_token_pairs  # noqa: PLC0415

    # (1) The helper: trainer.train.loss.accumulate_gradients on uneven micro-batches.
    pad_id, seq = 0, 24
    model = build_model(preset("tiny"), seed=3).double()
    tokens = _padded_global_batch(model.config.vocab_size, seq, pad_id)
    real = int((tokens[:, 1:] != pad_id).sum())
    ref_loss, ref_grads = _reference(model, tokens, pad_id)
    worst, miscounted, rows = 0.0, 0, []
    for grad_accum in (1, 2, 4, 8):
        # Unequal micro-batches: split the 8 rows by a fixed, uneven cut when possible.
        cuts = {1: [8], 2: [3, 5], 4: [1, 2, 2, 3], 8: [1] * 8}[grad_accum]
        micro, start = [], 0
        for size in cuts:
            micro.append(next_token_pairs(tokens[start : start + size], pad_id))
            start += size
        model.zero_grad(set_to_none=True)
        loss, count = accumulate_gradients(model, micro)
        grads = {n: p.grad for n, p in model.named_parameters()}
        errors = _loss_grad_errors(loss, grads, ref_loss, ref_grads)
        miscounted += count != real
        rows.append(f"helper g={grad_accum}: {max(errors):.2e} (count {count} of {real})")
        worst = max(worst, *errors, 0.0 if count == real else math.inf)
    # (2) The loop: the step loss, token count and gradients train() itself produces.
    loop64, loop32, loop_miscounted, loop_rows = _loop_errors(pad_id, seq)
    return Measurement(
        values={
            # The helper and the loop run in float64: what is measured is the reduction.
            "max_loss_grad_relative_error": (max(worst, loop64), "ratio"),
            # The loop as it runs on CPU (float32), against the same float64 reference.
            "loop_fp32_max_loss_grad_relative_error": (loop32, "ratio"),
            # Steps whose target count (the helper's return, the loop's record) is wrong.
            "miscounted_steps": (miscounted + loop_miscounted, "steps"),
        },
        workload="one global batch of 8 sequences x 24 targets with 0-90 % padding; each "
        "step's loss and every parameter gradient (relative L2 error per tensor) against one "
        "float64 token-mean cross-entropy over its non-padding targets from the same initial "
        "weights, and its target count against the true one. (1) tiny preset in float64, "
        "grad_accum 1, 2, 4, 8 unequal micro-batches through "
        "trainer.train.loss.accumulate_gradients; (2) trainer.train.loop.train (tiny Llama: "
        "1 layer, hidden 16, V 64; padding reaching the loop as IGNORE_INDEX targets from "
        "its data source) for one optimizer step at grad_accum 1, 2, 4, 8 (micro_batch 8, 4, "
        "2, 1), clipping off, the loss and token count it records and the gradients at "
        "before_optimizer_step, with the model cast to float64 at on_start, then again in "
        "float32 as the loop runs on CPU (loop_fp32_max_loss_grad_relative_error)",
        inputs=_sources(ctx, "trainer/train/loss.py", "trainer/train/loop.py"),
        notes="; ".join(rows + loop_rows),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-010
@measures("GATE-TRAIN-LOOP-010")
def causal_objective(ctx: GateContext) -> Measurement:
    import torch  # noqa: PLC0415

    from trainer.model import preset  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415
    from trainer.train.loss import next_token_pairs  # noqa: PLC0415

    cfg, seq = preset("tiny"), 32
    model = build_model(cfg, seed=5)
    leaks, dead, checked = 0, 0, 0
    for sample in range(3):
        base = torch.randint(
            0, cfg.vocab_size, (1, seq), generator=torch.Generator().manual_seed(sample)
        )
        variants = base.repeat(seq + 1, 1)
        for j in range(seq):
            variants[1 + j, j] = (base[0, j] + 1) % cfg.vocab_size
        with torch.no_grad():
            logits = model(variants)
        for j in range(seq):
            for i in range(seq):
                same = torch.equal(logits[1 + j, i], logits[0, i])
                checked += 1
                leaks += i < j and not same  # position i saw token j > i
                dead += i >= j and same  # a later position ignores token j: not attending
    tokens = torch.randint(
        0, cfg.vocab_size, (4, seq + 1), generator=torch.Generator().manual_seed(7)
    )
    inputs, targets = next_token_pairs(tokens)
    shift_wrong = int((targets != tokens[:, 1:]).sum() + (inputs != tokens[:, :-1]).sum())
    return Measurement(
        values={
            "future_token_leaks": (leaks + shift_wrong, "positions"),
            "positions_checked": (checked, "positions"),
            "later_positions_unaffected": (dead, "positions"),
        },
        workload="tiny preset, 3 random 32-token sequences; each token perturbed in turn and "
        "all 33 variants run in one forward pass; a logit before the perturbed position "
        "that changes at all is a leak; plus next_token_pairs on 4 x 33 tokens, any target "
        "that is not the next input token counted as a leak",
        inputs=_sources(ctx, "trainer/model/llama.py", "trainer/train/loss.py"),
        notes=f"shift mismatches {shift_wrong}; later positions unchanged by an earlier "
        f"token {dead} (expected 0)",
    )
