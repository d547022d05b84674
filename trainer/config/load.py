"""Load a run config (one YAML file: model, data, optimizer, training, monitoring) into
frozen dataclasses, or report every problem with its file, line, column and field.

    cfg = load_config(Path("configs/quickstart.yaml"))     # raises ConfigError(findings)
    cfg.model                  # trainer.model.config.LlamaConfig (preset + overrides)
    cfg.training.max_steps     # omitted keys take the section dataclass's default
    cfg.line_of("training.epochs")                         # 1-based YAML line, or None

Checks, all reported together, never as a traceback: the YAML itself (gates/model/source.py:
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

The findings and their wording: trainer/config/messages.py. The section dataclasses
(the run-config model, each key's unit and default): trainer/config/sections.py. A config
built in code, or changed by dotted key: trainer/config/in_code.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from gates.io.jsonpath import json_path
from gates.model.source import SourceError, UnreadablePathError, YamlSource, read_yaml
from trainer.config.messages import (
    ConfigError,
    ConfigFinding,
    alert_findings,
    describe,
    schema_findings,
)
from trainer.config.sections import (
    ARCH_FIELDS,
    SECTIONS,
    RunConfig,
    derived_values,
    section_of,
)
from trainer.model.config import LlamaConfig, ModelConfigError, preset

#: Without a preset, these architecture keys have no default.
ARCH_REQUIRED = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
)


def _errors_under(findings: list[ConfigFinding], prefix: str) -> bool:
    return any(f.field == prefix or f.field.startswith(prefix + ".") for f in findings)


def _build_model(src: YamlSource, model: dict) -> tuple[LlamaConfig | None, list[ConfigFinding]]:
    """LlamaConfig from preset + architecture overrides, with its problems cited at the key
    that causes them (or at model.architecture / model.preset when the key is implied)."""
    path = str(src.path)
    arch = dict(model.get("architecture") or {})
    name = model.get("preset")

    def cite(key: str, message: str, hint: str, code: str) -> ConfigFinding:
        dotted = f"model.architecture.{key}" if key in ARCH_FIELDS else f"model.{key}"
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


class _UnreadableConfigError(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def _read(path: Path) -> YamlSource:
    """gates/model/source.py's reader (every YAML guard), with config wording for bad paths."""
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
                    f"the config is {describe(data)}, not a mapping",
                    "write top-level keys model:, data:, optimizer:, training:",
                    "not-a-mapping",
                )
            ]
        )

    findings = list(schema_findings(src))
    findings += alert_findings(src)
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
    # Every section from its own table (monitoring may be absent), one loop for all of them.
    given = {name: d.get(name) or {} for name in SECTIONS}
    return RunConfig(
        path=src.path,
        name=d.get("name"),
        model=model_cfg,
        model_preset=d["model"].get("preset"),
        **{
            name: section_of(cls, given[name], **derived_values(name, given[name]))
            for name, cls in SECTIONS.items()
        },
        positions=_positions(src.tree),
    )
