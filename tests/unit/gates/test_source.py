"""Reading YAML: positions are 1-based and point at what the user must edit."""

from pathlib import Path

import pytest

from gates.model.source import SourceError, read_yaml


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
