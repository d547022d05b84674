"""The run-config model: the section dataclasses of trainer/config/sections.py and
trainer/config/schema.json agree on every key, its type (nullable included), its default
(a required key has none on either side) and its enum values; the loader fills omitted
keys from the dataclasses; a config built in code (config_from_values, with_values) takes
the same defaults and derived values, by the same key names.

Each disagreement is reported by its dotted key, e.g.
``training.save_interval: default differs: schema.json 999, dataclass 1000``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest

from trainer.config.alerts import AlertRule
from trainer.config.algebra import default_min_lr
from trainer.config.in_code import config_from_values, with_values
from trainer.config.load import load_config
from trainer.config.messages import schema
from trainer.config.sections import (
    IN_CODE_ONLY,
    DataConfig,
    MonitoringConfig,
    OptimizerConfig,
    TrainingConfig,
)
from trainer.model.config import preset

#: Dotted prefix -> the dataclass that models it; "[]" is each entry of a list.
SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "optimizer": OptimizerConfig,
    "training": TrainingConfig,
    "monitoring": MonitoringConfig,
    "monitoring.alerts[]": AlertRule,
}
#: Fields that are no YAML key: the loader derives them from keys that are.
DERIVED_FIELDS = {
    "optimizer.min_lr_given": "whether the file wrote optimizer.min_lr",
    "monitoring.alerts[].metric": "parsed from when",
    "monitoring.alerts[].comparator": "parsed from when",
    "monitoring.alerts[].threshold": "parsed from when",
}
#: Optional keys whose default depends on another key, so neither side states one.
DERIVED_DEFAULTS = {"optimizer.min_lr": "0.1 x optimizer.lr (algebra.default_min_lr)"}
#: Schema enums the dataclass annotates as plain str (no Literal to compare with).
UNTYPED_ENUMS = {
    "monitoring.alerts[].action": "AlertRule.action is str; parse_rule checks its value",
}
#: Required keys whose dataclass field also takes None: only a config built in code may
#: hold it (sections.IN_CODE_ONLY); a file must give a string (schema.json), and a loaded
#: config always checks and hashes what it names.
IN_CODE_NONE = {
    "data.shards": "in-memory sources: no shard directory, no manifest to check or hash",
    "data.tokenizer": "in-memory sources: no tokenizer on disk for the preflight to check",
    "training.output_dir": "a run built in code writes where its RunOptions.out_dir says",
}
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_MISSING = dataclasses.MISSING


def section_schema(prefix: str) -> dict:
    node = schema()
    for part in prefix.split("."):
        if part.endswith("[]"):
            node = node["properties"][part[:-2]]["items"]
        else:
            node = node["properties"][part]
    return node


def resolved(spec: dict) -> dict:
    """A property's schema with its $ref (#/$defs/NAME) merged under its own keys."""
    if "$ref" not in spec:
        return spec
    name = spec["$ref"].removeprefix("#/$defs/")
    return schema()["$defs"][name] | {k: v for k, v in spec.items() if k != "$ref"}


def schema_keys() -> dict[str, dict]:
    return {
        f"{prefix}.{key}": resolved(spec)
        for prefix in SECTIONS
        for key, spec in section_schema(prefix)["properties"].items()
    }


def model_fields() -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (annotation, default or MISSING) of every dataclass field."""
    out = {}
    for prefix, cls in SECTIONS.items():
        hints = get_type_hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not _MISSING else f.default
            out[f"{prefix}.{f.name}"] = (hints[f.name], default)
    return out


def json_types(annotation: Any) -> set[str]:
    """The JSON Schema types a value of ``annotation`` is written as in YAML."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return set().union(*(json_types(arg) for arg in get_args(annotation)))
    if origin is Literal:
        return {_JSON_TYPES[type(value)] for value in get_args(annotation)}
    if origin is tuple:
        return {"array"}
    if annotation is type(None):
        return {"null"}
    if annotation is Path:
        return {"string"}
    return {_JSON_TYPES[annotation]}


def schema_types(spec: dict) -> set[str]:
    if "type" in spec:
        return set(spec["type"]) if isinstance(spec["type"], list) else {spec["type"]}
    if "enum" in spec:
        return {"null" if v is None else _JSON_TYPES[type(v)] for v in spec["enum"]}
    raise AssertionError(f"no type or enum in {spec}")


def literal_values(annotation: Any) -> set | None:
    """The values of a Literal annotation (inside an Optional too); None for any other."""
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            if (values := literal_values(arg)) is not None:
                return values
    return None


