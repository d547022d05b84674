"""Shared set-up for the `trainer plot` tests: synthetic metrics.jsonl files, and readers
of what a plot holds (the points of each SVG data line, a PNG's size)."""

from __future__ import annotations

import json
import re
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

SVG_NS = "{http://www.w3.org/2000/svg}"


def records(steps: int, *, eval_every: int = 0, scale: float = 1.0) -> list[dict]:
    """Metrics records as the loop writes them: a curved loss (so an affine check of the
    plotted y is meaningful), warmup then constant lr, val_loss every ``eval_every``."""
    out = []
    for step in range(1, steps + 1):
        record = {
            "step": step,
            "epoch": 0,
            "loss": scale * (2.0 + 8.0 / step),
            "lr": 1e-3 * min(1.0, step / 4),
            "grad_norm": 1.0 / step**0.5,
            "tokens": 256,
            "tokens_per_s": 1000.0,
            "step_s": 0.25,
        }
        if eval_every and step % eval_every == 0:
            record["val_loss"] = scale * (2.5 + 8.0 / step)
        out.append(record)
    return out


def write_metrics(run_dir: Path, rows: list[dict], tail: str = "") -> Path:
    """``run_dir``/metrics.jsonl holding ``rows`` (one JSON line each) and then ``tail``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row) + "\n" for row in rows) + tail
    (run_dir / "metrics.jsonl").write_text(text, encoding="utf-8")
    return run_dir


def svg_lines(data: bytes) -> dict[str, dict]:
    """Every data line of a plot's SVG by id (loss-0, lr-1, ...): its path's points and
    its marker count."""
    root = ET.fromstring(data)
    lines = {}
    for group in root.iter(f"{SVG_NS}g"):
        gid = group.get("id", "")
        if not re.fullmatch(r"(loss|val_loss|lr|grad_norm)-\d+", gid):
            continue
        path = group.find(f"{SVG_NS}path")
        numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", path.get("d"))]
        points = list(zip(numbers[0::2], numbers[1::2], strict=True))
        markers = len(group.findall(f".//{SVG_NS}use"))
        lines[gid] = {"points": points, "markers": markers}
    return lines


def affine_to(points: list[tuple[float, float]], xs: list[float], ys: list[float]) -> bool:
    """Whether the drawn points are (xs, ys) under one x and one y scale-and-shift: the
    plotted data is the data, every point of it, in order."""
    if len(points) != len(xs):
        return False

    def fits(drawn: list[float], data: list[float]) -> bool:
        scale = (drawn[-1] - drawn[0]) / (data[-1] - data[0])
        pairs = zip(data, drawn, strict=True)
        return all(abs(drawn[0] + scale * (v - data[0]) - d) < 0.01 for v, d in pairs)

    return fits([p[0] for p in points], xs) and fits([p[1] for p in points], ys)


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR, after checking the signature."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])
