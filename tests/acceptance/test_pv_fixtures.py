"""Every invalid fixture contract fails with exactly the findings its comments predict.

A case is a folder under tests/fixtures/pv_project/contracts/invalid/. Each line that should
produce a finding carries a comment ``# pv-expect: RULE[, RULE]``: the expected line number is
where that comment sits, written by hand, not read back from pv.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from gates.rules import RULES
from gates.validate import validate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pv_project" / "contracts"
INVALID_CASES = sorted(p for p in (FIXTURES / "invalid").iterdir() if p.is_dir())
EXPECT = re.compile(r"#\s*pv-expect:\s*([A-Z0-9, -]+?)\s*$")
#: Fixtures are dated in 2026; pin "today" so they never drift into the future or past.
TODAY = dt.date(2026, 11, 22)


def expected_findings(case: Path) -> set[tuple[str, str, int]]:
    out = set()
    for file in sorted(case.glob("*.yaml")):
        for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            m = EXPECT.search(line)
            if m:
                out |= {(file.name, r.strip(), lineno) for r in m.group(1).split(",")}
    return out


def actual_findings(case: Path) -> set[tuple[str, str, int]]:
    result = validate(sorted(case.glob("*.yaml")), today=TODAY)
    assert not result.unreadable
    return {(Path(f.file).name, f.rule, f.line) for f in result.report.findings}


def test_valid_fixture_is_clean():
    result = validate(sorted((FIXTURES / "valid").glob("*.yaml")), today=TODAY)
    assert result.report.findings == []


@pytest.mark.parametrize("case", INVALID_CASES, ids=[c.name for c in INVALID_CASES])
def test_invalid_fixture_reports_exactly_its_expected_rules_and_lines(case: Path):
    expected = expected_findings(case)
    assert expected, f"{case.name} declares no pv-expect comment"
    assert actual_findings(case) == expected


def test_every_error_rule_has_an_invalid_fixture():
    covered = {rule for case in INVALID_CASES for _, rule, _ in expected_findings(case)}
    # File-level rules need bytes a YAML fixture cannot hold; test_pv_cli covers them.
    # PV-INTERNAL is a bug in pv and has no fixture by design.
    elsewhere = {"FILE-EMPTY", "FILE-BINARY", "FILE-ENCODING", "FILE-TOO-LARGE", "PV-INTERNAL"}
    missing = set(RULES) - covered - elsewhere
    assert not missing, f"rules without an invalid fixture: {sorted(missing)}"
