"""Reading YAML: positions are 1-based and point at what the user must edit."""

import os
from pathlib import Path

import pytest

from gates.model.source import SourceError, declared_id, read_yaml


def test_locate_points_at_keys_items_and_missing_keys(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("a:\n  b: 1\nlist:\n  - x: 1\n    y: [2, 3]\n")
    src = read_yaml(path)
    assert src.locate(("a", "b")) == (2, 3)
    assert src.locate(("list", 0)) == (4, 5)
    assert src.locate(("list", 0, "y")) == (5, 5)
    assert src.locate(("list", 0, "y", 1)) == (5, 12)
    assert src.locate(("a", "missing")) == (1, 1)  # reported at the parent key
    assert src.locate(()) == (1, 1)


def test_unquoted_dates_stay_text(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_text("created: 2026-02-30\nupdated: 2026-01-01\n")
    assert read_yaml(path).data == {"created": "2026-02-30", "updated": "2026-01-01"}


def test_utf8_bom_is_accepted(tmp_path: Path):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert read_yaml(path).data == {"a": 1}


@pytest.mark.parametrize(
    ("content", "rule", "line"),
    [
        (b"a: 1\nb:\n  c: 1\n  c: 2\n", "YAML-DUPLICATE-KEY", 4),
        (b"a: 1\nb: *nothing\n", "YAML-ALIAS", 2),
        (b"a: &x 1\nb: *x\n", "YAML-ALIAS", 2),
        (b"a: &x 1\nb:\n  - 2\n  - *x\n", "YAML-ALIAS", 4),  # in a list
        (b"a: &x k\n? *x\n: 2\n", "YAML-ALIAS", 2),  # as a key
        (b"a: &x 1\nb: *x\nc: [\n", "YAML-ALIAS", 2),  # before a syntax error
        (b"a: 1\nb: \xc3\x28\n", "FILE-ENCODING", 2),
        (b"a:\n  - 1\n\t- 2\n", "YAML-TAB", 3),
    ],
)
def test_source_errors_carry_rule_and_line(tmp_path: Path, content, rule, line):
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(SourceError) as err:
        read_yaml(path)
    assert (err.value.rule, err.value.line) == (rule, line)


def test_an_alias_bomb_is_refused_at_its_first_alias(tmp_path: Path):
    # Billion laughs: nine levels of ten aliases each; expanding it would take 10^9 items.
    lines = ['l0: &l0 "lol"'] + [
        f"l{i}: &l{i} [{', '.join(f'*l{i - 1}' for _ in range(10))}]" for i in range(1, 10)
    ]
    path = tmp_path / "c.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SourceError) as err:
        read_yaml(path)
    assert (err.value.rule, err.value.line) == ("YAML-ALIAS", 2)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("metadata:\n  id: C-A\n  version: 1.0.0\n", "C-A"),
        # after other keys, complex keys and nested collections it skips
        ("x: [1, {y: [2]}]\n? [a, b]\n: c\nmetadata: {version: 1, id: 'C-B'}\n", "C-B"),
        ("metadata:\n  other: {id: C-NOT}\n  id: C-C\n", "C-C"),
        ('metadata:\n  id: "123"\n', "123"),  # quoted: text
        ("metadata:\n  id: C-D\nlater: [\n", "C-D"),  # read no further than the id
        # what the full load would not give as a string id, or could not read
        ("metadata:\n  id: 123\n", None),
        ("metadata:\n  id: null\n", None),
        ("metadata:\n  id: [C-E]\n", None),
        ("metadata:\n  other: {id: C-F}\n", None),
        ("metadata: C-G\n", None),
        ("- metadata:\n    id: C-H\n", None),
        ("a: &x 1\nb: *x\nmetadata:\n  id: C-I\n", None),  # an alias before the id
        ("metadata:\n\tid: C-J\n", None),  # a tab
        ("", None),
    ],
)
def test_declared_id_reads_the_metadata_id_as_the_full_load_would(
    tmp_path: Path, content: str, expected: str | None
):
    path = tmp_path / "c.yaml"
    path.write_text(content)
    assert declared_id(path) == expected
    if expected is not None and not content.endswith("[\n"):
        assert read_yaml(path).data["metadata"]["id"] == expected


def test_declared_id_of_a_fifo_or_a_missing_file_is_none(tmp_path: Path):
    os.mkfifo(tmp_path / "fifo.yaml")
    assert declared_id(tmp_path / "fifo.yaml") is None  # never opened, so never blocks
    assert declared_id(tmp_path / "missing.yaml") is None