def comparable(value: Any) -> Any:
    """A dataclass default as JSON holds it: a tuple is a list; the type is kept, so 1 and
    1.0 (or 1 and True) still differ."""
    value = list(value) if isinstance(value, tuple) else value
    return (type(value).__name__, value)


def agreement_problems(key: str) -> list[str]:
    """Every way the schema and the dataclass disagree on ``key``."""
    spec = schema_keys()[key]
    annotation, default = model_fields()[key]
    prefix = key.rsplit(".", 1)[0]
    required = key.rsplit(".", 1)[1] in section_schema(prefix).get("required", ())
    problems = []
    written_as = json_types(annotation) - ({"null"} if key in IN_CODE_NONE else set())
    if schema_types(spec) != written_as:
        problems.append(
            f"{key}: type differs: schema.json {sorted(schema_types(spec))}, dataclass "
            f"{annotation} (written as {sorted(json_types(annotation))})"
        )
    if key in DERIVED_DEFAULTS:
        if "default" in spec or default is not _MISSING or required:
            problems.append(f"{key}: its default is derived; neither side may state one")
    elif required:
        if "default" in spec:
            problems.append(f"{key}: required, yet schema.json has a default")
        if default is not _MISSING:
            problems.append(f"{key}: required in schema.json, yet the dataclass has a default")
    elif "default" not in spec or default is _MISSING:
        schema_says = spec.get("default", "none")
        model_says = "none" if default is _MISSING else repr(default)
        problems.append(
            f"{key}: an optional key needs a default on both sides: schema.json {schema_says}, "
            f"dataclass {model_says}"
        )
    elif comparable(spec["default"]) != comparable(default):
        problems.append(
            f"{key}: default differs: schema.json {spec['default']!r}, dataclass {default!r}"
        )
    values = literal_values(annotation)
    if values is not None and values != set(spec.get("enum", ())):
        problems.append(
            f"{key}: enum differs: schema.json {spec.get('enum')}, dataclass {sorted(values)}"
        )
    if values is None and "enum" in spec and key not in UNTYPED_ENUMS:
        problems.append(f"{key}: schema.json has enum {spec['enum']}; annotate it as a Literal")
    return problems


def test_every_schema_key_has_a_field_and_every_field_a_key():
    in_schema, in_model = set(schema_keys()), set(model_fields()) - set(DERIVED_FIELDS)
    no_field, no_key = sorted(in_schema - in_model), sorted(in_model - in_schema)
    assert not no_field, f"schema keys without a dataclass field: {no_field}"
    assert not no_key, f"dataclass fields without a schema key: {no_key}"
    assert set(DERIVED_FIELDS) <= set(model_fields()), "a listed derived field no longer exists"
    assert not set(DERIVED_FIELDS) & in_schema, "a derived field became a YAML key"


@pytest.mark.parametrize("key", sorted(schema_keys()))
def test_schema_and_dataclass_agree_on_type_default_and_enum(key):
    problems = agreement_problems(key)
    assert not problems, "\n".join(problems)


def test_the_listed_exceptions_name_keys_that_exist():
    keys = set(schema_keys())
    assert set(DERIVED_DEFAULTS) <= keys and set(UNTYPED_ENUMS) <= keys
    assert set(IN_CODE_NONE) == set(IN_CODE_ONLY) and set(IN_CODE_NONE) <= keys
    for key in IN_CODE_NONE:  # so a file can never leave one out, nor write null
        prefix, name = key.rsplit(".", 1)
        assert name in section_schema(prefix)["required"], key
        assert "null" not in schema_types(schema_keys()[key]), key


#: The required keys only; JSON is YAML, so a dict written with json.dumps is a config.
MINIMAL = {
    "model": {"preset": "tiny"},
    "data": {"shards": "data/", "tokenizer": "tok/", "micro_batch": 4, "seq_len": 128},
    "optimizer": {"lr": 3.0e-4},
    "training": {"epochs": 2, "max_steps": 100, "warmup_steps": 10, "output_dir": "out/"},
}


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_omitted_keys_take_the_dataclass_defaults(tmp_path):
    cfg = load_config(write(tmp_path / "run.yaml", MINIMAL))
    for section in ("optimizer", "training", "monitoring"):
        loaded = getattr(cfg, section)
        for f in dataclasses.fields(loaded):
            if f.default is not _MISSING:
                assert getattr(loaded, f.name) == f.default, f"{section}.{f.name}"


