"""The example's own code: a tiny Llama, toy data, `transformers.Trainer` set up on CPU, and
the four scenarios that contract C-HF-TRAINER-LOOP (contracts/hf-trainer-loop-v1.yaml)
holds Trainer to: accumulation, learning rate, gradient norm and resume.

Nothing here imports the reference trainer (`trainer/`); everything is built in code, on CPU,
with no download. The probes (a callback and gradient hooks) only *observe* what Trainer
does: they read ``optimizer.param_groups``, ``.grad`` and Trainer's log dicts, and never
change a value. The tests (tests/test_*.py) assert on these scenarios; the gate measurements
(tests/measurements/) run larger versions of them and report numbers.

Run the example's suite from this directory: ``pytest`` (see README.md).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import math
import os
import re
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the Hub: everything is local

import accelerate
import torch
import transformers
from torch.utils.data import Dataset, SequentialSampler
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PrinterCallback,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error()  # Trainer's info lines and advice are not results
hf_logging.disable_progress_bar()  # "Writing model shards" on every checkpoint
# The model is tiny: with two or more intra-op threads on a busy 2-core machine, thread
# hand-offs cost ~10x the arithmetic. One thread is faster and the same in every process.
torch.set_num_threads(1)

#: labels at padding positions: Hugging Face's ignore index
IGNORE = -100
PAD_ID = 0


def versions() -> dict[str, str]:
    """What was measured: package versions and the hash of the Trainer source that ran."""
    source = inspect.getsource(inspect.getmodule(Trainer)).encode()
    return {
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "torch": torch.__version__,
        "transformers_trainer_py_sha256": hashlib.sha256(source).hexdigest(),
    }


# ---- what the installed release can do (read from its code, never from its version) --------

#: TrainingArguments' fields in the installed release.
ARGUMENT_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainingArguments))


def logged_loss_decimals() -> int | None:
    """The decimals Trainer rounds its logged loss to (4.x: ``round(..., 4)``), read from the
    source of the method that writes ``logs["loss"]``; None when it logs the value as is."""
    source = inspect.getsource(Trainer._maybe_log_save_evaluate)
    rounded = re.search(r"""logs\["loss"\]\s*=\s*round\(.*,\s*(\d+)\)""", source)
    return int(rounded.group(1)) if rounded else None


def logged_error(logged: float, exact: float) -> float:
    """Relative error of a logged loss against the exact value, at the precision the
    installed Trainer logs: rounding to d decimals is not an error, anything beyond it is."""
    decimals = logged_loss_decimals()
    slack = 0.5 * 10.0**-decimals if decimals is not None else 0.0
    return max(0.0, abs(logged - exact) - slack) / abs(exact)


# ---- model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TinyLlama:
    vocab_size: int = 96  # tokens
    hidden_size: int = 32
    intermediate_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # grouped-query attention, as in Llama 2/3
    max_position_embeddings: int = 64  # tokens; longer than any toy sequence
    #: probability; > 0 makes every training forward consume torch's CPU RNG, so a resume
    #: that does not restore the RNG state trains on other dropout masks
    attention_dropout: float = 0.0

    def config(self) -> LlamaConfig:
        config = LlamaConfig(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            max_position_embeddings=self.max_position_embeddings,
            attention_dropout=self.attention_dropout,
            pad_token_id=PAD_ID,
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=False,
        )
        config._attn_implementation = "eager"  # the plain attention: no fused-kernel choice
        return config

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def build_model(spec: TinyLlama, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A freshly initialised LlamaForCausalLM; the same seed and spec give the same weights."""
    torch.manual_seed(seed)
    return LlamaForCausalLM(spec.config()).to(dtype)


# ---- data -----------------------------------------------------------------------------------


