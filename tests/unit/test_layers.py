"""Import layering (issues 17 and 34): the trainer's parts and the gates framework's each
form a DAG in the order their package's __init__.py lists, and the gates framework never
imports the trainer.

Imports are read from the source (ast), never by importing: every ``import`` and ``from
... import`` anywhere in a module, function bodies included, and, since code can also run
from a string (``python -c``, importlib), every string constant that holds an import
statement and every ``import_module("...")`` / ``__import__("...")`` of a literal name.

    .venv/bin/pytest -q tests/unit/test_layers.py
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import gates
import trainer

ROOT = Path(__file__).resolve().parents[2]
GATES = ROOT / "gates"
#: The packages whose parts are layered, each by the list in its own docstring.
LAYERED = {"trainer": trainer, "gates": gates}
#: ``from trainer.x import y`` / ``import trainer.x`` inside a string (``python -c`` code).
IMPORT_IN_TEXT = re.compile(
    r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w, ]+)|import\s+([\w.]+))", re.MULTILINE
)
#: One line of a package's layer list: "3. config, checkpoint - what they are".
LAYER_LINE = re.compile(r"^(\d+)\. ([\w, ]+?) - ", re.MULTILINE)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path) -> Iterator[tuple[str, int]]:
    """(module name, line) of every import in ``path``: statements anywhere, import
    statements inside string constants, and literal import_module / __import__ calls.
    ``from a import b`` yields both a and a.b (b may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ""  # relative imports resolve against it; "" outside the repository
    if path.is_relative_to(ROOT):
        package = _module_name(path if path.name == "__init__.py" else path.parent)
    docstrings = {  # documentation shows imports, it does not run them
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            for match in IMPORT_IN_TEXT.finditer(node.value):
                source, names, plain = match.groups()
                line = node.lineno + node.value.count("\n", 0, match.start())
                if plain:
                    yield plain, line
                else:
                    yield source, line
                    for name in names.split(","):
                        yield f"{source}.{name.strip()}", line
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, node.lineno


def package_parts(package: str) -> set[str]:
    """The nodes of the graph: the package's subpackages and its top-level modules."""
    return {
        p.stem if p.is_file() else p.name
        for p in (ROOT / package).iterdir()
        if (p.is_dir() and (p / "__init__.py").is_file())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }


def part_of(name: str, parts: set[str], package: str) -> str | None:
    """The node a module name belongs to (trainer.train.loop -> train), or None."""
    pieces = name.split(".")
    if pieces[0] == package and len(pieces) > 1 and pieces[1] in parts:
        return pieces[1]
    return None


def import_graph(package: str) -> dict[str, dict[str, list[str]]]:
    """part -> imported part -> ["trainer/x/y.py:LINE", ...] (edges between parts only)."""
    parts = package_parts(package)
    graph: dict[str, dict[str, list[str]]] = {part: {} for part in parts}
    for path in sorted((ROOT / package).rglob("*.py")):
        source = part_of(_module_name(path), parts, package)
        if source is None:
            continue  # the package's __init__.py: its docstring and __version__ only
        for name, line in imported_names(path):
            target = part_of(name, parts, package)
            if target is not None and target != source:
                where = f"{path.relative_to(ROOT)}:{line}"
                seen = graph[source].setdefault(target, [])
                if where not in seen:  # `from a import b` names a and a.b on one line
                    seen.append(where)
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, parts in sorted order)."""
    state: dict[str, str] = {}  # "open" while on the path, "done" once fully explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, {})):
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def declared_layers(package: str) -> dict[str, int]:
    """part -> layer number, from the package's __init__.py docstring."""
    layers = {}
    for number, names in LAYER_LINE.findall(LAYERED[package].__doc__ or ""):
        for name in names.split(","):
            layers[name.strip()] = int(number)
    return layers


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_the_parts_of_a_package_import_each_other_without_a_cycle(package):
    graph = import_graph(package)
    cycle = find_cycle(graph)
    if cycle:
        steps = [f"  {a} -> {b}: {', '.join(graph[a][b])}" for a, b in itertools.pairwise(cycle)]
        raise AssertionError("import cycle " + " -> ".join(cycle) + "\n" + "\n".join(steps))


@pytest.mark.parametrize("package", sorted(LAYERED))
def test_every_import_goes_down_the_layers_its_package_init_lists(package):
    layers = declared_layers(package)
    graph = import_graph(package)
    assert not set(graph) - set(layers), (
        f"not in {package}/__init__.py's layer list: {sorted(set(graph) - set(layers))}"
    )
    assert not set(layers) - set(graph), (
        f"listed in {package}/__init__.py but not in {package}/: {sorted(set(layers) - set(graph))}"
    )
    upward = [
        f"{a} (layer {layers[a]}) -> {b} (layer {layers[b]}): {', '.join(where)}"
        for a, targets in sorted(graph.items())
        for b, where in sorted(targets.items())
        if layers[b] >= layers[a]
    ]
    assert not upward, "imports beside or above their own layer:\n" + "\n".join(upward)


def test_no_module_of_the_gates_framework_imports_the_trainer():
    found = sorted(
        {
            f"{path.relative_to(ROOT)}:{line}"
            for path in GATES.rglob("*.py")
            for name, line in imported_names(path)
            if name == "trainer" or name.startswith("trainer.")
        }
    )
    assert not found, "gates/ imports the trainer:\n" + "\n".join(found)


def test_the_import_reader_sees_imports_in_functions_strings_and_import_module(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "import os\n"
        "def f():\n"
        "    from trainer.train import loop\n"
        "CODE = 'import sys\\nfrom trainer.cli import main\\n'\n"
        "importlib.import_module('trainer.store.db')\n",
        encoding="utf-8",
    )
    names = {name for name, _ in imported_names(module)}
    assert {"os", "trainer.train", "trainer.train.loop", "trainer.cli.main"} <= names
    assert {"trainer.store.db", "sys"} <= names


def test_a_cycle_is_found_and_named_in_order():
    graph = {"a": {"b": ["x:1"]}, "b": {"c": ["y:2"]}, "c": {"a": ["z:3"]}, "d": {}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": []}, "b": {}}) is None
