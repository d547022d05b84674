"""The Trainer pack: C-HF-TRAINER-LOOP's scenarios (hf_example.py) measured against a
project's own ``transformers.Trainer``: its subclass, ``compute_loss`` override, collator
and optimizer, around the tiny model and the data each scenario provides.

A project names its factory in its ``pyproject.toml``::

    [tool.shipgate-hf-trainer]
    trainer_factory = "my_trainer:build_trainer"   # module (from the project root):function

``build_trainer(model, args, train_dataset, callbacks)`` returns the project's Trainer around
exactly that model, those ``TrainingArguments`` (the scenario's: batch sizes, accumulation,
schedule, label smoothing) and that dataset, with the callbacks (the scenario's probes)
added. Its measurement modules then bind the pack's measurements to their own gates::

    @measures("GATE-MY-TRAINER-001")
    def token_mean(ctx):
        return hf_trainer_pack.token_mean_under_accumulation(ctx, load_factory(ctx.root))

Each measurement reports what it measured, whatever that is (the verdict is the gate's
threshold), and records the factory, the package versions and the sha256 of the pack's two
files: they lie outside an adopting project's root, where its evidence's traced sources do
not reach. examples/hf-team-trainer adopts the pack; examples/hf-trainer measures the stock
Trainer with the same functions (no factory).
"""

from __future__ import annotations

import hashlib
import importlib
import re
import sys
import tomllib
from pathlib import Path

import hf_example
from hf_example import TrainerFactory

from gates.measure import GateContext, Measurement

#: The pyproject table and key that name a project's factory.
TABLE = "shipgate-hf-trainer"
KEY = "trainer_factory"
#: The pack's own code, whose digest every measurement records.
PACK_FILES = tuple(Path(m.__file__).resolve() for m in (hf_example, sys.modules[__name__]))


class FactoryError(ValueError):
    """The project's factory is missing or malformed; the message names the file and key."""