class ToySequences(Dataset):
    """``n`` right-padded sequences of ``seq_len`` tokens whose real lengths cycle through
    2 .. seq_len (0 to ~90 % padding), so micro-batches hold unequal numbers of targets.
    Labels are the inputs with -100 at padding; the model shifts them itself."""

    def __init__(self, n: int, seq_len: int, vocab_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for i in range(n):
            real = 2 + (i * 7) % (seq_len - 1)
            ids = torch.full((seq_len,), PAD_ID, dtype=torch.long)
            ids[:real] = torch.randint(3, vocab_size, (real,), generator=g)
            mask = torch.zeros(seq_len, dtype=torch.long)
            mask[:real] = 1
            labels = ids.clone()
            labels[real:] = IGNORE
            self.items.append({"input_ids": ids, "attention_mask": mask, "labels": labels})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.items[i].items()}

    def batch(self, start: int, stop: int) -> dict[str, torch.Tensor]:
        return {
            k: torch.stack([self.items[i][k] for i in range(start, stop)]) for k in self.items[0]
        }


class UnpaddedSequences(Dataset):
    """The same sequences without their padding, as token lists (``input_ids`` and
    ``labels``): what a padding-free collator (transformers.DataCollatorWithFlattening)
    concatenates into one row per micro-batch."""

    def __init__(self, padded: ToySequences):
        self.items = []
        for item in padded.items:
            real = int(item["attention_mask"].sum())
            ids = item["input_ids"][:real].tolist()
            self.items.append({"input_ids": ids, "labels": list(ids)})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return {k: list(v) for k, v in self.items[i].items()}


def padding_free_collator():
    """transformers.DataCollatorWithFlattening (4.44 and later): each micro-batch becomes one
    row, ``position_ids`` restarting at every sequence and label -100 at each sequence's
    first token. Looked up by name, never by version; ValueError naming what is missing."""
    collator = getattr(transformers, "DataCollatorWithFlattening", None)
    if collator is None:
        raise ValueError(
            f"transformers {transformers.__version__} has no DataCollatorWithFlattening "
            "(transformers 4.44 and later): padding-free batches cannot be measured"
        )
    return collator()


def targets(batch: dict[str, torch.Tensor]) -> int:
    """Non-padding next-token targets of a batch: labels[:, 1:] != -100 (the model shifts)."""
    return int((batch["labels"][:, 1:] != IGNORE).sum())


# ---- Trainer --------------------------------------------------------------------------------


def training_args(out: Path, **overrides) -> TrainingArguments:
    """CPU, no reporting, one log record per optimizer step; overrides replace any field."""
    base = dict(
        output_dir=str(out),
        use_cpu=True,
        report_to=[],
        disable_tqdm=True,
        logging_steps=1,  # optimizer steps: each log record is one step's loss and grad_norm
        save_strategy="no",
        per_device_train_batch_size=2,  # sequences per micro-batch
        gradient_accumulation_steps=2,  # micro-batches per optimizer step
        learning_rate=1e-2,  # peak; high so that a few steps move the tiny model visibly
        lr_scheduler_type="cosine",
        warmup_steps=3,  # optimizer steps
        weight_decay=0.1,  # makes Trainer's two parameter groups differ (decay / no decay)
        max_grad_norm=1.0,
        max_steps=6,
        seed=1234,
        data_seed=1234,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
    )
    base.update(overrides)
    return TrainingArguments(**base)


