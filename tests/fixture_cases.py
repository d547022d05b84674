"""pv's own fixture cases: folders of contracts whose comments predict their findings.

Each line that must produce a finding carries ``# pv-expect: RULE[, RULE]``. Used by the
tests of pv and by the measurements of the pv gates (C-PV-VALIDATOR).
"""

from __future__ import annotations

import datetime as dt
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

from gates.model import source
from gates.pv.checks import contract_rules, crossfile_rules, project_rules
from gates.pv.validate import validate

FIXTURE_CONTRACTS = Path("tests") / "fixtures" / "pv_project" / "contracts"
EXPECT = re.compile(r"#\s*pv-expect:\s*([A-Z0-9, -]+?)\s*$")
#: Fixtures are dated in 2026; "today" is pinned so they never drift into the future.
FIXTURE_TODAY = dt.date(2026, 11, 22)

Found = set[tuple[str, str, int]]


def invalid_cases(root: Path) -> list[Path]:
    return sorted(p for p in (root / FIXTURE_CONTRACTS / "invalid").iterdir() if p.is_dir())


def case_files(case: Path) -> list[Path]:
    return sorted(case.glob("*.yaml"))


def expected_findings(case: Path) -> Found:
    out: Found = set()
    for file in case_files(case):
        for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            m = EXPECT.search(line)
            if m:
                out |= {(file.name, r.strip(), lineno) for r in m.group(1).split(",")}
    return out


def actual_findings(case: Path) -> Found:
    result = validate(case_files(case), today=FIXTURE_TODAY)
    if result.unreadable:
        raise FileNotFoundError("; ".join(result.unreadable))
    return {(Path(f.file).name, f.rule, f.line) for f in result.report.findings}


def mismatched_cases(root: Path) -> list[str]:
    return [c.name for c in invalid_cases(root) if actual_findings(c) != expected_findings(c)]


def checkers() -> Iterator[tuple[object, str]]:
    """Every public checker generator of pv (module, name)."""
    for module in (contract_rules, project_rules, crossfile_rules):
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if (
                fn.__module__ == module.__name__
                and inspect.isgeneratorfunction(fn)
                and not name.startswith("_")
                and name != "all_issues"
            ):
                yield module, name


SOURCE_GUARDS = ("_check_tabs", "_refuse_alias", "_check_nesting")


def undetected_removals(root: Path) -> list[str]:
    """Checkers (and source guards) whose removal no fixture case notices."""
    undetected = []
    targets = [*checkers(), *((source, g) for g in SOURCE_GUARDS)]
    for module, name in targets:
        original = getattr(module, name)
        setattr(
            module,
            name,
            (lambda *a, **k: iter(())) if module is not source else (lambda _: None),
        )
        try:
            if not mismatched_cases(root):
                undetected.append(f"{module.__name__}.{name}")
        finally:
            setattr(module, name, original)
    return undetected
