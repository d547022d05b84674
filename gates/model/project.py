"""Where a project keeps its mutants and gate measurements: the ``[tool.shipgate]`` table.

A project that adopts shipgate says, in its ``pyproject.toml``::

    [tool.shipgate]
    mutants = ["tests/mutants"]            # modules with @mutant("…") functions
    measurements = ["tests/measurements"]  # modules with @measures("GATE-…") functions
    packages = ["transformers"]            # versions evidence records, beside the framework's

Each entry is a directory relative to the project root. Every ``*.py`` in it is one module,
imported under its dotted path from the root (``tests/measurements/loop.py`` is
``tests.measurements.loop``) with the root first on ``sys.path``: modules import the
project's own code and each other as the project's tests do, and a child process started
from the root can import them by the same name. Without the table the two defaults above
hold. ``pv`` reads these directories statically (AST, nothing imported); ``gates`` and the
pytest plugin import them. The framework itself holds no mutant and no measurement.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gates.io import files

PYPROJECT = "pyproject.toml"
TABLE = "tool.shipgate"
#: Largest pyproject.toml or module read: source files are kilobytes, this is a mistake.
MAX_FILE_BYTES = 16 * 1024 * 1024

#: kind → (default directories, the decorator that registers one item of that kind)
KINDS: dict[str, tuple[tuple[str, ...], str]] = {
    "mutants": (("tests/mutants",), "mutant"),
    "measurements": (("tests/measurements",), "measures"),
}


class ProjectConfigError(ValueError):
    """The ``[tool.shipgate]`` table is malformed; the message names the file and key."""


@dataclass(frozen=True)
class ProjectConfig:
    root: Path
    #: kind → directories (absolute), in the order the table lists them
    directories: dict[str, tuple[Path, ...]]
    #: distributions whose versions evidence records in host.packages
    packages: tuple[str, ...] = ()

    def modules(self, kind: str, only: str | None = None) -> list[tuple[Path, str]]:
        """(file, dotted module name) of every module of ``kind`` (or of the one named
        ``only``), sorted by name.

        Every ``*.py`` is imported, so one that is not a regular file (a FIFO would hang the
        import, /dev/zero fill memory) is a ProjectConfigError naming it. Hidden names
        (``.#x.py``, an editor's lock symlink) are no module and are passed over."""
        found: list[tuple[Path, str]] = []
        for directory in self.directories[kind]:
            if not directory.is_dir():
                continue
            package = ".".join(directory.relative_to(self.root).parts)
            found += [(f, f"{package}.{f.stem}") for f in sorted(directory.glob("*.py"))]
        modules = [(f, name) for f, name in found if not f.name.startswith(("__", "."))]
        modules = [(f, name) for f, name in modules if only in (None, name)]
        for f, _ in modules:
            try:
                os.close(files.open_regular(f))
            except OSError as e:
                raise ProjectConfigError(
                    f"{f}: {e.strerror or e}; every *.py in [{TABLE}] {kind} is imported"
                ) from e
        return modules


def load_config(root: Path) -> ProjectConfig:
    """The project's shipgate table; defaults where the table or a key is absent."""
    root = root.resolve()
    table: dict = {}
    pyproject = root / PYPROJECT
    if os.path.lexists(pyproject):
        try:
            text = files.read_regular(pyproject, MAX_FILE_BYTES).decode("utf-8")
            data = tomllib.loads(text)
        except OSError as e:  # a FIFO, a dangling symlink, a directory, unreadable
            raise ProjectConfigError(f"{pyproject}: {e.strerror or e}") from e
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise ProjectConfigError(f"{pyproject}: not valid TOML: {e}") from e
        table = data.get("tool", {}).get("shipgate", {})
        if not isinstance(table, dict):
            raise ProjectConfigError(f"{pyproject}: [{TABLE}] must be a table")
    unknown = sorted(set(table) - {*KINDS, "packages"})
    if unknown:
        raise ProjectConfigError(
            f"{pyproject}: [{TABLE}] has unknown key(s) {', '.join(unknown)}; "
            f"known: {', '.join(KINDS)}, packages"
        )
    directories = {
        kind: tuple(
            _directory(root, pyproject, kind, entry) for entry in _entries(pyproject, table, kind)
        )
        for kind in KINDS
    }
    packages = table.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(v, str) and v for v in packages):
        raise ProjectConfigError(
            f"{pyproject}: [{TABLE}] packages must be a list of distribution names, "
            f"got {packages!r}"
        )
    return ProjectConfig(root, directories, tuple(packages))


