"""The run-config model: one frozen dataclass per section of a run config's YAML file
(DataConfig, OptimizerConfig, TrainingConfig, MonitoringConfig) and RunConfig, which holds
them with the model; each field's unit, meaning and default is written here. Also how a
section is built from its keys (section_of) and the values derived from them
(derived_values), which a loaded file (trainer/config/load.py) and a config built in code
(trainer/config/in_code.py) share.

schema.json validates the file and repeats the defaults for editors and readers;
tests/unit/trainer/test_config_model.py proves the two agree on every key, type, default
and enum. No torch import (``trainer validate`` must start fast).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from trainer.config.alerts import AlertRule, parse_rule
from trainer.config.algebra import AlgebraInputs, default_min_lr
from trainer.model.config import LlamaConfig

# One frozen dataclass per section of the YAML file. A field without a default is a key
# the file must give; kw_only lets a required key follow defaulted ones in file order.
# A Literal annotation is the key's full set of values (the schema's enum).
OptimizerName = Literal["adamw"]
Scheduler = Literal["cosine"]
Precision = Literal["fp32", "bf16", "fp16"]
DataParallel = Literal["ddp", "fsdp"]


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """``data:`` — what the run reads. Every key is required."""

    # None for shards and tokenizer only in a config built in code (IN_CODE_ONLY).
    shards: Path | None  # directory from `trainer data encode` (manifest.json: both splits)
    tokenizer: Path | None  # tokenizer directory, or its tokenizer.json
    micro_batch: int  # sequences per forward/backward on one rank
    seq_len: int  # tokens per training sequence (the model's input length)

    @property
    def manifest(self) -> Path | None:
        """The shards' manifest.json (hashed into the run's identity); None: in memory."""
        return None if self.shards is None else Path(self.shards) / "manifest.json"


@dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """``optimizer:`` — AdamW and its peak learning rate; only ``lr`` is required."""

    name: OptimizerName = "adamw"  # the one optimizer this trainer runs
    lr: float  # peak learning rate, reached at the end of warmup
    # Not a static default: when min_lr is omitted, derived_values makes it 0.1 x lr (INV-CFG-006).
    min_lr: float  # learning rate at the end of the cosine decay
    min_lr_given: bool  # derived, not a YAML key: whether the file wrote min_lr
    beta1: float = 0.9  # AdamW's first-moment (gradient mean) decay per step
    beta2: float = 0.95  # AdamW's second-moment (squared gradient) decay per step
    eps: float = 1e-8  # added to the second moment's square root: a floor on the divisor
    weight_decay: float = 0.1  # decoupled decay of the "decay" group (trainer/train/optim.py)
    grad_clip: float | None = 1.0  # cap on the global L2 gradient norm; None: no clipping


@dataclass(frozen=True, kw_only=True)
class TrainingConfig:
    """``training:`` — the schedule, precision, evaluation and checkpoints of the run."""

    epochs: int  # cap on passes over the training split (C-TRAINCFG-001)
    max_steps: int  # optimizer steps of the run, and the LR schedule's length
    warmup_steps: int  # linear warmup steps; at most 10 % of max_steps (INV-CFG-004)
    gradient_accumulation: int = 1  # micro-batches per optimizer step
    lr_scheduler: Scheduler = "cosine"  # linear warmup, then cosine from lr to min_lr
    # bf16 is autocast on CUDA. Refused before anything is written (trainer/config/device.py):
    # fp16 on every device (the loop runs no grad scaler), bf16 off CUDA (a CPU trains fp32).
    mixed_precision: Precision = "fp32"
    seed: int = 42  # the one seed of model init, data order and every RNG of the run
    eval_interval: int = 1000  # steps between validation-loss evaluations
    save_interval: int = 1000  # steps between checkpoints (the last step is always saved)
    # run directory: run_manifest.json, metrics.jsonl, checkpoints/ (`trainer apply` hands
    # it to the loop as RunOptions.out_dir); None only in a config built in code.
    output_dir: Path | None
    force_token_budget: bool = False  # run under 10 tokens/parameter (INV-CFG-005), recorded
    wrap_around: bool = True  # a new epoch when the split is used up; off: exhaustion is an error
    early_stopping: bool = False  # stop after 5 evaluations without improvement
    eval_tokens: int = 131_072  # validation target tokens per evaluation (capped at the split)
    compile: bool = False  # torch.compile the model
    keep_checkpoints: int = 2  # the newest K (>= 2) plus the best by validation loss
    data_parallel: DataParallel = "ddp"  # strategy of a torchrun (multi-process) run


@dataclass(frozen=True, kw_only=True)
class MonitoringConfig:
    """``monitoring:`` — optional as a whole; every key has a default."""

    # Only the terminal progress line; metrics.jsonl records every step.
    log_interval: int = 10  # steps between progress lines
    alerts: tuple[AlertRule, ...] = ()  # checked by the loop after every step, in file order


#: Keys only a config built in code may leave None: in-memory data sources have no
#: shard directory or tokenizer on disk (nothing for the loop to check or hash), and such
#: a run writes where its RunOptions.out_dir says. schema.json requires all three.
IN_CODE_ONLY = ("data.shards", "data.tokenizer", "training.output_dir")


@dataclass(frozen=True)
class RunConfig:
    """One run's definition: the model and the four sections. ``path`` is the file it
    was loaded from (None: built in code, config_from_values)."""

    path: Path | None
    name: str | None
    model: LlamaConfig
    model_preset: str | None
    data: DataConfig
    optimizer: OptimizerConfig
    training: TrainingConfig
    monitoring: MonitoringConfig
    #: dotted field -> 1-based (line, column) of its key, for every key in the file.
    positions: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def line_of(self, field_name: str) -> int | None:
        """The YAML line of ``field_name`` ("training.epochs"), None if the file omits it."""
        pos = self.positions.get(field_name)
        return pos[0] if pos else None

    def position_of(self, field_name: str) -> tuple[int, int]:
        """(line, column) of the field, or of its nearest ancestor in the file (where a
        defaulted key would be added); (1, 1) for a field none of whose parents exist."""
        parts = field_name.split(".")
        while parts:
            pos = self.positions.get(".".join(parts))
            if pos:
                return pos
            parts.pop()
        return (1, 1)

    def algebra_inputs(
        self, *, sequences: int | None, params: int, world_size: int = 1
    ) -> AlgebraInputs:
        """The C-TRAINCFG-001 inputs of this config (N from the shard manifest, or None)."""
        return AlgebraInputs(
            sequences=sequences,
            micro_batch=self.data.micro_batch,
            grad_accum=self.training.gradient_accumulation,
            seq_len=self.data.seq_len,
            epochs=self.training.epochs,
            max_steps=self.training.max_steps,
            warmup_steps=self.training.warmup_steps,
            params=params,
            peak_lr=self.optimizer.lr,
            min_lr=self.optimizer.min_lr,
            world_size=world_size,
            force_token_budget=self.training.force_token_budget,
        )

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out.pop("positions")
        return json.loads(json.dumps(out, default=str))  # Paths as strings


_Section = TypeVar("_Section")


@cache
def field_types(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def as_field_type(kind: Any, value: Any) -> Any:
    """A YAML value as its field's type: a path as Path, a number as float (YAML reads
    ``lr: 1`` as an int); anything else is already what the schema let through."""
    if value is None:
        return None
    if kind is Path or Path in get_args(kind):
        return Path(value)
    if kind is float or float in get_args(kind):
        return float(value)
    return value


def section_of(cls: type[_Section], given: dict, **derived: Any) -> _Section:
    """``cls`` from the keys the file gives; the dataclass's own defaults fill the rest.
    ``derived`` values (not YAML scalars as written) replace given ones."""
    types = field_types(cls)
    values = {key: as_field_type(types[key], value) for key, value in given.items()}
    return cls(**(values | derived))


def derived_values(section: str, values: dict, before: Any = None) -> dict:
    """The fields of ``section`` derived from its given ``values``, for a file and for a
    config built in code alike: optimizer.min_lr (as given; kept from ``before`` when that
    config gave it; else 0.1 x lr, INV-CFG-006) and min_lr_given, and the alert rules
    parsed from their YAML mappings (an AlertRule is taken as it is)."""
    if section == "optimizer":
        if "min_lr" in values:
            return {"min_lr": float(values["min_lr"]), "min_lr_given": True}
        if before is not None and before.min_lr_given:
            return {}
        lr = values["lr"] if "lr" in values else getattr(before, "lr", None)
        if lr is None:
            return {}  # a missing lr is reported by whoever builds the section
        return {"min_lr": default_min_lr(float(lr)), "min_lr_given": False}
    if section == "monitoring" and "alerts" in values:
        rules = values["alerts"]
        return {"alerts": tuple(r if isinstance(r, AlertRule) else parse_rule(r) for r in rules)}
    return {}


#: The sections of a run config by YAML name.
SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "optimizer": OptimizerConfig,
    "training": TrainingConfig,
    "monitoring": MonitoringConfig,
}
#: Architecture fields a config may set one by one ("model.vocab_size").
ARCH_FIELDS = frozenset(f.name for f in dataclasses.fields(LlamaConfig))
