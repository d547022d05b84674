"""Read a YAML file defensively and keep the position of every key and list item.

Bad input never raises past this module: special files (FIFOs, devices, symlink loops),
empty, binary, non-UTF-8, oversized files, tabs, duplicate keys, aliases (billion-laughs)
and syntax errors each become a :class:`SourceError` naming a rule and a 1-based line and
column.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from ruamel.yaml.nodes import ScalarNode

from gates.io import files
from gates.model.findings import DocPath

#: Contracts are kilobytes; anything this large is a mistake, and parsing it wastes CI time.
MAX_SOURCE_BYTES = 2 * 1024 * 1024
#: ruamel's scanner is quadratic in nesting depth (5000 nested `[` take ~30 s); contracts
#: nest a handful of levels, so deeper input is refused before ruamel sees it.
MAX_FLOW_DEPTH = 64
MAX_INDENT = 256


class SourceError(Exception):
    """The file could not be read as one YAML document."""

    def __init__(self, rule: str, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.rule, self.message, self.line, self.column = rule, message, line, column


class UnreadablePathError(Exception):
    """The path is missing, a directory, or not readable: a usage/I-O error (exit 2)."""


@dataclass(frozen=True)
class YamlSource:
    path: Path
    text: str
    #: The round-trip tree (CommentedMap/Seq), which carries positions.
    tree: Any
    #: The same content as plain dicts/lists/str/int/float/bool (dates as ISO strings).
    data: Any

    def locate(self, where: DocPath, *, at_key: bool = True) -> tuple[int, int]:
        """1-based (line, column) of the deepest node of ``where`` that exists.

        A missing key is reported at its parent, which is where it must be added.
        """
        node, pos = self.tree, (0, 0)
        for step in where:
            if isinstance(node, CommentedMap) and not isinstance(step, int) and step in node:
                pos = node.lc.key(step) if at_key else node.lc.value(step)
                node = node[step]
            elif isinstance(node, CommentedSeq) and isinstance(step, int) and 0 <= step < len(node):
                pos = node.lc.item(step)
                node = node[step]
            else:
                break
        return pos[0] + 1, pos[1] + 1


class _DatesAsText(RoundTripConstructor):
    """Keep YAML timestamps as their text: `2026-02-30` must become a DATE-FORMAT finding
    with a position, not a ValueError from the date constructor."""


_DatesAsText.add_constructor("tag:yaml.org,2002:timestamp", RoundTripConstructor.construct_yaml_str)


def _refuse_alias(event: Any) -> None:
    """YAML-ALIAS (billion laughs) at the first alias: called on each node's first event as
    it is composed, so an alias bomb costs nothing, since nothing after it is read."""
    if isinstance(event, AliasEvent):
        mark = event.start_mark
        raise SourceError(
            "YAML-ALIAS",
            f"alias *{event.anchor} refers to an anchor",
            mark.line + 1,
            mark.column + 1,
        )


class _RefusingAliases(Composer):
    """The composer that refuses aliases (_refuse_alias): one pass over the text."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        _refuse_alias(self.parser.peek_event())
        return super().compose_node(parent, index)


def _yaml() -> YAML:
    y = YAML(typ="rt", pure=True)
    y.Composer = _RefusingAliases
    y.Constructor = _DatesAsText
    y.allow_duplicate_keys = False
    return y


