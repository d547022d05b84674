"""`pv` as a user runs it: exit codes, output formats, and bad input that must never
end in a traceback (each case runs the real command in a subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gates.cli import pv as pv_cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "pv_project" / "contracts"
VALID = FIXTURES / "valid" / "demo-v1.yaml"


def pv(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gates.cli.pv", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def assert_no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
)

BAD_CONTENT = {
    "empty": (b"", "FILE-EMPTY"),
    "only-comments": (b"# nothing here\n", "FILE-EMPTY"),
    "binary": (bytes(range(256)) * 4, "FILE-BINARY"),
    "non-utf8": (b"metadata:\n  id: C-\xff\xfeX\n", "FILE-ENCODING"),
    "alias-bomb": (BILLION_LAUGHS.encode(), "YAML-ALIAS"),
    "duplicate-keys": (b"metadata: 1\nmetadata: 2\n", "YAML-DUPLICATE-KEY"),
    "tabs": (b"metadata:\n\tid: C-X\n", "YAML-TAB"),
    "syntax": (b"metadata: [unclosed\n", "YAML-SYNTAX"),
    "two-documents": (b"a: 1\n---\nb: 2\n", "YAML-SYNTAX"),
    "deep-nesting": (b"[" * 5000 + b"]" * 5000, "YAML-SYNTAX"),
    "a-list": (b"- 1\n- 2\n", "SCHEMA-TYPE"),
    "a-scalar": (b"just text\n", "SCHEMA-TYPE"),
}


@pytest.mark.ship_blocking
@pytest.mark.parametrize("name", sorted(BAD_CONTENT))
def test_bad_content_is_a_finding_never_a_traceback(tmp_path: Path, capsys, name: str):
    # In-process, so `gates audit` can inject mutants; an exception here is the traceback.
    content, rule = BAD_CONTENT[name]
    path = tmp_path / f"{name}-v1.yaml"
    path.write_bytes(content)
    assert pv_cli.main(["validate", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"error {rule}:" in out
    assert f"{path}:" in out  # every finding names its file:line:column


@pytest.mark.parametrize("name", ["binary", "alias-bomb", "non-utf8"])
def test_bad_content_through_the_real_command(tmp_path: Path, name: str):
    content, rule = BAD_CONTENT[name]
    path = tmp_path / f"{name}-v1.yaml"
    path.write_bytes(content)
    proc = pv("validate", path)
    assert_no_traceback(proc)
    assert proc.returncode == 1
    assert f"error {rule}:" in proc.stdout


def test_a_ten_megabyte_file_is_refused_quickly(tmp_path: Path):
    path = tmp_path / "huge-v1.yaml"
    path.write_bytes(b"k: " + b"x" * (10 * 1024 * 1024) + b"\n")
    proc = pv("validate", path)
    assert_no_traceback(proc)
    assert proc.returncode == 1
    assert "FILE-TOO-LARGE" in proc.stdout


def test_a_directory_is_a_usage_error(tmp_path: Path):
    proc = pv("validate", tmp_path)
    assert_no_traceback(proc)
    assert proc.returncode == 2
    assert "is a directory" in proc.stderr


def test_a_missing_path_is_a_usage_error_and_other_files_are_still_checked(tmp_path: Path):
    proc = pv("validate", tmp_path / "nope.yaml", VALID)
    assert_no_traceback(proc)
    assert proc.returncode == 2
    assert "no such file" in proc.stderr
    assert "1 file valid" in proc.stdout


def test_unreadable_file_is_a_usage_error(tmp_path: Path, monkeypatch, capsys):
    # Injected, because chmod 000 does not stop root (which CI runs as) from reading.
    path = tmp_path / "secret-v1.yaml"
    path.write_text("a: 1\n")
    real_open = os.open

    def deny(name, flags, *args, **kwargs) -> int:
        if Path(name) == path:
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    assert pv_cli.main(["validate", str(path)]) == 2
    assert "Permission denied" in capsys.readouterr().err


def test_unknown_option_is_a_usage_error():
    proc = pv("validate", "--no-such-option")
    assert proc.returncode == 2


def test_valid_contract_exits_zero():
    proc = pv("validate", VALID)
    assert proc.returncode == 0, proc.stdout
    assert "1 file valid (0 warnings)" in proc.stdout


def test_json_format_is_machine_readable():
    case = FIXTURES / "invalid" / "ref-dangling" / "demo-v1.yaml"
    proc = pv("validate", "--format", "json", case)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    (finding,) = report["findings"]
    assert finding["rule"] == "REF-DANGLING"
    assert finding["line"] > 1 and finding["column"] > 1
    assert finding["json_path"] == "$.gates[1].falsification_tests[0]"
    assert report["summary"] == {"files": 1, "errors": 1, "warnings": 0}


def test_github_format_emits_workflow_annotations():
    case = FIXTURES / "invalid" / "schema-enum" / "demo-v1.yaml"
    proc = pv("validate", "--format", "github", case)
    assert proc.returncode == 1
    first = proc.stdout.splitlines()[0]
    assert first.startswith(f"::error file={case},line=")
    assert ",title=SCHEMA-ENUM::" in first
    assert "did you mean `PASS`?" in first


def test_strict_turns_warnings_into_failure():
    case = FIXTURES / "invalid" / "style-warnings" / "demo.yaml"
    assert pv("validate", case).returncode == 0
    assert pv("validate", "--strict", case).returncode == 1


def test_status_requires_ship_ready_only_when_asked():
    ready = pv("status", "--require-ship-ready", VALID)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    assert "ship-blocking gates: 1 of 1 PASS" in ready.stdout


def test_status_refuses_invalid_contracts():
    proc = pv("status", FIXTURES / "invalid" / "evidence-verdict-mismatch" / "demo-v1.yaml")
    assert proc.returncode == 1
    assert "EVIDENCE-MISMATCH" in proc.stderr


def test_shipped_contracts_validate_clean():
    contracts = sorted((ROOT / "contracts").glob("*.yaml"))
    assert len(contracts) >= 4
    proc = pv("validate", *contracts)
    assert proc.returncode == 0, proc.stdout
    assert "(0 warnings)" in proc.stdout


def test_status_refuses_ship_ready_while_a_ship_blocking_gate_is_open(tmp_path: Path):
    project = tmp_path / "pv_project"
    shutil.copytree(FIXTURES.parent, project)
    contract = project / "contracts" / "valid" / "demo-v1.yaml"
    text = contract.read_text()
    # GATE-DEMO-002 is PENDING and not ship-blocking; make it block the ship.
    head, sep, tail = text.partition("  - id: GATE-DEMO-002")
    contract.write_text(head + sep + tail.replace("ship_blocking: false", "ship_blocking: true", 1))
    proc = pv("status", "--require-ship-ready", contract, cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "outstanding: GATE-DEMO-002" in proc.stdout


def test_shipped_contracts_are_ship_ready():
    # Every ship-blocking gate in contracts/ has been promoted by `gates promote`; this
    # fails the moment one is demoted or a new ship-blocking gate lands unmeasured.
    proc = pv("status", "--require-ship-ready")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "outstanding: GATE-" not in proc.stdout


def test_deep_block_nesting_is_refused(tmp_path: Path):
    path = tmp_path / "deep-v1.yaml"
    path.write_text("".join(f"{' ' * i}k{i}:\n" for i in range(400)) + " " * 400 + "v: 1\n")
    proc = pv("validate", path)
    assert_no_traceback(proc)
    assert proc.returncode == 1
    assert "YAML-SYNTAX" in proc.stdout and "nesting too deep" in proc.stdout
