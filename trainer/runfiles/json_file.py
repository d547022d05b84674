"""How a run writes a JSON file whole: atomically and durably.

    atomic_write_json(path, {"max_steps": 100, "last": record})

gates/io/files.py's atomic write: a temp file beside ``path``, fsynced, renamed over it, the
directory fsynced; a reader sees the old file or the new one, never a part, and a crash
or power loss leaves one of the two. Indented, a newline at the end; NaN and infinity are
refused (JSON has none: metrics_file.json_record spells them as strings first).
"""

from __future__ import annotations

import json
from pathlib import Path

from gates.io.files import atomic_write_text


def atomic_write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON to ``path`` atomically (readers never see half a file)."""
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")
