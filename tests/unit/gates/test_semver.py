"""Semantic versions: parsing, order, and which release may follow which."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gates.model import semver


@pytest.mark.parametrize("text", ["1.0", "v1.0.0", "1.0.0.0", "01.0.0", "1.0.0-", "", "1.0.0 "])
def test_non_semver_is_rejected(text):
    assert semver.parse(text) is None


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("1.0.0", "1.0.1"),
        ("1.0.0-rc.1", "1.0.0"),
        ("1.0.0-alpha", "1.0.0-alpha.1"),
        ("1.0.0-alpha.1", "1.0.0-beta"),
        ("1.0.0-2", "1.0.0-10"),
        ("1.9.0", "1.10.0"),
    ],
)
def test_precedence_follows_semver_spec(older, newer):
    assert semver.parse(older) < semver.parse(newer)


def test_build_metadata_does_not_change_precedence():
    assert semver.parse("1.0.0+build.5") == semver.parse("1.0.0")


@pytest.mark.parametrize(
    ("older", "newer", "ok"),
    [
        ("1.0.0", "1.0.1", True),
        ("1.0.0", "1.1.0", True),
        ("1.0.0", "2.0.0", True),
        ("1.0.0", "1.0.2", False),
        ("1.0.0", "1.2.0", False),
        ("1.0.0", "1.1.1", False),
        ("1.0.0", "3.0.0", False),
        ("1.2.3", "1.3.0", True),
        ("1.0.0", "1.0.0", False),
        ("1.1.0-rc.1", "1.1.0", True),
        ("1.0.0", "1.1.0-rc.1", True),
    ],
)
def test_next_release(older, newer, ok):
    assert semver.is_next_release(semver.parse(older), semver.parse(newer)) is ok


@given(st.tuples(*[st.integers(0, 50)] * 3), st.sampled_from(["patch", "minor", "major"]))
def test_every_bump_is_a_next_release_and_greater(core, part):
    v = semver.Version(*core)
    assert semver.is_next_release(v, v.bump(part))
    assert v.bump(part) > v
    assert semver.parse(str(v)) == v
