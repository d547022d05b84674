"""Load a run config (one YAML file: model, data, optimizer, training, monitoring) into
frozen dataclasses, or report every problem with its file, line, column and field.

    cfg = load_config(Path("configs/quickstart.yaml"))     # raises ConfigError(findings)
    cfg.model                  # trainer.model.config.LlamaConfig (preset + overrides)
    cfg.training.max_steps     # omitted keys take the section dataclass's default
    cfg.line_of("training.epochs")                         # 1-based YAML line, or None

Checks, all reported together, never as a traceback: the YAML itself (gates/source.py:
binary, tabs, duplicate keys, aliases, syntax), the JSON Schema in schema.json (unknown
keys with a did-you-mean, types, ranges, enums, required keys; integers must be written
as integers, numbers must be finite), then the architecture (LlamaConfig.problems(),
cited at the offending key), seq_len <= max_position_embeddings, and each alert rule's
``when`` expression (trainer/config/alerts.py), cited at its line as
``monitoring.alerts[I].when``.

YAML numbers may use underscores (``32_768``, ``1_000_000``) and exponents (``3.0e-4``):
the YAML reader (ruamel, YAML 1.2 rules with underscores) already reads them as numbers,
which tests/unit/trainer/test_config_load.py pins. A *quoted* "32_768" is a string the
author asked for and is reported as a wrong type.

Paths (data.shards, data.tokenizer, training.output_dir) are kept as written; relative
ones resolve against the current working directory, as the seed's configs assume.
No torch import (``trainer validate`` must start fast).

The section dataclasses below (DataConfig, OptimizerConfig, TrainingConfig,
MonitoringConfig) are the run-config model: each field's unit and meaning, and its
default. schema.json validates the file and repeats the defaults for editors and readers;
tests/unit/trainer/test_config_model.py proves the two agree on every key, type, default
and enum.

A config can also be built in code (tests, tools, the oracle), from the same dataclasses
and their defaults, and any config changed by dotted key:

    cfg = config_from_values(model, data={"micro_batch": 2, "seq_len": 8},
                             optimizer={"lr": 1e-2}, training={"epochs": 3, "max_steps": 12,
                             "warmup_steps": 1})
    cfg = with_values(cfg, {"training.max_steps": 5, "data.micro_batch": 4})

Only a config built in code may leave ``data.shards``, ``data.tokenizer`` and
``training.output_dir`` None (IN_CODE_ONLY): in-memory sources have no files to check,
and such a run writes where its RunOptions say. A loaded file always names all three.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_type_hints

from jsonschema import Draft202012Validator, validators
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from gates.jsonpath import json_path
from gates.source import SourceError, UnreadablePathError, YamlSource, read_yaml
from trainer.config.alerts import AlertRule, AlertSyntaxError, parse_rule, parse_when
from trainer.config.algebra import AlgebraInputs, default_min_lr
from trainer.model.config import LlamaConfig, ModelConfigError, preset

SCHEMA_PATH = Path(__file__).with_name("schema.json")
#: Without a preset, these architecture keys have no default.
ARCH_REQUIRED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)
_ARCH_FIELDS = frozenset(f.name for f in dataclasses.fields(LlamaConfig))
#: Keys of the seed's (albor's) config shape that this schema names differently, or not at all.
RENAMED = {
    "data.batch_size": "micro_batch",
    "data.train": "shards (the directory from `trainer data encode`; it holds both splits)",
    "data.val": "shards (the val split lives in the same encoded directory)",
    "training.grad_accum": "gradient_accumulation",
    "training.gradient_accumulation_steps": "gradient_accumulation",
    "optimizer.learning_rate": "lr",
    "optimizer.max_grad_norm": "grad_clip",
}


@dataclass(frozen=True)
class ConfigFinding:
    """One problem with a config file, where it is, and how to fix it."""

    path: str
    line: int | None  # 1-based; None when the file itself could not be read
    column: int | None
    field: str  # dotted, e.g. "training.epochs"; "" for the file as a whole
    message: str
    hint: str = ""
    code: str = "config-invalid"  # kebab-case id, e.g. "unknown-key", "yaml-syntax"
    severity: str = "error"  # error | warning

    def render(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}:{self.column or 1}"
        subject = f"{self.severity} {self.field}" if self.field else self.severity
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}: {subject}: {self.message}{hint}"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class ConfigError(Exception):
    """The config is invalid; ``findings`` holds every problem, in file order."""

    def __init__(self, findings: list[ConfigFinding]) -> None:
        self.findings = list(findings)
        super().__init__("\n".join(f.render() for f in self.findings))


# ---------------------------------------------------------------- the run-config model
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
    # Not a static default: when the file omits min_lr, _build derives 0.1 x lr (INV-CFG-006).
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


# ---------------------------------------------------------------- schema
@cache
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def _is_integer(_checker: Any, value: Any) -> bool:
    # JSON Schema calls 1.0 an integer; a step count written 1.0 is a typo worth naming.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(_checker: Any, value: Any) -> bool:
    # .inf and .nan pass every minimum/maximum comparison, and an integer past the float
    # range cannot become one, so both are refused here.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


_Validator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _is_integer, "number": _is_number}
    ),
)


def _subschema(where: tuple) -> dict:
    node = schema()
    for step in where:
        if isinstance(step, int):  # a list entry: the schema of the list's items
            node = node.get("items", {})
        else:
            node = node.get("properties", {}).get(str(step), {})
    return node


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "not a finite number" if not math.isfinite(value) else "a decimal number"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "empty (null)"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _type_hint(value: Any, expected: str | list) -> str:
    wanted = expected if isinstance(expected, list) else [expected]
    if isinstance(value, str) and ("integer" in wanted or "number" in wanted):
        try:
            float(value.replace("_", ""))
            return "remove the quotes to write a number"
        except ValueError:
            pass
    if "integer" in wanted:
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return f"write {int(value)} without a decimal point"
        return "write a whole number, e.g. 4 or 32_768"
    if "number" in wanted:
        return "write a finite number, e.g. 3.0e-4"
    if "boolean" in wanted:
        return "write true or false"
    if "object" in wanted:
        return "write a mapping of keys under it"
    if "array" in wanted:
        return "write a list, one '- ' entry per line"
    if "string" in wanted:
        return "quote it if it is meant as text"
    return ""


def _did_you_mean(key: str, where: tuple) -> str:
    dotted = json_path((*where, key), root="")
    if dotted in RENAMED:
        return f"did you mean {RENAMED[dotted]}?"
    known = list(_subschema(where).get("properties", {}))
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    for section, sub in schema()["properties"].items():
        if key in sub.get("properties", {}) and section != (where[0] if where else None):
            return f"{key} belongs under {section}:"
    return f"known keys here: {', '.join(known)}" if known else ""


def _missing_hint(where: tuple, key: str) -> str:
    section = f" under {json_path(where, root='')}:" if where else ""
    about = _subschema((*where, key)).get("description", "").rstrip(".")
    return f"add {key}:{section}" + (f" {about[0].lower()}{about[1:]}" if about else "")


def _schema_findings(src: YamlSource) -> Iterator[ConfigFinding]:
    path = str(src.path)

    def at(where: tuple, message: str, hint: str, code: str, *, at_key: bool = False):
        line, col = src.locate(where, at_key=at_key)
        return ConfigFinding(path, line, col, json_path(where, root=""), message, hint, code)

    seen: set[tuple] = set()
    for err in _Validator(schema()).iter_errors(src.data):
        where = tuple(err.absolute_path)
        kind, value = err.validator, err.instance
        if kind == "additionalProperties":
            allowed = _subschema(where).get("properties", {})
            for key in value:
                if key not in allowed:
                    line, col = src.locate((*where, key), at_key=True)
                    yield ConfigFinding(
                        path,
                        line,
                        col,
                        json_path((*where, key), root=""),
                        f"unknown key {key!r}",
                        _did_you_mean(key, where),
                        "unknown-key",
                    )
        elif kind == "required":
            for key in err.validator_value:
                if key not in value and (where, key) not in seen:
                    seen.add((where, key))
                    section = json_path(where, root="") or "the top level"
                    yield ConfigFinding(
                        path,
                        *src.locate(where),
                        json_path((*where, key), root=""),
                        f"missing required key {key!r} in {section}",
                        _missing_hint(where, key),
                        "missing-key",
                    )
        elif kind == "type":
            expected = err.validator_value
            wanted = " or ".join(expected) if isinstance(expected, list) else expected
            yield at(
                where,
                f"{value!r} is {_describe(value)}, expected {wanted}",
                _type_hint(value, expected),
                "wrong-type",
            )
        elif kind == "enum":
            options = [str(o) for o in err.validator_value]
            close = difflib.get_close_matches(str(value), options, n=1, cutoff=0.75)
            yield at(
                where,
                f"{value!r} is not one of {', '.join(options)}",
                f"use {options[0]}"
                if len(options) == 1
                else (f"did you mean {close[0]}? " if close else "")
                + f"use one of {', '.join(options)}",
                "bad-value",
            )
        elif kind in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=",
                  "exclusiveMaximum": "<"}[kind]  # fmt: skip
            yield at(
                where,
                f"{value!r} is out of range: must be {op} {err.validator_value}",
                f"set {where[-1]} {op} {err.validator_value}",
                "out-of-range",
            )
        elif kind == "minLength":
            yield at(where, "is empty", f"give {where[-1]} a value", "bad-value")
        elif kind == "anyOf" and where == ("model",):
            yield at(
                where,
                "names neither a preset nor an architecture",
                "add preset: tiny | 50m | 370m, or an architecture: mapping",
                "missing-key",
                at_key=True,
            )
        else:  # a schema keyword without a tailored message: jsonschema's own words
            yield at(where, err.message, "", "bad-value")


# ---------------------------------------------------------------- semantic checks
def _alert_findings(src: YamlSource) -> list[ConfigFinding]:
    """Each alert rule's ``when`` that is a string but not ``METRIC COMPARATOR NUMBER``,
    cited at its value; entries the schema already refuses as a whole are its findings."""
    monitoring = src.data.get("monitoring")
    alerts = monitoring.get("alerts") if isinstance(monitoring, dict) else None
    if not isinstance(alerts, list):
        return []
    findings = []
    for index, entry in enumerate(alerts):
        when = entry.get("when") if isinstance(entry, dict) else None
        if not isinstance(when, str) or not when:
            continue
        try:
            parse_when(when)
        except AlertSyntaxError as exc:
            where = ("monitoring", "alerts", index, "when")
            line, col = src.locate(where, at_key=False)
            findings.append(
                ConfigFinding(
                    str(src.path),
                    line,
                    col,
                    json_path(where, root=""),
                    str(exc),
                    exc.hint,
                    "bad-alert",
                )
            )
    return findings


def _errors_under(findings: list[ConfigFinding], prefix: str) -> bool:
    return any(f.field == prefix or f.field.startswith(prefix + ".") for f in findings)


def _build_model(src: YamlSource, model: dict) -> tuple[LlamaConfig | None, list[ConfigFinding]]:
    """LlamaConfig from preset + architecture overrides, with its problems cited at the key
    that causes them (or at model.architecture / model.preset when the key is implied)."""
    path = str(src.path)
    arch = dict(model.get("architecture") or {})
    name = model.get("preset")

    def cite(key: str, message: str, hint: str, code: str) -> ConfigFinding:
        dotted = f"model.architecture.{key}" if key in _ARCH_FIELDS else f"model.{key}"
        for where in (
            ("model", "architecture", key),
            ("model", "architecture"),
            ("model", key),
            ("model",),
        ):
            if _key_present(src.tree, where):
                return ConfigFinding(path, *src.locate(where), dotted, message, hint, code)
        return ConfigFinding(path, 1, 1, dotted, message, hint, code)

    if name is None:
        missing = [k for k in ARCH_REQUIRED if k not in arch]
        if missing:
            return None, [
                cite(
                    k,
                    f"missing {k!r}: without model.preset the architecture must give it",
                    f"add {k}, or a preset (tiny, 50m, 370m) to take it from",
                    "missing-key",
                )
                for k in missing
            ]
        cfg = LlamaConfig(**arch)
    else:
        try:
            cfg = dataclasses.replace(preset(name), **arch)
        except ModelConfigError as exc:  # an unknown preset; the schema enum normally stops it
            return None, [cite(p.field, p.message, p.hint, "bad-value") for p in exc.problems]
    problems = cfg.problems()
    if problems:
        via = f" (preset {name} with overrides)" if name and arch else ""
        return None, [cite(p.field, p.message + via, p.hint, "bad-architecture") for p in problems]
    return cfg, []


def _key_present(tree: Any, where: tuple) -> bool:
    node = tree
    for step in where:
        if not isinstance(node, CommentedMap) or step not in node:
            return False
        node = node[step]
    return True


def _positions(tree: Any, prefix: tuple = ()) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    if isinstance(tree, CommentedMap):
        for key, value in tree.items():
            line, col = tree.lc.key(key)
            where = (*prefix, str(key))
            out[json_path(where, root="")] = (line + 1, col + 1)
            out.update(_positions(value, where))
    elif isinstance(tree, CommentedSeq):  # list entries: "monitoring.alerts[1]"
        for index, value in enumerate(tree):
            line, col = tree.lc.item(index)
            where = (*prefix, index)
            out[json_path(where, root="")] = (line + 1, col + 1)
            out.update(_positions(value, where))
    return out


_Section = TypeVar("_Section")


@cache
def _field_types(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _as_field_type(kind: Any, value: Any) -> Any:
    """A YAML value as its field's type: a path as Path, a number as float (YAML reads
    ``lr: 1`` as an int); anything else is already what the schema let through."""
    if value is None:
        return None
    if kind is Path or Path in get_args(kind):
        return Path(value)
    if kind is float or float in get_args(kind):
        return float(value)
    return value


def _section(cls: type[_Section], given: dict, **derived: Any) -> _Section:
    """``cls`` from the keys the file gives; the dataclass's own defaults fill the rest.
    ``derived`` values (not YAML scalars as written) replace given ones."""
    types = _field_types(cls)
    values = {key: _as_field_type(types[key], value) for key, value in given.items()}
    return cls(**(values | derived))


def _derived_values(section: str, values: dict, before: Any = None) -> dict:
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


# ---------------------------------------------------------------- entry point
class _UnreadableConfigError(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _read(path: Path) -> YamlSource:
    """gates/source.py's reader (every YAML guard), with config wording for bad paths."""
    if path.is_dir():
        raise _UnreadableConfigError("is a directory, not a config file", "name the .yaml file")
    if not path.exists():
        raise _UnreadableConfigError(
            "no such file", "check the path; a relative one starts at the working directory"
        )
    try:
        return read_yaml(path)
    except UnreadablePathError as exc:  # permissions, or the file vanished meanwhile
        raise _UnreadableConfigError(str(exc), "check the file's permissions") from None


