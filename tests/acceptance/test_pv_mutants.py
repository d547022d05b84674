"""Each pv checker can fail: switch one off and some fixture case must notice.

The mutation audit of issue #3 applied to pv itself: a checker whose removal no fixture
detects is a check that cannot fail, which our standards call a defect.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest

from gates import source
from gates.checks import contract_rules, crossfile_rules, project_rules
from tests.acceptance.test_pv_fixtures import INVALID_CASES, actual_findings, expected_findings

pytestmark = pytest.mark.slow  # ~25 s: every checker against every fixture case

CHECKER_MODULES = (contract_rules, project_rules, crossfile_rules)
CHECKERS = [
    (module, name)
    for module in CHECKER_MODULES
    for name, fn in inspect.getmembers(module, inspect.isfunction)
    if fn.__module__ == module.__name__
    and inspect.isgeneratorfunction(fn)
    and not name.startswith("_")
    and name != "all_issues"
]
SOURCE_GUARDS = ["_check_tabs", "_check_aliases", "_check_nesting"]


def _nothing(*args: object, **kwargs: object) -> Iterator:
    return iter(())


def _some_case_breaks() -> bool:
    return any(actual_findings(case) != expected_findings(case) for case in INVALID_CASES)


def test_checker_discovery_finds_the_checkers():
    assert len(CHECKERS) >= 20


@pytest.mark.parametrize(
    ("module", "name"), CHECKERS, ids=[f"{m.__name__.rsplit('.', 1)[1]}.{n}" for m, n in CHECKERS]
)
def test_switching_off_a_checker_is_detected(monkeypatch, module, name):
    assert not _some_case_breaks()  # the real checker: every fixture as expected
    monkeypatch.setattr(module, name, _nothing)
    assert _some_case_breaks(), f"no fixture notices {name} switched off"


@pytest.mark.parametrize("name", SOURCE_GUARDS)
def test_switching_off_a_source_guard_is_detected(monkeypatch, name):
    monkeypatch.setattr(source, name, lambda text: None)
    assert _some_case_breaks(), f"no fixture notices {name} switched off"
