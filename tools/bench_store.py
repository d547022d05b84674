"""Benchmark what the run store adds to a training step: RunRecorder.step (one row, one
commit to runs.db) against the files every step already writes (MetricsWriter.write: a
metrics.jsonl line, flushed, and training_state.json replaced atomically), side by side in
one run; write the numbers as JSON.

    python tools/bench_store.py --out evidence/benchmarks/run-store-step-cost-cpu.json
    python tools/bench_store.py --steps 200 --against runs/demo/train    # a real run's steps

Both sides get the same record of every step, in one temporary run directory on the disk
of ``--dir`` (default: the system's temp directory; pass a path on the disk runs train on).
Within each step the order alternates (files first on even steps, the store first on odd
ones), so drift and cache warmth hit both. Medians and 95th percentiles are reported, and
the store's median as a fraction of the files' and, with ``--against RUN_DIR``, of that
run's median step time (metrics.jsonl's step_s): what the store costs a real run. The
run's rows are counted afterwards: a store that gave up (a warning) is a failed benchmark,
not a fast one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gates.io.machine_paths import portable_command  # noqa: E402
from gates.provenance.evidence import portable_path  # noqa: E402 - needs ROOT on sys.path
from trainer.model.config import preset  # noqa: E402
from trainer.runfiles.metrics_file import read_metrics  # noqa: E402
from trainer.runfiles.names import RUNS_DB_FILE  # noqa: E402
from trainer.store.identity import new_run_id  # noqa: E402
from trainer.store.registry import HOME_ENV  # noqa: E402
from trainer.train.metrics import MetricsWriter  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(seconds: list[float]) -> dict[str, float]:
    return {
        "median_us": statistics.median(seconds) * 1e6,
        "p95_us": _percentile(seconds, 0.95) * 1e6,
        "max_us": max(seconds) * 1e6,
    }


def _run_dir(root: Path, steps: int) -> Path:
    """A run directory as `trainer apply` starts one: run_manifest.json first."""
    run = root / "run"
    run.mkdir()
    manifest = {
        "created": "2025-01-01T00:00:00+00:00",
        "run_id": new_run_id(),
        "run_started": "2025-01-01T00:00:00+00:00",
        "seed": 0,
        "config": {"name": "bench-store", "training": {"max_steps": steps}},
    }
    (run / "run_manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return run


@contextlib.contextmanager
def _own_registry(root: Path) -> Iterator[None]:
    """The benchmark's run registers in a registry of its own, never the user's (whose
    `trainer runs ls` would list it as missing once the temporary directory is gone)."""
    before = os.environ.get(HOME_ENV)
    os.environ[HOME_ENV] = str(root / "home")
    try:
        yield
    finally:
        if before is None:
            del os.environ[HOME_ENV]
        else:
            os.environ[HOME_ENV] = before


def run_benchmark(steps: int, directory: Path | None = None) -> dict[str, Any]:
    """Time ``steps`` steps of both sides; the numbers as a JSON-able dict."""
    if steps < 2:
        raise ValueError("--steps must be at least 2 (the order alternates per step)")
    with tempfile.TemporaryDirectory(dir=directory) as tmp, _own_registry(Path(tmp)):
        run = _run_dir(Path(tmp), steps)
        writer = MetricsWriter(run, preset("tiny"), 256, torch.device("cpu"))
        recorder, writer.recorder = writer.recorder, None  # the two sides, timed apart
        if recorder is None or recorder.failure is not None:
            raise RuntimeError(f"{run / RUNS_DB_FILE}: the store did not start: {recorder.failure}")
        files_s: list[float] = []
        store_s: list[float] = []
        for step in range(1, steps + 1):
            record = writer.step_record(
                step, epoch=0, loss=9.0 / step, lr=1e-3, grad_norm=1.0, tokens=2048, seconds=0.15
            )

            def files(record: dict = record) -> None:
                writer.write(record, last_step=steps)

            def store(record: dict = record) -> None:
                recorder.step(record, last_step=steps)

            order = (files, store) if step % 2 == 0 else (store, files)
            for side in order:
                started = time.perf_counter()
                side()
                (files_s if side is files else store_s).append(time.perf_counter() - started)
        recorder.close()
        writer.close()
        if recorder.failure is not None:
            raise RuntimeError(recorder.failure)
        import sqlite3  # noqa: PLC0415

        conn = sqlite3.connect(f"{(run / RUNS_DB_FILE).as_uri()}?mode=ro", uri=True)
        stored = conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
        conn.close()
        if stored != steps:
            raise RuntimeError(f"{run / RUNS_DB_FILE}: {stored} rows for {steps} steps")
    result = {
        "workload": {
            "steps": steps,
            "order": "files, store alternating first per step",
            "journal": "WAL, synchronous=NORMAL (trainer/store/db.py)",
            "directory": portable_path(Path(directory or tempfile.gettempdir()), ROOT),
        },
        "files": _summary(files_s),
        "store": _summary(store_s),
        "rows_stored": stored,
    }
    result["store_over_files"] = statistics.median(store_s) / statistics.median(files_s)
    return result


def against_run(result: dict[str, Any], run_dir: Path) -> None:
    """Add the store's median as a fraction of ``run_dir``'s median step time."""
    records = read_metrics(Path(run_dir) / "metrics.jsonl")
    step_s = [r["step_s"] for r in records if isinstance(r.get("step_s"), float)]
    if not step_s:
        raise ValueError(f"{run_dir / 'metrics.jsonl'}: no step_s recorded")
    median = statistics.median(step_s)
    result["against_run"] = {
        "run_dir": portable_path(Path(run_dir), ROOT),
        "steps": len(step_s),
        "median_step_s": median,
        "store_fraction_of_step": result["store"]["median_us"] / 1e6 / median,
    }


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"{'side':<7} {'median':>10} {'p95':>10} {'max':>10}   ({result['rows_stored']} steps)"
    ]
    for side in ("files", "store"):
        s = result[side]
        lines.append(
            f"{side:<7} {s['median_us']:>8.0f}us {s['p95_us']:>8.0f}us {s['max_us']:>8.0f}us"
        )
    lines.append(f"store / files (medians): {result['store_over_files']:.2f}")
    if "against_run" in result:
        a = result["against_run"]
        lines.append(
            f"store / median step of {a['run_dir']} ({a['median_step_s'] * 1e3:.1f} ms): "
            f"{a['store_fraction_of_step']:.2e}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dir", type=Path, help="where the temporary run directory goes")
    parser.add_argument("--against", type=Path, metavar="RUN_DIR", help="a real run's steps")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from gates.provenance.evidence import git_info, host_info, utc_now  # noqa: PLC0415

    result = run_benchmark(args.steps, args.dir)
    if args.against is not None:
        against_run(result, args.against)
    result["captured_at"] = utc_now()
    args_shown = portable_command("python", argv or sys.argv[1:], ROOT)[1:]
    result["command"] = " ".join(["python", "tools/bench_store.py", *args_shown])
    result["host"] = host_info()
    result["git"] = git_info(ROOT)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    print(_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