def load_config(path: Path | str) -> RunConfig:
    """Read, check and build a run config; raises :class:`ConfigError` with every finding."""
    path = Path(path)
    try:
        src = _read(path)
    except _UnreadableConfigError as exc:
        raise ConfigError(
            [ConfigFinding(str(path), None, None, "", str(exc), exc.hint, "unreadable-file")]
        ) from None
    except SourceError as exc:
        code, hint = (
            exc.rule.lower(),
            (
                "write a run config: model:, data:, optimizer:, training:"
                if exc.rule == "FILE-EMPTY"
                else "fix the YAML at this line and column"
            ),
        )
        raise ConfigError(
            [ConfigFinding(str(path), exc.line, exc.column, "", exc.message, hint, code)]
        ) from None
    data = src.data
    if not isinstance(data, dict):
        raise ConfigError(
            [
                ConfigFinding(
                    str(path),
                    1,
                    1,
                    "",
                    f"the config is {_describe(data)}, not a mapping",
                    "write top-level keys model:, data:, optimizer:, training:",
                    "not-a-mapping",
                )
            ]
        )

    findings = list(_schema_findings(src))
    findings += _alert_findings(src)
    model_cfg = None
    if not _errors_under(findings, "model"):
        model_cfg, problems = _build_model(src, data["model"])
        findings += problems
    if (
        model_cfg is not None
        and not _errors_under(findings, "data")
        and data["data"]["seq_len"] > model_cfg.max_position_embeddings
    ):
        line, col = src.locate(("data", "seq_len"), at_key=False)
        findings.append(
            ConfigFinding(
                str(path),
                line,
                col,
                "data.seq_len",
                f"seq_len {data['data']['seq_len']} > the model's max_position_embeddings "
                f"{model_cfg.max_position_embeddings}",
                "lower seq_len or raise model.architecture.max_position_embeddings",
                "out-of-range",
            )
        )
    if findings or model_cfg is None:
        findings.sort(key=lambda f: (f.line or 0, f.column or 0))
        raise ConfigError(findings)
    return _build(src, model_cfg)


