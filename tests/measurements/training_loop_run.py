"""Measurements of C-TRAINING-LOOP's gates that need whole runs of the loop
(contracts/training-loop-v1.yaml): no placeholder loss (GATE-TRAIN-LOOP-001), validation
never trained on (-002), the validation-size floor under early stopping (-003), no step on
a non-finite value (-006), the applied learning rate (-007), the real gradient norm
(-008) and determinism across processes (-011).

Each runs trainer.train.loop.train on a tiny model on CPU and counts what disagrees with
the contract's prediction, observing the run through train()'s hooks. The scenarios are
written here from the contract's rules, independently of the bound tests.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gates.measure import GateContext, Measurement, measures

VOCAB = 64


def _sources(ctx: GateContext, *names: str) -> list[Path]:
    return [ctx.root / name for name in ("trainer/train/loop.py", *names)]


def _config(values: dict | None = None, vocab_size: int = VOCAB):
    """The measured run, built in code over in-memory rows; ``values`` by dotted key."""
    from trainer.config.in_code import config_from_values, with_values  # noqa: PLC0415
    from trainer.model.config import preset  # noqa: PLC0415 - torch on demand only

    model = dataclasses.replace(
        preset("tiny"),
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=None,
        max_position_embeddings=64,
    )
    base = config_from_values(
        model,
        data={"micro_batch": 2, "seq_len": 8},
        optimizer={"lr": 1e-2, "min_lr": 1e-3},
        training={
            "seed": 1234,
            "gradient_accumulation": 2,
            "epochs": 3,
            "max_steps": 12,
            "warmup_steps": 1,
        },
    )
    return with_values(base, values or {})


class _Rows:
    """An in-memory SequenceSource: rows of seq_len + 1 token ids."""

    def __init__(self, rows, pad_id: int | None = None) -> None:
        self.rows = rows
        self.num_sequences, self.seq_len = rows.shape[0], rows.shape[1] - 1
        self.pad_id = pad_id

    def batch(self, indices: Sequence[int]):
        from trainer.train.loss import next_token_pairs  # noqa: PLC0415

        return next_token_pairs(self.rows[list(indices)], self.pad_id)


def _random_rows(n: int, seq_len: int, seed: int, vocab: int = VOCAB):
    import torch  # noqa: PLC0415

    return torch.randint(0, vocab, (n, seq_len + 1), generator=torch.Generator().manual_seed(seed))


class _Hooks:
    """Keeps each step's batches and answers: was the recorded loss the real one?"""

    def __init__(self) -> None:
        self.model = self.optimizer = None
        self.batches: dict[int, tuple[int, list, list]] = {}
        self.recomputed: dict[int, float] = {}
        self.lrs: dict[int, list[float]] = {}
        self.grad_norms: dict[int, float] = {}
        self.steps: list[int] = []
        self.evaluated: list[list] = []

    def on_start(self, model, optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def evaluation(self, step, batches, val_loss) -> None:
        self.evaluated.append(list(batches))

    def step_batches(self, step, epoch, indices, micro_batches) -> None:
        self.batches[step] = (epoch, indices, micro_batches)

    def before_optimizer_step(self, step, optimizer, model) -> None:
        import torch  # noqa: PLC0415

        from trainer.train.loss import IGNORE_INDEX  # noqa: PLC0415

        # The weights are those the step's forward used: the optimizer has not moved them.
        micro_batches = self.batches[step][2]
        with torch.no_grad():
            inputs = torch.cat([i for i, _ in micro_batches])
            targets = torch.cat([t for _, t in micro_batches])
            logits = model(inputs).double()
        self.recomputed[step] = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX
        ).item()
        self.lrs[step] = [group["lr"] for group in optimizer.param_groups]
        self.grad_norms[step] = math.sqrt(
            sum(
                float((p.grad.double() ** 2).sum())
                for p in model.parameters()
                if p.grad is not None
            )
        )

    def after_step(self, step, record) -> None:
        self.steps.append(step)


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-001
@measures("GATE-TRAIN-LOOP-001")
def placeholder_losses(ctx: GateContext) -> Measurement:
    from trainer.train.loop import train  # noqa: PLC0415
    from trainer.train.sequences import DataExhaustedError  # noqa: PLC0415

    data = _Rows(_random_rows(16, 8, seed=11))  # exactly 4 global batches of 2 x 2
    problems = []
    # (a) wrap-around on: 12 steps over 3 epochs, every loss the real one.
    hooks = _Hooks()
    result = train(_config({"training.max_steps": 12}), data, None, hooks=hooks)
    made_up = [
        s
        for s, recorded in enumerate(result.losses, start=1)
        if abs(recorded - hooks.recomputed.get(s, math.nan)) > 1e-6 * max(1.0, recorded)
        or not math.isfinite(recorded)
    ]
    problems += [f"step {s}: recorded loss is not the batch's loss" for s in made_up]
    # The positive control: steps whose recorded loss was recomputed and agreed (12).
    verified = len(result.losses) - len(made_up)
    if result.steps_run != 12 or result.epochs_completed != 2:
        problems.append(
            f"wrap: {result.steps_run} steps, epochs_completed {result.epochs_completed}"
        )
    # (b) wrap-around off: step 5 is an error naming step 5, and no loss is recorded for it.
    hooks = _Hooks()
    try:
        train(
            _config({"training.max_steps": 12, "training.wrap_around": False}),
            data,
            None,
            hooks=hooks,
        )
        problems.append("no wrap: the run ended without DataExhaustedError")
    except DataExhaustedError as error:
        if not re.search(r"step 5\b", str(error)):
            problems.append(f"no wrap: the error does not name step 5: {error}")
    if hooks.steps != [1, 2, 3, 4]:
        problems.append(f"no wrap: steps {hooks.steps} recorded, expected 1-4")
    return Measurement(
        values={
            # Every problem is a step that was not trained as recorded: a made-up loss, a
            # step run past exhaustion, a missing error or a miscounted wrap.
            "placeholder_losses": (len(problems), "steps"),
            # Of the 12 wrap-around steps, those whose recorded loss was recomputed from
            # its batch and agreed: a run that records no loss scores 0 here, not 12.
            "losses_verified": (verified, "steps"),
        },
        workload="16 sequences = 4 global batches (micro_batch 2 x grad_accum 2), tiny Llama "
        "(1 layer, hidden 16, V 64) on CPU: 12 steps with wrap-around, each recorded loss "
        "recomputed in float64 from its batch and the pre-step weights; then wrap-around off",
        inputs=_sources(ctx, "trainer/train/sequences.py"),
        notes="; ".join(problems),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-002
_WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "kelp")
_DOCS = [
    f"DOC{i:02d}X " + " ".join(_WORDS[(i * 3 + k * 7) % len(_WORDS)] for k in range(5 + i % 6))
    for i in range(40)
]


