"""gates.model.schema.violations: jsonschema's errors dissected once, for pv's findings and
the trainer's config errors alike (their words are tested with each of them)."""

from __future__ import annotations

from jsonschema import Draft202012Validator

from gates.model.schema import violations

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "size", "mode"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "size": {"type": "integer", "minimum": 1, "exclusiveMaximum": 10},
        "mode": {"enum": ["fast", "safe"]},
        "limit": {"oneOf": [{"type": "integer"}, {"type": "object", "required": ["max"]}]},
    },
}


def _found(data, **kw) -> list[tuple]:
    return [
        (v.kind, v.where, v.key, v.expected)
        for v in violations(Draft202012Validator(SCHEMA), data, **kw)
    ]


def test_each_missing_key_is_named_once_and_unknown_keys_in_file_order():
    # jsonschema reports "required" once per missing key; each must come out once.
    found = _found({"zeta": 1, "alpha": 2})
    assert [f for f in found if f[0] == "missing-key"] == [
        ("missing-key", (), "name", None),
        ("missing-key", (), "size", None),
        ("missing-key", (), "mode", None),
    ]
    allowed = ["limit", "mode", "name", "size"]
    assert [f for f in found if f[0] == "unknown-key"] == [
        ("unknown-key", (), "zeta", allowed),
        ("unknown-key", (), "alpha", allowed),
    ]


def test_types_values_and_bounds_carry_what_was_expected():
    found = _found({"name": "Bad", "size": 10, "mode": "fsat"})
    assert ("pattern", ("name",), None, None) in found
    assert ("out-of-range", ("size",), None, ("<", 10)) in found
    assert ("bad-value", ("mode",), None, ["fast", "safe"]) in found
    assert _found({"name": 3, "size": 0, "mode": "safe"}) == [
        ("wrong-type", ("name",), None, "string"),
        ("out-of-range", ("size",), None, (">=", 1)),
    ]
    assert _found({"name": "ok", "size": 2, "mode": "safe"}) == []  # a valid document


def test_a_one_of_is_reported_by_the_branch_its_type_was_meant_for():
    base = {"name": "ok", "size": 2, "mode": "safe"}
    assert _found({**base, "limit": {}}) == [("missing-key", ("limit",), "max", None)]
    assert _found({**base, "limit": "x"}) == [("no-branch", ("limit",), None, None)]
    # Without branches, the caller words the oneOf itself.
    assert _found({**base, "limit": {}}, branches=False) == [("oneOf", ("limit",), None, None)]
