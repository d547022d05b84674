"""Each pv checker can fail: switch one off and some fixture case must notice.

The mutation audit applied to pv itself: a checker whose removal no fixture detects is a
check that cannot fail, which our standards call a defect. (GATE-PV-002 measures the same.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gates.model import source
from tests import fixture_cases

ROOT = Path(__file__).resolve().parents[2]
CHECKERS = list(fixture_cases.checkers())

pytestmark = pytest.mark.slow  # ~25 s: every checker against every fixture case


def _nothing(*args: object, **kwargs: object):
    return iter(())


def test_checker_discovery_finds_the_checkers():
    assert len(CHECKERS) >= 20


@pytest.mark.parametrize(
    ("module", "name"), CHECKERS, ids=[f"{m.__name__.rsplit('.', 1)[1]}.{n}" for m, n in CHECKERS]
)
def test_switching_off_a_checker_is_detected(monkeypatch, module, name):
    assert not fixture_cases.mismatched_cases(ROOT)  # the real checker: all as expected
    monkeypatch.setattr(module, name, _nothing)
    assert fixture_cases.mismatched_cases(ROOT), f"no fixture notices {name} switched off"


@pytest.mark.parametrize("name", fixture_cases.SOURCE_GUARDS)
def test_switching_off_a_source_guard_is_detected(monkeypatch, name):
    monkeypatch.setattr(source, name, lambda text: None)
    assert fixture_cases.mismatched_cases(ROOT), f"no fixture notices {name} switched off"