class Recorder(TrainerCallback):
    """Observes every optimizer step without touching it.

    * ``lrs[s - 1]``: every param group's lr just before optimizer step s;
    * ``logs``: Trainer's own per-step log dicts (loss, grad_norm, learning_rate, step);
    * with ``watch_grads``: the accumulated gradients before clipping (the last value each
      parameter's post-accumulate-grad hook saw) and after (``.grad`` just before
      ``optimizer.step()``, which Trainer calls after clipping).

    "Just before the step" is a step pre-hook on the torch optimizer Trainer steps (torch's
    ``Optimizer.register_step_pre_hook``): every release reaches it, where TrainerCallback's
    ``on_pre_optimizer_step`` (the same moment) is missing from 4.41 and older.
    """

    def __init__(self, watch_grads: bool = False):
        self.watch_grads = watch_grads
        self.lrs: list[list[float]] = []
        self.logs: list[dict] = []
        self.pre_clip: list[dict[str, torch.Tensor]] = []
        self.post_clip: list[dict[str, torch.Tensor]] = []
        self._latest: dict[str, torch.Tensor] = {}
        self._hooked = False
        self._step_hook = None

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.watch_grads and not self._hooked:
            for name, p in model.named_parameters():
                p.register_post_accumulate_grad_hook(self._keeper(name))
            self._hooked = True
        torch_optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
        self._step_hook = torch_optimizer.register_step_pre_hook(
            lambda stepped, _args, _kwargs: self._before_step(stepped, model)
        )

    def on_train_end(self, args, state, control, **kwargs):
        if self._step_hook is not None:
            self._step_hook.remove()
            self._step_hook = None

    def _keeper(self, name: str):
        def keep(p: torch.Tensor) -> None:
            self._latest[name] = p.grad.detach().clone()

        return keep

    def _before_step(self, optimizer, model) -> None:
        self.lrs.append([float(g["lr"]) for g in optimizer.param_groups])
        if self.watch_grads:
            self.pre_clip.append(dict(self._latest))
            self.post_clip.append(
                {
                    n: p.grad.detach().clone()
                    for n, p in model.named_parameters()
                    if p.grad is not None
                }
            )
            self._latest = {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        # A step's record: its loss (grad_norm too when clipping is on; 4.x logs none
        # without clipping). The end-of-training summary logs train_loss, not loss.
        if logs and "loss" in logs:
            self.logs.append({**logs, "step": state.global_step})


class StopAt(TrainerCallback):
    """Interrupts a run after optimizer step ``step`` (its checkpoint is written first)."""

    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


class InOrderTrainer(Trainer):
    """Trainer taking the training sequences in order: what ``train_sampling_strategy=
    "sequential"`` asks of a release that has that field, for a release that has not
    (before 5.x). Only the sampler is chosen; every step is Trainer's own."""

    def _get_train_sampler(self, *args, **kwargs):
        dataset = args[0] if args else kwargs.get("train_dataset")
        return SequentialSampler(dataset if dataset is not None else self.train_dataset)


def in_order(args: dict) -> tuple[dict, type[Trainer]]:
    """(arguments, Trainer class) that take the sequences in order on the installed release."""
    if "train_sampling_strategy" in ARGUMENT_FIELDS:
        return {**args, "train_sampling_strategy": "sequential"}, Trainer
    return args, InOrderTrainer


#: Builds the Trainer a scenario runs from (model, args, train_dataset, callbacks): a
#: project's own Trainer subclass, collator and optimizer around the model and data the
#: scenario provides (hf_trainer_pack: the Trainer pack).
TrainerFactory = Callable[[torch.nn.Module, TrainingArguments, Dataset, list], Trainer]


def make_trainer(
    model,
    args: TrainingArguments,
    data: Dataset,
    *callbacks,
    trainer_class=Trainer,
    factory: TrainerFactory | None = None,
    collator=None,
) -> Trainer:
    """``trainer_class`` around the scenario's model, or what ``factory`` builds around it.
    A factory's Trainer takes the sequences in order like InOrderTrainer when
    ``trainer_class`` asks for it (a release without ``train_sampling_strategy``): only
    that instance's sampler is replaced, its class and every step stay the project's.
    ``collator``: the scenario's batches (padding-free rows) instead of the Trainer's own
    collator's; its loss, optimizer and steps stay the Trainer's."""
    if factory is None:
        trainer = trainer_class(
            model=model, args=args, train_dataset=data, callbacks=list(callbacks)
        )
    else:
        trainer = factory(model, args, data, list(callbacks))
        if not isinstance(trainer, Trainer):
            raise TypeError(f"the Trainer factory {factory!r} returned {type(trainer)!r}")
        if trainer.model is not model:
            raise ValueError(
                f"the Trainer factory {factory!r} trains another model: it must train "
                "the model it is given (the scenario compares that model's gradients)"
            )
        if trainer_class is InOrderTrainer:
            trainer._get_train_sampler = types.MethodType(
                InOrderTrainer._get_train_sampler, trainer
            )
    if collator is not None:
        trainer.data_collator = collator
    trainer.remove_callback(PrinterCallback)  # with tqdm off it prints every log dict
    return trainer


# ---- independent references -----------------------------------------------------------------


def cosine_with_warmup(step: int, peak: float, warmup: int, total: int) -> float:
    """lr of optimizer step ``step`` (1-based) under Trainer's documented "cosine" schedule
    (transformers.get_cosine_schedule_with_warmup, num_cycles 0.5): before step s the
    scheduler has been stepped s - 1 times, so step 1 runs at lr 0 when warmup > 0."""
    t = step - 1
    if t < warmup:
        return peak * t / max(1, warmup)
    progress = (t - warmup) / max(1, total - warmup)
    return peak * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def token_mean_gradients(model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0):
    """Loss and per-parameter gradients of the token-mean cross-entropy over the non-padding
    targets of ``batch``, computed here from the logits (not by the model's loss code); with
    ``label_smoothing`` ε, torch's smoothed cross-entropy, the rule Trainer's
    ``label_smoothing_factor`` documents: (1 - ε) NLL + ε mean over the vocabulary of -log p."""
    model.zero_grad(set_to_none=True)
    model.train(False)  # no dropout: the reference of a dropout-free model
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    shift_logits = logits[:, :-1].reshape(-1, logits.shape[-1])
    shift_labels = batch["labels"][:, 1:].reshape(-1)
    keep = shift_labels != IGNORE
    ce = torch.nn.functional.cross_entropy(
        shift_logits[keep], shift_labels[keep], reduction="sum", label_smoothing=label_smoothing
    )
    loss = ce / keep.sum()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), grads


