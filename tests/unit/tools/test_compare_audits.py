"""tools/compare_audits.py: two audit records agree when every test row and every measurement
row says the same thing; only the seconds may differ."""

from __future__ import annotations

import copy

from tools import compare_audits

RECORD = {
    "sources": [{"path": "pkg/shop.py", "sha256": "a" * 64}],
    "rows": [
        {
            "contract": "C-SHOP",
            "test": "FALSIFY-SHOP-001",
            "node": "tests/test_shop.py::test_total",
            "mutant": "total-off-by-one",
            "outcome": "failed",
            "verdict": "killed",
            "status": "ok",
            "failure": {"exception": "AssertionError", "message": "assert 3 == 4"},
            "seam_check": {"ok": True},
            "sources": [0],
            "seconds": 1.5,
        }
    ],
    "measurements": [
        {
            "contract": "C-SHOP",
            "gate": "GATE-SHOP-001",
            "mutant": "total-off-by-one",
            "outcome": "caught",
            "reason": "",
            "seconds": 0.7,
        }
    ],
}


def _changed(path: tuple, value) -> dict:
    record = copy.deepcopy(RECORD)
    where = record
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    return record


def test_records_differing_only_in_seconds_agree():
    faster = _changed(("rows", 0, "seconds"), 0.2)
    faster["measurements"][0]["seconds"] = 0.1
    assert compare_audits.differences(RECORD, faster) == []


def test_a_test_rows_verdict_differing_is_named():
    survived = _changed(("rows", 0, "verdict"), "SURVIVED")
    assert compare_audits.differences(RECORD, survived) == [
        "FALSIFY-SHOP-001 total-off-by-one: verdict 'killed' != 'SURVIVED'"
    ]


def test_a_measurement_rows_outcome_differing_is_named():
    survived = _changed(("measurements", 0, "outcome"), "survived")
    assert compare_audits.differences(RECORD, survived) == [
        "measured GATE-SHOP-001 total-off-by-one: outcome 'caught' != 'survived'"
    ]


def test_a_measurement_row_in_one_record_only_is_named():
    fewer = _changed(("measurements",), [])
    assert compare_audits.differences(RECORD, fewer) == [
        "measured GATE-SHOP-001 total-off-by-one: only in A"
    ]
