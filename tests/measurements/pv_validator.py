"""Measurements of the gates over pv itself (contracts/pv-validator-v1.yaml)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from gates.measure import GateContext, Measurement, measures
from tests import fixture_cases

#: Contract files no fixture can hold (a fixture's expectations are read as UTF-8 text):
#: each must be reported as an error, never end in a traceback nor pass.
BAD_INPUTS = {
    "latin-1.yaml": b"metadata:\n  id: C-X\n  description: caf\xe9\n",
    "binary.yaml": bytes(range(256)),
    "nul.yaml": b"metadata:\x00\n",
    "utf-16.yaml": "metadata:\n  id: C-X\n".encode("utf-16"),
    "empty.yaml": b"",
}


def _bad_inputs_mishandled() -> list[str]:
    from gates.pv.validate import validate  # noqa: PLC0415

    mishandled = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in BAD_INPUTS.items():
            path = Path(tmp) / name
            path.write_bytes(data)
            try:
                result = validate([path])
            except Exception as exc:  # the traceback a user would see
                mishandled.append(f"{name}: {type(exc).__name__}: {exc}")
                continue
            if not result.unreadable and not result.report.errors:
                mishandled.append(f"{name}: accepted")
    return mishandled


@measures("GATE-PV-001")
def fixtures_report_exactly_their_expectations(ctx: GateContext) -> Measurement:
    cases = fixture_cases.invalid_cases(ctx.root)
    mismatched = fixture_cases.mismatched_cases(ctx.root)
    mishandled = _bad_inputs_mishandled()
    return Measurement(
        values={
            "fixture_mismatches": (len(mismatched), "cases"),
            "fixture_cases": (len(cases), "cases"),
            "bad_inputs_mishandled": (len(mishandled), "files"),
        },
        workload=f"pv validate over {len(cases)} invalid fixture cases; each must report "
        "exactly the rules and lines its pv-expect comments name. Then over "
        f"{len(BAD_INPUTS)} bad files ({', '.join(BAD_INPUTS)}): each must be an error, "
        "neither a traceback nor accepted",
        inputs=[f for c in cases for f in fixture_cases.case_files(c)],
        notes="; ".join(
            [*(["mismatched: " + ", ".join(mismatched)] if mismatched else []), *mishandled]
        ),
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
