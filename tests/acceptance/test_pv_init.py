"""`pv init`: a project that has never seen shipgate gets a contract whose gate checks at once,
and nothing it already has is overwritten."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tree import files_under

BIN = Path(sys.executable).parent


def run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SHIPGATE_MUTANT"}
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_an_empty_directory_validates_and_checks_its_example_gate_at_once(tmp_path: Path):
    init = run(tmp_path, "pv", "init")
    assert init.returncode == 0, init.stderr
    assert "created contracts/example-v1.yaml" in init.stdout

    contracts = [str(p.relative_to(tmp_path)) for p in (tmp_path / "contracts").glob("*.yaml")]
    validated = run(tmp_path, "pv", "validate", *contracts)
    assert validated.returncode == 0, validated.stdout + validated.stderr

    checked = run(tmp_path, "gates", "check", "GATE-EXAMPLE-001", "--out", "checked.json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "GATE-EXAMPLE-001: PASS" in checked.stdout
    record = json.loads((tmp_path / "checked.json").read_text())
    # run() starts gates by its absolute path; evidence names the program, never that path.
    assert record["command"] == ["gates", "check", "GATE-EXAMPLE-001", "--out", "checked.json"]
    assert record["workload"]["inputs"][0]["path"] == "shipgate_example.py"

    tests = run(tmp_path, "pytest", "-q", "-m", "ship_blocking", "-p", "no:cacheprovider")
    assert tests.returncode == 0, tests.stdout
    assert "1 passed" in tests.stdout

    # Positive control: the scaffolded gate is not a constant; the bug its mutant names fails it.
    subject = tmp_path / "shipgate_example.py"
    subject.write_text(
        subject.read_text().replace(
            "return sum(loss for loss, real in zip(losses, mask, strict=True) if real) / tokens",
            "return sum(losses) / len(losses)",
        )
    )
    broken = run(tmp_path, "gates", "check", "GATE-EXAMPLE-001")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "GATE-EXAMPLE-001: FAIL" in broken.stdout


def test_a_second_init_refuses_and_changes_nothing(tmp_path: Path):
    assert run(tmp_path, "pv", "init").returncode == 0
    before = files_under(tmp_path)
    again = run(tmp_path, "pv", "init")
    assert again.returncode == 2
    assert "would overwrite contracts/example-v1.yaml" in again.stderr
    assert "nothing was written" in again.stderr
    assert files_under(tmp_path) == before


def test_an_existing_pyproject_is_appended_to_and_its_pytest_table_kept(tmp_path: Path):
    own = '[project]\nname = "theirs"\n\n[tool.pytest.ini_options]\naddopts = ["-ra"]\n'
    (tmp_path / "pyproject.toml").write_text(own)
    (tmp_path / ".gitignore").write_text("build/")
    result = run(tmp_path, "pv", "init")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "pyproject.toml").read_text()
    assert text.startswith(own)
    assert text.count("[tool.pytest.ini_options]") == 1
    assert "[tool.shipgate]" in text
    assert "your [tool.pytest.ini_options] was left as it is" in result.stdout
    assert (tmp_path / ".gitignore").read_text() == "build/\n.gates.lock\n"


@pytest.mark.parametrize(
    "pyproject",
    ["[tool.shipgate]\nmutants = ['m']\n", "[tool.pytest\n", "tool = { black = {} }\n"],
    ids=["already-initialised", "not-toml", "would-not-parse"],
)
def test_a_pyproject_it_cannot_extend_is_refused_with_nothing_written(
    tmp_path: Path, pyproject: str
):
    (tmp_path / "pyproject.toml").write_text(pyproject)
    result = run(tmp_path, "pv", "init")
    assert result.returncode == 2, result.stdout
    assert "nothing was written" in result.stderr
    assert files_under(tmp_path) == {
        "pyproject.toml": hashlib.sha256(pyproject.encode()).hexdigest()
    }
