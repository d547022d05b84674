"""Measurements of the gates over pv itself (contracts/pv-validator-v1.yaml)."""

from __future__ import annotations

from gates.measure import GateContext, Measurement, measures
from tests import fixture_cases


@measures("GATE-PV-001")
def fixtures_report_exactly_their_expectations(ctx: GateContext) -> Measurement:
    cases = fixture_cases.invalid_cases(ctx.root)
    mismatched = fixture_cases.mismatched_cases(ctx.root)
    return Measurement(
        values={
            "fixture_mismatches": (len(mismatched), "cases"),
            "fixture_cases": (len(cases), "cases"),
        },
        workload=f"pv validate over {len(cases)} invalid fixture cases; each must report "
        "exactly the rules and lines its pv-expect comments name",
        inputs=[f for c in cases for f in fixture_cases.case_files(c)],
        notes=("mismatched: " + ", ".join(mismatched)) if mismatched else "",
    )


@measures("GATE-PV-002")
def every_checker_can_fail(ctx: GateContext) -> Measurement:
    targets = len(list(fixture_cases.checkers())) + len(fixture_cases.SOURCE_GUARDS)
    undetected = fixture_cases.undetected_removals(ctx.root)
    cases = fixture_cases.invalid_cases(ctx.root)
    return Measurement(
        values={
            "undetected_checker_removals": (len(undetected), "checkers"),
            "checkers_audited": (targets, "checkers"),
        },
        workload=f"each of {targets} pv checkers and source guards switched off in turn; "
        f"some of {len(cases)} fixture cases must notice",
        inputs=[f for c in cases for f in fixture_cases.case_files(c)],
        notes=("undetected: " + ", ".join(undetected)) if undetected else "",
    )
