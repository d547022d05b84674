"""A checkpoint file against its manifest entry, checked here without the trainer's code.

The gates' checks of a checkpoint do not trust trainer.checkpoint to say whether its bytes
are what its manifest lists: they hash the file themselves, whichever digests the entry
holds (format 1: the whole file's sha256; 2: that and each range's; 3: each range's).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def bytes_as_listed(path: Path, entry: Any) -> bool:
    """Whether ``path`` holds exactly the bytes ``entry`` lists: its size and every digest
    it has, and at least one digest (an entry with none vouches for nothing). Read once, a
    range at a time (a 370M checkpoint's optimizer file is 3 GB)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("size"), int):
        return False
    listed_whole, listed_ranges = entry.get("sha256"), entry.get("range_sha256")
    step = entry.get("range_bytes") if listed_ranges is not None else 1 << 20
    if (listed_whole is None and listed_ranges is None) or not isinstance(step, int) or step < 1:
        return False
    whole, ranges, size = hashlib.sha256(), [], 0
    with path.open("rb") as fh:
        while block := fh.read(step):
            if listed_whole is not None:
                whole.update(block)
            if listed_ranges is not None:
                ranges.append(hashlib.sha256(block).hexdigest())
            size += len(block)
    ranges = ranges or [hashlib.sha256().hexdigest()]  # an empty file: one range, empty
    return (
        size == entry["size"]
        and listed_whole in (None, whole.hexdigest())
        and listed_ranges in (None, ranges)
    )
