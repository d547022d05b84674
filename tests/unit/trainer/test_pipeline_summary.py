"""The pipeline's summary reads its numbers back from the run's files: each field is the
one the records hold (first and last loss, the median speed, the last validation), not a
neighbour of it; the gate table counts what it shows; a gate not PASS/PARTIAL is named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.unit.gates.report_support import copy_demo_project
from tests.unit.trainer.loop_support import loop_config
from trainer.pipeline.summary import (
    _gate_rows,
    _number,
    _training,
    failed_checks,
    render_gate_table,
)
from trainer.plan.flops import flops_per_token
from trainer.runfiles.names import PipelineDir

RUN = loop_config()  # max_steps 12, the tiny model, seq_len 8

# Speeds in no order, one missing: the median of the five floats (200) is neither the
# first, the last, their mean, nor the middle record's.
RECORDS = [
    {"step": 1, "loss": 6.25, "tokens_per_s": 300.0, "step_s": 0.5},
    {"step": 2, "loss": 5.5, "tokens_per_s": 100.0, "step_s": 0.25, "val_loss": 5.75},
    {"step": 3, "loss": 5.0, "tokens_per_s": None, "step_s": None},
    {"step": 4, "loss": 4.75, "tokens_per_s": 500.0, "step_s": 1.0, "val_loss": 4.875},
    {"step": 5, "loss": 4.5, "tokens_per_s": 200.0, "step_s": 2.0},
    {"step": 6, "loss": 4.25, "tokens_per_s": 50.0, "step_s": 4.0},
]


def run_dir(root: Path, records: list[dict], end: dict | None = None) -> Path:
    train = PipelineDir(root).train
    train.root.mkdir(parents=True)
    train.metrics.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    if end is not None:
        train.training_state.write_text(json.dumps(end), encoding="utf-8")
    return root


def test_the_training_fields_are_the_records_own(tmp_path):
    end = {"status": "stopped", "reason": "stop_after"}
    got = _training(run_dir(tmp_path, RECORDS, end), RUN)
    assert {k: got[k] for k in got if k not in ("median_peak_fraction", "matmul_peak_flops")} == {
        "steps": 6,
        "max_steps": 12,
        "first_loss": 6.25,
        "last_loss": 4.25,
        "last_val_loss": 4.875,
        "last_val_step": 4,
        "median_tokens_per_s": 200.0,
        "seconds": 7.75,  # the steps with a time; the one without is not counted as 0
        "status": "stopped",
        "reason": "stop_after",
    }
    assert got["median_peak_fraction"] is None and got["matmul_peak_flops"] is None


def test_without_an_end_record_a_run_past_step_0_reads_finished(tmp_path):
    got = _training(run_dir(tmp_path, RECORDS[:1]), RUN)
    assert (got["status"], got["reason"], got["last_val_loss"], got["last_val_step"]) == (
        "finished", "", None, None,
    )  # fmt: skip


def test_a_run_with_no_step_recorded_is_refused_naming_the_file(tmp_path):
    with pytest.raises(ValueError, match=r"metrics\.jsonl: no step recorded"):
        _training(run_dir(tmp_path, []), RUN)


def test_the_matmul_peak_is_recovered_from_the_median_steps_own_record(tmp_path):
    """peak = model FLOP/s / peak_fraction of the median step by fraction; a record with a
    zero or non-finite fraction is not a measurement and takes no part."""
    fractions = [(0.25, 1e3), (0.0, 9e9), (0.125, 7e2), (math.nan, 9e9), (0.5, 1.5e3), (0.0, 9e9)]
    records = [
        {**r, "peak_fraction": f, "tokens_per_s": tps}
        for r, (f, tps) in zip(RECORDS, fractions, strict=True)
    ]
    got = _training(run_dir(tmp_path, records), RUN)
    assert got["median_peak_fraction"] == 0.25
    per_token = flops_per_token(RUN.model, RUN.data.seq_len)
    assert got["matmul_peak_flops"] == pytest.approx(1e3 * per_token / 0.25, rel=1e-12)


@pytest.mark.parametrize(
    ("value", "shown"),
    [(373509120, "373509120"), (2.0, "2"), (0.123456, "0.1235"), (1e16, "1e+16"), (-3.0, "-3")],
)
def test_numbers_are_shown_exactly_when_whole_else_to_four_digits(value, shown):
    assert _number(value) == shown


def gate_row(
    gate: str, status: str, ship: bool, this_run: str | None = None, stale: str | None = None
) -> dict:
    return {"gate": gate, "contract": "C", "status": status, "ship_blocking": ship,
            "why": f"why {gate}", "this_run": this_run, "stale": stale}  # fmt: skip


def test_the_gate_table_counts_statuses_and_ship_blocking_passes():
    rows = [
        gate_row("GATE-A", "PASS", True, "PASS"),
        gate_row("GATE-B", "FAIL", True),
        gate_row("GATE-C", "PARTIAL", False),
        gate_row("GATE-D", "PASS", False),
    ]
    head, columns, *lines = render_gate_table(rows)
    assert head.split() == ["gates", "4", "gates:", "FAIL", "1,", "PARTIAL", "1,", "PASS", "2;",
                            "ship-blocking", "1", "of", "2", "PASS"]  # fmt: skip
    assert columns.split() == ["gate", "status", "ship", "this", "run", "why"]
    assert [line.split() for line in lines] == [
        ["GATE-A", "PASS", "yes", "PASS", "why", "GATE-A"],
        ["GATE-B", "FAIL", "yes", "-", "why", "GATE-B"],
        ["GATE-C", "PARTIAL", "-", "why", "GATE-C"],
        ["GATE-D", "PASS", "-", "why", "GATE-D"],
    ]
    assert render_gate_table([]) == ["  gates       no contracts here: nothing to show"]


def test_a_pass_on_stale_evidence_is_flagged_and_counted_as_pv_status_counts_it():
    rows = [
        gate_row("GATE-A", "PASS", True, stale="a.py changed since commit 0123"),
        gate_row("GATE-B", "PASS", True),
        gate_row("GATE-C", "PASS", False, stale="c.py changed since commit 4567"),
    ]
    head, _, *lines = render_gate_table(rows)
    assert head.endswith("; ship-blocking 2 of 2 PASS, 1 of them on stale evidence")
    assert [line.split() for line in lines] == [
        ["GATE-A", "PASS", "yes", "-", "why", "GATE-A"],
        ["STALE:", "a.py", "changed", "since", "commit", "0123"],
        ["GATE-B", "PASS", "yes", "-", "why", "GATE-B"],
        ["GATE-C", "PASS", "-", "why", "GATE-C"],
        ["STALE:", "c.py", "changed", "since", "commit", "4567"],
    ]
    fresh = render_gate_table([{**r, "stale": None} for r in rows])
    assert fresh[0].endswith("; ship-blocking 2 of 2 PASS") and len(fresh) == 2 + len(rows)


def test_every_check_not_pass_or_partial_is_named_with_its_evidence():
    summary = {
        "run_dir": "/runs/demo",
        "checks": {
            "GATE-A": {"verdict": "PASS", "on_this_run": True, "evidence": "evidence/A.json"},
            "GATE-B": {"verdict": "PARTIAL", "on_this_run": False, "evidence": "evidence/B.json"},
            "GATE-C": {"verdict": "FAIL", "on_this_run": True, "evidence": "evidence/C.json"},
            "GATE-D": {"verdict": "SKIP", "on_this_run": False, "evidence": "evidence/D.json"},
        },
    }
    assert failed_checks(summary) == [
        "GATE-C reads FAIL on this run (evidence /runs/demo/evidence/C.json)",
        "GATE-D reads SKIP (evidence /runs/demo/evidence/D.json)",
    ]
    assert failed_checks({"run_dir": "/runs/demo"}) == []  # --no-gates: nothing checked


def test_the_gate_rows_carry_pv_status_staleness(tmp_path):
    """The rows read the contracts' own project: fresh evidence has no reason; the bound
    test edited after its evidence makes the gate's row say which file changed."""
    root = copy_demo_project(tmp_path / "project")

    def stale() -> dict:
        return {r["gate"]: r["stale"] for r in _gate_rows(root / "contracts", {})}

    assert stale() == {"GATE-DEMO-001": None, "GATE-DEMO-002": None}
    with (root / "tests" / "test_demo.py").open("a") as source:
        source.write("\n# edited after the evidence was measured\n")
    why = stale()["GATE-DEMO-001"]
    assert why is not None and why.startswith("tests/test_demo.py changed since commit ")
