"""Mutants: the known bugs a falsification test exists to catch, as explicit injections.

A project keeps its mutants in ``tests/mutants/*.py``::

    from gates.mutants import mutant

    @mutant("ties-broken-by-hash-order")
    def _(patch):                     # patch is a pytest.MonkeyPatch
        patch.setattr(bpe, "tie_key", lambda pair: hash(pair))

`pv validate` finds them statically (AST, nothing imported); `gates audit` runs a test with
``SHIPGATE_MUTANT=<id>`` and the pytest plugin (gates.pytest_plugin) applies that mutant
before any test runs.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

ENV_VAR = "SHIPGATE_MUTANT"
MUTANTS_DIR = Path("tests") / "mutants"

MutantFn = Callable[..., None]
REGISTRY: dict[str, MutantFn] = {}


def mutant(mutant_id: str) -> Callable[[MutantFn], MutantFn]:
    """Register the decorated function as the implementation of ``mutant_id``."""

    def register(fn: MutantFn) -> MutantFn:
        if mutant_id in REGISTRY and REGISTRY[mutant_id] is not fn:
            raise ValueError(f"mutant {mutant_id!r} is implemented twice")
        REGISTRY[mutant_id] = fn
        return fn

    return register


def discover(root: Path) -> dict[str, str]:
    """mutant id → ``file:line`` of its implementation, found without importing anything."""
    found: dict[str, str] = {}
    directory = root / MUTANTS_DIR
    for file in sorted(directory.glob("*.py")) if directory.is_dir() else []:
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                name = dec.func if isinstance(dec, ast.Call) else None
                is_mutant = (isinstance(name, ast.Name) and name.id == "mutant") or (
                    isinstance(name, ast.Attribute) and name.attr == "mutant"
                )
                if is_mutant and dec.args and isinstance(dec.args[0], ast.Constant):
                    found[str(dec.args[0].value)] = f"{file.relative_to(root)}:{dec.lineno}"
    return found


def load(root: Path) -> None:
    """Import every ``tests/mutants/*.py`` of ``root`` so their mutants register."""
    directory = root / MUTANTS_DIR
    for file in sorted(directory.glob("*.py")) if directory.is_dir() else []:
        name = f"_shipgate_mutants_{abs(hash(str(file.resolve())))}_{file.stem}"
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, file)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)


def apply_from_env(root: Path):
    """Apply the mutant named by $SHIPGATE_MUTANT in this process, as the pytest plugin
    does; for child processes of a test or a measurement. Returns the MonkeyPatch (None
    when the variable is unset), so the caller can undo it."""
    import pytest  # noqa: PLC0415 - only child processes under audit need it

    mutant_id = os.environ.get(ENV_VAR)
    if not mutant_id:
        return None
    load(root)
    impl = REGISTRY.get(mutant_id)
    if impl is None:
        raise SystemExit(f"{ENV_VAR}={mutant_id}: no such mutant under {root}")
    patch = pytest.MonkeyPatch()
    impl(patch)
    return patch