def global_norm(grads: dict[str, torch.Tensor]) -> float:
    """L2 norm over all gradients, in float64."""
    return math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads.values()))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


# ---- scenarios ------------------------------------------------------------------------------
# Each runs Trainer for real and returns what was observed next to its independent reference.


@dataclass
class AccumulationResult:
    micro_batch: int  # sequences
    grad_accum: int  # micro-batches per optimizer step (the configured number)
    micro_batch_targets: list[int]  # non-padding targets of each micro-batch of this step
    loss_relative_error: float  # Trainer's logged loss vs the reference, at its logged precision
    max_grad_relative_error: float  # worst parameter tensor, relative L2
    grad_tensors: int
    step: int = 1  # the optimizer step (1-based)


def accumulation(
    micro_batch: int,
    grad_accum: int,
    sequences: int,
    seed: int = 0,
    factory: TrainerFactory | None = None,
) -> AccumulationResult:
    """One optimizer step of Trainer over a global batch of ``sequences`` sequences split into
    ``grad_accum`` micro-batches (taken in order: in_order), in float64, no clipping; its
    accumulated gradient against one token-mean backward over the whole batch."""
    assert micro_batch * grad_accum == sequences
    return accumulation_steps(micro_batch, grad_accum, sequences, seed=seed, factory=factory)[0]


def accumulation_steps(
    micro_batch: int,
    grad_accum: int,
    sequences: int,
    *,
    seed: int = 0,
    label_smoothing: float = 0.0,
    padding_free: bool = False,
    factory: TrainerFactory | None = None,
) -> list[AccumulationResult]:
    """One epoch of Trainer over ``sequences`` sequences taken in order, in float64, no
    clipping: micro-batches of ``micro_batch`` sequences, an optimizer step every
    ``grad_accum`` of them, and a last, shorter window when they do not divide (7 sequences
    at 1 x 3: windows of 3, 3 and 1 micro-batches). The learning rate is 0, so every step's
    gradient is taken at the initial weights: each step's accumulated gradient and logged
    loss against one token-mean (label-smoothed when asked) backward over that window's
    sequences alone.

    ``padding_free``: the sequences without their padding, each micro-batch flattened into
    one row by padding_free_collator, against the same reference: the sequences of a row
    must train as they do padded, each attending to itself alone at its own positions (a
    model call with ``position_ids``, no attention mask and no cache masks the row per
    sequence; a loss that drops ``position_ids`` or passes a mask of ones does not)."""
    spec = TinyLlama()
    padded = ToySequences(sequences, 16, spec.vocab_size, seed=seed)
    model = build_model(spec, seed=seed, dtype=torch.float64)
    reference = build_model(spec, seed=seed, dtype=torch.float64)
    window = micro_batch * grad_accum
    starts = range(0, sequences, window)
    data, collator = padded, None
    if padding_free:
        data, collator = UnpaddedSequences(padded), padding_free_collator()

    def micro_batches(start: int) -> list[dict[str, torch.Tensor]]:
        """The micro-batches of the window at ``start``, as Trainer's collator makes them."""
        stop = min(start + window, sequences)
        if collator is None:
            return [
                padded.batch(k, min(k + micro_batch, stop)) for k in range(start, stop, micro_batch)
            ]
        return [
            collator([data[i] for i in range(k, min(k + micro_batch, stop))])
            for k in range(start, stop, micro_batch)
        ]

    windows = [micro_batches(s) for s in starts]
    # Padded or not, the reference is the window's sequences padded, in one forward: a
    # padding-free row must train as its sequences would apart.
    references = [
        token_mean_gradients(
            reference, padded.batch(s, min(s + window, sequences)), label_smoothing
        )
        for s in starts
    ]
    recorder = Recorder(watch_grads=True)
    with tempfile.TemporaryDirectory() as out:
        overrides, trainer_class = in_order(
            dict(
                per_device_train_batch_size=micro_batch,
                gradient_accumulation_steps=grad_accum,
                max_steps=len(starts),
                learning_rate=0.0,  # weights stay put: later windows' references hold
                warmup_steps=0,
                max_grad_norm=0.0,  # no clipping: the gradient is the loss's own
                label_smoothing_factor=label_smoothing,
            )
        )
        args = training_args(Path(out), **overrides)
        trainer = make_trainer(
            model,
            args,
            data,
            recorder,
            trainer_class=trainer_class,
            factory=factory,
            collator=collator,
        )
        trainer.train()
    results = []
    for step, (w, (ref_loss, ref_grads)) in enumerate(zip(windows, references, strict=True), 1):
        taken = step <= len(recorder.post_clip)  # a window Trainer never stepped on: inf
        grads = recorder.post_clip[step - 1] if taken else {}
        results.append(
            AccumulationResult(
                micro_batch=micro_batch,
                grad_accum=grad_accum,
                micro_batch_targets=[targets(b) for b in w],
                loss_relative_error=(
                    logged_error(recorder.logs[step - 1]["loss"], ref_loss) if taken else math.inf
                ),
                max_grad_relative_error=max(
                    relative_error(grads[n], ref_grads[n]) if n in grads else math.inf
                    for n in ref_grads
                ),
                grad_tensors=len(grads),
                step=step,
            )
        )
    return results


def lr_trace(steps: int, warmup: int, peak: float = 1e-2, factory: TrainerFactory | None = None):
    """Runs ``steps`` optimizer steps; returns the Recorder (lrs per group, logs) and the
    expected lr of each step."""
    spec = TinyLlama()
    data = ToySequences(12, 16, spec.vocab_size)
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as out:
        args = training_args(Path(out), max_steps=steps, warmup_steps=warmup, learning_rate=peak)
        make_trainer(build_model(spec), args, data, recorder, factory=factory).train()
    expected = [cosine_with_warmup(s, peak, warmup, steps) for s in range(1, steps + 1)]
    return recorder, expected


def lr_mismatches(recorder: Recorder, expected: list[float], rtol: float = 1e-12) -> list[str]:
    """Every (step, group) whose applied lr misses the schedule, and every step whose logged
    learning_rate is not the lr applied; empty when all agree."""
    bad = []
    if len(recorder.lrs) != len(expected):
        bad.append(f"{len(recorder.lrs)} optimizer steps observed, {len(expected)} expected")
    for s, (groups, want) in enumerate(zip(recorder.lrs, expected, strict=False), 1):
        for g, lr in enumerate(groups):
            if abs(lr - want) > rtol * abs(want):
                bad.append(f"step {s} group {g}: lr {lr!r}, schedule {want!r}")
    for log, groups in zip(recorder.logs, recorder.lrs, strict=False):
        if log["learning_rate"] != groups[0]:
            bad.append(
                f"step {log['step']}: logged {log['learning_rate']!r}, applied {groups[0]!r}"
            )
    return bad


@dataclass
class NormStep:
    step: int
    logged: float  # Trainer's grad_norm
    pre_clip: float  # float64 norm of the accumulated gradients before clipping
    post_clip: float  # float64 norm of the gradients the optimizer steps on
    clip_relative_error: float  # post-clip grads vs pre-clip * min(1, clip / (norm + 1e-6))


