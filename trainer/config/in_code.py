"""Run configs built in code (tests, tools, the oracle), from the same section dataclasses
and defaults as a loaded file (trainer/config/sections.py), and any config changed by dotted
key: one generic mapping, no field copied by hand.

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
from typing import Any

from trainer.config.sections import (
    ARCH_FIELDS,
    SECTIONS,
    RunConfig,
    as_field_type,
    derived_values,
    field_types,
    section_of,
)
from trainer.model.config import LlamaConfig

#: Fields no caller sets: sections.derived_values derives them from the keys that are.
_DERIVED = frozenset({"optimizer.min_lr_given"})


def _known(section: str) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(SECTIONS[section])
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
    derived = derived_values(section, values, before)
    if before is not None:
        types = field_types(SECTIONS[section])
        converted = {k: as_field_type(types[k], v) for k, v in values.items()}
        return dataclasses.replace(before, **(converted | derived))
    required = [
        f.name
        for f in dataclasses.fields(SECTIONS[section])
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [k for k in required if k not in values and k not in derived]
    if missing:
        raise ValueError(
            f"missing run-config key(s): {', '.join(f'{section}.{k}' for k in missing)}"
        )
    return section_of(SECTIONS[section], values, **derived)


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
            if name not in ARCH_FIELDS:
                raise _unknown_key(key, sorted(ARCH_FIELDS))
            model_fields[name] = value
        elif section in SECTIONS and name:
            by_section.setdefault(section, {})[name] = value
        else:
            raise _unknown_key(key, ["name", "model", *(f"{s}.FIELD" for s in SECTIONS)])
    model = top.get("model", cfg.model)
    if model_fields:
        model = dataclasses.replace(model, **model_fields)
    sections = {
        section: _section_in_code(section, given, getattr(cfg, section))
        for section, given in by_section.items()
    }
    return dataclasses.replace(cfg, name=top.get("name", cfg.name), model=model, **sections)
