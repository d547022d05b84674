"""tools/adopter_venv.py: what it installs into an adopter's virtualenv and what it refuses.
The installs themselves need the registry and minutes (make framework-alone, CI; make
examples-alone); these are the decisions they rest on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gates.pv.validate import validate
from tools import adopter_venv as tool

EXAMPLES = tool.ROOT / "examples"


def test_the_repositorys_distributions_come_from_the_copy_and_the_rest_from_the_registry(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "x"\ndependencies = ["torch>=2.4", "shipgate>=0.1,<0.2"]\n'
        '[project.optional-dependencies]\ntest = ["pytest>=8.3", "shipgate-hf-trainer"]\n'
        'other = ["numpy"]\n'
    )
    src = tmp_path / "src"
    assert tool.requirements(pyproject, src) == [
        "torch>=2.4",
        str(src),
        "pytest>=8.3",
        str(src / "examples" / "hf-trainer"),
    ]


def test_a_pyproject_without_a_project_table_declares_nothing_and_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.shipgate]\n")
    with pytest.raises(tool.StepFailedError, match="no \\[project\\] table"):
        tool.requirements(tmp_path / "pyproject.toml", tmp_path)


@pytest.mark.parametrize("name", sorted(p.parent.name for p in EXAMPLES.glob("*/pyproject.toml")))
def test_every_example_declares_its_dependencies_and_needs_no_reference_trainer(name):
    wanted = tool.requirements(EXAMPLES / name / "pyproject.toml", Path("/src"))
    names = {tool.requirement_name(r) for r in wanted if not r.startswith("/src")}
    assert "/src" in wanted, "the framework, from this repository"
    assert "torch" in names
    assert str(Path("/src/trainer")) not in wanted and "shipgate-trainer" not in names


@pytest.mark.parametrize("name", sorted(p.parent.name for p in EXAMPLES.glob("*/pyproject.toml")))
def test_the_gates_it_checks_are_the_gates_the_contracts_declare(name):
    example = EXAMPLES / name
    paths = sorted((example / "contracts").glob("*.yaml"))
    declared = sorted(g.id for c in validate(paths).contracts for g in c.gates)
    found = sorted(g for p in paths for g in tool.GATE_ID.findall(p.read_text(encoding="utf-8")))
    assert found == declared and found


def test_the_copy_holds_what_git_sees_and_nothing_ignored_or_deleted(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "kept.py").write_text("x = 1\n")
    (repo / "gone.py").write_text("y = 1\n")
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big.bin").write_text("no")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    (repo / "gone.py").unlink()
    (repo / "new.py").write_text("z = 1\n")
    dest = tool.copy_tree(repo, tmp_path / "copy")
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == [
        ".gitignore",
        "kept.py",
        "new.py",
    ]


def test_an_importable_module_that_must_not_be_is_named(tmp_path):
    python = Path(sys.executable)
    tool.not_importable(python, ("no_such_module_shipgate_xyz",), tmp_path)
    with pytest.raises(tool.StepFailedError, match="json"):
        tool.not_importable(python, ("no_such_module_shipgate_xyz", "json"), tmp_path)


def test_a_failing_step_stops_the_run_named(tmp_path):
    with pytest.raises(tool.StepFailedError, match="the step: exit 3"):
        tool.run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, "the step")
    assert "hello" in tool.run([sys.executable, "-c", "print('hello')"], tmp_path, "echo")
