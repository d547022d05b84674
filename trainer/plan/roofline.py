"""A CPU roofline: this machine's measured dense float32 matmul peak, the ceiling a CPU run's
model FLOP/s is compared with (a CPU has no datasheet peak to compute an MFU against).

    peak = matmul_peak()             # MatmulPeak: measured once, then read from the cache
    peak.flops_per_second            # e.g. 1.9e11
    fraction = model_flops_per_s / peak.flops_per_second   # a metrics record's peak_fraction

What is measured: ``torch.mm`` of two square float32 matrices (contiguous, CPU) at each of
SIZES, with the torch thread count in force at the call (torch.get_num_threads()), one
untimed warm-up product per size, then up to REPEATS timed products (fewer, and fewer
sizes, once CALIBRATION_SECONDS have passed on a slow or busy machine); a product of n x n
matrices counts 2 n^3 FLOPs. A size's rate is the median of its timed products; the peak
is the best size's rate. The whole calibration takes about 1-2 s, and is what a well-blocked
dense kernel reaches here: an upper bound for a model's mix of matmuls, attention,
elementwise work and memory traffic, not a promise. A busy machine measures a lower peak;
delete the cache file to measure again.

The result is cached as JSON in ``$SHIPGATE_CACHE_DIR/matmul-peak.json``, else
``$XDG_CACHE_HOME/shipgate/matmul-peak.json``, else ``~/.cache/shipgate/matmul-peak.json``,
one entry per machine key: the CPU model name (/proc/cpuinfo's "model name", else
platform.processor()), the logical CPU count, the torch thread count and the torch
version. A cache file that cannot be read, is not JSON, or holds an entry of the wrong
shape is ignored: the peak is measured again and the file rewritten atomically; a cache
directory that cannot be written costs the cache, never the run (no traceback either way).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gates.io.files import atomic_write_bytes, read_regular

#: Overrides the cache directory (tests, read-only homes).
CACHE_ENV = "SHIPGATE_CACHE_DIR"
CACHE_FILE = "matmul-peak.json"
#: The cache file's format; another value is ignored as corrupt.
CACHE_VERSION = 1
#: A cache file larger than this is not one of ours.
CACHE_LIMIT = 1024 * 1024
#: Square matrix sizes timed, smallest first.
SIZES = (512, 1024, 2048)
#: Timed products per size, at most (after one untimed warm-up product).
REPEATS = 3
#: The calibration starts no new size, and adds no timed product, once this many seconds
#: have passed (the first size always gets its warm-up and one timed product).
CALIBRATION_SECONDS = 2.0


@dataclass(frozen=True)
class MatmulPeak:
    flops_per_second: float
    size: int  # the matrix size that gave the peak
    key: dict  # the machine key it was measured under
    cached: bool  # read from the cache file, not measured by this call

    def __str__(self) -> str:
        return f"{self.flops_per_second / 1e9:,.0f} GFLOP/s"


def cache_path() -> Path:
    """Where the peak is cached (see the module docstring)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override) / CACHE_FILE
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "shipgate" / CACHE_FILE


def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo's, else platform.processor(), else "unknown"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                name, sep, value = line.partition(":")
                if sep and name.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_key() -> dict:
    """What a cached peak is valid for: CPU model, logical CPUs, torch threads and version."""
    import torch  # noqa: PLC0415 - torch only when a peak is asked for

    return {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count() or 0,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def _key_text(key: dict) -> str:
    return json.dumps(key, sort_keys=True)


def measure_peak(
    sizes: tuple[int, ...] = SIZES,
    repeats: int = REPEATS,
    *,
    clock: Callable[[], float] = time.perf_counter,
    seconds: float = CALIBRATION_SECONDS,
) -> tuple[float, int]:
    """(best median FLOP/s over ``sizes``, the size that gave it): see the module docstring."""
    import torch  # noqa: PLC0415

    generator = torch.Generator().manual_seed(0)
    start = clock()
    best, best_size = 0.0, sizes[0]
    for n in sizes:
        if clock() - start > seconds:
            break  # a slow or busy machine: the larger sizes are left out
        a = torch.rand(n, n, generator=generator)
        b = torch.rand(n, n, generator=generator)
        out = torch.empty(n, n)
        torch.mm(a, b, out=out)  # warm-up: threads spun up, pages touched
        rates = []
        for _ in range(repeats):
            t0 = clock()
            torch.mm(a, b, out=out)
            elapsed = clock() - t0
            if elapsed > 0:
                rates.append(2.0 * n**3 / elapsed)
            if clock() - start > seconds:
                break
        if rates and statistics.median(rates) > best:
            best, best_size = statistics.median(rates), n
    return best, best_size


def _read_entries(path: Path) -> dict | None:
    """The cache's {key text: entry}, or None when it is missing or not a valid cache."""
    try:
        data = json.loads(read_regular(path, CACHE_LIMIT))
    except (OSError, ValueError):  # missing, not a regular file, too large, not JSON/UTF-8
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return None
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return None
    for entry in entries.values():
        if not _valid_entry(entry):
            return None
    return entries


def _valid_entry(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    rate, size = entry.get("flops_per_second"), entry.get("size")
    return (
        isinstance(rate, float | int)
        and not isinstance(rate, bool)
        and math.isfinite(rate)
        and rate > 0
        and isinstance(size, int)
        and not isinstance(size, bool)
        and size > 0
    )


def matmul_peak(
    *,
    path: Path | None = None,
    key: dict | None = None,
    measure: Callable[[], tuple[float, int]] = measure_peak,
) -> MatmulPeak:
    """This machine's float32 matmul peak: the cached entry for its key, else measured and
    cached (see the module docstring). ``measure`` and ``key`` are for tests."""
    path = cache_path() if path is None else Path(path)
    key = machine_key() if key is None else key
    text = _key_text(key)
    entries = _read_entries(path)
    if entries is not None and text in entries:
        entry = entries[text]
        return MatmulPeak(float(entry["flops_per_second"]), entry["size"], key, cached=True)
    rate, size = measure()
    if not (math.isfinite(rate) and rate > 0):
        return MatmulPeak(rate, size, key, cached=False)  # nothing worth caching
    entries = dict(entries or {})
    entries[text] = {
        "flops_per_second": rate,
        "size": size,
        "key": key,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    payload = {"version": CACHE_VERSION, "entries": entries}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, (json.dumps(payload, indent=2) + "\n").encode("utf-8"))
    except OSError:
        pass  # an unwritable cache costs the next run a re-measure, nothing else
    return MatmulPeak(rate, size, key, cached=False)


def percent(fraction: float) -> str:
    """A fraction as a person reads it: "26 %", "0.9 %" (one decimal under 10 %)."""
    value = fraction * 100
    return f"{value:.0f} %" if value >= 10 else f"{value:.1f} %"


def peak_fraction(model_flops_per_second: float, peak: float | None) -> float | None:
    """The share of ``peak`` a rate reaches; None without a usable peak."""
    if peak is None or not (math.isfinite(peak) and peak > 0):
        return None
    return model_flops_per_second / peak
