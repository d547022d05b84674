"""What a directory holds, by content: the tests' one way to say "nothing was written".

A run directory's writer lock file (trainer/runfiles/lock.py) is left out: it records who
last took the lock, which is not what a run wrote (a refused second writer can take it).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from trainer.runfiles.names import WRITER_LOCK_FILE


def files_under(directory: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``directory`` (empty when missing)."""
    if not directory.exists():
        return {}
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != WRITER_LOCK_FILE
    }