def _entries(pyproject: Path, table: dict, kind: str) -> list[str]:
    value = table.get(kind, list(KINDS[kind][0]))
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ProjectConfigError(
            f"{pyproject}: [{TABLE}] {kind} must be a list of directory names, got {value!r}"
        )
    return value


def _directory(root: Path, pyproject: Path, kind: str, entry: str) -> Path:
    relative = Path(entry)
    parts = relative.parts
    if relative.is_absolute() or ".." in parts or not all(p.isidentifier() for p in parts):
        raise ProjectConfigError(
            f"{pyproject}: [{TABLE}] {kind}: {entry!r} must be a relative directory inside "
            "the project whose parts are Python identifiers (it is imported as a package)"
        )
    return root / relative


def discover(root: Path, kind: str) -> dict[str, str]:
    """Registered id → ``file:line`` of its implementation, found without importing."""
    return {item: at for item, at, _ in _registered(root, kind)}


def registering_module(root: Path, kind: str, item_id: str) -> str | None:
    """The dotted name of the module of ``kind`` that registers ``item_id``, found as
    :func:`discover` finds it (read, not imported); None when no module visibly does (a
    registration whose id is not written out). Two registrations are a ProjectConfigError
    naming both: importing one module alone would hide the other."""
    places = [(at, name) for item, at, name in _registered(root, kind) if item == item_id]
    if len(places) > 1:
        raise ProjectConfigError(
            f"{item_id} is registered more than once: {', '.join(at for at, _ in places)}"
        )
    return places[0][1] if places else None


def _registered(root: Path, kind: str) -> Iterator[tuple[str, str, str]]:
    """(id, ``file:line``, dotted module name) of every registration written out in the
    modules of ``kind``, in module order."""
    config = load_config(root)
    for file, name in config.modules(kind):
        try:
            data = files.read_regular(file, MAX_FILE_BYTES)
        except (OSError, ValueError):  # unreadable: its import says why
            continue
        for item, line in _registrations(data, str(file), KINDS[kind][1]):
            yield item, f"{file.relative_to(config.root)}:{line}", name


@functools.lru_cache(maxsize=256)
def _registrations(data: bytes, filename: str, decorator: str) -> tuple[tuple[str, int], ...]:
    """(id, line) of every function in ``data`` decorated ``@decorator("ID", ...)`` with the
    id written out; none when it cannot be parsed (its import says why). Cached by the
    bytes: a plan looks up every gate, and parsing every module per gate took 65 ms each."""
    try:
        tree = ast.parse(data.decode("utf-8"), filename)
    except (SyntaxError, ValueError):  # ValueError: not UTF-8, or a NUL byte
        return ()
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if _is_call_of(dec, decorator) and isinstance(dec.args[0], ast.Constant):
                found.append((str(dec.args[0].value), dec.lineno))
    return tuple(found)


def _is_call_of(node: ast.expr, name: str) -> bool:
    if not isinstance(node, ast.Call) or not node.args:
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == name) or (
        isinstance(f, ast.Attribute) and f.attr == name
    )


def import_all(root: Path, kind: str, *, only: str | None = None) -> None:
    """Import every module of ``kind`` (or only the one whose dotted name is ``only``) so
    its decorators register.

    The project root goes first on sys.path. A top-level package of the same name already
    imported from elsewhere (another project's ``tests``) is refused, never mixed up.
    """
    config = load_config(root)
    modules = config.modules(kind, only)  # only that one is opened: a traced read is a source
    if modules and str(config.root) not in sys.path:
        sys.path.insert(0, str(config.root))
    for file, name in modules:
        package = name.split(".")[0]
        top = sys.modules.get(package)
        paths = [Path(p).resolve() for p in getattr(top, "__path__", [])] if top else []
        if top is not None and config.root / package not in paths:
            raise ProjectConfigError(
                f"{file}: cannot import it as {name}: a package {package!r} is "
                f"already imported from {', '.join(map(str, paths)) or top!r}"
            )
        importlib.import_module(name)
