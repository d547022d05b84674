"""gates/io/jsonpath.py renders document paths the way findings, schema messages and the
trainer's config findings show them.

Run: .venv/bin/pytest tests/unit/gates/test_jsonpath.py
"""

from collections import deque

import pytest

from gates.io.jsonpath import json_path


@pytest.mark.parametrize(
    ("path", "jsonpath", "dotted"),
    [
        ((), "$", ""),
        (("gates",), "$.gates", "gates"),
        (("gates", 2, "threshold"), "$.gates[2].threshold", "gates[2].threshold"),
        ((0, "id"), "$[0].id", "[0].id"),
        (("matrix", 1, 0), "$.matrix[1][0]", "matrix[1][0]"),
    ],
)
def test_keys_are_dotted_and_indexes_bracketed(path, jsonpath, dotted):
    assert json_path(path) == jsonpath
    assert json_path(path, root="") == dotted


def test_a_path_may_be_any_iterable_such_as_a_jsonschema_deque():
    assert json_path(deque(["clauses", 3])) == "$.clauses[3]"
