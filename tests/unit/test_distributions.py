"""Two distributions from this repository (issue 34): the framework `shipgate` (the root's
pyproject.toml: gates, pv, the pytest plugin) and the reference trainer `shipgate-trainer`
(trainer/pyproject.toml). Each declares exactly the distributions its package imports: one
it imports but does not declare breaks a fresh install, one it declares but never imports
(torch in the framework) is weight a user cannot shed. Imports are read from the source (ast),
function bodies included; module names map to distributions through what is installed here.
tools/adopter_venv.py proves the framework's side by installing it alone (make framework-alone, CI).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: distribution → (its pyproject.toml, the package it ships)
DISTRIBUTIONS = {
    "shipgate": (ROOT / "pyproject.toml", "gates"),
    "shipgate-trainer": (ROOT / "trainer" / "pyproject.toml", "trainer"),
}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower()


def third_party_imports(package: Path) -> dict[str, str]:
    """Top-level module → first ``file:line`` importing it, for every module outside the
    standard library and outside ``package`` itself. A ``setup.py`` at the package's root is
    the build's script (the trainer's C module), run by the build backend: its imports are
    the ``[build-system]`` requires, checked by the test below."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        if path == package / "setup.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != package.name:
                    found.setdefault(top, f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def needed(package: Path) -> dict[str, str]:
    """Distribution → where the package first imports it. Our own packages map to our own
    distributions (the editable installs of this repository)."""
    ours = {pkg: dist for dist, (_, pkg) in DISTRIBUTIONS.items()}
    installed = packages_distributions()
    out: dict[str, str] = {}
    for module, where in third_party_imports(package).items():
        dists = [ours[module]] if module in ours else installed.get(module)
        assert dists, f"{where}: imports {module}, which no installed distribution provides"
        out.setdefault(dists[0].lower(), where)
    return out


def compare(deps: set[str], imports: dict[str, str]) -> tuple[dict[str, str], set[str]]:
    """(imported but not declared → where, declared but never imported)."""
    return {d: w for d, w in imports.items() if d not in deps}, deps - set(imports)


def declared(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]


@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
def test_each_distribution_declares_exactly_what_its_package_imports(distribution):
    pyproject, package = DISTRIBUTIONS[distribution]
    project = declared(pyproject)
    assert project["name"] == distribution
    deps = {_name(r) for r in project["dependencies"]}
    imports = needed(ROOT / package)
    missing, unused = compare(deps, imports)
    assert not missing, f"{pyproject.name} of {distribution} lacks {missing} (imported there)"
    assert not unused, f"{distribution} declares {sorted(unused)}, which {package}/ never imports"


def test_the_framework_ships_no_trainer_and_needs_no_torch():
    framework = declared(ROOT / "pyproject.toml")
    deps = {_name(r) for r in framework["dependencies"]}
    assert deps.isdisjoint({"torch", "numpy", "matplotlib", "safetensors", "rich"}), deps
    assert set(framework["scripts"]) == {"pv", "gates"}
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["packages"]["find"]["include"] == ["gates*"]
    trainer = declared(ROOT / "trainer" / "pyproject.toml")
    assert set(trainer["scripts"]) == {"trainer"}
    assert "shipgate" in {_name(r) for r in trainer["dependencies"]}


def test_a_missing_or_unused_declaration_is_found(tmp_path):
    # Positive control for the comparison above: a package importing numpy and a stdlib
    # module, and nothing else third-party.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text(
        "import json\nfrom numpy import zeros\n\ndef f():\n    import pytest\n"
    )
    found = third_party_imports(package)
    assert found == {"numpy": "pkg/a.py:2", "pytest": "pkg/a.py:5"}
    assert compare({"numpy", "pytest"}, found) == ({}, set())
    assert compare({"numpy", "torch"}, found) == ({"pytest": "pkg/a.py:5"}, {"torch"})


def test_a_build_script_imports_only_what_the_build_system_requires():
    """trainer/setup.py (it compiles the BPE merge loop) runs under the build backend's
    requires, never at run time: what it imports must be declared there."""
    pyproject, package = DISTRIBUTIONS["shipgate-trainer"]
    requires = {
        _name(r)
        for r in tomllib.loads(pyproject.read_text(encoding="utf-8"))["build-system"]["requires"]
    }
    script = ROOT / package / "setup.py"
    assert script.is_file()
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else node.names[0].name).split(".")[0]
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
    }
    assert imported - set(sys.stdlib_module_names) == {"setuptools"} <= requires