def _line_col_of_offset(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _decode(raw: bytes) -> str:
    if b"\x00" in raw[:8192]:
        raise SourceError("FILE-BINARY", "binary content (NUL bytes): not a YAML text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _line_col_of_offset(raw[: exc.start].decode("utf-8", "replace"), exc.start)
        # The column counts bytes decoded so far; good enough to find the bad byte.
        raise SourceError(
            "FILE-ENCODING",
            f"byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8",
            line,
            col,
        ) from None
    return text.removeprefix("\ufeff")


def _check_tabs(text: str) -> None:
    for lineno, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip() and not line.lstrip().startswith("#"):
            raise SourceError(
                "YAML-TAB", "tab used for indentation", lineno, indent.index("\t") + 1
            )


def _check_nesting(text: str) -> None:
    """Linear guard against pathological nesting. Brackets inside quoted text may be
    miscounted; that only matters past MAX_FLOW_DEPTH, which no real contract reaches."""
    depth = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        indent = len(line) - len(line.lstrip(" "))
        if indent > MAX_INDENT:
            raise SourceError(
                "YAML-SYNTAX",
                f"indented {indent} columns (limit {MAX_INDENT}): nesting too deep for a contract",
                lineno,
                1,
            )
        for col, ch in enumerate(line, start=1):
            if ch == "#" and (col == 1 or line[col - 2] in " \t"):
                break
            if ch in "[{":
                depth += 1
                if depth > MAX_FLOW_DEPTH:
                    raise SourceError(
                        "YAML-SYNTAX",
                        f"flow collections nested deeper than {MAX_FLOW_DEPTH}",
                        lineno,
                        col,
                    )
            elif ch in "]}":
                depth = max(0, depth - 1)


def to_plain(node: Any) -> Any:
    """Round-trip tree → plain JSON-like data (what JSON Schema and checkers see)."""
    if isinstance(node, dict):
        return {str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, _dt.datetime | _dt.date):
        return node.isoformat()
    return str(node)


def read_yaml(path: Path) -> YamlSource:
    """Read and parse one YAML file; raises :class:`SourceError` or :class:`UnreadablePathError`.

    Only a regular file is read, and at most MAX_SOURCE_BYTES + 1 bytes of it
    (gates/io/files.py ``read_regular``): a FIFO, a device, a socket, a symlink loop or a
    dangling symlink is a FILE-NOT-REGULAR finding, never a hang or an endless read.
    """
    try:
        raw = files.read_regular(path, MAX_SOURCE_BYTES)
    except files.NotRegularFileError as exc:
        raise SourceError(
            "FILE-NOT-REGULAR", f"{exc.strerror}: pv reads only regular files"
        ) from None
    except files.FileTooLargeError as exc:
        raise SourceError("FILE-TOO-LARGE", exc.strerror) from None
    except FileNotFoundError:
        raise UnreadablePathError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UnreadablePathError(f"{path}: is a directory, not a contract file") from None
    except OSError as exc:
        raise UnreadablePathError(f"{path}: {exc.strerror or exc}") from None
    return parse_yaml(_decode(raw), path)


def parse_yaml(text: str, path: Path) -> YamlSource:
    """Parse YAML text (already decoded) with the same guards as :func:`read_yaml`."""
    if not text.strip():
        raise SourceError("FILE-EMPTY", "empty file")
    _check_tabs(text)
    _check_nesting(text)
    try:
        tree = _yaml().load(text)
    except MarkedYAMLError as exc:
        rule = "YAML-DUPLICATE-KEY" if "duplicate key" in str(exc.problem) else "YAML-SYNTAX"
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        message = " ".join(p for p in (exc.context, exc.problem) if p) or "invalid YAML"
        raise SourceError(rule, message.replace("\n", " "), line, col) from None
    except (YAMLError, RecursionError, ValueError, TypeError) as exc:
        # Constructor failures carry no position; the message still names the value.
        raise SourceError("YAML-SYNTAX", f"invalid YAML: {exc}".splitlines()[0]) from None
    if tree is None:
        raise SourceError("FILE-EMPTY", "the file holds only comments or an empty document")
    return YamlSource(path=path, text=text, tree=tree, data=to_plain(tree))


def declared_id(path: Path) -> str | None:
    """The ``metadata.id`` a contract file declares, read no further than that key: what a
    sibling scan needs (gates/pv/validate.py), without parsing whole files it does not
    validate. None when the file cannot be read (read_yaml's guards), the id is not a string,
    or the YAML goes wrong before the id is reached."""
    try:
        text = _decode(files.read_regular(path, MAX_SOURCE_BYTES))
        _check_tabs(text)
        _check_nesting(text)
        return _metadata_id(text)
    except (SourceError, OSError, YAMLError, RecursionError, ValueError, StopIteration):
        return None


def _metadata_id(text: str) -> str | None:
    y = _yaml()
    events = _refusing_aliases(y.parse(text))
    next(events), next(events)  # the stream's and the document's start
    if not isinstance(next(events), MappingStartEvent):
        return None
    value = _value_at(events, ("metadata", "id"))
    if value is None:
        return None
    if value.style is not None:  # quoted: a string whatever it reads as
        return value.value
    tag = y.resolver.resolve(ScalarNode, value.value, value.implicit)
    # What the full load would make of it: plain text, or a date kept as its text.
    return value.value if tag in ("tag:yaml.org,2002:str", "tag:yaml.org,2002:timestamp") else None


def _refusing_aliases(events: Iterator[Any]) -> Iterator[Any]:
    for event in events:
        _refuse_alias(event)  # as the full load would
        yield event


def _value_at(events: Iterator[Any], keys: tuple[str, ...]) -> ScalarEvent | None:
    """The scalar at ``keys`` in the mapping whose start was just read; None when a key is
    missing or holds something else. Reads the events up to it, skipping other subtrees."""
    for key in events:
        if isinstance(key, MappingEndEvent):
            return None
        _skip_subtree(events, key)  # a complex key (a mapping or list as a key)
        value = next(events)
        if isinstance(key, ScalarEvent) and key.value == keys[0]:
            if len(keys) == 1:
                return value if isinstance(value, ScalarEvent) else None
            return _value_at(events, keys[1:]) if isinstance(value, MappingStartEvent) else None
        _skip_subtree(events, value)
    return None


def _skip_subtree(events: Iterator[Any], start: Any) -> None:
    """Reads past the collection ``start`` opens (nothing for a scalar)."""
    depth = int(isinstance(start, MappingStartEvent | SequenceStartEvent))
    while depth:
        event = next(events)
        if isinstance(event, MappingStartEvent | SequenceStartEvent):
            depth += 1
        elif isinstance(event, MappingEndEvent | SequenceEndEvent):
            depth -= 1
