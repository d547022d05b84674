"""JSON Schema (Draft 2020-12) checks, with each schema error mapped to a pv rule.

The rule id comes from the failing keyword (``required`` → SCHEMA-REQUIRED, …) or,
for patterns, from the ``x-rule`` annotation beside it in the schema file.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator
from dataclasses import dataclass
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


#: Comparison keywords and the operator a message says them with.
BOUNDS = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}


@dataclass(frozen=True)
class Violation:
    """One schema error in the terms a message is made of, whoever words it: pv's findings
    (below) and the trainer's config errors (trainer/config/messages.py) share this
    dissection of jsonschema's errors and differ only in their words.

    ``kind``: unknown-key, missing-key (``key`` names it; ``where`` is its mapping's path),
    wrong-type (``expected``: a type or a list of types), bad-value (enum or const;
    ``expected``: the allowed values), out-of-range (``expected``: (operator, bound)),
    no-branch (a oneOf/anyOf whose value fits no branch's type), or else the keyword
    itself (pattern, minLength, not, …) with jsonschema's own ``message``."""

    kind: str
    where: tuple
    value: Any
    keyword: str
    schema: dict  # the subschema holding the failing keyword (its x-rule, properties…)
    message: str
    key: str | None = None
    expected: Any = None


def violations(
    validator: Draft202012Validator, data: Any, *, branches: bool = True
) -> Iterator[Violation]:
    """Every violation of ``data``, in the validator's order, each missing key once.
    ``branches``: a oneOf/anyOf is reported by the errors of the branch the value's type
    was meant for; without, as one ``anyOf``/``oneOf`` violation."""
    seen: set[tuple] = set()
    for error in validator.iter_errors(data):
        for v in _violations_of(error, branches):
            if v.kind == "missing-key":
                if (v.where, v.key) in seen:
                    continue
                seen.add((v.where, v.key))
            yield v


def _violations_of(error: ValidationError, branches: bool) -> Iterator[Violation]:
    where, keyword, value = tuple(error.absolute_path), error.validator, error.instance
    sub = error.schema if isinstance(error.schema, dict) else {}

    def violation(kind: str, **kw: Any) -> Violation:
        return Violation(kind, where, value, str(keyword), sub, error.message, **kw)

    if keyword in ("oneOf", "anyOf") and branches:
        by_branch: dict[int, list[ValidationError]] = {}
        for sub_error in error.context or ():
            by_branch.setdefault(sub_error.relative_schema_path[0], []).append(sub_error)
        for errors in by_branch.values():
            if not any(x.validator == "type" and not x.relative_path for x in errors):
                for sub_error in errors:
                    yield from _violations_of(sub_error, branches)
                return
        yield violation("no-branch")
    elif keyword == "additionalProperties":
        allowed = sorted(sub.get("properties", {}))
        for key in value:
            if key not in allowed:
                yield violation("unknown-key", key=key, expected=allowed)
    elif keyword == "required":
        for key in error.validator_value:
            if key not in value:
                yield violation("missing-key", key=key)
    elif keyword == "type":
        yield violation("wrong-type", expected=error.validator_value)
    elif keyword in ("enum", "const"):
        allowed = error.validator_value if keyword == "enum" else [error.validator_value]
        yield violation("bad-value", expected=list(allowed))
    elif keyword in BOUNDS:
        yield violation("out-of-range", expected=(BOUNDS[keyword], error.validator_value))
    else:
        yield violation(str(keyword))


def _issue_of(v: Violation) -> Issue:
    rule_id = v.schema.get("x-rule") or _KEYWORD_RULES.get(v.keyword, "SCHEMA-VIOLATION")
    if v.kind == "no-branch":
        found = _type_name(v.value)
        return Issue(
            "SCHEMA-TYPE", v.where, f"expected one of the allowed forms, found {found}",
            at_key=False,
        )  # fmt: skip
    if v.kind == "unknown-key":
        guess = did_you_mean(v.key, v.expected)
        hint = f"did you mean `{guess}`?" if guess else f"allowed keys: {', '.join(v.expected)}"
        return Issue(rule_id, (*v.where, v.key), f"unknown key `{v.key}`", hint)
    if v.kind == "missing-key":
        what = json_where(v.where)
        return Issue(
            rule_id, v.where, f"missing required key `{v.key}` in {what}",
            f"add `{v.key}:` to {what}",
        )  # fmt: skip
    if v.kind == "bad-value":
        guess = did_you_mean(str(v.value), [str(a) for a in v.expected])
        hint = f"did you mean `{guess}`?" if guess else None
        return Issue(
            rule_id, v.where, f"{v.value!r} is not one of {v.expected}", hint, at_key=False
        )
    if v.kind == "wrong-type":
        found = _type_name(v.value)
        return Issue(rule_id, v.where, f"expected {v.expected}, found {found}", at_key=False)
    if v.kind == "not" and rule_id == "TEST-BINDING":
        return Issue(rule_id, (*v.where, "test"), rule(rule_id).summary)
    if v.kind == "pattern":
        return Issue(rule_id, v.where, f"{v.value!r}: {rule(rule_id).summary}", at_key=False)
    return Issue(rule_id, v.where, v.message, at_key=False)


def json_where(where: tuple) -> str:
    if not where:
        return "the contract"
    return f"`{json_path(where, root='')}`"


def schema_issues(data: Any, validator: Draft202012Validator | None = None) -> list[Issue]:
    """Every schema violation in ``data``, as issues ordered by document path."""
    validator = validator or load_validator()
    if not isinstance(data, dict):
        return [Issue("SCHEMA-TYPE", (), f"a contract is a mapping, found {_type_name(data)}")]
    issues = [_issue_of(v) for v in violations(validator, data)]
    return sorted(issues, key=lambda i: [str(s) for s in i.where])
