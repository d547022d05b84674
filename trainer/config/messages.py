"""What is wrong with a run config, said at its file, line, column and field: ConfigFinding
and ConfigError, and the findings of the JSON Schema (schema.json: unknown keys with a
did-you-mean, types, ranges, enums, required keys; integers must be written as integers,
numbers must be finite) and of each alert rule's ``when`` expression
(trainer/config/alerts.py), cited at its line as ``monitoring.alerts[I].when``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, validators

from gates.io.jsonpath import json_path
from gates.model.schema import violations
from gates.model.source import YamlSource
from trainer.config.alerts import AlertSyntaxError, parse_when

SCHEMA_PATH = Path(__file__).with_name("schema.json")
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


def describe(value: Any) -> str:
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


def schema_findings(src: YamlSource) -> Iterator[ConfigFinding]:
    """The schema's violations (gates.model.schema.violations: the framework's dissection
    of jsonschema's errors), each said at its line in a config's words."""
    path = str(src.path)

    def at(where: tuple, message: str, hint: str, code: str, *, at_key: bool = False):
        line, col = src.locate(where, at_key=at_key)
        return ConfigFinding(path, line, col, json_path(where, root=""), message, hint, code)

    for v in violations(_Validator(schema()), src.data, branches=False):
        where, value = v.where, v.value
        if v.kind == "unknown-key":
            yield at(
                (*where, v.key), f"unknown key {v.key!r}", _did_you_mean(v.key, where),
                "unknown-key", at_key=True,
            )  # fmt: skip
        elif v.kind == "missing-key":
            section = json_path(where, root="") or "the top level"
            line, col = src.locate(where)
            yield ConfigFinding(
                path, line, col, json_path((*where, v.key), root=""),
                f"missing required key {v.key!r} in {section}", _missing_hint(where, v.key),
                "missing-key",
            )  # fmt: skip
        elif v.kind == "wrong-type":
            expected = v.expected
            wanted = " or ".join(expected) if isinstance(expected, list) else expected
            yield at(
                where,
                f"{value!r} is {describe(value)}, expected {wanted}",
                _type_hint(value, expected),
                "wrong-type",
            )
        elif v.kind == "bad-value" and v.keyword == "enum":
            options = [str(o) for o in v.expected]
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
        elif v.kind == "out-of-range":
            op, bound = v.expected
            yield at(
                where,
                f"{value!r} is out of range: must be {op} {bound}",
                f"set {where[-1]} {op} {bound}",
                "out-of-range",
            )
        elif v.kind == "minLength":
            yield at(where, "is empty", f"give {where[-1]} a value", "bad-value")
        elif v.kind == "anyOf" and where == ("model",):
            yield at(
                where,
                "names neither a preset nor an architecture",
                "add preset: tiny | 50m | 370m, or an architecture: mapping",
                "missing-key",
                at_key=True,
            )
        else:  # a schema keyword without a tailored message: jsonschema's own words
            yield at(where, v.message, "", "bad-value")


# ---------------------------------------------------------------- semantic checks
def alert_findings(src: YamlSource) -> list[ConfigFinding]:
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
