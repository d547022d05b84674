"""JSON Schema (Draft 2020-12) checks, with each schema error mapped to a pv rule.

The rule id comes from the failing keyword (``required`` → SCHEMA-REQUIRED, …) or,
for patterns, from the ``x-rule`` annotation beside it in the schema file.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from gates.io.jsonpath import json_path
from gates.model.findings import Issue
from gates.model.rules import rule

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"  # package data: the framework's own
CONTRACT_SCHEMA = SCHEMA_DIR / "contract.schema.json"

_KEYWORD_RULES = {
    "required": "SCHEMA-REQUIRED",
    "additionalProperties": "SCHEMA-UNKNOWN-KEY",
    "type": "SCHEMA-TYPE",
    "enum": "SCHEMA-ENUM",
    "const": "SCHEMA-ENUM",
}


@cache
def load_validator(path: Path = CONTRACT_SCHEMA) -> Draft202012Validator:
    schema = json.loads(path.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def did_you_mean(word: str, choices: list[str]) -> str | None:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return close[0] if close else None


def _type_name(value: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def _issues_for(error: ValidationError) -> Iterator[Issue]:
    where = tuple(error.absolute_path)
    keyword = error.validator
    sub = error.schema if isinstance(error.schema, dict) else {}
    rule_id = sub.get("x-rule") or _KEYWORD_RULES.get(keyword, "SCHEMA-VIOLATION")

    if keyword in ("oneOf", "anyOf"):
        # e.g. a gate's threshold, one mapping or a list of them: report the errors of the
        # branch the value's type was meant for, not "valid under none of the schemas".
        branches: dict[int, list[ValidationError]] = {}
        for sub_error in error.context or ():
            branches.setdefault(sub_error.relative_schema_path[0], []).append(sub_error)
        for errors in branches.values():
            if not any(x.validator == "type" and not x.relative_path for x in errors):
                for sub_error in errors:
                    yield from _issues_for(sub_error)
                return
        yield Issue(
            "SCHEMA-TYPE",
            where,
            f"expected one of the allowed forms, found {_type_name(error.instance)}",
            at_key=False,
        )
        return
    if keyword == "additionalProperties":
        allowed = sorted(sub.get("properties", {}))
        for key in sorted(set(error.instance) - set(allowed)):
            guess = did_you_mean(key, allowed)
            hint = f"did you mean `{guess}`?" if guess else f"allowed keys: {', '.join(allowed)}"
            yield Issue(rule_id, (*where, key), f"unknown key `{key}`", hint)
        return
    if keyword == "required":
        match = re.match(r"^'(.+)' is a required property$", error.message)
        missing = match.group(1) if match else str(error.validator_value)
        what = json_where(where)
        yield Issue(
            rule_id,
            where,
            f"missing required key `{missing}` in {what}",
            f"add `{missing}:` to {what}",
        )
        return
    if keyword in ("enum", "const"):
        allowed = error.validator_value if keyword == "enum" else [error.validator_value]
        guess = did_you_mean(str(error.instance), [str(a) for a in allowed])
        hint = f"did you mean `{guess}`?" if guess else None
        yield Issue(
            rule_id, where, f"{error.instance!r} is not one of {allowed}", hint, at_key=False
        )
        return
    if keyword == "type":
        yield Issue(
            rule_id,
            where,
            f"expected {error.validator_value}, found {_type_name(error.instance)}",
            at_key=False,
        )
        return
    if keyword == "not" and rule_id == "TEST-BINDING":
        yield Issue(rule_id, (*where, "test"), rule(rule_id).summary)
        return
    if keyword == "pattern":
        yield Issue(rule_id, where, f"{error.instance!r}: {rule(rule_id).summary}", at_key=False)
        return
    yield Issue(rule_id, where, error.message, at_key=False)


def json_where(where: tuple) -> str:
    if not where:
        return "the contract"
    return f"`{json_path(where, root='')}`"


def schema_issues(data: Any, validator: Draft202012Validator | None = None) -> list[Issue]:
    """Every schema violation in ``data``, as issues ordered by document path."""
    validator = validator or load_validator()
    if not isinstance(data, dict):
        return [Issue("SCHEMA-TYPE", (), f"a contract is a mapping, found {_type_name(data)}")]
    issues = [i for e in validator.iter_errors(data) for i in _issues_for(e)]
    return sorted(issues, key=lambda i: [str(s) for s in i.where])