def _encode_sentinel_corpus(root: Path) -> tuple[Path, object]:
    """The 40 documents encoded with the project's encoder, exactly 4 of them validation."""
    from trainer.data.encode import encode_corpus, val_key  # noqa: PLC0415
    from trainer.tokenizer import bpe  # noqa: PLC0415
    from trainer.tokenizer.model import ByteLevelBPE  # noqa: PLC0415
    from trainer.tokenizer.pretokenize import count_words  # noqa: PLC0415

    tokenizer = ByteLevelBPE.from_model(
        bpe.train_fast(count_words(_DOCS), vocab_size=300, special_tokens=("<|endoftext|>",))
    )
    tokenizer.save(root / "tok")
    files = []
    for i, text in enumerate(_DOCS):
        files.append(root / "corpus" / f"doc{i:02d}.txt")
        files[-1].parent.mkdir(parents=True, exist_ok=True)
        files[-1].write_text(text, encoding="utf-8")
    keys = sorted(val_key(hashlib.sha256(d.encode()).digest()) for d in _DOCS)
    # encode's rule: documents whose key is below the fraction go to validation.
    encode_corpus(
        files, root / "tok", root / "data", workers=1, val_fraction=(keys[3] + keys[4]) / 2
    )
    return root / "data", tokenizer


