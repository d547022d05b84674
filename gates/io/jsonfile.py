"""Read JSON that a checkout supplies (evidence, the audit record, a commit journal, an
artifact's volatile JSON): bounded, and every failure a :class:`JsonFileError` naming the file.

    data = read_json(path, limit=MAX_EVIDENCE_BYTES)   # raises JsonFileError (or FileNotFoundError)
    data = loads(text, path)                           # text already read: the same checks

``json.loads`` recurses once per nesting level, so 200,000 ``[`` raise RecursionError — an
internal error with no file named — and a document just under the interpreter's limit
parses but breaks the next recursive walk of it (a schema validator, a key filter). So
nesting is bounded before parsing: more than :data:`MAX_DEPTH` levels is an error at the line
and column of the first bracket too deep. No file gates reads nests more than a dozen levels.

What each failure says, after the path: the special file it is (a FIFO, a device, a symlink
loop: gates/io/files.py ``read_regular`` never opens one), its size over the limit, the first
byte that is not UTF-8, the bracket nested too deep, or the JSON error (``line:column`` when
there is one). A missing file raises FileNotFoundError unchanged: callers say what a missing
file means to them (no evidence yet, nothing to recover).

Tests: tests/unit/gates/test_jsonfile.py; pv's findings: tests/acceptance/test_pv_evidence_files.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gates.io import files

#: Deepest nesting of arrays and objects read. Evidence nests 5 levels, the audit record 4;
#: 256 leaves room for any record gates writes and stays far below the interpreter's
#: recursion limit (1000), which every recursive walk of the data shares.
MAX_DEPTH = 256

# A JSON string (skipped whole: brackets inside it do not nest) or a bracket.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


class JsonFileError(Exception):
    """A JSON file could not be read or parsed; ``str()`` is ``path[:line:column]: problem``."""

    def __init__(
        self, path: Path | str, problem: str, line: int | None = None, column: int | None = None
    ) -> None:
        self.path, self.problem, self.line, self.column = path, problem, line, column
        super().__init__(self.located())

    def located(self, shown: str | None = None) -> str:
        """The message with the file shown as ``shown`` (default: the path as given)."""
        at = f":{self.line}:{self.column}" if self.line is not None else ""
        return f"{shown if shown is not None else self.path}{at}: {self.problem}"


def _line_column(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def first_too_deep(text: str, max_depth: int = MAX_DEPTH) -> int | None:
    """Offset of the first ``[`` or ``{`` nested deeper than ``max_depth``, or None. Linear;
    a document with fewer openers than the limit is not scanned at all."""
    if text.count("[") + text.count("{") <= max_depth:
        return None
    depth = 0
    for token in _TOKEN.finditer(text):
        char = token.group()
        if char in ("[", "{"):
            depth += 1
            if depth > max_depth:
                return token.start()
        elif char in ("]", "}"):
            depth -= 1
    return None


def loads(text: str, path: Path | str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse ``text``, read from ``path``; any failure is a :class:`JsonFileError` naming it."""
    deep = first_too_deep(text, max_depth)
    if deep is not None:
        line, column = _line_column(text, deep)
        raise JsonFileError(path, f"JSON nested deeper than {max_depth} levels", line, column)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonFileError(path, f"not JSON ({exc.msg})", exc.lineno, exc.colno) from None
    except RecursionError:  # only if the caller's stack is already deep: still this file
        raise JsonFileError(path, "JSON nested too deep to parse") from None
    except ValueError as exc:  # an integer of more digits than int() converts
        raise JsonFileError(path, f"not JSON ({exc})") from None


def decode(raw: bytes, path: Path | str) -> str:
    """``raw`` as UTF-8 text; a byte that is not is a :class:`JsonFileError` at its place."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8", "replace")
        line, column = _line_column(before, len(before))
        problem = f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        raise JsonFileError(path, problem, line, column) from None


def read_json(path: Path | str, limit: int, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in the regular file at ``path``, at most ``limit`` bytes. Raises
    FileNotFoundError when there is nothing at ``path``, else :class:`JsonFileError`."""
    try:
        raw = files.read_regular(path, limit)
    except FileNotFoundError:
        raise
    except files.FileTooLargeError as exc:
        raise JsonFileError(path, f"too large: {exc.strerror}") from None
    except OSError as exc:  # a FIFO, a device, a symlink loop, a directory, no permission
        raise JsonFileError(path, exc.strerror or str(exc)) from None
    return loads(decode(raw, path), path, max_depth)
