"""Find absolute paths of one machine in text and in JSON documents.

An absolute path in evidence (``/work/main/.venv/bin/gates``, ``/tmp/run``, ``C:\\Users\\x``)
names a file only one machine has: nobody else can re-verify what it points at. The
detector looks for tokens, not for every slash:

- a POSIX path: ``/`` followed by a path character, where the ``/`` starts a token (at the
  start of the text or after a space, quote, bracket, ``=`` or ``,``). So ``1/2``,
  ``tokens/s``, ``./rel``, ``../rel``, ``~/x`` and the ``//`` of ``https://host/x`` are not
  paths, nor is a ``/`` standing alone as division (``a / b``);
- a Windows drive path: a letter, ``:``, then ``\\`` or ``/``, starting a token
  (``C:\\x``, ``d:/x``; not ``http://``, whose ``p:`` follows a letter);
- a UNC path: ``\\\\server\\share``.

    find_absolute("ran /work/main/.venv/bin/gates")  # '/work/main/.venv/bin/gates'
    find_absolute("12.5 tokens/s, 1/2 of it")        # None
    list(absolute_paths({"command": ["gates", "--out", "/tmp/x"]}))
    # [(('command', 2), '/tmp/x')]

Tests: .venv/bin/pytest tests/unit/gates/test_machine_paths.py
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: What may start a token before the path: the start, whitespace, quotes, brackets, = , ; |
_TOKEN_START = r"(?:^|(?<=[\s\"'`(\[{<=,;|]))"
#: A character a path segment is made of (not a space, quote, bracket or separator).
_PATH_CHAR = r"[\w.~+@%-]"
_ABSOLUTE = re.compile(
    _TOKEN_START
    + r"(?:"
    + rf"/{_PATH_CHAR}"  # POSIX: /work, /tmp, /.venv
    + rf"|[A-Za-z]:[\\/]{_PATH_CHAR}"  # Windows drive: C:\Users, d:/x
    + r"|\\\\[\w.-]+\\"  # UNC: \\server\share
    + r")[^\s\"'`<>|,;()\[\]{}]*"
)


def find_absolute(text: str) -> str | None:
    """The first absolute machine path in ``text``, or None."""
    m = _ABSOLUTE.search(text)
    return m.group(0).rstrip(".:") if m else None  # "see /tmp/x." names /tmp/x


def absolute_paths(
    value: Any, where: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(JSON path, offending token) for every string value, and every mapping key, of a
    parsed JSON document that holds an absolute machine path. A key is reported at the
    path of the value it names."""
    if isinstance(value, str):
        found = find_absolute(value)
        if found:
            yield where, found
    elif isinstance(value, dict):
        for key, item in value.items():
            found = find_absolute(str(key))
            if found:
                yield (*where, key), found
            yield from absolute_paths(item, (*where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from absolute_paths(item, (*where, i))


#: What stands for the folders of an absolute command-line path outside the project: the
#: name is kept (``…/audit.json``); the rest says only where one machine kept the file.
#: The same mark gates.audit.bound_tests.portable cuts other absolute paths to.
OUTSIDE = "…"


def portable_command(prog: str, args: list[str], root: Path) -> list[str]:
    """A command line as evidence records it: ``prog`` by name (never one machine's path to
    its executable), absolute paths under ``root`` made relative to it, and absolute paths
    outside it cut to ``…/<name>``. Relative paths stay as typed. ``--opt=/abs/path`` counts too.

        portable_command("gates", ["check", "G", "--artifact", "/tmp/a.txt"], root)
        # ['gates', 'check', 'G', '--artifact', '…/a.txt']
    """
    resolved_root = root.resolve()

    def portable(arg: str) -> str:
        option, eq, value = arg.partition("=")
        if eq and option.startswith("-"):
            return f"{option}={portable(value)}"
        path = Path(arg)
        if not path.is_absolute():
            return arg
        full = path.resolve()
        if full.is_relative_to(resolved_root):
            return str(full.relative_to(resolved_root))
        return f"{OUTSIDE}/{path.name}" if path.name else OUTSIDE

    return [Path(prog).name, *(portable(a) for a in args)]