@measures("GATE-TRAIN-LOOP-002")
def validation_tokens_trained_on(ctx: GateContext) -> Measurement:
    import torch  # noqa: PLC0415

    from trainer.data.manifest import load_manifest, open_shard  # noqa: PLC0415
    from trainer.train.loop import train  # noqa: PLC0415
    from trainer.train.sequences import ShardSequences  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        data_dir, tokenizer = _encode_sentinel_corpus(Path(tmp))
        manifest = load_manifest(data_dir)
        split_text = {
            split: tokenizer.decode(
                [int(t) for e in manifest.shards(split) for t in open_shard(manifest, e)]
            )
            for split in ("train", "val")
        }
        docs = {s: {int(m) for m in re.findall(r"DOC(\d\d)X", t)} for s, t in split_text.items()}
        val_docs = docs["val"]
        seq_len = 16
        train_data = ShardSequences(data_dir, "train", seq_len)
        steps_per_epoch = train_data.num_sequences // 4
        hooks = _Hooks()
        train(
            _config(
                {
                    "data.seq_len": seq_len,
                    "training.max_steps": 3 * steps_per_epoch,
                    "training.eval_interval": steps_per_epoch,
                },
                vocab_size=manifest.vocab_size,
            ),
            train_data,
            ShardSequences(data_dir, "val", seq_len),
            hooks=hooks,
        )

    # Every token each step trained on, decoded; a validation document's tokens are found
    # by its sentinel and counted with the sentinel's length. Likewise training documents
    # in the evaluation batches: validation built from training data is the same leak.
    def sentinel_tokens(windows, doc_ids) -> int:
        count = 0
        for row in windows.tolist():
            text = tokenizer.decode(row)
            for doc in doc_ids:
                mark = f"DOC{doc:02d}X"
                count += text.count(mark) * len(tokenizer.encode(mark))
        return count

    leaked, epochs = 0, set()
    for epoch, _, micro_batches in hooks.batches.values():
        epochs.add(epoch)
        for inputs, targets in micro_batches:
            leaked += sentinel_tokens(torch.cat([inputs, targets[:, -1:]], dim=1), val_docs)
    evaluated_training = sum(
        sentinel_tokens(torch.cat([inputs, targets[:, -1:]], dim=1), docs["train"])
        for batches in hooks.evaluated
        for inputs, targets in batches
    )
    overlap = docs["train"] & val_docs
    broken = [d for s in docs for d in docs[s] if _DOCS[d] not in split_text[s]]
    problems = [f"documents in both splits: {sorted(overlap)}"] if overlap else []
    problems += [f"documents cut across the splits: {broken}"] if broken else []
    problems += [] if len(val_docs) == 4 else [f"{len(val_docs)} validation documents, not 4"]
    problems += [] if hooks.evaluated else ["no evaluation ran"]
    if evaluated_training:
        problems.append(f"{evaluated_training} training-document tokens in evaluation batches")
    return Measurement(
        values={
            # Tokens on the wrong side of the split, wherever they were found; a document
            # shared or cut across the splits counts one token at least.
            "validation_tokens_trained_on": (
                leaked + evaluated_training + len(overlap) + len(broken),
                "tokens",
            ),
            "epochs_trained": (len(epochs), "epochs"),
            "validation_documents": (len(val_docs), "documents"),
            # The positive control: tokens decoded and searched, in training windows and
            # in evaluation batches. A loop that trains or evaluates nothing leaks nothing.
            "training_tokens_searched": (
                sum(t.numel() + t.shape[0] for _, _, mb in hooks.batches.values() for _, t in mb),
                "tokens",
            ),
            "evaluations_searched": (len(hooks.evaluated), "evaluations"),
        },
        workload="40 sentinel-marked documents encoded by trainer.data.encode (4 validation), "
        "tiny Llama trained 3 epochs with wrap-around over ShardSequences (seq_len 16); every "
        "training window decoded and searched for validation sentinels",
        inputs=_sources(ctx, "trainer/train/sequences.py", "trainer/data/encode.py"),
        notes="; ".join(problems),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-003
def _validation_rows(targets: int, pad_rows: int = 0, seq_len: int = 64):
    """Validation rows with exactly ``targets`` non-padding targets (pad id 0), then
    ``pad_rows`` rows of padding only."""
    import torch  # noqa: PLC0415

    rows_needed = -(-targets // seq_len)
    rows = _random_rows(rows_needed, seq_len, seed=13, vocab=VOCAB - 1) + 1  # ids 1..63
    flat = rows[:, 1:].reshape(-1)
    flat[targets:] = 0
    rows[:, 1:] = flat.view(rows_needed, seq_len)
    rows = torch.cat([rows, torch.zeros(pad_rows, seq_len + 1, dtype=rows.dtype)])
    return _Rows(rows, pad_id=0)


@measures("GATE-TRAIN-LOOP-003")
def validation_floor(ctx: GateContext) -> Measurement:
    from trainer.config.in_code import with_values  # noqa: PLC0415
    from trainer.train.loop import train  # noqa: PLC0415

    train_data = _Rows(_random_rows(8, 64, seed=12))
    run = _config(
        {
            "data.seq_len": 64,
            "training.max_steps": 1,
            "training.epochs": 1,
            "training.early_stopping": True,
        }
    )
    # (label, validation set, must start?)
    cases = [
        ("16,384 targets", _validation_rows(16_384), False),
        ("131,071 targets", _validation_rows(131_071), False),
        ("16,384 targets in 262,144 positions", _validation_rows(16_384, pad_rows=3840), False),
        ("131,072 targets", _validation_rows(131_072), True),
    ]
    accepted, wrong, wrongly_refused = [], [], []
    for label, val, should_start in cases:
        try:
            train(run, train_data, val)
            started, message = True, ""
        except ValueError as error:
            started, message = False, str(error)
        if started:
            accepted.append(int(val.rows[:, 1:].ne(0).sum()))
        if started != should_start:
            wrong.append(f"{label}: {'started' if started else 'refused'}")
            wrongly_refused += [label] if should_start else []
        elif not started and "131,072" not in message:
            wrong.append(f"{label}: the refusal does not state the minimum: {message}")
    # The other valid configuration: early stopping off, any validation size.
    no_early = with_values(run, {"training.early_stopping": False})
    try:
        ran = train(no_early, train_data, _validation_rows(2_000)).steps_run == 1
    except ValueError as error:
        ran = False
        wrongly_refused.append(f"early stopping off with 2,000 validation tokens: {error}")
    if not ran:
        wrong.append("early stopping off with 2,000 validation tokens did not run")
    return Measurement(
        values={
            "min_validation_tokens_with_early_stopping": (
                min(accepted) if accepted else math.inf,
                "tokens",
            ),
            "wrong_startup_decisions": (len(wrong), "cases"),
            # The other side: valid startups (early stopping on with 131,072 targets, or
            # off) refused. Refusing everything leaves the minimum at inf; this counts it.
            "valid_configs_refused": (len(wrongly_refused), "configs"),
        },
        workload="startups of trainer.train.loop.train with early stopping on and validation "
        "sets of 16,384, 131,071, 131,072 targets and 16,384 targets padded to 262,144 "
        "positions; then early stopping off with 2,000",
        inputs=_sources(ctx, "trainer/train/guards.py"),
        notes="; ".join(wrong),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-006
class _Poisoned(_Hooks):
    """A NaN loss (forward hook) or a +inf gradient (tensor hook) at step 7; keeps the
    weights and AdamW moments after step 6."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind, self.current, self.after_6 = kind, 0, None

    def on_start(self, model, optimizer) -> None:
        super().on_start(model, optimizer)
        if self.kind == "nan loss":
            model.register_forward_hook(
                lambda module, args, out: out * math.nan if self.current == 7 else out
            )
            return

        def inf_at_step_7(grad):
            if self.current != 7:
                return grad
            grad = grad.clone()
            grad.view(-1)[0] = math.inf
            return grad

        model.model.layers[0].mlp.up_proj.weight.register_hook(inf_at_step_7)

    def step_batches(self, step, epoch, indices, micro_batches) -> None:
        self.current = step
        super().step_batches(step, epoch, indices, micro_batches)

    def before_optimizer_step(self, step, optimizer, model) -> None:
        self.steps_reaching_optimizer = [*getattr(self, "steps_reaching_optimizer", []), step]

    def after_step(self, step, record) -> None:
        super().after_step(step, record)
        if step == 6:
            self.after_6 = self.state()

    def state(self) -> list:
        optimizer_state = self.optimizer.state_dict()["state"]
        tensors = [t.clone() for t in self.model.state_dict().values()]
        return tensors + [v.clone() for s in optimizer_state.values() for v in s.values()]


def _apply_exit_on_nan(root: Path) -> tuple[int, str]:
    """`trainer apply` on a real config whose model returns NaN logits at its 7th forward:
    (exit status, stderr)."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415

    from trainer import cli  # noqa: PLC0415
    from trainer.train import loop  # noqa: PLC0415

    data_dir, tokenizer = _encode_sentinel_corpus(root)
    config = root / "run.yaml"
    config.write_text(
        "\n".join(
            [
                "name: nan-at-step-7",
                "model:",
                "  preset: tiny",
                "  architecture:",
                f"    vocab_size: {tokenizer.vocab_size}",
                "    hidden_size: 16",
                "    intermediate_size: 32",
                "    num_attention_heads: 2",
                "    num_key_value_heads: 1",
                "data:",
                f"  shards: {data_dir}",
                f"  tokenizer: {root / 'tok'}",
                "  micro_batch: 2",
                "  seq_len: 8",
                "optimizer:",
                "  name: adamw",
                "  lr: 1.0e-3",
                "training:",
                "  epochs: 5",
                "  max_steps: 10",
                "  warmup_steps: 1",
                "  eval_interval: 100",
                "  save_interval: 1000",
                f"  output_dir: {root / 'out'}",
                "  force_token_budget: true",
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    forwards = [0]

    def nan_at_forward_7(module, args, out):
        forwards[0] += 1
        return out * math.nan if forwards[0] == 7 else out

    real_build = loop.build_model

    def build_poisoned(cfg, **kwargs):
        model = real_build(cfg, **kwargs)
        model.register_forward_hook(nan_at_forward_7)
        return model

    stderr = io.StringIO()
    loop.build_model = build_poisoned
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(["apply", str(config), "--device", "cpu"])
    finally:
        loop.build_model = real_build
    return status, stderr.getvalue()


@measures("GATE-TRAIN-LOOP-006")
def nonfinite_steps_applied(ctx: GateContext) -> Measurement:
    import torch  # noqa: PLC0415

    from trainer.train.guards import NonFiniteError  # noqa: PLC0415
    from trainer.train.loop import train  # noqa: PLC0415

    data = _Rows(_random_rows(16, 8, seed=14))
    applied, notes = 0, []
    for kind, value in (("nan loss", "loss is nan"), ("inf gradient", "grad norm is inf")):
        hooks = _Poisoned(kind)
        try:
            train(_config({"training.max_steps": 12}), data, None, hooks=hooks)
            notes.append(f"{kind}: the run finished")
        except NonFiniteError as error:
            if not (re.search(r"step 7\b", str(error)) and value in str(error)):
                notes.append(f"{kind}: the error does not name step 7 and {value!r}: {error}")
        moved = hooks.after_6 is None or any(
            not torch.equal(a, b) for a, b in zip(hooks.state(), hooks.after_6, strict=True)
        )
        reached = 7 in getattr(hooks, "steps_reaching_optimizer", []) or 7 in hooks.steps
        applied += int(moved or reached)
        if moved or reached:
            notes.append(f"{kind}: step 7 reached the optimizer or changed the weights/moments")
    with tempfile.TemporaryDirectory() as tmp:
        status, stderr = _apply_exit_on_nan(Path(tmp))
    if status == 0 or not re.search(r"step 7\b.*loss is nan", stderr):
        notes.append(f"trainer apply: exit {status} on a NaN loss at step 7")
    return Measurement(
        values={
            # Each case that breaks the rule: a step applied, a run that goes on, an error
            # that does not name the step and value, a zero exit from `trainer apply`.
            "nonfinite_rule_violations": (len(notes), "cases"),
            "nonfinite_steps_applied": (applied, "steps"),
            "apply_exit_status_on_nan": (status, "status"),
        },
        workload="tiny Llama, 12 planned steps; a NaN injected into the loss at step 7, then "
        "+inf into one gradient at step 7 with a finite loss; weights and AdamW moments "
        "compared bitwise with those after step 6; then `trainer apply` on a real config "
        "with NaN logits at step 7 (exit status and message)",
        inputs=_sources(
            ctx, "trainer/train/guards.py", "trainer/train/apply.py", "trainer/train/commands.py"
        ),
        notes="; ".join(notes),
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-007
@measures("GATE-TRAIN-LOOP-007")
def lr_mismatched_steps(ctx: GateContext) -> Measurement:
    from trainer.config.schedule import lr_at  # noqa: PLC0415
    from trainer.train.loop import train  # noqa: PLC0415
    from trainer.train.options import RunOptions  # noqa: PLC0415

    run = _config(
        {
            "data.seq_len": 4,
            "training.max_steps": 200,
            "training.epochs": 50,
            "training.warmup_steps": 20,
            "optimizer.lr": 3e-4,
            "optimizer.min_lr": 3e-5,
        }
    )
    data = _Rows(_random_rows(16, 4, seed=15))
    mismatched, groups = [], set()
    # The whole run, then one stopped early (`--stop-after 60`): both follow the schedule
    # over training.max_steps 200; a step past the stop, or one missing, is mismatched too.
    for label, stop_after in (("full", None), ("stop_after 60", 60)):
        hooks = _Hooks()
        train(run, data, None, options=RunOptions(stop_after=stop_after), hooks=hooks)
        for step in sorted(set(range(1, (stop_after or 200) + 1)) | set(hooks.lrs)):
            expected = lr_at(step, peak=3e-4, warmup=20, max_steps=200, min_lr=3e-5)
            lrs = hooks.lrs.get(step, [])
            groups.add(len(lrs))
            if (
                step > (stop_after or 200)
                or len(lrs) != 2
                or any(abs(lr - expected) > 1e-12 * expected for lr in lrs)
            ):
                mismatched.append(f"{label}: {step}")
    return Measurement(
        values={
            "lr_mismatched_steps": (len(mismatched), "steps"),
            "param_groups": (max(groups), "groups"),
        },
        workload="200 steps, peak 3e-4, warmup 20, min 3e-5, then the same config stopped "
        "after step 60 (RunOptions.stop_after); optimizer.param_groups[*]['lr'] read before "
        "every optimizer.step() of both runs and compared with C-TRAINCFG-001's lr(s) over "
        "max_steps 200; a step of the stopped run past 60 or missing counts as mismatched",
        inputs=_sources(
            ctx, "trainer/config/schedule.py", "trainer/train/optim.py", "trainer/train/options.py"
        ),
        notes=f"mismatched steps: {mismatched[:10]}" if mismatched else "",
    )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-008
@measures("GATE-TRAIN-LOOP-008")
def grad_norm_error(ctx: GateContext) -> Measurement:
    from trainer.train.loop import train  # noqa: PLC0415

    data = _Rows(_random_rows(16, 8, seed=16))
    hooks = _Hooks()
    # Clip far above the norm: .grad before the step is the unclipped gradient.
    result = train(
        _config({"training.max_steps": 20, "training.epochs": 5, "optimizer.grad_clip": 1e9}),
        data,
        None,
        hooks=hooks,
    )
    errors = [
        abs(reported - hooks.grad_norms[s]) / hooks.grad_norms[s]
        for s, reported in enumerate(result.grad_norms, start=1)
    ]
    # Clipping engages: a loss scaled by 1e4 at step 3, clip 1.0. The pre-clip norm is
    # recomputed from scratch on a copy of the model (same weights, same batch, same
    # scaling hook); the post-clip norm is that of .grad as the optimizer gets it.
    clipped = _ScaledAt3()
    scaled = train(
        _config({"training.max_steps": 3, "optimizer.grad_clip": 1.0}), data, None, hooks=clipped
    )
    pre_clip = clipped.fresh_pre_clip_norm
    errors.append(abs(scaled.grad_norms[2] - pre_clip) / pre_clip)
    errors.append(max(0.0, clipped.grad_norms[3] - 1.0))  # over max_norm 1.0: not clipped
    return Measurement(
        values={
            "max_grad_norm_relative_error": (max(errors), "ratio"),
            "distinct_reported_norms": (len(set(result.grad_norms)), "values"),
            "reported_pre_clip_norm_scaled_step": (scaled.grad_norms[2], "norm"),
            "independent_pre_clip_norm_scaled_step": (pre_clip, "norm"),
            "post_clip_norm_scaled_step": (clipped.grad_norms[3], "norm"),
        },
        workload="20 steps, clip 1e9: the reported norm against a float64 norm over every "
        ".grad before optimizer.step(); then one step with the loss scaled by 1e4, clip 1.0: "
        "the reported norm against the step's gradient recomputed from scratch, and the "
        "applied norm against max_norm (its excess counted as error)",
        inputs=_sources(ctx, "trainer/train/optim.py"),
    )


class _ScaledAt3(_Hooks):
    """Multiplies the loss gradient of step 3 by 1e4 and recomputes that step's pre-clip
    gradient norm independently."""

    def on_start(self, model, optimizer) -> None:
        super().on_start(model, optimizer)

        def scale(module, args, out):
            if len(self.batches) == 3 and out.requires_grad:
                out.register_hook(lambda grad: grad * 1e4)
            return out

        model.register_forward_hook(scale)

    def before_optimizer_step(self, step, optimizer, model) -> None:
        import torch  # noqa: PLC0415

        from trainer.train.loss import IGNORE_INDEX  # noqa: PLC0415

        super().before_optimizer_step(step, optimizer, model)
        if step != 3:
            return
        fresh = copy.deepcopy(model)
        fresh.zero_grad(set_to_none=True)
        micro_batches = self.batches[step][2]
        inputs = torch.cat([i for i, _ in micro_batches])
        targets = torch.cat([t for _, t in micro_batches])
        torch.nn.functional.cross_entropy(
            fresh(inputs).flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX
        ).backward()
        self.fresh_pre_clip_norm = math.sqrt(
            sum(
                float((p.grad.double() ** 2).sum())
                for p in fresh.parameters()
                if p.grad is not None
            )
        )


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-011
def _determinism_child(out: str) -> None:
    """In a fresh process: 30 steps of a tiny model with seed 1234 across an epoch boundary."""
    from safetensors.torch import save  # noqa: PLC0415

    from gates import mutants  # noqa: PLC0415
    from trainer.train.loop import train  # noqa: PLC0415

    # Under `gates audit`-style checks the mutant must reach this process too.
    mutants.apply_from_env(Path(__file__).resolve().parents[2])

    # 64 sequences / 4 per step = 16 steps per epoch: the order reshuffles at step 17.
    result = train(
        _config({"training.max_steps": 30, "training.epochs": 2}),
        _Rows(_random_rows(64, 8, seed=17)),
        None,
    )
    weights = {k: v.contiguous() for k, v in result.model.state_dict().items()}
    Path(out).write_text(
        json.dumps(
            {
                "losses": [x.hex() for x in result.losses],
                "grad_norms": [x.hex() for x in result.grad_norms],
                "weights_sha256": hashlib.sha256(save(weights)).hexdigest(),
            }
        )
    )


@measures("GATE-TRAIN-LOOP-011")
def differing_values(ctx: GateContext) -> Measurement:
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for hash_seed in ("0", "99"):
            out = Path(tmp) / f"run-{hash_seed}.json"
            code = (
                "import sys; from tests.measurements.training_loop_run import _determinism_child; "
                "_determinism_child(sys.argv[1])"
            )
            subprocess.run(
                [sys.executable, "-c", code, str(out)],
                check=True,
                cwd=ctx.root,
                env={**os.environ, "PYTHONHASHSEED": hash_seed},
            )
            runs.append(json.loads(out.read_text()))
    a, b = runs
    differing = sum(
        x != y for key in ("losses", "grad_norms") for x, y in zip(a[key], b[key], strict=False)
    )
    differing += abs(len(a["losses"]) - len(b["losses"]))
    differing += int(a["weights_sha256"] != b["weights_sha256"])
    return Measurement(
        values={
            "differing_values": (differing, "values"),
            "steps": (len(a["losses"]), "steps"),
        },
        workload="two CPU processes (PYTHONHASHSEED 0 and 99) each train a tiny Llama 30 "
        "steps with seed 1234 across an epoch boundary; losses and gradient norms compared "
        "as exact hex floats, final weights by the sha256 of their safetensors bytes",
        inputs=_sources(ctx, "trainer/train/sequences.py"),
        notes=f"weights sha256 {a['weights_sha256']}",
    )
