"""`gates list` / `gates show` and `trainer env` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gates.cli import gates as gates_cli
from trainer import cli as trainer_cli

VALID = Path(__file__).resolve().parents[1] / "fixtures" / "pv_project" / "contracts" / "valid"


def test_list_filters_by_status(capsys):
    assert gates_cli.main(["list", "--status", "PASS", "--files", str(VALID / "demo-v1.yaml")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["GATE-DEMO-001"]


def test_show_json_names_tests_evidence_and_history(capsys):
    argv = ["show", "GATE-DEMO-001", "--json", "--files", str(VALID / "demo-v1.yaml")]
    assert gates_cli.main(argv) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["status"] == "PASS"
    assert info["evidence"] == "evidence/C-DEMO/GATE-DEMO-001.json"
    assert info["falsification_tests"][0]["mutants"] == ["add-one"]
    assert [h["version"] for h in info["history"]] == ["1.1.0"]


@pytest.mark.parametrize(("gate", "hint"), [("GATE-DEMO-01", "did you mean GATE-DEMO-001?")])
def test_unknown_gate_suggests_the_nearest(capsys, gate, hint):
    assert gates_cli.main(["show", gate, "--files", str(VALID / "demo-v1.yaml")]) == 2
    assert hint in capsys.readouterr().err


def test_gates_refuse_invalid_contracts(capsys):
    bad = VALID.parent / "invalid" / "evidence-verdict-mismatch" / "demo-v1.yaml"
    assert gates_cli.main(["list", "--files", str(bad)]) == 1
    assert "EVIDENCE-MISMATCH" in capsys.readouterr().err


def test_trainer_env_reports_torch_and_device(capsys):
    assert trainer_cli.main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["torch"] and env["device"] in ("cpu", "cuda")


def test_a_closed_pipe_is_not_taken_for_an_io_error(monkeypatch):
    """BrokenPipeError is an OSError: caught as one, `pv status | head` would say
    "error" and exit 2. It must reach its own branch (128 + SIGPIPE)."""
    from gates import exit_codes  # noqa: PLC0415
    from gates.cli.common import run_guarded  # noqa: PLC0415

    monkeypatch.setattr(exit_codes, "stop_on_broken_pipe", lambda: exit_codes.BROKEN_PIPE)

    def writes_to_a_closed_pipe() -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert run_guarded("pv", writes_to_a_closed_pipe, debug=False) == exit_codes.BROKEN_PIPE