def _build(src: YamlSource, model_cfg: LlamaConfig) -> RunConfig:
    d = src.data
    opt = d["optimizer"]
    monitoring = d.get("monitoring") or {}
    return RunConfig(
        path=src.path,
        name=d.get("name"),
        model=model_cfg,
        model_preset=d["model"].get("preset"),
        data=_section(DataConfig, d["data"]),
        optimizer=_section(OptimizerConfig, opt, **_derived_values("optimizer", opt)),
        training=_section(TrainingConfig, d["training"]),
        monitoring=_section(
            MonitoringConfig, monitoring, **_derived_values("monitoring", monitoring)
        ),
        positions=_positions(src.tree),
    )


# ---------------------------------------------------------------- configs built in code
_SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "optimizer": OptimizerConfig,
    "training": TrainingConfig,
    "monitoring": MonitoringConfig,
}
#: Fields no caller sets: _derived_values derives them from the keys that are.
_DERIVED = frozenset({"optimizer.min_lr_given"})


def _known(section: str) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(_SECTIONS[section])
        if f"{section}.{f.name}" not in _DERIVED
    ]


def _unknown_key(key: str, known: list[str]) -> ValueError:
    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(known)}"
    return ValueError(f"{key}: no such run-config key ({hint})")


def _section_in_code(section: str, values: dict, before: Any = None) -> Any:
    """Section ``section`` from ``values`` (its field names), the rest from ``before`` or,
    without one, the dataclass defaults; ValueError for an unknown or a missing key."""
    known = _known(section)
    for key in values:
        if key not in known:
            raise _unknown_key(f"{section}.{key}", known)
    derived = _derived_values(section, values, before)
    if before is not None:
        types = _field_types(_SECTIONS[section])
        converted = {k: _as_field_type(types[k], v) for k, v in values.items()}
        return dataclasses.replace(before, **(converted | derived))
    required = [
        f.name
        for f in dataclasses.fields(_SECTIONS[section])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in values and k not in derived]
    if missing:
        raise ValueError(
            f"missing run-config key(s): {', '.join(f'{section}.{k}' for k in missing)}"
        )
    return _section(_SECTIONS[section], values, **derived)