def test_every_default_written_out_loads_to_the_same_config(tmp_path):
    # The dataclass defaults are values the schema accepts, and writing them changes nothing.
    explicit = copy.deepcopy(MINIMAL)
    for key, (_, default) in model_fields().items():
        prefix, name = key.rsplit(".", 1)
        if "[" not in prefix and default is not _MISSING and key not in DERIVED_FIELDS:
            value = list(default) if isinstance(default, tuple) else default
            explicit.setdefault(prefix, {})[name] = value
    assert len(explicit["training"]) > len(MINIMAL["training"])
    a = load_config(write(tmp_path / "a.yaml", MINIMAL))
    b = load_config(write(tmp_path / "b.yaml", explicit))
    assert (a.optimizer, a.training, a.monitoring) == (b.optimizer, b.training, b.monitoring)


# ---------------------------------------------------------------- configs built in code
def _value(cfg, dotted: str):
    section, name = dotted.split(".")
    return getattr(getattr(cfg, section), name)


def _in_code(**training):
    return config_from_values(
        preset("tiny"),
        data={"micro_batch": 4, "seq_len": 128},
        optimizer={"lr": 3.0e-4},
        training={"epochs": 2, "max_steps": 100, "warmup_steps": 10, **training},
    )


def test_a_config_built_in_code_is_the_file_with_the_same_keys(tmp_path):
    loaded = load_config(write(tmp_path / "run.yaml", MINIMAL))
    built = config_from_values(
        preset("tiny"),
        data=MINIMAL["data"],
        optimizer=MINIMAL["optimizer"],
        training=MINIMAL["training"],
        model_preset="tiny",
    )
    # Every default, the derived min_lr (0.1 x lr) and the Paths: only the file differs.
    assert built.to_json() == loaded.to_json() | {"path": None}
    assert built.optimizer.min_lr_given is False
    assert built.optimizer.min_lr == default_min_lr(3.0e-4)


def test_only_a_config_built_in_code_may_leave_its_files_none(tmp_path):
    loaded = load_config(write(tmp_path / "run.yaml", MINIMAL))
    assert all(_value(loaded, key) is not None for key in IN_CODE_ONLY)
    built = _in_code()
    assert all(_value(built, key) is None for key in IN_CODE_ONLY)
    assert built.path is None and built.data.manifest is None
    assert loaded.data.manifest == Path("data/manifest.json")


def test_with_values_replaces_by_dotted_key_and_rebuilds_the_frozen_sections():
    cfg = _in_code()
    changed = with_values(
        cfg,
        {
            "training.max_steps": 5,
            "data.micro_batch": 2,
            "data.shards": "some/data",
            "model.vocab_size": 100,
            "monitoring.alerts": [{"when": "loss > 9", "action": "stop"}],
        },
    )
    assert (changed.training.max_steps, changed.data.micro_batch) == (5, 2)
    assert changed.data.shards == Path("some/data"), "a path is a Path, as load_config makes it"
    assert changed.model.vocab_size == 100 and changed.model.hidden_size == cfg.model.hidden_size
    assert changed.monitoring.alerts[0].metric == "loss", "rules parsed as a file's are"
    assert cfg.training.max_steps == 100, "the original is untouched"
    with pytest.raises(dataclasses.FrozenInstanceError):
        changed.training.max_steps = 6  # type: ignore[misc]
    assert with_values(cfg, {}) == cfg


def test_a_derived_min_lr_follows_lr_and_a_given_one_stays():
    derived = with_values(_in_code(), {"optimizer.lr": 1.0e-2})
    assert derived.optimizer.min_lr == default_min_lr(1.0e-2)
    assert derived.optimizer.min_lr_given is False
    given = with_values(_in_code(), {"optimizer.min_lr": 1.0e-6})
    assert (given.optimizer.min_lr, given.optimizer.min_lr_given) == (1.0e-6, True)
    assert with_values(given, {"optimizer.lr": 1.0e-2}).optimizer.min_lr == 1.0e-6


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (
            {"training.max_step": 5},
            "training.max_step: no such run-config key (did you mean max_steps?)",
        ),
        ({"optimizer.min_lr_given": True}, "optimizer.min_lr_given: no such run-config key"),
        ({"trainig.epochs": 1}, "trainig.epochs: no such run-config key"),
        ({"model.hidden": 8}, "model.hidden: no such run-config key"),
        ({"max_steps": 5}, "max_steps: no such run-config key"),
    ],
)
def test_an_unknown_key_is_refused_naming_it(values, words):
    with pytest.raises(ValueError) as refused:
        with_values(_in_code(), values)
    assert words in str(refused.value)


def test_a_missing_required_key_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"missing run-config key\(s\): training.warmup_steps"):
        config_from_values(
            preset("tiny"),
            data={"micro_batch": 4, "seq_len": 128},
            optimizer={"lr": 3.0e-4},
            training={"epochs": 2, "max_steps": 100},
        )
