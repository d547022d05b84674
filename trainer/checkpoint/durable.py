"""A checkpoint's JSON files, written durably into its staging directory.

The staging directory is published by one rename (trainer/checkpoint/save.py), so a file in
it needs its bytes on disk, not an atomic replace of its own. Atomic replacement of a single
file, fsync of files and directories and sha256 of a file: gates/files.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON and fsync it. NaN/inf are refused: they are not JSON."""
    text = json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n"
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