def grad_norm_trace(
    steps: int, clip: float, factory: TrainerFactory | None = None
) -> list[NormStep]:
    spec = TinyLlama()
    data = ToySequences(12, 16, spec.vocab_size)
    recorder = Recorder(watch_grads=True)
    with tempfile.TemporaryDirectory() as out:
        args = training_args(Path(out), max_steps=steps, max_grad_norm=clip)
        make_trainer(build_model(spec), args, data, recorder, factory=factory).train()
    trace = []
    for s, log in enumerate(recorder.logs, 1):
        pre, post = recorder.pre_clip[s - 1], recorder.post_clip[s - 1]
        norm = global_norm(pre)
        # torch.nn.utils.clip_grad_norm_'s rule, the one INV-TRAIN-LOOP-008 states
        coef = min(1.0, clip / (norm + 1e-6))
        worst = max(relative_error(post[n], pre[n] * coef) for n in pre) if pre else math.inf
        trace.append(NormStep(s, float(log["grad_norm"]), norm, global_norm(post), worst))
    return trace


@dataclass
class ResumeResult:
    total_steps: int
    stop_at: int
    differing_parameter_values: int  # elements of the final weights that differ
    differing_log_values: int  # per-step loss / grad_norm / learning_rate values that differ
    parameter_values: int
    log_values: int
    checkpoint_files: list[str]
    #: The exception the resume raised (its type and first line), None when it ran: a resume
    #: that raises restores nothing, and what it left is compared all the same.
    resume_error: str | None = None


def resume_compare(
    total_steps: int, stop_points: list[int], factory: TrainerFactory | None = None
) -> list[ResumeResult]:
    """One uninterrupted run of ``total_steps``; then for each K in ``stop_points`` a run
    interrupted after step K (checkpoint-K written by save_steps=K) and a fresh Trainer on a
    differently initialised model resumed with ``resume_from_checkpoint``. Dropout is on and
    the sampler shuffles, so the RNG and data position matter."""
    spec = TinyLlama(attention_dropout=0.1)
    data = ToySequences(12, 16, spec.vocab_size)  # 3 optimizer steps per epoch
    fields = ("loss", "grad_norm", "learning_rate")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        straight = Recorder()
        model = build_model(spec)
        args = training_args(Path(tmp) / "straight", max_steps=total_steps)
        make_trainer(model, args, data, straight, factory=factory).train()
        want = {n: p.detach().clone() for n, p in model.named_parameters()}
        want_logs = [(r["step"], *(r[f] for f in fields)) for r in straight.logs]
        for k in stop_points:
            out = Path(tmp) / f"stop-{k}"
            args = training_args(out, max_steps=total_steps, save_strategy="steps", save_steps=k)
            first = Recorder()
            make_trainer(build_model(spec), args, data, first, StopAt(k), factory=factory).train()
            checkpoint = out / f"checkpoint-{k}"
            files = sorted(p.name for p in checkpoint.iterdir())
            second = Recorder()
            resumed = build_model(spec, seed=99)  # weights must come from the checkpoint
            error = None
            try:
                make_trainer(resumed, args, data, second, factory=factory).train(
                    resume_from_checkpoint=str(checkpoint)
                )
            except Exception as exc:  # any failure of the resume is the result, named
                error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
            got = dict(resumed.named_parameters())
            got_logs = [(r["step"], *(r[f] for f in fields)) for r in first.logs + second.logs]
            log_diff = sum(
                a != b
                for x, y in zip(want_logs, got_logs, strict=False)
                for a, b in zip(x, y, strict=True)
            ) + len(fields) * abs(len(want_logs) - len(got_logs))
            results.append(
                ResumeResult(
                    total_steps=total_steps,
                    stop_at=k,
                    differing_parameter_values=sum(
                        int((want[n] != got[n].detach()).sum()) for n in want
                    ),
                    differing_log_values=log_diff,
                    parameter_values=sum(p.numel() for p in want.values()),
                    log_values=len(fields) * len(want_logs),
                    checkpoint_files=files,
                    resume_error=error,
                )
            )
    return results
