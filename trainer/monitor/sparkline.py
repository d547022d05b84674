"""A series of numbers as one line of unicode block characters.

    sparkline([1, 2, 3, 2])   # '▁▅█▅'

The lowest value maps to the lowest block and the highest to the full one, so the shape
is what shows (a loss going from 10.8 to 3.1 and one from 3.2 to 3.1 both span the
line); the numbers themselves are printed next to it. A non-finite value is drawn as
``!`` and left out of the scale: one NaN must not flatten everything else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

SERIES_WIDTH = 60  # characters a view gives a sparkline

BLOCKS = "▁▂▃▄▅▆▇█"
NON_FINITE = "!"


def sparkline(values: Sequence[float], width: int | None = None) -> str:
    """``values`` (the last ``width`` of them, when given) as block characters."""
    if width is not None:
        values = values[-width:] if width > 0 else []
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return NON_FINITE * len(values)
    low, high = min(finite), max(finite)
    span = high - low
    top = len(BLOCKS) - 1
    chars = []
    for v in values:
        if not math.isfinite(v):
            chars.append(NON_FINITE)
        elif span == 0:
            chars.append(BLOCKS[top // 2])  # a flat series is a flat line, mid-height
        else:
            chars.append(BLOCKS[round((v - low) / span * top)])
    return "".join(chars)
