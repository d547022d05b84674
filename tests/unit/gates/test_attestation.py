"""Evidence as an in-toto Statement (issue 19 item 9): the subject is what the evidence is
about, by digest; the predicate is everything else; nothing is lost either way."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gates.provenance import attestation

SHA = re.compile(r"^[0-9a-f]{64}$")
EVIDENCE = {
    "schema_version": 1,
    "gate": "GATE-WIDGET-001",
    "verdict": "PASS",
    "measurements": {"line_count": {"value": 3, "unit": "lines"}},
    "artifacts": [
        {"name": "loop-run", "sha256": "a" * 64, "bytes": 10, "recipe": {"command": ["python"]}},
        {"name": "notes.txt", "path": "data/notes.txt", "sha256": "b" * 64, "bytes": 3},
    ],
    "sources": [
        {"path": "widget.py", "sha256": "c" * 64},
        {"path": "tests/test_widget.py", "sha256": "d" * 64},
    ],
}


def test_the_statement_has_the_in_toto_shape():
    stmt = attestation.statement(EVIDENCE)
    assert stmt["_type"] == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == attestation.PREDICATE_TYPE
    assert [s["name"] for s in stmt["subject"]] == [
        "loop-run",
        "data/notes.txt",
        "widget.py",
        "tests/test_widget.py",
    ]
    assert all(SHA.match(s["digest"]["sha256"]) for s in stmt["subject"])
    assert "artifacts" not in stmt["predicate"] and "sources" not in stmt["predicate"]
    assert stmt["predicate"]["measurements"] == EVIDENCE["measurements"]


def test_the_evidence_comes_back_whole():
    assert attestation.evidence_of(attestation.statement(EVIDENCE)) == EVIDENCE


def test_evidence_about_nothing_is_no_statement():
    with pytest.raises(ValueError, match="no artifact and no source"):
        attestation.statement({**EVIDENCE, "artifacts": [], "sources": []})


def test_gates_attest_prints_a_committed_gates_statement(tmp_path: Path):
    root = Path(__file__).resolve().parents[3]
    gate = "GATE-PV-001"
    out = tmp_path / "statement.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gates.cli.gates", "attest", gate, "--out", str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    stmt = json.loads(out.read_text())
    recorded = json.loads((root / "evidence" / "C-PV-VALIDATOR" / f"{gate}.json").read_text())
    assert attestation.evidence_of(stmt) == recorded
    assert stmt["subject"], "a gate's evidence is about the files it read"
