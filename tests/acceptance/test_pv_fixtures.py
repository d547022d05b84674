"""Every invalid fixture contract fails with exactly the findings its comments predict.

A case is a folder under tests/fixtures/pv_project/contracts/invalid/. Each line that should
produce a finding carries a comment ``# pv-expect: RULE[, RULE]``: the expected line number is
where that comment sits, written by hand, not read back from pv. (FALSIFY-PV-001)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gates.model.rules import RULES
from gates.pv.validate import validate
from tests.fixture_cases import (
    FIXTURE_TODAY,
    actual_findings,
    expected_findings,
    invalid_cases,
)

ROOT = Path(__file__).resolve().parents[2]
INVALID_CASES = invalid_cases(ROOT)
VALID = ROOT / "tests" / "fixtures" / "pv_project" / "contracts" / "valid"


def test_valid_fixture_is_clean():
    result = validate(sorted(VALID.glob("*.yaml")), today=FIXTURE_TODAY)
    assert result.report.findings == []


@pytest.mark.ship_blocking
@pytest.mark.parametrize("case", INVALID_CASES, ids=[c.name for c in INVALID_CASES])
def test_invalid_fixture_reports_exactly_its_expected_rules_and_lines(case: Path):
    expected = expected_findings(case)
    assert expected, f"{case.name} declares no pv-expect comment"
    assert actual_findings(case) == expected


def test_every_error_rule_has_an_invalid_fixture():
    covered = {rule for case in INVALID_CASES for _, rule, _ in expected_findings(case)}
    # File-level rules need bytes (or, for FILE-NOT-REGULAR, a FIFO or a symlink) a YAML
    # fixture cannot hold; test_pv_cli and test_pv_special_files cover them.
    # PV-INTERNAL is a bug in pv and has no fixture by design. AUDIT-INVALID needs a broken
    # audit file, and the fixture project holds one valid audit for every case:
    # tests/unit/gates/test_audit_rules.py covers it.
    elsewhere = {
        "FILE-EMPTY",
        "FILE-BINARY",
        "FILE-ENCODING",
        "FILE-TOO-LARGE",
        "FILE-NOT-REGULAR",
        "PV-INTERNAL",
        "AUDIT-INVALID",
    }
    missing = set(RULES) - covered - elsewhere
    assert not missing, f"rules without an invalid fixture: {sorted(missing)}"
