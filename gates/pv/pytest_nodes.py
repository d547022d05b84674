"""Static index of pytest node ids: does ``tests/x.py::Class::test_y`` exist, and is it marked?

Nothing is imported or run (no torch import, no test collection): each test file is parsed
with :mod:`ast`, once per validation run.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path

from gates.io.files import read_regular

#: Largest test file parsed; a test module is kilobytes, anything this large is a mistake.
MAX_TEST_FILE_BYTES = 16 * 1024 * 1024


@dataclass
class NodeInfo:
    exists: bool
    reason: str = ""
    markers: set[str] = field(default_factory=set)
    parametrized: bool = False


def _marker_names(expr: ast.expr) -> set[str]:
    """Marker names in a decorator or `pytestmark` value: pytest.mark.X, mark.X, X(...)."""
    names: set[str] = set()
    if isinstance(expr, ast.List | ast.Tuple):
        for elt in expr.elts:
            names |= _marker_names(elt)
        return names
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Attribute):
        base = expr.value
        if (isinstance(base, ast.Attribute) and base.attr == "mark") or (
            isinstance(base, ast.Name) and base.id == "mark"
        ):
            names.add(expr.attr)
    return names


def _decorator_markers(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for dec in node.decorator_list:
        out |= _marker_names(dec)
    return out


def _class_body_markers(cls: ast.ClassDef) -> set[str]:
    out = _decorator_markers(cls)
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            out |= _marker_names(stmt.value)
    return out


class NodeIndex:
    """Resolves node ids under one project root, caching each parsed file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[Path, ast.Module | str] = {}

    def _module(self, file: Path) -> ast.Module | str:
        if file not in self._modules:
            try:
                text = read_regular(file, MAX_TEST_FILE_BYTES).decode("utf-8")
                self._modules[file] = ast.parse(text, str(file))
            except OSError as exc:  # also a FIFO, a device, a symlink loop, too large
                self._modules[file] = f"cannot read {file}: {exc.strerror or exc}"
            except ValueError as exc:  # not UTF-8, or a NUL byte
                self._modules[file] = f"cannot read {file}: {exc}"
            except SyntaxError as exc:
                self._modules[file] = f"{file} has a syntax error at line {exc.lineno}"
        return self._modules[file]

    def lookup(self, node_id: str) -> NodeInfo:
        base, _, param = node_id.partition("[")
        rel, *names = base.split("::")
        file = self.root / rel
        if not os.path.lexists(file) or file.is_dir():
            return NodeInfo(False, f"no test file {rel} under {self.root}")
        module = self._module(file)
        if isinstance(module, str):
            return NodeInfo(False, module)
        markers: set[str] = set()
        for stmt in module.body:
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
            ):
                markers |= _marker_names(stmt.value)
        scope: list[ast.stmt] = module.body
        found: ast.AST | None = None
        for depth, name in enumerate(names):
            last = depth == len(names) - 1
            kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
            found = next((s for s in scope if isinstance(s, kinds) and s.name == name), None)
            if found is None:
                what = "test function" if last else "class"
                return NodeInfo(False, f"{rel} defines no {what} `{name}`")
            if isinstance(found, ast.ClassDef):
                markers |= _class_body_markers(found)
                scope = found.body
        assert isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef)
        fn_markers = _decorator_markers(found)
        markers |= fn_markers
        parametrized = "parametrize" in fn_markers
        if param and not parametrized:
            return NodeInfo(False, f"`{names[-1]}` is not parametrized, so `[{param}` cannot exist")
        if not names[-1].startswith("test"):
            return NodeInfo(False, f"`{names[-1]}` is not collected by pytest (name lacks test)")
        return NodeInfo(True, markers=markers, parametrized=parametrized)
