"""What a directory holds, by content: the tests' one way to say "nothing was written"."""

from __future__ import annotations

import hashlib
from pathlib import Path


def files_under(directory: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``directory`` (empty when missing)."""
    if not directory.exists():
        return {}
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }
