"""The plan as data (trainer/plan/report.py): a section's verdict follows from its
findings, the exit code from the sections, and both renderings cite file:line: field."""

from __future__ import annotations

import json

from trainer.plan.report import SECTION_KEYS, PlanReport, Section, render_json, render_text


def report_with(**sections: Section) -> PlanReport:
    full = {key: sections.get(key, Section(key)) for key in SECTION_KEYS}
    return PlanReport("configs/x.yaml", full)


def test_an_error_fails_a_section_even_when_it_was_also_skipped_or_warned():
    section = Section("data")
    assert section.verdict == "ok"
    section.warning("thin val split")
    assert section.verdict == "warn"
    section.skipped = "not reached"
    assert section.verdict == "skipped"
    section.error("missing")
    assert section.verdict == "FAIL"


def test_the_plan_fails_with_exit_1_exactly_when_a_section_fails():
    warned = Section("time")
    warned.warning("slow")
    assert report_with(time=warned).exit_code == 0
    assert report_with(time=warned).verdict == "warn"
    failed = Section("algebra")
    failed.error("epochs: 1 gives 43 steps < max_steps 5000", "training.epochs", 31)
    assert report_with(time=warned, algebra=failed).exit_code == 1
    assert report_with(time=warned, algebra=failed).verdict == "FAIL"


def test_text_cites_file_line_and_field_and_json_keeps_every_section():
    failed = Section("algebra", values={"steps_per_epoch": 43})
    failed.error("epochs: 1 gives 43 steps", "training.epochs", 31, "C-TRAINCFG-001 INV-CFG-002")
    report = report_with(algebra=failed)
    text = render_text(report)
    assert "error: configs/x.yaml:31: training.epochs: epochs: 1 gives 43 steps" in text
    assert "hint: C-TRAINCFG-001 INV-CFG-002" in text
    assert text.splitlines()[-1] == "plan: FAIL (1 errors, 0 warnings)"
    data = json.loads(render_json(report))
    assert list(data["sections"]) == list(SECTION_KEYS)
    assert data["exit_code"] == 1
    assert data["sections"]["algebra"]["findings"][0] == {
        "level": "error",
        "field": "training.epochs",
        "line": 31,
        "message": "epochs: 1 gives 43 steps",
        "hint": "C-TRAINCFG-001 INV-CFG-002",
    }
