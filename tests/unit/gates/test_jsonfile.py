"""gates/io/jsonfile.py, the one reader of JSON a checkout supplies (issue 31): every failure to
read a file is a JsonFileError naming it, at the line and column where there is one; nesting
past MAX_DEPTH is refused before json.loads can recurse into a RecursionError; and what is
not wrong still parses (the limit itself, brackets inside strings, a sparse file under the
size limit).

Run: .venv/bin/pytest tests/unit/gates/test_jsonfile.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gates.io import jsonfile
from gates.io.jsonfile import MAX_DEPTH, JsonFileError

LIMIT = 1024 * 1024


def _sparse(path: Path, size: int) -> None:
    with path.open("wb") as fh:
        fh.truncate(size)  # no data blocks: the read, not the disk, is what is bounded


BAD = {
    "200000-deep": (b"[" * 200_000, "nested deeper than 256 levels", (1, MAX_DEPTH + 1)),
    "deep-objects": (
        b'{"kind": "x",\n "a": ' + b'{"a": ' * (MAX_DEPTH + 5) + b"1" + b"}" * (MAX_DEPTH + 6),
        "nested deeper than 256 levels",
        (2, 7 + 6 * (MAX_DEPTH - 1)),
    ),
    "not-utf8": (b'{\n  "a": "caf\xe9"\n}', "not UTF-8 text (byte 0xe9", (2, 12)),
    "not-json": (b'{\n  "a": ,\n}', "not JSON (Expecting value)", (2, 8)),
    "a-huge-integer": (b"1" * 5000, "not JSON", None),
    "empty": (b"", "not JSON", (1, 1)),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_file_that_is_not_json_within_the_limits_names_itself(tmp_path, case):
    content, problem, place = BAD[case]
    path = tmp_path / "evidence.json"
    path.write_bytes(content)
    try:
        jsonfile.read_json(path, LIMIT)
    except Exception as exc:  # any other exception is the bug: it names no file
        error = exc
    else:
        pytest.fail("parsed a file that is not JSON within the limits")
    assert isinstance(error, JsonFileError), repr(error)
    assert problem in error.problem, error
    assert (error.path, (error.line, error.column) if place else error.line) == (
        path,
        place,
    ), error
    where = f":{place[0]}:{place[1]}" if place else ""
    assert str(error) == f"{path}{where}: {error.problem}"
    assert error.located("evidence/C/G.json").startswith(f"evidence/C/G.json{where}: ")


def test_a_file_over_the_size_limit_and_a_device_name_themselves(tmp_path):
    large = tmp_path / "large.json"
    _sparse(large, LIMIT + 1)
    with pytest.raises(JsonFileError, match=rf"^{large}: too large: .* {LIMIT}-byte limit"):
        jsonfile.read_json(large, LIMIT)
    device = tmp_path / "device.json"
    device.symlink_to("/dev/null")  # never opened: a read of /dev/zero would never end
    with pytest.raises(JsonFileError, match=rf"^{device}: a character device"):
        jsonfile.read_json(device, LIMIT)
    with pytest.raises(FileNotFoundError):  # the caller says what missing means
        jsonfile.read_json(tmp_path / "missing.json", LIMIT)


def test_what_is_within_the_limits_still_parses(tmp_path):
    """Two-sided: exactly MAX_DEPTH levels, brackets inside strings (escaped quotes too), a
    file of exactly the limit's size (sparse: NUL bytes are whitespace to nobody, so only
    its size is checked here)."""
    path = tmp_path / "ok.json"
    deepest = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    path.write_text(deepest)
    assert jsonfile.read_json(path, LIMIT) == json.loads(deepest)
    bracketed = {"text": '[[[{ "\\" [' * 1000, "list": [[1], {"a": [2]}]}
    path.write_text(json.dumps(bracketed))
    assert jsonfile.read_json(path, LIMIT) == bracketed
    assert jsonfile.first_too_deep("[" * (MAX_DEPTH + 1)) == MAX_DEPTH
    assert jsonfile.first_too_deep('"' + "[" * 1000 + '"') is None
    _sparse(path, LIMIT)
    with pytest.raises(JsonFileError, match="not JSON"):  # read whole, then parsed
        jsonfile.read_json(path, LIMIT)
