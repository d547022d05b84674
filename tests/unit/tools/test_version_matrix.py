"""tools/version_matrix.py: a row is what the check's evidence says, or the crash it was;
every verdict but PASS carries its cause or says it has none; the whole run, end to end, on
`pv init`'s scaffold with this interpreter standing in for a release's virtualenv."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

from tools import version_matrix
from tools.version_matrix import TOOLS


def test_a_row_is_the_evidence_verdict_and_its_measured_values(tmp_path):
    out = tmp_path / "e.json"
    out.write_text(json.dumps({"verdict": "FAIL", "measurements": {"m": {"value": 1.5}}}))
    row = version_matrix.row_of("GATE-X-001", 1, "anything", out, 2.0)
    assert row == {"gate": "GATE-X-001", "verdict": "FAIL", "values": {"m": 1.5}, "seconds": 2.0}


def test_a_check_that_wrote_no_evidence_is_no_verdict_with_its_last_words(tmp_path):
    said = "collecting\ngates: internal error: TypeError: unexpected keyword\n\n"
    row = version_matrix.row_of("GATE-X-001", 3, said, tmp_path / "none.json", 1.0)
    assert row["verdict"] == "no verdict (exit 3)"
    assert row["said"] == "gates: internal error: TypeError: unexpected keyword"


def test_every_verdict_but_pass_carries_its_cause_or_says_it_has_none():
    rows = [
        {"version": "1.0", "gate": "G-1", "verdict": "PASS"},
        {"version": "1.0", "gate": "G-2", "verdict": "FAIL"},
        {"version": "2.0", "gate": "G-2", "verdict": "FAIL"},
        {"version": "2.0", "gate": "G-1", "verdict": "no verdict (exit 3)"},
    ]
    explained = version_matrix.explain(rows, {"G-2@1.0": "read in 1.0's source: a bug"})
    assert "cause" not in explained[0]
    assert [r.get("cause") for r in explained[1:]] == [
        "read in 1.0's source: a bug",
        "unexplained",
        "unexplained",
    ]


def test_the_table_has_a_line_per_release_and_a_column_per_gate():
    rows = [{"version": "1.0", "gate": "G-1", "verdict": "PASS"}]
    table = version_matrix.markdown(rows, ["1.0", "2.0"], ["G-1", "G-2"])
    assert table.splitlines() == [
        "| release | G-1 | G-2 |",
        "|---|---|---|",
        "| 1.0 | PASS | - |",
        "| 2.0 | - | - |",
    ]


def test_the_hf_example_has_four_gates():
    gates = version_matrix.gate_ids(version_matrix.ROOT / "examples" / "hf-trainer")
    assert [g for g, _ in gates] == [f"GATE-HF-TRAINER-00{i}" for i in range(1, 5)]


def test_a_whole_run_on_the_scaffold_records_each_release_and_gate(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    pv = [sys.executable, "-m", "gates.cli.pv", "init", str(project)]
    subprocess.run(pv, check=True, capture_output=True)
    venvs = tmp_path / "venvs"
    for version in ("1.0", "2.0"):  # this interpreter stands in for each release's venv
        bin_dir = venvs / f"pytest-{version}" / "bin"
        bin_dir.mkdir(parents=True)
        python = bin_dir / "python"
        python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)
        # filled as the tool fills it: its requirements, so it is reused, never refilled
        torch_version = importlib.metadata.version("torch").split("+")[0]
        wanted = [f"pytest=={version}", f"torch=={torch_version}", *TOOLS]
        (bin_dir.parent / ".filled").write_text("\n".join(wanted) + "\n")
    out = tmp_path / "matrix.json"
    causes = tmp_path / "causes.json"
    causes.write_text("{}")
    argv = ["--example", str(project), "--package", "pytest", "--versions", "1.0", "2.0",
            "--venvs", str(venvs), "--causes", str(causes), "--out", str(out)]  # fmt: skip
    assert version_matrix.main(argv) == 0
    record = json.loads(out.read_text())
    assert [(r["version"], r["gate"], r["verdict"]) for r in record["rows"]] == [
        ("1.0", "GATE-EXAMPLE-001", "PASS"),
        ("2.0", "GATE-EXAMPLE-001", "PASS"),
    ]
    assert record["environments"]["1.0"]["torch"] is not None, "read from the environment"
    assert "| 2.0 | PASS |" in record["table"]


def test_causes_found_later_join_the_record_without_measuring_again(tmp_path):
    out = tmp_path / "matrix.json"
    rows = [{"version": "1.0", "gate": "G-1", "verdict": "FAIL", "cause": "unexplained"}]
    out.write_text(json.dumps({"rows": rows, "table": "kept"}))
    causes = tmp_path / "causes.json"
    causes.write_text(json.dumps({"G-1@1.0": "read in 1.0's source"}))
    argv = ["--example", str(tmp_path), "--versions", "1.0", "--causes", str(causes),
            "--out", str(out), "--explain-only"]  # fmt: skip
    assert version_matrix.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["rows"][0]["cause"] == "read in 1.0's source"
    assert record["table"] == "kept"