def load_factory(root: Path) -> TrainerFactory:
    """The factory ``root/pyproject.toml`` names in ``[tool.shipgate-hf-trainer]
    trainer_factory``, imported with the root first on sys.path (as its tests import it)."""
    pyproject = Path(root) / "pyproject.toml"
    try:
        text = pyproject.read_text("utf-8")
        table = tomllib.loads(text).get("tool", {}).get(TABLE)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise FactoryError(f"{pyproject}: cannot read it: {e}") from e
    line = next(
        (n for n, s in enumerate(text.splitlines(), 1) if re.match(rf"\s*{KEY}\s*=", s)), None
    )
    where = f"{pyproject}:{line}" if line else str(pyproject)
    if not isinstance(table, dict) or KEY not in table:
        raise FactoryError(
            f'{where}: [tool.{TABLE}] {KEY} = "module:function" is missing: the pack '
            "measures the Trainer that function builds"
        )
    unknown = sorted(set(table) - {KEY})
    if unknown:
        raise FactoryError(f"{where}: [tool.{TABLE}] has unknown key(s) {', '.join(unknown)}")
    spec = table[KEY]
    module_name, _, attr = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not (all(p.isidentifier() for p in module_name.split(".")) and attr.isidentifier()):
        raise FactoryError(f'{where}: {KEY} = {spec!r} is not "module:function"')
    if str(Path(root).resolve()) not in sys.path:
        sys.path.insert(0, str(Path(root).resolve()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise FactoryError(f"{where}: {KEY} = {spec!r}: cannot import {module_name}: {e}") from e
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise FactoryError(f"{where}: {KEY} = {spec!r}: {module_name} has no function {attr}")
    return factory


def factory_name(factory: TrainerFactory | None) -> str:
    """``module:function`` of a factory; the stock Trainer when there is none."""
    if factory is None:
        return "transformers.Trainer"
    return f"{factory.__module__}:{factory.__qualname__}"


def _trainer(factory: TrainerFactory | None) -> str:
    if factory is None:
        return "transformers.Trainer"
    return f"the Trainer built by {factory_name(factory)}"


def _versions(factory: TrainerFactory | None) -> dict:
    digest = hashlib.sha256()
    for path in PACK_FILES:
        digest.update(path.read_bytes())
    return {
        **hf_example.versions(),
        "trainer_factory": factory_name(factory),
        "hf_trainer_pack_sha256": digest.hexdigest(),
    }


MODEL = "LlamaForCausalLM (2 layers, hidden 32, 4 heads / 2 kv heads, vocab 96), eager attention"


def _inputs(ctx: GateContext) -> list:
    """The scenario code, where it lies inside the measured project (the HF example)."""
    return [p for p in PACK_FILES if p.parent == ctx.root.resolve()]


def token_mean_under_accumulation(
    ctx: GateContext, factory: TrainerFactory | None = None
) -> Measurement:
    splits = [(12, 1), (6, 2), (4, 3), (3, 4), (2, 6), (1, 12)]
    results = [
        hf_example.accumulation(mb, ga, sequences=12, seed=s, factory=factory)
        for s in (0, 1)
        for mb, ga in splits
    ]
    worst_grad = max(r.max_grad_relative_error for r in results)
    worst_loss = max(r.loss_relative_error for r in results)
    return Measurement(
        values={
            "max_loss_grad_relative_error": (max(worst_grad, worst_loss), "ratio"),
            "max_grad_relative_error": (worst_grad, "ratio"),
            "max_logged_loss_relative_error": (worst_loss, "ratio"),
            "splits_with_unequal_micro_batches": (
                sum(len(set(r.micro_batch_targets)) == r.grad_accum > 1 for r in results),
                "splits",
            ),
        },
        workload=(
            f"{MODEL} in float64; one optimizer step of {_trainer(factory)} over a global batch "
            "of 12 sequences (16 positions, 1 to 15 non-padding targets each, labels -100 at "
            "padding), split into micro-batch x gradient_accumulation_steps 12x1, 6x2, 4x3, "
            "3x4, 2x6, 1x12 (sequential sampler, max_grad_norm 0), data and init seeds 0 and 1; "
            "the accumulated .grad of every parameter and the logged loss against one float64 "
            "token-mean cross-entropy backward over the whole batch, written from the logits"
        ),
        inputs=_inputs(ctx),
        parameters={
            **_versions(factory),
            "splits": [list(s) for s in splits],
            "seeds": [0, 1],
            # Trainer 4.x rounds its logged loss to 4 decimals: within that, no error.
            "logged_loss_decimals": hf_example.logged_loss_decimals(),
        },
        notes="; ".join(
            f"{r.grad_accum} x {r.micro_batch} sequences, targets {r.micro_batch_targets}: grad "
            f"{r.max_grad_relative_error:.2e}, loss {r.loss_relative_error:.2e}"
            for r in results[: len(splits)]
        )
        + ". Trainer's causal-LM loss upcasts logits with .float(), so a float64 model's loss "
        "and gradient are float32-accurate (~1e-7), not float64-accurate.",
    )


def scheduled_lr_applied(ctx: GateContext, factory: TrainerFactory | None = None) -> Measurement:
    peak, warmup, steps = 1e-2, 5, 40
    recorder, expected = hf_example.lr_trace(steps, warmup, peak, factory=factory)
    bad = hf_example.lr_mismatches(recorder, expected)
    bad_steps = {int(b.split()[1].rstrip(":")) for b in bad if b.startswith("step ")}
    first = [groups[0] for groups in recorder.lrs]
    peak_step = next((s for s, lr in enumerate(first, 1) if lr == peak), None)
    return Measurement(
        values={
            "lr_mismatched_steps": (len(bad_steps) + (len(recorder.lrs) != steps) * steps, "steps"),
            "optimizer_steps_observed": (len(recorder.lrs), "steps"),
            "param_groups": (len(recorder.lrs[0]) if recorder.lrs else 0, "groups"),
            "lr_at_step_1": (recorder.lrs[0][0], "lr"),
            "lr_at_last_step": (recorder.lrs[-1][0], "lr"),
        },
        workload=(
            f"{MODEL}; {_trainer(factory)} for {steps} optimizer steps (12 sequences, "
            "micro-batch 2, gradient_accumulation_steps 2), lr_scheduler_type cosine, peak "
            f"{peak}, warmup_steps {warmup}, weight_decay 0.1 (two parameter groups); every "
            "group's lr read from optimizer.param_groups just before optimizer.step() (a step "
            "pre-hook on the torch optimizer) and compared "
            "(relative 1e-12) with get_cosine_schedule_with_warmup's documented formula; the "
            "logged learning_rate compared with the lr applied"
        ),
        inputs=_inputs(ctx),
        parameters={**_versions(factory), "steps": steps, "warmup_steps": warmup, "peak": peak},
        notes=(
            "; ".join(bad[:5]) or f"all {steps} steps x {len(recorder.lrs[0])} groups on schedule"
        )
        + f". Applied lr at step 1: {first[0]!r}; first step at the peak: {peak_step}; "
        f"at the last step: {first[-1]!r}",
    )


def grad_norm_before_clipping(
    ctx: GateContext, factory: TrainerFactory | None = None
) -> Measurement:
    clip, steps = 0.5, 30
    trace = hf_example.grad_norm_trace(steps=steps, clip=clip, factory=factory)
    errors = [abs(s.logged - s.pre_clip) / s.pre_clip for s in trace]
    return Measurement(
        values={
            "max_grad_norm_relative_error": (max(errors), "ratio"),
            "steps_clipped": (sum(s.pre_clip > clip for s in trace), "steps"),
            "max_post_clip_norm": (max(s.post_clip for s in trace), "norm"),
            "max_clip_relative_error": (max(s.clip_relative_error for s in trace), "ratio"),
            "min_pre_clip_norm": (min(s.pre_clip for s in trace), "norm"),
            "max_pre_clip_norm": (max(s.pre_clip for s in trace), "norm"),
        },
        workload=(
            f"{MODEL}; {_trainer(factory)} for {steps} optimizer steps (12 sequences, "
            f"micro-batch 2, gradient_accumulation_steps 2), max_grad_norm {clip}; the logged "
            "grad_norm against the float64 global L2 norm of the accumulated gradients as the "
            "last post-accumulate-grad hook saw them (before clipping), and the gradients at "
            "optimizer.step() against pre-clip * min(1, clip / (norm + 1e-6))"
        ),
        inputs=_inputs(ctx),
        parameters={**_versions(factory), "steps": steps, "max_grad_norm": clip},
        notes=f"pre-clip norms {min(s.pre_clip for s in trace):.3f} .. "
        f"{max(s.pre_clip for s in trace):.3f}; clipping engaged at "
        f"{sum(s.pre_clip > clip for s in trace)} of {len(trace)} steps",
    )


def bitwise_resume(ctx: GateContext, factory: TrainerFactory | None = None) -> Measurement:
    total, stops = 9, [1, 2, 3, 4, 5, 6, 7, 8]
    results = hf_example.resume_compare(total_steps=total, stop_points=stops, factory=factory)
    files = results[0].checkpoint_files
    pickled = [f for f in files if f.endswith((".pt", ".pth", ".bin"))]
    return Measurement(
        values={
            "differing_values_after_resume": (
                sum(r.differing_parameter_values + r.differing_log_values for r in results),
                "values",
            ),
            "resumes": (len(results), "runs"),
            "resumes_that_raised": (sum(r.resume_error is not None for r in results), "runs"),
            "parameter_values_compared_per_resume": (results[0].parameter_values, "values"),
            "log_values_compared_per_resume": (results[0].log_values, "values"),
            "checkpoint_files_written_by_torch_save": (len(pickled), "files"),
        },
        workload=(
            f"{MODEL} with attention_dropout 0.1; {_trainer(factory)} for {total} optimizer "
            "steps (12 sequences shuffled by the random sampler, micro-batch 2, "
            "gradient_accumulation_steps 2: 3 steps per epoch) straight through, and for each K "
            f"in {stops} interrupted after step K (save_steps K) and finished by a fresh Trainer "
            "on a differently initialised model with resume_from_checkpoint=checkpoint-K, in "
            "the same process; final parameters and every logged loss, grad_norm and "
            "learning_rate compared bitwise"
        ),
        inputs=_inputs(ctx),
        parameters={
            **_versions(factory),
            "total_steps": total,
            "stop_points": stops,
            "checkpoint_files": files,
            "checkpoint_files_written_by_torch_save": pickled,
        },
        notes=(
            "; ".join(
                f"K={r.stop_at}: {r.differing_parameter_values} parameter and "
                f"{r.differing_log_values} log values differ"
                + (f" (the resume raised {r.resume_error})" if r.resume_error else "")
                for r in results
            )
            + f". Checkpoints hold {', '.join(pickled)} written by torch.save (pickle) beside "
            "model.safetensors and JSON: Trainer's own format, which INV-TRAIN-LOOP-016 of "
            "C-TRAINING-LOOP would refuse."
        ),
    )


#: (name, micro-batch, gradient_accumulation_steps, sequences, label smoothing): windows that
#: users' Trainers get wrong. 10 at 2 x 3: a last window of 2 micro-batches; 7 at 1 x 3: of
#: 1; 11 at 2 x 2: a last micro-batch of one sequence; smoothing 0.1 over full and short
#: windows (a compute_loss that drops label_smoothing_factor, or smooths per micro-batch).
WINDOWS = (
    ("last window 2 of 3 micro-batches", 2, 3, 10, 0.0),
    ("last window 1 of 3 micro-batches", 1, 3, 7, 0.0),
    ("last micro-batch 1 of 2 sequences", 2, 2, 11, 0.0),
    ("label smoothing 0.1, full windows", 2, 3, 12, 0.1),
    ("label smoothing 0.1, last window short", 2, 3, 10, 0.1),
)


def token_mean_over_short_windows(
    ctx: GateContext, factory: TrainerFactory | None = None
) -> Measurement:
    """Every optimizer step of an epoch whose last accumulation window (or micro-batch) is
    shorter than the others, and under label smoothing, against the token mean of that
    step's own window (hf_example.accumulation_steps)."""
    return _token_mean_over_windows(ctx, factory, WINDOWS, padding_free=False)


#: Padding-free batches (transformers.DataCollatorWithFlattening: a micro-batch is one row of
#: its sequences end to end, position_ids restarting at each): full windows, a short last
#: window, a last micro-batch of one sequence, and label smoothing over a short window.
PADDING_FREE_WINDOWS = (
    ("padding-free, full windows", 2, 3, 12, 0.0),
    ("padding-free, last window 2 of 3 micro-batches", 2, 3, 10, 0.0),
    ("padding-free, last micro-batch 1 of 2 sequences", 2, 2, 11, 0.0),
    ("padding-free, label smoothing 0.1, last window short", 2, 3, 10, 0.1),
)


def token_mean_over_padding_free_windows(
    ctx: GateContext, factory: TrainerFactory | None = None
) -> Measurement:
    """Every optimizer step over padding-free micro-batches against the token mean of the
    same window's sequences padded: a row's sequences must train as they would apart
    (hf_example.accumulation_steps with ``padding_free``)."""
    return _token_mean_over_windows(ctx, factory, PADDING_FREE_WINDOWS, padding_free=True)


def _token_mean_over_windows(
    ctx: GateContext,
    factory: TrainerFactory | None,
    windows: tuple[tuple[str, int, int, int, float], ...],
    *,
    padding_free: bool,
) -> Measurement:
    runs = [
        (
            name,
            hf_example.accumulation_steps(
                mb, ga, n, seed=s, label_smoothing=eps, padding_free=padding_free, factory=factory
            ),
        )
        for name, mb, ga, n, eps in windows
        for s in (0, 1)
    ]
    steps = [(name, r) for name, results in runs for r in results]
    worst_grad = max(r.max_grad_relative_error for _, r in steps)
    worst_loss = max(r.loss_relative_error for _, r in steps)
    last = [results[-1] for _, results in runs]
    batches = (
        "each micro-batch flattened into one row by transformers.DataCollatorWithFlattening "
        "(position_ids restarting at every sequence, label -100 at each sequence's first token; "
        "the scenario's collator replaces the Trainer's)"
        if padding_free
        else "right-padded micro-batches"
    )
    return Measurement(
        values={
            "max_loss_grad_relative_error": (max(worst_grad, worst_loss), "ratio"),
            "max_grad_relative_error": (worst_grad, "ratio"),
            "max_logged_loss_relative_error": (worst_loss, "ratio"),
            "max_last_window_grad_relative_error": (
                max(r.max_grad_relative_error for r in last),
                "ratio",
            ),
            "optimizer_steps_compared": (len(steps), "steps"),
        },
        workload=(
            f"{MODEL} in float64; one epoch of {_trainer(factory)} at learning rate 0 (every "
            f"step's gradient at the initial weights), sequences in order, {batches}, "
            "max_grad_norm 0: "
            + "; ".join(f"{name}: {n} sequences at {mb} x {ga}" for name, mb, ga, n, _ in windows)
            + "; data and init seeds 0 and 1; each step's accumulated .grad of every parameter "
            "and its logged loss against one float64 token-mean cross-entropy backward (torch's "
            "label_smoothing when smoothed) over that step's window alone, its sequences "
            "right-padded, written from the logits"
        ),
        inputs=_inputs(ctx),
        parameters={
            **_versions(factory),
            "windows": [list(w) for w in windows],
            "padding_free": padding_free,
            "seeds": [0, 1],
            "logged_loss_decimals": hf_example.logged_loss_decimals(),
        },
        notes="seed 0: "
        + "; ".join(
            f"{name}, step {r.step} ({len(r.micro_batch_targets)} micro-batches, targets "
            f"{r.micro_batch_targets}): grad {r.max_grad_relative_error:.2e}, loss "
            f"{r.loss_relative_error:.2e}"
            for name, results in runs[::2]
            for r in results
        ),
    )