def config_from_values(
    model: LlamaConfig,
    *,
    data: dict[str, Any],
    optimizer: dict[str, Any],
    training: dict[str, Any],
    monitoring: dict[str, Any] | None = None,
    name: str | None = None,
    model_preset: str | None = None,
) -> RunConfig:
    """A run config built in code: each section from the keys given (the YAML names) and
    its dataclass's defaults, derived values derived as load_config derives them
    (optimizer.min_lr omitted is 0.1 x lr). The IN_CODE_ONLY keys may be omitted: None,
    in-memory sources and no run directory of its own. Nothing on disk is read; the
    checks load_config makes of a file (schema ranges, the architecture) are not made.
    ValueError for an unknown or a missing key."""
    given = {
        "data": {"shards": None, "tokenizer": None} | dict(data),
        "optimizer": dict(optimizer),
        "training": {"output_dir": None} | dict(training),
        "monitoring": dict(monitoring or {}),
    }
    sections = {section: _section_in_code(section, values) for section, values in given.items()}
    return RunConfig(path=None, name=name, model=model, model_preset=model_preset, **sections)


def with_values(cfg: RunConfig, values: dict[str, Any]) -> RunConfig:
    """``cfg`` with the values of ``values`` (dotted keys: "training.max_steps", "data.seq_len",
    "model" for the whole LlamaConfig, "model.vocab_size" for one of its fields, "name"),
    every section rebuilt frozen; derived values follow (a new optimizer.lr moves a derived
    min_lr with it). ValueError for a key that is not a field of the run-config model."""
    by_section: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    model_fields: dict[str, Any] = {}
    for key, value in values.items():
        section, _, name = key.partition(".")
        if key in ("name", "model"):
            top[key] = value
        elif section == "model" and name:
            if name not in _ARCH_FIELDS:
                raise _unknown_key(key, sorted(_ARCH_FIELDS))
            model_fields[name] = value
        elif section in _SECTIONS and name:
            by_section.setdefault(section, {})[name] = value
        else:
            raise _unknown_key(key, ["name", "model", *(f"{s}.FIELD" for s in _SECTIONS)])
    model = top.get("model", cfg.model)
    if model_fields:
        model = dataclasses.replace(model, **model_fields)
    sections = {
        section: _section_in_code(section, given, getattr(cfg, section))
        for section, given in by_section.items()
    }
    return dataclasses.replace(cfg, name=top.get("name", cfg.name), model=model, **sections)
