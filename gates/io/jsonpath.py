"""Render a path into a JSON/YAML document: ``("gates", 2, "x")`` -> ``$.gates[2].x``.

    json_path(("gates", 2, "threshold"))           # '$.gates[2].threshold'
    json_path(("monitoring", "alerts", 1), root="")  # 'monitoring.alerts[1]' (a dotted path)
    json_path(())                                  # '$' (the document itself)

Keys are written as they are, unquoted, the way jsonschema's ``ValidationError.json_path``
writes them: every path shipgate renders is made of identifier-like schema keys.

Tests: .venv/bin/pytest tests/unit/gates/test_jsonpath.py
"""

from __future__ import annotations

from collections.abc import Iterable


def json_path(path: Iterable[str | int], root: str = "$") -> str:
    """``root`` then ``.key`` per mapping key and ``[i]`` per list index; with ``root=""``
    the first key has no leading dot (``a[0].b``)."""
    out = root
    for step in path:
        if isinstance(step, int):
            out += f"[{step}]"
        else:
            out += f".{step}" if out else str(step)
    return out
